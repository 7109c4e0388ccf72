"""``--engine ray`` and ``add_ray_score_columns``: a real local Ray cluster (2 CPUs) scoring with the
tiny model gives the single-process job's output, and bad options are clear errors."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_adapters import cli
from hf_adapters.engines.ray_cluster import INSTALL_HINT
from tests.conftest import build_model, build_tokenizer, write_jsonl
from tests.spaces.spaces_fixtures import ROOT, tiny_model_dir_fixture  # noqa: F401  (fixture)


@pytest.fixture
def rows(tmp_path) -> Path:
    """60 instruction rows (some with an input, one with an empty output) and ids, as JSONL."""
    records = [{"id": f"row-{i}", "instruction": f"Say something about {i}.", "input": "A hint." if i % 4 == 0 else "",
                "output": "The quick brown fox. " * (i % 5)} for i in range(60)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture
def config(tmp_path, tiny_model_dir) -> str:
    path = tmp_path / "ppl.yaml"
    path.write_text(f"name: PPLScorer\nmodel: {tiny_model_dir}\nbatch_size: 8\nmax_length: 64\n", encoding="utf-8")
    return str(path)


def score(config: str, rows: Path, output: Path, *flags: str) -> int:
    return cli.main(["score", config, "--data", str(rows), "--output", str(output), "--no-progress", *flags])


def assert_same_scores(lines: list[dict], reference: list[dict]) -> None:
    assert [line["id"] for line in lines] == [line["id"] for line in reference]
    for line, expected in zip(lines, reference, strict=True):
        if expected["score"] is None:
            assert line["score"] is None
        else:
            assert math.isclose(line["score"], expected["score"], rel_tol=1e-5), line


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_parquet_with_the_rows_columns_equals_the_single_process_jobs(ray_cluster, config, rows, tmp_path):
    import pyarrow.parquet as pq

    flags = ["--output-format", "parquet", "--keep-columns"]
    assert score(config, rows, tmp_path / "plain", *flags) == 0
    assert score(config, rows, tmp_path / "ray", *flags, "--engine", "ray", "--num-workers", "1") == 0
    plain, on_ray = pq.read_table(tmp_path / "plain"), pq.read_table(tmp_path / "ray")
    assert on_ray.schema == plain.schema
    assert on_ray.drop_columns(["score"]).equals(plain.drop_columns(["score"]))
    assert_same_scores(on_ray.select(["id", "score"]).to_pylist(), plain.select(["id", "score"]).to_pylist())


def test_rows_without_ids_get_their_numbers_on_ray_and_a_finished_job_is_not_run_again(ray_cluster, config,
                                                                                         tmp_path, capsys):
    """Rows without an id are written with their row number by the Ray engine as by the default one
    (not ``""``), and the same command on a finished job's output does nothing, saying so.

    Round five, items 6 and 21.
    """
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"instruction": f"Say {i}.", "output": "A fox. " * i}) + "\n"
                            for i in range(6)), encoding="utf-8")
    assert score(config, data, tmp_path / "plain.jsonl") == 0
    assert score(config, data, tmp_path / "ray.jsonl", "--engine", "ray") == 0
    assert [line["id"] for line in read_jsonl(tmp_path / "ray.jsonl")] == list(range(6))
    assert_same_scores(read_jsonl(tmp_path / "ray.jsonl"), read_jsonl(tmp_path / "plain.jsonl"))
    capsys.readouterr()
    assert score(config, data, tmp_path / "ray.jsonl", "--engine", "ray") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path / 'ray.jsonl'} is already this job's complete output (6 rows, 6 valid scores): nothing to do. "
        "Pass --overwrite to score it again."]


def test_the_python_entry_returns_the_score_columns_in_order(ray_cluster, tiny_model_dir):
    from datasets import Dataset

    from hf_adapters import add_perplexity_column
    from hf_adapters.engines.ray_columns import add_ray_score_columns

    texts = [f"Sentence number {i} is {'very ' * (i % 7)}short." for i in range(40)]
    expected = add_perplexity_column(Dataset.from_dict({"text": texts}), text_column="text",
                                     model_id=tiny_model_dir)["perplexity"]
    ds = ray_cluster.data.from_items([{"text": text, "n": i} for i, text in enumerate(texts)], override_num_blocks=8)
    config = {"name": "PerplexityScorer", "model": tiny_model_dir, "text_column": "text"}
    scored = add_ray_score_columns(ds, config, num_workers=2, batch_size=4, names={"perplexity": "ppl"})
    rows = scored.take_all()
    assert [row["n"] for row in rows] == list(range(40))
    assert list(rows[0]) == ["text", "n", "ppl"]
    assert all(math.isclose(row["ppl"], value, rel_tol=1e-5) for row, value in zip(rows, expected, strict=True))


def check_error(capsys, argv_result: int, pattern: str) -> None:
    err = capsys.readouterr().err
    assert argv_result == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert pattern in err, err


def test_an_unreachable_cluster_fails_in_seconds(config, rows, tmp_path, capsys):
    started = time.perf_counter()
    result = score(config, rows, tmp_path / "o.jsonl", "--engine", "ray", "--ray-address", "127.0.0.1:1")
    assert time.perf_counter() - started < 5
    check_error(capsys, result, "Cannot reach the Ray cluster at 127.0.0.1:1 (connection refused)")
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("flags,message", [
    (["--gpus-per-worker", "1"], "--gpus-per-worker 1 is more than any node of the Ray cluster has (0 GPUs"),
    (["--num-workers", "3"], "3 workers need 3 CPUs; the Ray cluster has 2"),
])
def test_workers_the_cluster_cannot_place_are_refused(ray_cluster, config, rows, tmp_path, capsys, flags, message):
    check_error(capsys, score(config, rows, tmp_path / "o.jsonl", "--engine", "ray", *flags), message)


@pytest.mark.parametrize("flags,message", [
    (["--num-workers", "2"], "--num-workers: only with --engine ray"),
    (["--engine", "ray", "--ray-address", "ray://head:10001"], "Ray Client addresses (ray://) are not supported"),
])
def test_options_that_make_no_sense_together_are_refused(config, rows, tmp_path, capsys, flags, message):
    check_error(capsys, score(config, rows, tmp_path / "o.jsonl", *flags), message)


def test_the_ray_engine_refuses_to_run_under_accelerate_launch():
    from hf_adapters.engines import RayEngine, ScoringJob

    job = ScoringJob.plan({"name": "PPLScorer"}, data="d.jsonl", output="o.jsonl")
    with pytest.raises(ValueError, match=r"not under accelerate launch \(2 processes\)"):
        RayEngine.check(job, num_processes=2)


def test_zero_workers_is_an_argument_error(config, rows, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        score(config, rows, tmp_path / "o.jsonl", "--engine", "ray", "--num-workers", "0")
    assert exit_.value.code == 2
    assert "--num-workers: must be at least 1, got 0" in capsys.readouterr().err


def test_without_ray_the_engine_names_the_extra_to_install(config, rows, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    check_error(capsys, score(config, rows, tmp_path / "o.jsonl", "--engine", "ray"), INSTALL_HINT)


def test_the_package_and_its_help_do_not_import_ray():
    code = ("import sys, hf_adapters, hf_adapters.engines.ray, hf_adapters.engines.ray_columns\n"
            "from hf_adapters import cli\n"
            "try:\n    cli.main(['score', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'ray' not in sys.modules, 'ray imported'")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "--engine {local,ray}" in result.stdout and "--file-per-block" in result.stdout


def test_the_workers_get_this_processs_settings_that_change_scores_or_engines(monkeypatch):
    """The CPU kernel and the vLLM engines' arguments of the command's process, not of the node's ``ray start``."""
    from hf_adapters.engines.ray_columns import worker_environment

    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "onednn")
    monkeypatch.setenv("HF_ADAPTERS_VLLM_ARGS", '{"enforce_eager": true}')
    settings = worker_environment()
    assert settings["HF_ADAPTERS_CPU_LINEAR"] == "onednn"
    assert settings["HF_ADAPTERS_VLLM_ARGS"] == '{"enforce_eager": true}'


class BatchesOf:
    """Stands in for a scored ``ray.data.Dataset``: yields the given Arrow tables."""

    def __init__(self, *tables):
        self.tables = tables

    def iter_batches(self, **_):
        return iter(self.tables)


def test_scores_that_come_back_out_of_order_or_short_stop_the_job():
    import pyarrow as pa

    from hf_adapters.engines.ray_columns import ROW_COLUMN, ordered_scores

    def block(rows, scores):
        return pa.table({ROW_COLUMN: rows, "score": scores})

    assert list(ordered_scores(BatchesOf(block([0, 1], [1.5, math.nan]), block([2], [math.inf])), 3)) == \
        [1.5, None, None]
    with pytest.raises(RuntimeError, match="out of order"):
        list(ordered_scores(BatchesOf(block([2], [1.0]), block([0, 1], [1.0, 2.0])), 3))
    with pytest.raises(RuntimeError, match="returned 2 rows of 3"):
        list(ordered_scores(BatchesOf(block([0, 1], [1.0, 2.0])), 3))


def test_a_workers_failure_is_told_by_its_last_error_line():
    from hf_adapters.engines.ray import worker_error

    report = ("ray::MapWorker() (pid=1, ip=1.2.3.4)\n  File \"x.py\", line 3, in f\n"
              "OSError: Error no file named model.safetensors found in directory /models/tiny.\n")
    assert worker_error(RuntimeError(report)) == \
        "OSError: Error no file named model.safetensors found in directory /models/tiny."


# --- From the round-four review: a pinned CPU kernel gives the single-process file byte for byte, and a
# worker's failure is told by its own exception at once ------------------------------------------------

WORDS = ("the quick brown fox jumps over a lazy dog write short poem about sea summarise text below cats are "
         "small mammals explain why sky is blue list three colours").split()


def instruction_rows(count: int, seed: int = 0) -> list[dict]:
    """``count`` Alpaca-like rows of varied length: an instruction, an input in every third, an output.
    Short texts, so that many are scored alone in products of a few positions, whose sums MKL orders
    by its thread count."""
    generator = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(generator.choice(WORDS) for _ in range(generator.randint(low, high)))

    return [{"id": f"row-{i}", "instruction": text(1, 6), "input": text(0, 20) if i % 3 == 0 else "",
             "output": text(1, 10)} for i in range(count)]


def write_config(folder: Path, name: str, model: str) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\nmodel: {model}\nbatch_size: 8\nmax_length: 128\n", encoding="utf-8")
    return str(path)


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("scorer", ["PPLScorer", "IFDScorer"])
def test_with_the_cpu_kernel_pinned_two_workers_write_the_single_process_file_byte_for_byte(
        model_dir, tmp_path, monkeypatch, capsys, scorer):
    """Two workers write the single-process job's file, byte for byte, say so in its summary line and
    leave nothing else beside it. From the round-four review (the bytes)."""
    # Set after the cluster started: the workers see it only if the job hands it to them.
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")
    rows = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(160))
    config = write_config(tmp_path, scorer, model_dir)
    assert score(config, rows, tmp_path / "plain.jsonl") == 0
    capsys.readouterr()
    assert score(config, rows, tmp_path / "ray.jsonl", "--engine", "ray", "--num-workers", "2") == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("160 rows, 160 valid scores, ")
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(("ray", "plain"))) == \
        ["plain.jsonl", "ray.jsonl"]


@pytest.fixture(scope="module")
def small_vocabulary_model_dir(tmp_path_factory) -> str:
    """A model folder that loads, with 100 embeddings where its tokenizer makes ids up to 400: every
    forward pass fails in the worker (IndexError), after the driver's checks passed."""
    folder = tmp_path_factory.mktemp("small-vocabulary-model")
    build_model(100).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return str(folder)


@pytest.mark.usefixtures("ray_cluster")
def test_a_failure_in_a_worker_is_told_by_its_own_exception_at_once(small_vocabulary_model_dir, tmp_path, capsys):
    """From the round-four review."""
    rows = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(40))
    config = write_config(tmp_path, "PPLScorer", small_vocabulary_model_dir)
    started = time.perf_counter()
    result = score(config, rows, tmp_path / "ray.jsonl", "--engine", "ray", "--num-workers", "1")
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert result == 1
    assert err.strip().splitlines() == ["error: Scoring failed in a Ray worker: IndexError: index out of range in self"]
    assert elapsed < 60, f"{elapsed:.0f} s to stop"
    assert not any(path.name.startswith("ray.jsonl") for path in tmp_path.iterdir())


# --- Issue 50: the workers read the shards and write the parts; a killed job resumes -------------------------------

#: A plugin module: PPLScorer under another name, which pauses before each chunk (so that a test can
#: kill the job between parts) and, in the first process to score row KILL_AT, kills that process (once).
PLUGIN = '''
import os
import signal
import time
from pathlib import Path

from hf_adapters.scorers import PPLScorer, register_scorer

PAUSE, KILL_AT, MARKER = {pause}, {kill_at}, {marker!r}


@register_scorer
class {name}(PPLScorer):
    name = "{name}"

    def score_rows_from(self, rows, first_row):
        if first_row == KILL_AT and not Path(MARKER).exists():
            Path(MARKER).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(PAUSE)
        return super().score_rows_from(rows, first_row)
'''
KILL_ROWS = 96
#: Small blocks: 12 parts, so that a job killed after two of them has more to do.
BLOCK_FLAGS = ("--engine", "ray", "--num-workers", "2", "--rows-per-block", "8", "--no-progress")


@pytest.fixture(scope="module")
def kill_job(tmp_path_factory, model_dir, ray_cluster) -> dict:
    """The data and config of the kill tests, and the file of the uninterrupted Ray run they must give."""
    folder = tmp_path_factory.mktemp("kill")
    rows = write_jsonl(folder / "rows.jsonl", instruction_rows(KILL_ROWS, seed=5))
    config = write_config(folder, "PPLScorer", model_dir)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")
        assert score(config, rows, folder / "uninterrupted.jsonl", *BLOCK_FLAGS) == 0
    return {"rows": rows, "model": model_dir, "expected": (folder / "uninterrupted.jsonl").read_bytes()}


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Write a plugin module (:data:`PLUGIN`) and its config; the module and its scorer are forgotten afterwards."""
    from hf_adapters.scorers.base import SCORERS

    written = []

    def make(name: str, model: str, pause: float = 0.0, kill_at: int = -1) -> str:
        module = name.lower()
        (tmp_path / f"{module}.py").write_text(PLUGIN.format(pause=pause, kill_at=kill_at, name=name,
                                                             marker=str(tmp_path / "killed")), encoding="utf-8")
        written.append((module, name))
        return write_config(tmp_path, name, model)

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")
    yield make
    for module, name in written:
        sys.modules.pop(module, None)
        SCORERS.pop(name, None)


def finished_parts(output: Path) -> list[Path]:
    return sorted(output.with_name(output.name + ".parts").glob("*.done"))


def test_a_driver_killed_after_some_parts_are_written_resumes_to_the_uninterrupted_files_bytes(
        kill_job, plugin, ray_cluster, tmp_path, capsys):
    """The command is SIGKILLed once two blocks are saved; the same command then scores only the others
    and writes the uninterrupted run's file, byte for byte."""
    config = plugin("PatientPPLScorer", kill_job["model"], pause=0.5)
    output = tmp_path / "scores.jsonl"
    command = [sys.executable, "-m", "hf_adapters", "score", config, "--data", str(kill_job["rows"]), "--output",
               str(output), *BLOCK_FLAGS, "--plugin", "patientpplscorer",
               "--ray-address", ray_cluster.get_runtime_context().gcs_address]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    driver = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while len(finished_parts(output)) < 2 and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    driver.kill()
    _, err = driver.communicate()
    saved = len(finished_parts(output))
    assert 2 <= saved < KILL_ROWS // 8 and not output.exists(), err.decode()
    assert score(config, kill_job["rows"], output, *BLOCK_FLAGS, "--plugin", "patientpplscorer") == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith(f"{KILL_ROWS} rows, {KILL_ROWS} valid scores; this run scored "), summary
    assert output.read_bytes() == kill_job["expected"]
    assert not output.with_name(output.name + ".parts").exists()


def test_a_worker_killed_while_scoring_is_replaced_and_the_file_is_the_uninterrupted_runs(kill_job, plugin,
                                                                                           tmp_path):
    """A worker (a Ray actor process) SIGKILLed while it scores a block, from a ``--plugin`` module that
    the workers import: Ray replaces it, the block is scored again, and the file is the same."""
    config = plugin("FatalPPLScorer", kill_job["model"], kill_at=40)
    output = tmp_path / "scores.jsonl"
    assert score(config, kill_job["rows"], output, *BLOCK_FLAGS, "--plugin", "fatalpplscorer") == 0
    assert (tmp_path / "killed").exists()
    assert output.read_bytes() == kill_job["expected"]


def write_shards(folder: Path, sizes: list[int], bad: dict | None = None) -> Path:
    """JSONL shards ``a.jsonl``, ``b.jsonl``... of ``sizes`` instruction rows without ids; ``bad`` replaces
    the second row of the second shard (a dict), or that line (a string)."""
    folder.mkdir()
    records, start = instruction_rows(sum(sizes), seed=3), 0
    for index, size in enumerate(sizes):
        lines = [json.dumps({key: value for key, value in row.items() if key != "id"})
                 for row in records[start:start + size]]
        if bad is not None and index == 1:
            lines[1] = bad if isinstance(bad, str) else json.dumps(bad)
        (folder / f"{'abcdef'[index]}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        start += size
    return folder


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("bad,flags", [
    ('{"instruction": "Say hi.", "output": ', []),  # a line that is not JSON
    ({"instruction": 7, "input": "", "output": "Hi."}, []),  # a column of text holding a number
    ({"instruction": "Say hi.", "input": ""}, []),  # a row without its output
    ({"instruction": "Say hi.", "input": ""}, ["--streaming"]),  # the same, found as its block is scored
], ids=["bad-line", "types", "bad-row", "bad-row-streamed"])
def test_the_workers_check_the_shards_with_the_default_engines_errors(config, tmp_path, capsys, bad, flags):
    """Read on the workers, a shard's error is the one the default engine gives: the file and line, or
    the row by its index in the whole data; no output is written (a stream keeps what it saved)."""
    shards = write_shards(tmp_path / "shards", [20, 6], bad)
    results = [score(config, shards, tmp_path / f"{engine}.jsonl", *flags, *engine_flags)
               for engine, engine_flags in (("local", []), ("ray", ["--engine", "ray", "--num-workers", "2"]))]
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert results == [2, 2] and len(errors) == 2 and errors[0] == errors[1], errors
    assert "b.jsonl" in errors[0] or "Row 21 " in errors[0]
    assert not (tmp_path / "local.jsonl").exists() and not (tmp_path / "ray.jsonl").exists()
    if not flags:
        assert sorted(path.name for path in tmp_path.iterdir()) == ["ppl.yaml", "shards"]


@pytest.mark.usefixtures("ray_cluster")
def test_shards_at_a_url_are_read_by_the_workers_as_the_local_engine_reads_their_folder(config, tmp_path):
    """A URL (``file://`` here, read through fsspec as ``s3://`` or ``gs://`` would be) is listed where
    the command runs and read by the workers: the scores of its folder's. (Streamed: the next test.)"""
    shards = write_shards(tmp_path / "shards", [20, 6])
    assert score(config, shards, tmp_path / "local.jsonl") == 0
    assert score(config, f"file://{shards}/*.jsonl", tmp_path / "ray.jsonl", "--engine", "ray") == 0
    assert_same_scores(read_jsonl(tmp_path / "ray.jsonl"), read_jsonl(tmp_path / "local.jsonl"))


@pytest.mark.usefixtures("ray_cluster")
def test_shards_whose_names_hold_glob_characters_are_each_read_once_on_ray(config, tmp_path):
    """A folder holding ``p1.jsonl`` and ``p[1].jsonl`` is scored as both shards' rows, each once (not
    ``p1.jsonl``'s twice), by the workers as by the local engine: the scores of one file holding both.

    Round six: a file name is a name, not a glob.
    """
    shards = write_shards(tmp_path / "shards", [6, 5])
    (shards / "a.jsonl").rename(shards / "p1.jsonl")
    (shards / "b.jsonl").rename(shards / "p[1].jsonl")
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes((shards / "p1.jsonl").read_bytes() + (shards / "p[1].jsonl").read_bytes())
    assert score(config, whole, tmp_path / "whole-scores.jsonl") == 0
    expected = read_jsonl(tmp_path / "whole-scores.jsonl")
    assert score(config, shards, tmp_path / "local.jsonl") == 0
    assert_same_scores(read_jsonl(tmp_path / "local.jsonl"), expected)
    assert score(config, shards, tmp_path / "ray.jsonl", "--engine", "ray") == 0
    assert_same_scores(read_jsonl(tmp_path / "ray.jsonl"), expected)


@pytest.mark.usefixtures("ray_cluster")
def test_streamed_shards_are_numbered_across_them_and_written_a_parquet_file_per_block(config, tmp_path):
    """``--streaming`` on Ray: the rows of three shards without ids are numbered across the shards, and
    ``--file-per-block`` leaves one Parquet file per block, named by shard file and rows, in input order;
    the shards are given as a ``file://`` URL, which the workers stream through fsspec."""
    import pyarrow.parquet as pq

    shards = write_shards(tmp_path / "shards", [20, 25, 15])
    parquet = ["--output-format", "parquet"]
    assert score(config, shards, tmp_path / "local", *parquet) == 0
    assert score(config, f"file://{shards}", tmp_path / "ray", *parquet, "--streaming", "--file-per-block",
                 "--engine", "ray", "--num-workers", "2", "--rows-per-block", "16") == 0
    assert sorted(path.name for path in (tmp_path / "ray").iterdir()) == [
        "part-00000-a-000000000000-000000000016.parquet", "part-00000-a-000000000016-000000000020.parquet",
        "part-00001-b-000000000000-000000000016.parquet", "part-00001-b-000000000016-000000000025.parquet",
        "part-00002-c-000000000000-000000000015.parquet"]
    on_ray, local = pq.read_table(tmp_path / "ray"), pq.read_table(tmp_path / "local")
    assert on_ray.schema == local.schema and on_ray.column("id").to_pylist() == list(range(60))
    assert_same_scores(on_ray.to_pylist(), local.to_pylist())


@pytest.mark.usefixtures("ray_cluster")
def test_a_score_set_runs_on_the_workers_as_in_one_process(model_dir, tmp_path, monkeypatch):
    """A config of several scores (``scores:``) builds one scorer on each worker as in the command:
    the file is the default engine's, byte for byte with the CPU kernel pinned."""
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")
    rows = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(48))
    config = tmp_path / "set.yaml"
    config.write_text(f"model: {model_dir}\nbatch_size: 8\nscores:\n  - name: IFDScorer\n  - name: PPLScorer\n",
                      encoding="utf-8")
    assert score(str(config), rows, tmp_path / "local.jsonl", "--score-columns", "all") == 0
    assert score(str(config), rows, tmp_path / "ray.jsonl", "--score-columns", "all", "--engine", "ray",
                 "--num-workers", "2") == 0
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


def ray_manifest(**changes) -> dict:
    manifest = {"scorer": {"name": "PPLScorer"}, "model": {"files": []}, "identified": True, "data": "d1", "rows": 40,
                "chunk_size": None, "engine": "ray", "rows_per_block": 16, "rows_per_chunk": 16,
                "parts": {"format": "jsonl", "keep_columns": False, "columns": ["score"]}, "file_per_block": False}
    return {**manifest, **changes}


def test_a_work_folder_resumes_its_own_job_and_refuses_another_until_overwrite(tmp_path):
    from hf_adapters.engines.ray_parts import save_part, work_folder
    from hf_adapters.engines.work_folder import JobConflictError
    from hf_adapters.files.score_files import OutputFormat

    output, work_dir, jsonl = tmp_path / "o.jsonl", tmp_path / "o.jsonl.parts", OutputFormat()
    assert work_folder(output).open(ray_manifest(), jsonl, False)[0] == "fresh"
    save_part(work_dir, "part-00000-rows-000000000000-000000000016", jsonl, b'{"id": 0, "score": 1.0}\n' * 16, 16, 16)
    assert work_folder(output).open(ray_manifest(rows_per_block=8), jsonl, False) == ("resume", ray_manifest())
    with pytest.raises(JobConflictError, match=r"holds partial results of a different job: the input data changed "
                                               r"\(40 rows before, 50 now\)\. Rerun the original job"):
        work_folder(output).open(ray_manifest(data="d2", rows=50), jsonl, False)
    assert work_folder(output).open(ray_manifest(data="d2"), jsonl, True)[0] == "fresh"
    assert sorted(path.name for path in work_dir.iterdir()) == ["manifest.json"]
    (work_dir / "manifest.json").write_text(json.dumps({**ray_manifest(), "chunk_size": 16, "engine": None}))
    (work_dir / "rank-00000.jsonl").write_text('{"i": 0, "id": 0, "score": 1.0}\n')
    with pytest.raises(JobConflictError, match="partial results of a job of the default engine: finish it"):
        work_folder(output).open(ray_manifest(), jsonl, False)


def test_ctrl_c_on_ray_says_how_many_rows_the_parts_hold(tmp_path):
    from hf_adapters.engines import RayEngine, ScoringJob
    from hf_adapters.engines.ray_parts import save_part, work_folder
    from hf_adapters.files.score_files import OutputFormat

    job = ScoringJob.plan({"name": "PPLScorer"}, data="d.jsonl", output=tmp_path / "o.jsonl")
    assert RayEngine().interrupted_message(job) == \
        "Interrupted before any row was saved; the same command starts again."
    work_dir = tmp_path / "o.jsonl.parts"
    work_folder(job.output_path).open(ray_manifest(rows=4000), OutputFormat(), False)
    for start in (0, 16):
        save_part(work_dir, f"part-00000-d-{start:012d}-{start + 16:012d}", OutputFormat(), b"{}\n" * 16, 16, 16)
    assert RayEngine().interrupted_message(job) == (
        f"Interrupted: 32 of 4,000 rows are saved in {work_dir}; run the same command again to resume.")


#: A plugin module: a scorer of the output's length whose workers (not the command's process) find the
#: disk full once a block is saved, for as long as the file FULL exists.
FULL_DISK_PLUGIN = """import errno
import os
from pathlib import Path

from hf_adapters.engines import ray_blocks
from hf_adapters.scorers import RowScorer, register_scorer

FULL = Path({full!r})
saved = ray_blocks.save_part


def save_part_on_a_full_disk(work_dir, *args, **kwargs):
    if FULL.exists() and any(Path(work_dir).glob("*.done")):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    saved(work_dir, *args, **kwargs)


@register_scorer
class FullDiskLength(RowScorer):
    name = "FullDiskLength"
    options = {{"batch_size": 4}}
    roles = {{"output": "output"}}
    text_roles = ("output",)

    def score_batch(self, batch, first_row=0):
        ray_blocks.save_part = save_part_on_a_full_disk  # in a worker only: the command's process scores nothing
        return {{"score": [float(len(text)) for text in self.read_texts(batch, first_row)["output"]]}}
"""


@pytest.mark.usefixtures("ray_cluster")
def test_a_full_disk_in_a_worker_says_how_many_rows_are_saved_and_the_same_command_resumes(tmp_path, capsys,
                                                                                         monkeypatch):
    """A worker's write failing for want of space was told as ``Scoring failed in a Ray worker: OSError:
    [Errno 28] ...``, without the rows saved or that the job resumes: the local engine's line.

    Round six: a full disk."""
    from hf_adapters.scorers.base import SCORERS

    full = tmp_path / "full"
    full.touch()
    (tmp_path / "full_disk_scorer.py").write_text(FULL_DISK_PLUGIN.format(full=str(full)), encoding="utf-8")
    (tmp_path / "length.yaml").write_text("name: FullDiskLength\n", encoding="utf-8")
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": i, "output": "ab" * (i % 5)} for i in range(40)])
    output = tmp_path / "out.jsonl"
    flags = ("--engine", "ray", "--num-workers", "1", "--rows-per-block", "8", "--plugin", "full_disk_scorer")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert score(str(tmp_path / "length.yaml"), rows, output, *flags) == 1
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: no space left on a device this job writes to, such as the one holding {tmp_path} (free some "
            f"space there): 8 of 40 rows are saved in {output}.parts; run the same command again to resume."]
        full.unlink()
        assert score(str(tmp_path / "length.yaml"), rows, output, *flags) == 0
    finally:
        sys.modules.pop("full_disk_scorer", None)
        SCORERS.pop("FullDiskLength", None)
    assert read_jsonl(output) == [{"id": i, "score": float(2 * (i % 5))} for i in range(40)]


# --- Issue 61: what a scorer sees of a row, the same on every engine -------------------------------------------------

#: A plugin module: a scorer of the output's length that also reads a field it does not declare.
UNDECLARED_PLUGIN = """from hf_adapters.scorers import RowScorer, register_scorer


@register_scorer
class WeightedLength(RowScorer):
    name = "WeightedLength"
    options = {"batch_size": 4}
    roles = {"output": "output"}
    text_roles = ("output",)

    def score_rows(self, rows, first_row=0):
        return [len(row["output"]) * row["weight"] for row in rows]
"""


@pytest.mark.usefixtures("ray_cluster")
def test_a_scorer_reading_a_field_it_does_not_declare_fails_in_the_same_line_on_every_engine(tmp_path, capsys,
                                                                                           monkeypatch):
    """The local engine handed a scorer every field of a row and the Ray engine its declared columns: a
    scorer reading another field worked locally and failed on Ray with a KeyError (issue 61)."""
    from hf_adapters.engines.work_folder import work_dir_for
    from hf_adapters.scorers.base import SCORERS

    (tmp_path / "weighted_length.py").write_text(UNDECLARED_PLUGIN, encoding="utf-8")
    (tmp_path / "weighted.yaml").write_text("name: WeightedLength\n", encoding="utf-8")
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": i, "output": "ab" * i, "weight": 2} for i in range(10)])
    output = tmp_path / "out.jsonl"
    monkeypatch.syspath_prepend(str(tmp_path))
    ray = ("--engine", "ray", "--num-workers", "1", "--rows-per-block", "4")
    try:
        for flags in ((), ("--keep-columns",), ray, (*ray, "--keep-columns")):
            assert score(str(tmp_path / "weighted.yaml"), rows, output, "--plugin", "weighted_length", *flags) == 2
            assert capsys.readouterr().err.strip().splitlines() == [
                "error: WeightedLength reads the field 'weight' of a row, which is not among the columns it declares "
                "('output'): every engine gives a scorer only those and the row's id. Give the field a role of the "
                "scorer, or read only its columns."], flags
            assert not output.exists() and not work_dir_for(output).exists()
    finally:
        sys.modules.pop("weighted_length", None)
        SCORERS.pop("WeightedLength", None)


# --- Issue 59: a resume writes its parts as they are, or is refused naming the option; the layouts of the output -----


@pytest.mark.parametrize("parts,message", [
    ({"keep_columns": True}, "it was started without --keep-columns, and its parts hold the records without the "
                             "rows' columns"),
    ({"columns": ["ppl_direct", "ppl_conditional", "score"]},
     "it was started with the score columns in another order (score, ppl_conditional, ppl_direct; --score-columns), "
     "and its parts hold them in that order"),
    ({"format": "parquet"}, "it was started with --output-format jsonl, and its parts hold the records as that format "
                            "writes them"),
    ({"file_per_block": True}, None),
], ids=["keep-columns", "score-columns-order", "output-format", "file-per-block"])
def test_a_work_folder_resumes_only_a_run_that_writes_its_parts_as_they_are(tmp_path, parts, message):
    from hf_adapters.engines.ray_parts import save_part, work_folder
    from hf_adapters.engines.work_folder import JobConflictError
    from hf_adapters.files.score_files import OutputFormat

    output, work_dir, jsonl = tmp_path / "o.jsonl", tmp_path / "o.jsonl.parts", OutputFormat()
    started = ray_manifest(parts={"format": "jsonl", "keep_columns": False,
                                  "columns": ["score", "ppl_conditional", "ppl_direct"]})
    work_folder(output).open(started, jsonl, False)
    save_part(work_dir, "part-00000-rows-000000000000-000000000016", jsonl, b'{"id": 0, "score": 1.0}\n' * 16, 16, 16)
    rerun = {**started, "parts": {**started["parts"], **parts}} if "file_per_block" not in parts else \
        {**started, **parts}
    if message is None:
        assert work_folder(output).open(rerun, jsonl, False) == ("resume", started)
        return
    with pytest.raises(JobConflictError, match=re.escape(f"partial results of a different job: {message}. Rerun")):
        work_folder(output).open(rerun, jsonl, False)


def write_ifd_config(folder: Path, model: str) -> str:
    path = folder / "ifd.yaml"
    path.write_text(f"name: IFDScorer\nmodel: {model}\nbatch_size: 8\nmax_length: 64\n", encoding="utf-8")
    return str(path)


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("started,rerun,message", [
    ([], ["--keep-columns"], "it was started without --keep-columns"),
    (["--output-format", "parquet", "--score-columns", "ppl_conditional,ppl_direct"],
     ["--output-format", "parquet", "--score-columns", "ppl_direct,ppl_conditional"],
     "it was started with the score columns in another order (score, ppl_conditional, ppl_direct; --score-columns)"),
], ids=["keep-columns-added", "parquet-score-columns-reordered"])
def test_a_ray_job_resumed_with_its_records_written_otherwise_is_refused_naming_the_option(
        tiny_model_dir, tmp_path, capsys, monkeypatch, started, rerun, message):
    """A Ray job's parts hold the output's records as written: a rerun that would write them otherwise
    (the rows' columns added, the score columns in another order) is refused at once, naming the
    option, instead of writing a file of two layouts or failing every merge. Issue 59."""
    from hf_adapters.engines import ray as ray_engine

    def killed_before_the_merge(*args, **kwargs):
        raise KeyboardInterrupt

    config = write_ifd_config(tmp_path, tiny_model_dir)
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(24))
    output, flags = tmp_path / "scores", ["--engine", "ray", "--rows-per-block", "8"]
    monkeypatch.setattr(ray_engine, "merge_parts", killed_before_the_merge)
    assert score(config, data, output, *started, *flags) == 130
    monkeypatch.undo()
    (output.with_name("scores.parts") / "part-00000-rows-000000000008-000000000016.done").unlink()
    capsys.readouterr()
    assert score(config, data, output, *rerun, *flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and message in err, err
    assert not output.exists()
    assert score(config, data, output, *rerun, *flags, "--overwrite") == 0


@pytest.mark.usefixtures("ray_cluster")
def test_parquet_keeping_the_columns_of_rows_without_ids_has_no_id_column_as_on_the_default_engine(config, tmp_path):
    """Issue 59: Ray wrote an all-null ``id`` column the default engine's file does not have."""
    import pyarrow.parquet as pq

    data = write_jsonl(tmp_path / "rows.jsonl", [{key: value for key, value in row.items() if key != "id"}
                                                 for row in instruction_rows(12)])
    flags = ["--output-format", "parquet", "--keep-columns"]
    assert score(config, data, tmp_path / "plain", *flags) == 0
    assert score(config, data, tmp_path / "ray", *flags, "--engine", "ray") == 0
    plain, on_ray = pq.read_table(tmp_path / "plain"), pq.read_table(tmp_path / "ray")
    assert on_ray.schema == plain.schema and "id" not in on_ray.column_names
    assert_same_scores([{"id": i, **row} for i, row in enumerate(on_ray.to_pylist())],
                       [{"id": i, **row} for i, row in enumerate(plain.to_pylist())])


@pytest.mark.usefixtures("ray_cluster")
def test_a_finished_output_asked_for_in_the_other_parquet_layout_is_refused_naming_the_flag(config, rows, tmp_path,
                                                                                          capsys):
    """A rerun without ``--file-per-block`` of a job that wrote a file per block (or the reverse) says
    which layout the output has and how to get the other, instead of "nothing to do". Issue 59."""
    output, flags = tmp_path / "scores", ["--output-format", "parquet", "--engine", "ray", "--rows-per-block", "32"]
    assert score(config, rows, output, *flags, "--file-per-block") == 0
    assert len(list(output.iterdir())) == 2
    capsys.readouterr()
    assert score(config, rows, output, *flags) == 2
    assert capsys.readouterr().err == (
        f"error: {output} is already this job's complete output, as one Parquet file per block (written with --engine "
        "ray --file-per-block): add --file-per-block to leave it so, or pass --overwrite to score it again into shards "
        "of --rows-per-shard rows.\n")
    assert score(config, rows, output, *flags, "--overwrite") == 0
    assert [path.name for path in output.iterdir()] == ["part-00000.parquet"]
    capsys.readouterr()
    assert score(config, rows, output, *flags, "--file-per-block") == 2
    assert "as Parquet shards of --rows-per-shard rows: run without --file-per-block to leave it so, or pass " \
           "--overwrite to score it again as one file per block." in capsys.readouterr().err
    assert score(config, rows, output, *flags) == 0
    assert "nothing to do" in capsys.readouterr().out


@pytest.mark.usefixtures("ray_cluster")
def test_ray_writes_kept_values_and_ids_as_they_were_read_and_refuses_a_nan_id_naming_its_row(config, tmp_path,
                                                                                                capsys):
    """As the default engine: a kept NaN or infinity is written as JSON's ``NaN``/``Infinity`` (not
    ``null``), a whole-number id among fractional ones as ``2`` (not ``2.0``), and a NaN id, which
    the Ray engine wrote as ``null``, is refused naming its file and line or row. Issue 59."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(f'{{"id": {key}, "instruction": "Say {key}.", "output": "A fox.", "x": {x}}}\n'
                            for key, x in [(1.5, "NaN"), (2, "Infinity"), (3, "-Infinity")]), encoding="utf-8")

    def without_scores(path: Path) -> list[str]:
        return [line.rsplit(', "score": ', 1)[0] for line in path.read_text(encoding="utf-8").split("\n")]

    assert score(config, data, tmp_path / "plain.jsonl", "--keep-columns") == 0
    assert score(config, data, tmp_path / "ray.jsonl", "--keep-columns", "--engine", "ray") == 0
    assert without_scores(tmp_path / "ray.jsonl") == without_scores(tmp_path / "plain.jsonl") == [
        '{"id": 1.5, "instruction": "Say 1.5.", "output": "A fox.", "x": NaN',
        '{"id": 2, "instruction": "Say 2.", "output": "A fox.", "x": Infinity',
        '{"id": 3, "instruction": "Say 3.", "output": "A fox.", "x": -Infinity', ""]
    assert score(config, data, tmp_path / "ids.jsonl", "--engine", "ray") == 0
    assert [line.split(",")[0] for line in without_scores(tmp_path / "ids.jsonl")] == [
        '{"id": 1.5', '{"id": 2', '{"id": 3', ""]
    capsys.readouterr()
    data.write_text(data.read_text(encoding="utf-8").replace('"id": 2,', '"id": NaN,'), encoding="utf-8")
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([json.loads(line) for line in data.read_text().splitlines()]), parquet)
    for source, place in [(data, "Line 2"), (parquet, "Row 1 of the file")]:
        assert score(config, source, tmp_path / "nan.jsonl", "--engine", "ray") == 2
        assert capsys.readouterr().err == (
            f"error: Cannot read {str(source)!r} as {'json' if source == data else 'parquet'}: {place}: the id NaN is "
            "not a number (NaN and infinities name no row); give the row an id.\n")
    from datasets import Dataset

    Dataset.from_parquet(str(parquet)).save_to_disk(str(tmp_path / "saved"))
    assert score(config, tmp_path / "saved", tmp_path / "nan.jsonl", "--engine", "ray") == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: Row 1 of the data: the id NaN is not a number (NaN and infinities name no row); give the row an id.")


@pytest.mark.usefixtures("ray_cluster")
def test_ray_keeps_a_column_of_integers_above_2_63_as_the_default_engine_reads_it(config, tmp_path):
    """Issue 59: the workers read only the ids exactly, so a kept column of integers holding one above
    ``2**63`` (integers in one shard, floats for pyarrow in the other) came out as floats (``1`` ->
    ``1.0``, ``18446744073709551615`` -> ``1.8446744073709552e+19``); it is written as the default
    engine writes it, in JSONL and in Parquet, and a column of fractions stays floats."""
    import pyarrow.parquet as pq

    folder = tmp_path / "shards"
    folder.mkdir()
    for name, rows in [("a", [(1, "A fox.", 1, 0.5), (2, "A dog.", 3, 2)]), ("b", [(3, "A cat.", 2**64 - 1, 1)])]:
        write_jsonl(folder / f"{name}.jsonl", [{"id": key, "instruction": "Say.", "output": output, "big": big, "f": f}
                                               for key, output, big, f in rows])

    def without_scores(path: Path) -> list[str]:
        return [line.rsplit(', "score": ', 1)[0] for line in path.read_text(encoding="utf-8").split("\n")]

    assert score(config, folder, tmp_path / "plain.jsonl", "--keep-columns") == 0
    assert score(config, folder, tmp_path / "ray.jsonl", "--keep-columns", "--engine", "ray") == 0
    assert without_scores(tmp_path / "ray.jsonl") == without_scores(tmp_path / "plain.jsonl") == [
        '{"id": 1, "instruction": "Say.", "output": "A fox.", "big": 1, "f": 0.5',
        '{"id": 2, "instruction": "Say.", "output": "A dog.", "big": 3, "f": 2.0',
        '{"id": 3, "instruction": "Say.", "output": "A cat.", "big": 18446744073709551615, "f": 1.0', ""]
    flags = ["--keep-columns", "--output-format", "parquet"]
    assert score(config, folder, tmp_path / "plain", *flags) == 0
    assert score(config, folder, tmp_path / "ray", *flags, "--engine", "ray") == 0
    plain, on_ray = pq.read_table(tmp_path / "plain"), pq.read_table(tmp_path / "ray")
    assert on_ray.schema == plain.schema and str(plain.schema.field("big").type) == "uint64"
    assert on_ray.drop(["score"]).equals(plain.drop(["score"]))
    assert on_ray.column("big").to_pylist() == [1, 3, 2**64 - 1]
    assert_same_scores(on_ray.to_pylist(), plain.to_pylist())


def test_an_output_left_complete_by_a_kill_during_the_cleanup_is_this_jobs_only_in_its_own_format(tmp_path):
    """A rerun asking for another format (here the rows' columns) does not take it as complete: it
    starts afresh, and writes the format it asks for."""
    import dataclasses

    from hf_adapters.engines.ray_parts import work_folder
    from hf_adapters.files.score_files import OutputFormat

    output, work_dir, jsonl = tmp_path / "o.jsonl", tmp_path / "o.jsonl.parts", OutputFormat()
    output.write_text('{"id": 0, "score": 1.0}\n')
    work_dir.mkdir()
    complete = {**ray_manifest(), "total_rows": 1, "valid": 1,
                "format": {"kind": "jsonl", "keep_columns": False, "rows_per_shard": jsonl.rows_per_shard}}
    (work_dir / "complete.json").write_text(json.dumps(complete))
    assert work_folder(output).open(ray_manifest(), jsonl, False) == ("complete", complete)
    kept = dataclasses.replace(jsonl, keep_columns=True)
    rerun = ray_manifest(parts={"format": "jsonl", "keep_columns": True, "columns": ["score"]})
    assert work_folder(output).open(rerun, kept, False) == ("fresh", rerun)
