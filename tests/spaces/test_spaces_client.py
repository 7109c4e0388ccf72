"""The Space scripted with gradio_client: each endpoint, on a local server, returns the library's numbers."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import time
import urllib.request

import pytest

from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.information_parity import compute_information_parity
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.ifeval import compute_ifeval
from tests.spaces.spaces_fixtures import (  # noqa: F401  (fixtures)
    ROOT,
    SPACE,
    app_fixture,
    free_port,
    server_url_fixture,
    tiny_model_dir_fixture,
)

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def client(server_url):
    return gradio_client.Client(server_url, verbose=False)


def column(table: dict, name: str) -> list:
    """One column of a returned table; JSON null (a NaN score) as NaN."""
    index = table["headers"].index(name)
    return [math.nan if row[index] is None else row[index] for row in table["data"]]


def scored_rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def assert_close(actual, expected):
    assert actual == pytest.approx(expected, rel=1e-6, nan_ok=True)


def test_endpoints_are_named_after_the_tabs(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert set(endpoints) == {"/perplexity", "/ifd", "/information_parity", "/ifeval"}


def test_perplexity_endpoint_matches_compute_perplexity(client, tiny_model_dir):
    texts = ["The quick brown fox jumps over the lazy dog.", "Write a short poem about the sea.", ""]
    pasted = "\n".join(json.dumps({"text": text}) for text in texts)
    table, summary, chart, path = client.predict(pasted, None, tiny_model_dir, api_name="/perplexity")
    expected = compute_perplexity(texts, model_id=tiny_model_dir)
    assert_close(column(table, "perplexity"), expected["perplexities"])
    assert_close(summary["mean_perplexity"], expected["mean_perplexity"])
    assert_close(summary["corpus_perplexity"], expected["corpus_perplexity"])
    assert summary["rows"] == 3 and summary["valid_rows"] == 2
    assert chart["type"] == "matplotlib"
    rows = scored_rows(path)
    assert [row["text"] for row in rows] == texts
    assert_close([row["perplexity"] for row in rows[:2]], expected["perplexities"][:2])
    assert rows[2]["perplexity"] is None  # an empty text has no score


def test_ifd_endpoint_matches_compute_ifd(client, tiny_model_dir):
    rows = [
        {"instruction": "Write a short poem about the sea.", "input": "", "output": "Waves on the shore."},
        {"instruction": "Summarise the text below.", "input": "Cats are small mammals.", "output": "Cats are mammals."},
    ]
    pasted = "\n".join(json.dumps(row) for row in rows)
    table, summary, _, path = client.predict(pasted, None, tiny_model_dir, api_name="/ifd")
    expected = compute_ifd([r["instruction"] for r in rows], [r["output"] for r in rows], [r["input"] for r in rows],
                           model_id=tiny_model_dir)
    assert_close(column(table, "ifd"), expected["ifd_scores"])
    assert_close(column(table, "conditional_perplexity"), expected["conditional_perplexities"])
    assert_close(column(table, "direct_perplexity"), expected["direct_perplexities"])
    assert_close(summary["mean_ifd"], expected["mean_ifd"])
    assert summary["valid_rows"] == expected["num_valid"] == 2
    assert_close([row["ifd"] for row in scored_rows(path)], expected["ifd_scores"])


def test_information_parity_endpoint_matches_the_metric_on_an_uploaded_csv(client, tiny_model_dir, tmp_path):
    pairs = [("The quick brown fox.", "Le renard brun."), ("The lazy dog.", "Le chien paresseux. 🐶")]
    upload = tmp_path / "pairs.csv"
    with upload.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("reference", "prediction"), *pairs])
    table, summary, _, path = client.predict(
        "ignored\twhen a file is uploaded", gradio_client.handle_file(str(upload)), tiny_model_dir,
        api_name="/information_parity",
    )
    expected = compute_information_parity([p for _, p in pairs], [r for r, _ in pairs], model_id=tiny_model_dir)
    assert_close(column(table, "information_parity"), expected["scores"])
    for name, value in expected.items():
        if name != "scores":
            assert_close(summary[name], value)
    assert path.endswith(".csv")
    with open(path, encoding="utf-8") as handle:
        written = list(csv.DictReader(handle))
    assert [(row["reference"], row["prediction"]) for row in written] == pairs
    assert_close([float(row["information_parity"]) for row in written], expected["scores"])


def test_ifeval_endpoint_matches_compute_ifeval(client, app):
    rows = app.IFEVAL.parse_text(app.IFEVAL.example)
    table, summary, chart, path = client.predict(app.IFEVAL.example, None, api_name="/ifeval")
    expected = compute_ifeval([row["response"] for row in rows], rows, detailed=True)
    for name in ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"):
        assert summary[name] == expected[name]
    assert summary["per_instruction"] == expected["per_instruction"]
    assert column(table, "follow_all_instructions_loose") == [all(r) for r in expected["loose_follow_instruction_list"]]
    assert [row["follow_instruction_list_strict"] for row in scored_rows(path)] == \
        expected["strict_follow_instruction_list"]
    assert chart["type"] == "matplotlib"


def test_bad_input_is_an_app_error_with_a_readable_message(client, tiny_model_dir):
    with pytest.raises(gradio_client.exceptions.AppError, match="Line 2 has 1 tab-separated cell"):
        client.predict("Hello.\tBonjour.\nno tab here", None, tiny_model_dir, api_name="/information_parity")
    with pytest.raises(gradio_client.exceptions.AppError, match="Could not load model") as caught:
        client.predict("some text", None, str(tiny_model_dir) + "-missing", api_name="/perplexity")
    assert "Traceback" not in str(caught.value)



def wait_for_server(url: str, process: subprocess.Popen, log, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            pytest.fail(f"the app exited with {process.returncode}:\n{log.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    pytest.fail(f"the app did not answer on {url} within {timeout} s")


def test_space_folder_runs_as_a_script_on_the_gradio_server_port(tmp_path, tiny_model_dir):
    """The Space as deployed: this folder's files plus a copy of the package, run as ``python app.py``.

    ``python -S`` with only site-packages on the path skips the editable install's hook, so the
    app can only import the copied package.
    """
    space = tmp_path / "space"
    shutil.copytree(SPACE, space, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "hf_adapters", space / "hf_adapters", ignore=shutil.ignore_patterns("__pycache__"))
    site_packages = sysconfig.get_paths()["purelib"]
    launcher = textwrap.dedent(f"""
        import runpy, sys
        sys.path[:] = [{str(space)!r}, *sys.path, {site_packages!r}]
        sys.argv = ["app.py"]
        runpy.run_path("app.py", run_name="__main__")
    """)
    probe = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.append({site_packages!r}); "
                            "import importlib.util; print(importlib.util.find_spec('hf_adapters'))"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert probe.stdout.strip() == "None", "hf_adapters is importable without the copy; the test would prove nothing"
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    with (tmp_path / "app.log").open("w+") as log:
        process = subprocess.Popen([sys.executable, "-S", "-c", launcher], cwd=space, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/"
            wait_for_server(url, process, log)
            client = gradio_client.Client(url, verbose=False)
            _, summary, _, _ = client.predict("The quick brown fox.", None, tiny_model_dir, api_name="/perplexity")
            expected = compute_perplexity(["The quick brown fox."], model_id=tiny_model_dir)
            assert_close(summary["mean_perplexity"], expected["mean_perplexity"])
        finally:
            process.terminate()
            process.wait(timeout=30)
