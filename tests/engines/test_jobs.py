"""The resumable, sharded job runner: output order, crash-safe resume, refusal to mix jobs, OOM retries,
and runs under ``accelerate launch`` with 2 CPU processes."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from hf_adapters import cli
from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.transformers import cpu_kernels
from hf_adapters.engines import local
from hf_adapters.engines.local import JobConflictError, run_scoring_job, score_dataset, shard_range, work_dir_for
from hf_adapters.scorers import SCORERS, PerplexityScorer, PPLScorer, RowScorer, build_scorer, register_scorer

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def chunks_of_four_rows(monkeypatch):
    """The jobs here save every 4 rows unless they say (the chunks these tests were written for)."""
    monkeypatch.setattr(local, "CPU_SAVE_EVERY", 4)


@register_scorer
class LengthRatioScorer(RowScorer):
    """len(output) / len(instruction), NaN for an empty output; sleeps ``delay`` seconds per chunk."""

    name = "LengthRatioScorer"
    options = {"batch_size": 4, "delay": 0.0}
    required_fields = ("instruction", "output")

    def __init__(self, **config):
        super().__init__(**config)
        self.scored_rows: list[str] = []

    def score_rows(self, rows):
        time.sleep(self.config["delay"])
        self.scored_rows.extend(row.get("id") for row in rows)
        return [len(row["output"]) / len(row["instruction"]) if row["output"] else math.nan for row in rows]


class CrashAfter(LengthRatioScorer):
    """Dies (like a killed process) once it has scored ``rows`` rows; same name and config as its parent."""

    def __init__(self, rows: int, **config):
        super().__init__(**config)
        self.limit = rows

    def score_rows(self, rows):
        if len(self.scored_rows) >= self.limit:
            raise KeyboardInterrupt
        return super().score_rows(rows)


class OutOfMemoryAbove(LengthRatioScorer):
    """Raises CUDA's out-of-memory error for any chunk longer than ``fits`` rows."""

    def __init__(self, fits: int, error: type[Exception] = torch.cuda.OutOfMemoryError, **config):
        super().__init__(**config)
        self.fits, self.error = fits, error

    def score_rows(self, rows):
        if len(rows) > self.fits:
            raise self.error("CUDA out of memory. Tried to allocate 20.00 GiB")
        return super().score_rows(rows)


def make_rows(n: int) -> list[dict]:
    return [
        {"id": f"r{i}", "instruction": "x" * (1 + i % 7), "input": "", "output": "" if i % 5 == 3 else "y" * (i % 11)}
        for i in range(n)
    ]


def expected_lines(rows: list[dict]) -> list[dict]:
    return [
        {"id": row["id"], "score": len(row["output"]) / len(row["instruction"]) if row["output"] else None}
        for row in rows
    ]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "num_rows,chunk,world", [(10, 3, 1), (10, 3, 2), (10, 3, 3), (9, 3, 4), (101, 8, 3), (0, 2, 2)]
)
def test_shards_are_contiguous_runs_of_whole_chunks_covering_every_row(num_rows, chunk, world):
    shards = [shard_range(num_rows, chunk, rank, world) for rank in range(world)]
    assert [i for shard in shards for i in shard] == list(range(num_rows))
    assert all(shard.start % chunk == 0 for shard in shards if len(shard))


def test_output_has_one_line_per_row_in_input_order_with_nan_as_null(tmp_path):
    rows = make_rows(23)
    summary = run_scoring_job(Dataset.from_list(rows), LengthRatioScorer(batch_size=4), tmp_path / "out.jsonl")
    assert read_jsonl(tmp_path / "out.jsonl") == expected_lines(rows)
    assert "NaN" not in (tmp_path / "out.jsonl").read_text()
    assert (summary.rows, summary.valid, summary.scored) == (23, sum(r["output"] != "" for r in rows), 23)
    assert str(summary).startswith(f"23 rows, {summary.valid} valid scores, ") and str(summary).endswith(" rows/s")
    assert not work_dir_for(tmp_path / "out.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_every_row_is_checked_before_any_is_scored(tmp_path):
    rows = make_rows(30)
    del rows[27]["output"]
    scorer = LengthRatioScorer()
    with pytest.raises(ValueError, match=r"Row 27 \(id='r27'\) has no field 'output'"):
        run_scoring_job(Dataset.from_list(rows), scorer, tmp_path / "out.jsonl")
    assert scorer.scored_rows == []
    assert not (tmp_path / "out.jsonl").exists()


def test_interrupted_job_resumes_without_rescoring_and_drops_a_torn_tail(tmp_path, caplog):
    rows = make_rows(40)
    data, output = Dataset.from_list(rows), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(data, CrashAfter(rows=12, batch_size=4), output)
    assert not output.exists()
    part = work_dir_for(output) / "rank-00000.jsonl"
    assert len(part.read_text().splitlines()) == 12
    with open(part, "ab") as handle:  # a kill in the middle of writing the next chunk
        handle.write(b'{"i": 12, "id": "r12", "score": 1.0}\n{"i": 13, "id": "r1')

    scorer = LengthRatioScorer(batch_size=4)
    with caplog.at_level(logging.INFO, logger="hf_adapters.engines.local"):
        summary = run_scoring_job(data, scorer, output)
    assert "resuming: 12 of 40 rows already scored" in caplog.messages
    assert scorer.scored_rows == [f"r{i}" for i in range(12, 40)]  # the incomplete chunk is scored again
    assert read_jsonl(output) == expected_lines(rows)
    assert (summary.rows, summary.scored) == (40, 28)


@pytest.mark.parametrize("change", ["config", "data"])
def test_partial_results_of_a_different_job_are_refused_unless_overwrite(tmp_path, change):
    rows, output = make_rows(20), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=8, batch_size=4), output)
    scorer = LengthRatioScorer(batch_size=4, delay=0.001 if change == "config" else 0.0)
    if change == "data":
        rows[15]["output"] = "changed"
    expected = {"config": "the scorer config changed", "data": "the input data changed"}[change]
    with pytest.raises(JobConflictError, match=f"{expected}.*--overwrite"):
        run_scoring_job(Dataset.from_list(rows), scorer, output)
    assert scorer.scored_rows == []

    run_scoring_job(Dataset.from_list(rows), scorer, output, overwrite=True)
    assert scorer.scored_rows == [row["id"] for row in rows]
    assert read_jsonl(output) == expected_lines(rows)


@pytest.mark.parametrize("batch_size", [3, 4, 7])
def test_a_job_resumes_with_another_batch_size_on_the_chunks_it_started_with(tmp_path, batch_size, caplog):
    rows, output = make_rows(30), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=8, batch_size=4), output)
    scorer = LengthRatioScorer(batch_size=batch_size)
    with caplog.at_level(logging.INFO, logger="hf_adapters.engines.local"):
        summary = run_scoring_job(Dataset.from_list(rows), scorer, output)
    assert "resuming: 8 of 30 rows already scored" in caplog.messages
    assert scorer.scored_rows == [row["id"] for row in rows[8:]] and summary.scored == 22
    assert read_jsonl(output) == expected_lines(rows)


def test_a_job_resumes_on_fewer_processes_than_it_started_with(tmp_path):
    rows, output = make_rows(30), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=12, batch_size=4), output)
    work_dir = work_dir_for(output)
    # As if process 3 of a 4-process run had scored these chunks before the job was stopped.
    (work_dir / "rank-00000.jsonl").rename(work_dir / "rank-00003.jsonl")
    scorer = LengthRatioScorer(batch_size=4)
    summary = run_scoring_job(Dataset.from_list(rows), scorer, output)
    assert scorer.scored_rows == [row["id"] for row in rows[12:]] and summary.scored == 18
    assert read_jsonl(output) == expected_lines(rows)


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError, RuntimeError])
def test_out_of_memory_halves_the_batch_and_keeps_every_row(tmp_path, caplog, error):
    rows = make_rows(19)
    scorer = OutOfMemoryAbove(fits=2, error=error, batch_size=8)
    with caplog.at_level(logging.WARNING, logger="hf_adapters.engines.local"):
        run_scoring_job(Dataset.from_list(rows), scorer, tmp_path / "out.jsonl", save_every=8)
    assert read_jsonl(tmp_path / "out.jsonl") == expected_lines(rows)
    assert scorer.scored_rows == [row["id"] for row in rows]
    assert "Out of memory on rows 0-7" in caplog.text and "retrying as 4 + 4 rows" in caplog.text


def test_a_row_that_runs_out_of_memory_alone_is_named(tmp_path):
    with pytest.raises(RuntimeError, match=r"Row 0 \(id='r0'\) runs out of memory even alone"):
        run_scoring_job(Dataset.from_list(make_rows(3)), OutOfMemoryAbove(fits=0), tmp_path / "out.jsonl")


def test_other_errors_are_not_retried(tmp_path):
    class Broken(LengthRatioScorer):
        def score_rows(self, rows):
            raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_scoring_job(Dataset.from_list(make_rows(3)), Broken(), tmp_path / "out.jsonl")


def test_score_dataset_adds_a_score_column_in_row_order(tmp_path):
    rows = make_rows(11)
    for row in rows:
        del row["id"]
    scored = score_dataset(Dataset.from_list(rows), {"name": "LengthRatioScorer", "batch_size": 3})
    assert scored.column_names == ["instruction", "input", "output", "score"]
    want = [len(r["output"]) / len(r["instruction"]) if r["output"] else math.nan for r in rows]
    assert [s if s == s else "nan" for s in scored["score"]] == [w if w == w else "nan" for w in want]

    kept = score_dataset(Dataset.from_list(rows), LengthRatioScorer(), column="ratio", output_path=tmp_path / "s.jsonl")
    assert kept.column_names[-1] == "ratio" and len(read_jsonl(tmp_path / "s.jsonl")) == 11


# --- Real processes: accelerate launch with 2 CPU processes, and kill -9 ---------------------------------

LAUNCHER = """import sys
sys.path.insert(0, {tests!r})
import test_jobs  # noqa: F401  (registers the fake scorers)
from hf_adapters.cli import main
sys.exit(main())
"""


def launcher(tmp_path: Path) -> Path:
    script = tmp_path / "launch_score.py"
    script.write_text(LAUNCHER.format(tests=str(Path(__file__).resolve().parent)), encoding="utf-8")
    return script


def run_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_two_processes_write_the_same_file_as_one(tmp_path, model, tokenizer):
    if "PPLScorer" not in SCORERS:
        pytest.skip("PPLScorer is not in hf_adapters.scorers yet")
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    rows = [{"id": i, "instruction": "Write a short poem about the sea."[: 5 + i] if i else "", "input": "",
             "output": "The quick brown fox jumps over the lazy dog."[: 3 * i]} for i in range(13)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    (tmp_path / "ppl.yaml").write_text(f"name: PPLScorer\nmodel: {tmp_path / 'model'}\nbatch_size: 2\n")
    args = ["score", str(tmp_path / "ppl.yaml"), "--data", str(data), "--no-progress", "--output"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each launched process has: CPU kernels split sums by thread
    try:
        assert cli.main([*args, str(tmp_path / "one.jsonl")]) == 0
    finally:
        torch.set_num_threads(threads)

    command = [str(VENV_BIN / "accelerate"), "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "hf_adapters", *args,
               str(tmp_path / "two.jsonl")]
    done = subprocess.run(command, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("13 rows, 12 valid scores, ") == 1  # printed by process 0 only
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()

    scores = [line["score"] for line in read_jsonl(tmp_path / "two.jsonl")]
    reference = build_scorer({"name": "PPLScorer", "model": str(tmp_path / "model"), "batch_size": 1})
    want = [reference.score_rows([row])[0] for row in rows]
    assert scores[0] is None and math.isnan(want[0])  # an empty text has no score
    assert scores[1:] == pytest.approx(want[1:], rel=1e-5)


def test_kill_9_in_the_middle_then_rerun_gives_the_uninterrupted_output(tmp_path, caplog):
    rows = make_rows(150)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    (tmp_path / "slow.yaml").write_text("name: LengthRatioScorer\nbatch_size: 2\ndelay: 0.04\n")
    output = tmp_path / "out.jsonl"
    args = ["score", str(tmp_path / "slow.yaml"), "--data", str(data), "--output", str(output), "--no-progress"]
    part = work_dir_for(output) / "rank-00000.jsonl"
    process = subprocess.Popen([sys.executable, str(launcher(tmp_path)), *args], cwd=REPO, env=run_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (part.exists() and len(part.read_bytes().splitlines()) >= 20):
            assert process.poll() is None and time.monotonic() < deadline, "the job ended before it could be killed"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    killed_at = len(part.read_bytes().splitlines())
    assert 20 <= killed_at < 150 and not output.exists()

    with caplog.at_level(logging.INFO, logger="hf_adapters.engines.local"):
        assert cli.main(args) == 0  # the same command again
    [resumed] = [message for message in caplog.messages if message.startswith("resuming: ")]
    assert resumed.endswith(" of 150 rows already scored") and int(resumed.split()[1]) >= killed_at - 2
    assert cli.main([*args[:-2], str(tmp_path / "uninterrupted.jsonl"), "--no-progress"]) == 0
    assert output.read_bytes() == (tmp_path / "uninterrupted.jsonl").read_bytes()


def test_a_second_job_on_the_same_output_stops_at_once_while_the_first_holds_the_lock(tmp_path):
    import fcntl

    rows = Dataset.from_list(make_rows(9))
    output = tmp_path / "out.jsonl"
    work_dir = work_dir_for(output)
    work_dir.mkdir()
    with open(work_dir / "lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        scorer = LengthRatioScorer()
        with pytest.raises(JobConflictError, match="Another job is writing out.jsonl"):
            run_scoring_job(rows, scorer, output, progress=False)
        assert scorer.scored_rows == [] and not output.exists()
    assert run_scoring_job(rows, LengthRatioScorer(), output, progress=False).rows == 9
    assert not work_dir.exists()


def test_a_model_that_fails_to_load_leaves_no_work_directory(tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in make_rows(3)), encoding="utf-8")
    (tmp_path / "ppl.yaml").write_text("name: PPLScorer\n", encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    args = ["score", str(tmp_path / "ppl.yaml"), "--data", str(data), "--output", str(output), "--no-progress"]
    assert cli.main([*args, "--model", str(tmp_path / "no-such-model")]) == 2
    assert "Could not load model" in capsys.readouterr().err
    assert not work_dir_for(output).exists()


@pytest.mark.parametrize("bad", [7, ["a list"], {"a": "dict"}])
def test_a_wrong_field_type_is_found_before_any_row_is_scored_and_named_by_its_index(tmp_path, bad):
    scorer = build_scorer({"name": "PPLScorer"})
    rows = make_rows(12)
    rows[9]["output"] = bad
    with pytest.raises(ValueError, match=r"Row 109 \(id='r9'\): field 'output' must be a string"):
        scorer.check_rows(rows, offset=100)
    data = Dataset.from_list([dict(row, output=bad) for row in make_rows(12)])
    output = tmp_path / "out.jsonl"
    with pytest.raises(ValueError, match=r"Row 0 \(id='r0'\): field 'output' must be a string"):
        run_scoring_job(data, scorer, output, progress=False)
    assert not work_dir_for(output).exists()


def test_an_ifeval_row_with_an_unknown_id_is_found_before_any_row_is_scored(tmp_path):
    good = {"key": 1, "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], "response": "Fine."}
    rows = [dict(good, key=i) for i in range(6)]
    rows[4] = dict(good, key=4, instruction_id_list=["no:such_check"])
    output = tmp_path / "out.jsonl"
    with pytest.raises(ValueError, match=r"unknown IFEval instruction id 'no:such_check' \(row 4, key 4\)"):
        run_scoring_job(Dataset.from_list(rows), build_scorer({"name": "IFEvalScorer"}), output, progress=False)
    assert not work_dir_for(output).exists()


class RefusesFirstChunk(LengthRatioScorer):
    """Refuses its first chunk as a scorer refuses what it finds only when it scores (a reference model
    with another tokenizer); raises ``error``."""

    def __init__(self, error: BaseException, **config):
        super().__init__(**config)
        self.error = error

    def score_rows(self, rows):
        raise self.error


@pytest.mark.parametrize("error", [ValueError("The reference model has another tokenizer."), KeyboardInterrupt()],
                         ids=["refused", "interrupted"])
@pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streaming"])
def test_a_refusal_or_stop_before_any_row_is_saved_leaves_nothing_behind(tmp_path, error, streaming):
    """A job refused (or stopped) before any row is saved leaves no work directory, lock or
    temporary output: the corrected command, another job, runs instead of being refused as "a
    different job".

    Round five, item 10.
    """
    rows = Dataset.from_list(make_rows(10))
    data = rows.to_iterable_dataset() if streaming else rows
    output = tmp_path / "out.jsonl"
    with pytest.raises(type(error)):
        run_scoring_job(data, RefusesFirstChunk(error, batch_size=4), output, data_fingerprint="rows", progress=False)
    assert list(tmp_path.iterdir()) == []
    corrected = LengthRatioScorer(batch_size=5)
    assert run_scoring_job(data, corrected, output, data_fingerprint="rows", progress=False).scored == 10


def test_a_streamed_row_refused_in_the_first_chunk_leaves_nothing_behind(tmp_path):
    """A stream's rows are checked chunk by chunk, after the work directory is made: a bad row in
    its first chunk leaves nothing behind.

    Round five, item 10.
    """
    rows = make_rows(6)
    del rows[1]["output"]
    output = tmp_path / "out.jsonl"
    with pytest.raises(ValueError, match=r"Row 1 \(id='r1'\) has no field 'output'"):
        run_scoring_job(Dataset.from_list(rows).to_iterable_dataset(), LengthRatioScorer(), output,
                        data_fingerprint="rows", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_failure_after_a_saved_chunk_keeps_the_work_directory_to_resume(tmp_path):
    """Only a run that saved nothing leaves nothing: saved chunks stay for the rerun.

    Round five, item 10.
    """
    output = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(make_rows(10)), CrashAfter(rows=4, batch_size=4), output, progress=False)
    assert (work_dir_for(output) / "manifest.json").is_file()


def test_the_summary_of_a_resumed_run_says_its_rate_counts_only_this_runs_rows():
    """After a resume the rate counts only the rows this run scored, and the summary says so.

    Round five, item 21.
    """
    from hf_adapters.engines.local import JobSummary

    assert str(JobSummary(rows=23, valid=20, seconds=2.0, scored=11)) == \
        "23 rows, 20 valid scores; this run scored 11 of them, 5.5 rows/s"
    assert str(JobSummary(rows=23, valid=20, seconds=2.0, scored=0)) == "23 rows, 20 valid scores, all scored by an " \
        "earlier run"
    assert str(JobSummary(rows=23, valid=20, seconds=2.0, scored=23)) == "23 rows, 20 valid scores, 11.5 rows/s"


def test_running_a_finished_job_again_does_nothing_unless_its_output_would_differ(tmp_path):
    """A finished job run again is skipped; another output format, other score columns, another
    config or ``overwrite`` score it again.

    Round five, item 21.
    """
    from hf_adapters.files.score_files import OutputFormat

    rows = Dataset.from_list(make_rows(9))
    output = tmp_path / "out.jsonl"
    assert not run_scoring_job(rows, LengthRatioScorer(), output, progress=False).skipped
    again = LengthRatioScorer(batch_size=2)
    summary = run_scoring_job(rows, again, output, progress=False)
    assert summary.skipped and again.scored_rows == [] and (summary.rows, summary.scored) == (9, 0)
    assert summary.valid == sum(line["score"] is not None for line in read_jsonl(output))
    for changed in ({"output": OutputFormat(keep_columns=True)}, {"overwrite": True}):
        scorer = LengthRatioScorer()
        assert not run_scoring_job(rows, scorer, output, progress=False, **changed).skipped
        assert len(scorer.scored_rows) == 9
    scorer = LengthRatioScorer(delay=0.001)
    assert not run_scoring_job(rows, scorer, output, progress=False).skipped and len(scorer.scored_rows) == 9


def test_a_kill_during_the_final_cleanup_leaves_a_complete_output_that_needs_no_work(tmp_path, monkeypatch):
    from hf_adapters.engines import local as jobs

    rows = Dataset.from_list(make_rows(10))
    output = tmp_path / "out.jsonl"

    def killed_during_cleanup(work_dir):
        (work_dir / "rank-00000.jsonl").unlink()  # the cleanup got this far
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "_remove_work_dir", killed_during_cleanup)
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, LengthRatioScorer(), output, progress=False)
    monkeypatch.undo()
    complete = output.read_bytes()
    assert (work_dir_for(output) / "complete.json").is_file()

    rerun = LengthRatioScorer()
    summary = run_scoring_job(rows, rerun, output, progress=False)
    assert rerun.scored_rows == [] and summary.scored == 0
    assert summary.valid == sum(json.loads(line)["score"] is not None for line in complete.splitlines())
    assert output.read_bytes() == complete and not work_dir_for(output).exists()


# --- Job identity: the model's files, dtype and device type -------------------------------------------


class PPLCrashAfterFirstChunk(PPLScorer):
    """The seed PPLScorer, killed (like kill -9) after its first chunk; same name and config."""

    calls = 0

    def score_rows(self, rows):
        PPLCrashAfterFirstChunk.calls += 1
        if PPLCrashAfterFirstChunk.calls > 1:
            raise KeyboardInterrupt
        return super().score_rows(rows)


def test_new_weights_at_the_same_model_path_are_another_job(tmp_path, tokenizer):
    from tests.conftest import build_model  # here: the subprocess launchers import this module without `tests`

    folder = tmp_path / "model"
    build_model(len(tokenizer), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rows, output = Dataset.from_list(make_rows(12)), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, PPLCrashAfterFirstChunk(model=str(folder), batch_size=4), output, progress=False)
    build_model(len(tokenizer), seed=1).save_pretrained(folder)  # same path, other weights
    with pytest.raises(JobConflictError, match="the model changed"):
        run_scoring_job(rows, PPLScorer(model=str(folder), batch_size=4), output, progress=False)
    manifest = json.loads((work_dir_for(output) / "manifest.json").read_text())
    assert manifest["model"]["dtype"] == "float32" and manifest["model"]["device_type"] == "cpu"


def test_the_manifest_tells_a_cpu_float32_job_from_a_gpu_bfloat16_one(tmp_path, model):
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    cpu = PPLScorer(model=str(folder), device="cpu").model_identity()
    gpu = PPLScorer(model=str(folder), device="cuda").model_identity()
    assert (cpu["dtype"], cpu["device_type"]) == ("float32", "cpu")
    assert (gpu["dtype"], gpu["device_type"]) == ("bfloat16", "cuda")


# --- From the round-four review: what a resumed job may reuse, and what a refusal says ----------------------

def killed_after_one_chunk(backend_class: type[TransformersBackend]) -> type[TransformersBackend]:
    """``backend_class``, dying (like a killed process) when asked to score a second chunk."""

    class KilledAfterOneChunk(backend_class):
        calls = 0

        def score(self, items, **settings):
            KilledAfterOneChunk.calls += 1
            if KilledAfterOneChunk.calls > 1:
                raise KeyboardInterrupt
            return super().score(items, **settings)

    return KilledAfterOneChunk


class Anonymous(TransformersBackend):
    """A backend that cannot say what it runs."""

    def identity(self):
        return None


def test_a_job_never_resumes_with_the_results_of_a_backend_without_identity(tmp_path, model, tokenizer):
    """From the round-four review, case 5."""
    rows = Dataset.from_list([{"id": f"r{i}", "text": "ab " * (i + 1)} for i in range(12)])
    output = tmp_path / "scores.jsonl"

    first = PerplexityScorer(backend=killed_after_one_chunk(Anonymous)(model, tokenizer), batch_size=4)
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, first, output, progress=False)
    assert read_jsonl(work_dir_for(output) / "rank-00000.jsonl")  # the first chunk was kept
    second = PerplexityScorer(backend=Anonymous(model, tokenizer), batch_size=4)
    with pytest.raises(JobConflictError, match="identity"):
        run_scoring_job(rows, second, output, progress=False)
    summary = run_scoring_job(rows, second, output, progress=False, overwrite=True)
    assert summary.scored == 12


def test_a_resumed_job_reuses_the_first_runs_cpu_kernel_choice(tmp_path, model, tokenizer, monkeypatch):
    """From the round-four review, case 6."""
    monkeypatch.setenv(cpu_kernels.CPU_LINEAR_ENV, "auto")
    monkeypatch.setattr(cpu_kernels, "_measured", {})
    monkeypatch.setattr(cpu_kernels, "_measured_long", {})
    if not cpu_kernels.onednn_linear_available():
        pytest.skip("oneDNN linear is not available in this PyTorch build")
    rows = Dataset.from_list([{"id": f"r{i}", "text": "ab " * (i + 1)} for i in range(12)])
    output = tmp_path / "scores.jsonl"
    chosen = iter(["onednn", "default"])  # the first run measures oneDNN faster, the resumed one the BLAS

    def measure(shapes, rows=cpu_kernels.MEASURE_ROWS, **kwargs):
        faster = next(chosen)
        return {"default": 2.0 if faster == "default" else 1.0, "onednn": 2.0 if faster == "onednn" else 1.0}

    monkeypatch.setattr(cpu_kernels, "measure_linear_rates", measure)

    def scorer(backend_class):
        backend = backend_class(model, tokenizer)
        backend.identity = lambda: {"model": "tiny"}
        return PerplexityScorer(backend=backend, batch_size=4)

    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, scorer(killed_after_one_chunk(TransformersBackend)), output, progress=False)
    cpu_kernels._measured.clear()  # a new process: nothing measured yet
    kernels = []
    monkeypatch.setattr(cpu_kernels, "OneDNNLinear", lambda: kernels.append("onednn") or contextlib.nullcontext())
    run_scoring_job(rows, scorer(TransformersBackend), output, progress=False)
    assert kernels and set(kernels) == {"onednn"}


def test_a_changed_stream_is_refused_without_row_counts_nobody_knows(tmp_path):
    """From the round-four review, case 16."""
    rows = make_rows(12)
    output = tmp_path / "o.jsonl"
    stream = Dataset.from_list(rows).to_iterable_dataset()
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(stream, CrashAfter(rows=4, batch_size=4), output, data_fingerprint="before", progress=False)
    with pytest.raises(JobConflictError) as refusal:
        run_scoring_job(stream, LengthRatioScorer(batch_size=4), output, data_fingerprint="after", progress=False)
    assert "the input data changed" in str(refusal.value) and "None" not in str(refusal.value)


def test_an_in_memory_job_still_says_how_many_rows_changed(tmp_path):
    """From the round-four review, case 16."""
    rows = make_rows(12)
    output = tmp_path / "o.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=4, batch_size=4), output, progress=False)
    with pytest.raises(JobConflictError, match="12 rows before, 13 now"):
        run_scoring_job(Dataset.from_list(make_rows(13)), LengthRatioScorer(batch_size=4), output, progress=False)


# --- How often progress is saved: its own setting, not the batch size -------------------------------------


@pytest.fixture
def chunk_offsets(monkeypatch) -> list[tuple[int, int]]:
    """(first row, rows) of every chunk a job scores."""
    chunks, original = [], local.score_chunk

    def recorded(scorer, rows, offset=0, columns=None):
        chunks.append((offset, len(rows)))
        return original(scorer, rows, offset, columns)

    monkeypatch.setattr(local, "score_chunk", recorded)
    return chunks


@pytest.mark.parametrize("save_every", [None, 5])
def test_how_often_progress_is_saved_does_not_depend_on_the_batch_size(tmp_path, chunk_offsets, save_every):
    saved = []
    for batch_size in (1, 3, 16):
        chunk_offsets.clear()
        run_scoring_job(Dataset.from_list(make_rows(13)), LengthRatioScorer(batch_size=batch_size),
                        tmp_path / f"{batch_size}.jsonl", progress=False, save_every=save_every)
        saved.append(list(chunk_offsets))
    every = save_every or local.CPU_SAVE_EVERY
    assert saved == [[(start, min(every, 13 - start)) for start in range(0, 13, every)]] * 3


class LengthRatioOnAnAccelerator(LengthRatioScorer):
    """LengthRatioScorer, as if its model ran on a GPU."""

    def model_identity(self):
        return {"device_type": "cuda"}


def test_a_job_on_an_accelerator_saves_every_4096_rows_by_default(tmp_path, chunk_offsets):
    run_scoring_job(Dataset.from_list(make_rows(20)), LengthRatioOnAnAccelerator(), tmp_path / "o.jsonl",
                    progress=False)
    assert chunk_offsets == [(0, 20)] and local.default_save_every("cuda") == 4096
    with pytest.raises(ValueError, match="`save_every` must be a positive whole number of rows, got 0"):
        run_scoring_job(Dataset.from_list(make_rows(2)), LengthRatioScorer(), tmp_path / "x.jsonl", save_every=0)


def test_the_chunk_setting_changes_no_score_and_no_line_of_the_output(tmp_path, model_dir):
    """Every row once, in order, whatever ``save_every``; a model's scores move only by float32 rounding
    (the rows of a chunk are batched among themselves, so another chunking may batch a row with others)."""
    rows = Dataset.from_list([{"id": f"r{i}", "instruction": "Say something." * (1 + i % 4), "input": "",
                               "output": "The quick brown fox jumps. " * (1 + i % 5)} for i in range(11)])
    ratios, perplexities = [], []
    for save_every in (1, 3, None, 64):
        run_scoring_job(rows, LengthRatioScorer(), tmp_path / f"ratio-{save_every}.jsonl", progress=False,
                        save_every=save_every)
        ratios.append((tmp_path / f"ratio-{save_every}.jsonl").read_bytes())
    for save_every in (3, 64):
        run_scoring_job(rows, PPLScorer(model=model_dir), tmp_path / f"ppl-{save_every}.jsonl", progress=False,
                        save_every=save_every)
        perplexities.append(read_jsonl(tmp_path / f"ppl-{save_every}.jsonl"))
    assert ratios[1:] == ratios[:1] * 3
    assert [[line["id"] for line in lines] for lines in perplexities] == [[f"r{i}" for i in range(11)]] * 2
    assert [line["score"] for line in perplexities[1]] == pytest.approx([line["score"] for line in perplexities[0]],
                                                                         rel=1e-6)


# --- Issue 59: what a refusal names; score columns in another order; a finished output in another layout ----------


def score_set_manifest(model: str, *members: dict) -> dict:
    from hf_adapters.engines.job_files import job_manifest
    from hf_adapters.files.score_files import OutputFormat

    scorer = build_scorer({"model": model, "scores": list(members)})
    return job_manifest(scorer, "data", 10, 4, OutputFormat().columns_of(scorer.outputs, scorer.named_outputs))


def test_a_score_set_resumed_without_a_member_is_refused_naming_its_members_not_the_model(model_dir):
    from hf_adapters.engines.job_files import job_changes

    ifd, ppl, upd = {"name": "IFDScorer"}, {"name": "PPLScorer"}, {"name": "UPDScorer"}
    reasons = job_changes(score_set_manifest(model_dir, ifd, ppl, upd), score_set_manifest(model_dir, ifd, ppl))
    assert reasons.startswith("the score set's members changed (were IFDScorer, PPLScorer, UPDScorer, now "
                              "IFDScorer, PPLScorer); the score columns changed"), reasons
    assert "model" not in reasons
    reasons = job_changes(score_set_manifest(model_dir, ifd, ppl), score_set_manifest(model_dir, ifd,
                                                                                      {**ppl, "max_length": 64}))
    assert reasons.startswith("the config of its member PPLScorer changed (was {"), reasons
    assert "IFDScorer" not in reasons and "model" not in reasons


def test_changed_data_of_the_same_row_count_is_refused_naming_its_content_not_a_row_count(tmp_path):
    rows, output = make_rows(20), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=8, batch_size=4), output, progress=False)
    rows[15]["output"] = "changed"
    with pytest.raises(JobConflictError) as refusal:
        run_scoring_job(Dataset.from_list(rows), LengthRatioScorer(batch_size=4), output, progress=False)
    assert "the input data changed: its content differs (another fingerprint, the same 20 rows)." in \
        str(refusal.value)
    assert "rows before" not in str(refusal.value)


IFD_COLUMNS = ("ppl_conditional", "ppl_direct")


def ifd_rows() -> Dataset:
    return Dataset.from_list([{"instruction": f"Say {i}.", "input": "", "output": "A fox. " * (1 + i % 3)}
                              for i in range(10)])


def test_a_finished_job_asked_for_its_score_columns_in_another_order_is_scored_again(tmp_path, model_dir):
    from hf_adapters.files.score_files import OutputFormat

    output = tmp_path / "out.jsonl"
    for columns in (IFD_COLUMNS, IFD_COLUMNS[::-1]):
        summary = run_scoring_job(ifd_rows(), build_scorer({"name": "IFDScorer", "model": model_dir}), output,
                                  progress=False, output=OutputFormat(score_columns=columns))
        assert not summary.skipped
        assert list(read_jsonl(output)[0]) == ["id", "score", *columns]


@pytest.mark.parametrize("change", [{"score_columns": IFD_COLUMNS[::-1]}, {"keep_columns": True}],
                         ids=["reordered", "kept"])
def test_a_parquet_job_resumed_with_its_columns_reordered_or_kept_writes_the_uninterrupted_runs_file(
        tmp_path, model_dir, monkeypatch, change):
    """The local engine's parts hold every score column by name and none of the rows' own: its resume
    writes the output the rerun asks for (checked for issue 59, where the Ray engine's could not)."""
    import dataclasses

    import pyarrow.parquet as pq

    from hf_adapters.files.score_files import OutputFormat

    started = OutputFormat("parquet", score_columns=IFD_COLUMNS)
    asked = dataclasses.replace(started, **change)
    scored = local.score_chunk

    def killed_after_two_chunks(*args, **kwargs):
        if killed_after_two_chunks.calls == 2:
            raise KeyboardInterrupt
        killed_after_two_chunks.calls += 1
        return scored(*args, **kwargs)

    killed_after_two_chunks.calls = 0
    monkeypatch.setattr(local, "score_chunk", killed_after_two_chunks)
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(ifd_rows(), build_scorer({"name": "IFDScorer", "model": model_dir}), tmp_path / "resumed",
                        progress=False, output=started)
    monkeypatch.setattr(local, "score_chunk", scored)
    for name in ("resumed", "whole"):
        run_scoring_job(ifd_rows(), build_scorer({"name": "IFDScorer", "model": model_dir}), tmp_path / name,
                        progress=False, output=asked)
    resumed, whole = pq.read_table(tmp_path / "resumed"), pq.read_table(tmp_path / "whole")
    assert resumed.schema == whole.schema and resumed.num_rows == whole.num_rows == 10
    for name in resumed.column_names:
        values, expected = resumed.column(name).to_pylist(), whole.column(name).to_pylist()
        assert values == (pytest.approx(expected, rel=1e-6) if name in ("score", *IFD_COLUMNS) else expected)


def test_a_finished_output_written_a_parquet_file_per_block_is_refused_naming_the_flag(tmp_path):
    """The default engine cannot write the layout ``--engine ray --file-per-block`` did: it says which
    layout the output has and how to get the other, instead of "nothing to do"."""
    from hf_adapters.engines.job_files import _finished_record
    from hf_adapters.files.score_files import OutputFormat

    rows, output, parquet = Dataset.from_list(make_rows(8)), tmp_path / "out", OutputFormat("parquet")
    run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=parquet)
    record = json.loads(_finished_record(output).read_text())
    _finished_record(output).write_text(json.dumps({**record, "job": {**record["job"], "file_per_block": True}}))
    with pytest.raises(ValueError, match=r"already this job's complete output, as one Parquet file per block "
                                         r"\(written with --engine ray --file-per-block\): add --file-per-block to "
                                         r"leave it so, or pass --overwrite to score it again into shards of "
                                         r"--rows-per-shard rows\."):
        run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=parquet)
    scorer = LengthRatioScorer()
    assert not run_scoring_job(rows, scorer, output, progress=False, output=parquet, overwrite=True).skipped
    assert run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=parquet).skipped


def test_a_kill_during_the_cleanup_then_a_rerun_in_another_format_scores_it_again_in_that_format(tmp_path,
                                                                                                monkeypatch):
    """The output left in place by a kill during the cleanup is this job's only in the format it was
    written in: a rerun keeping the rows' columns writes them (it was taken as complete, recorded as
    finished in the new format, and every later rerun did nothing)."""
    from hf_adapters.files.score_files import OutputFormat

    def killed_during_cleanup(work_dir):
        raise KeyboardInterrupt

    rows, output, remove_work_dir = Dataset.from_list(make_rows(6)), tmp_path / "out.jsonl", local._remove_work_dir
    monkeypatch.setattr(local, "_remove_work_dir", killed_during_cleanup)
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, LengthRatioScorer(), output, progress=False)
    monkeypatch.setattr(local, "_remove_work_dir", remove_work_dir)
    kept = OutputFormat(keep_columns=True)
    scorer = LengthRatioScorer()
    assert not run_scoring_job(rows, scorer, output, progress=False, output=kept).skipped
    assert len(scorer.scored_rows) == 6
    assert [list(line) for line in read_jsonl(output)][0] == ["id", "instruction", "input", "output", "score"]
    assert run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=kept).skipped
