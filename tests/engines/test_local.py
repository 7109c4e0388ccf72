"""The local engine: output order, the rows' checks, crash-safe resume on any number of processes and
any batch size, the chunks it saves, and runs as 2 CPU processes (torchrun, which ``accelerate launch``
runs on GPUs). Its work folder's decisions (resume, refuse, finish): ``test_work_folder.py``; the
out-of-memory retries: ``test_chunks.py``."""

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
from hf_adapters.core import scored_rows
from hf_adapters.engines import local
from hf_adapters.engines.local import run_scoring_job, score_dataset, shard_range
from hf_adapters.engines.work_folder import work_dir_for
from hf_adapters.scorers import SCORERS, PerplexityScorer, PPLScorer, RowScorer, build_scorer, register_scorer

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def chunks_of_four_rows(monkeypatch):
    """The jobs here save every 4 rows unless they say (the chunks these tests were written for)."""
    monkeypatch.setattr(scored_rows, "CPU_SAVE_EVERY", 4)


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


# --- Real processes: 2 CPU processes under torchrun, and kill -9 -----------------------------------------

LAUNCHER = """import sys
sys.path.insert(0, {tests!r})
import test_local  # noqa: F401  (registers the fake scorers)
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

    # torchrun, which `accelerate launch --multi_gpu` runs: `accelerate launch --cpu` starts one process only.
    command = [str(VENV_BIN / "torchrun"), "--nproc_per_node", "2", "-m", "hf_adapters", *args,
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


def test_the_summary_of_a_resumed_run_says_its_rate_counts_only_this_runs_rows():
    """After a resume the rate counts only the rows this run scored, and the summary says so.

    Round five, item 21.
    """
    from hf_adapters.engines.job_files import JobSummary

    assert str(JobSummary(rows=23, valid=20, seconds=2.0, scored=11)) == \
        "23 rows, 20 valid scores; this run scored 11 of them, 5.5 rows/s"
    assert str(JobSummary(rows=23, valid=20, seconds=2.0, scored=0)) == "23 rows, 20 valid scores, all scored by an " \
        "earlier run"
    assert str(JobSummary(rows=23, valid=20, seconds=2.0, scored=23)) == "23 rows, 20 valid scores, 11.5 rows/s"


# --- From the round-four review: what a resumed job may reuse ---------------------------------------------


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


# --- How often progress is saved: its own setting, not the batch size -------------------------------------


@pytest.fixture
def chunk_offsets(monkeypatch) -> list[tuple[int, int]]:
    """(first row, rows) of every chunk a job scores."""
    offsets, original = [], local.score_chunk

    def recorded(scorer, rows, offset=0, columns=None):
        offsets.append((offset, len(rows)))
        return original(scorer, rows, offset, columns)

    monkeypatch.setattr(local, "score_chunk", recorded)
    return offsets


@pytest.mark.parametrize("save_every", [None, 5])
def test_how_often_progress_is_saved_does_not_depend_on_the_batch_size(tmp_path, chunk_offsets, save_every):
    saved = []
    for batch_size in (1, 3, 16):
        chunk_offsets.clear()
        run_scoring_job(Dataset.from_list(make_rows(13)), LengthRatioScorer(batch_size=batch_size),
                        tmp_path / f"{batch_size}.jsonl", progress=False, save_every=save_every)
        saved.append(list(chunk_offsets))
    every = save_every or scored_rows.CPU_SAVE_EVERY
    assert saved == [[(start, min(every, 13 - start)) for start in range(0, 13, every)]] * 3


class LengthRatioOnAnAccelerator(LengthRatioScorer):
    """LengthRatioScorer, as if its model ran on a GPU."""

    def model_identity(self):
        return {"device_type": "cuda"}


def test_a_job_on_an_accelerator_saves_every_4096_rows_by_default(tmp_path, chunk_offsets):
    run_scoring_job(Dataset.from_list(make_rows(20)), LengthRatioOnAnAccelerator(), tmp_path / "o.jsonl",
                    progress=False)
    assert chunk_offsets == [(0, 20)] and scored_rows.default_save_every("cuda") == 4096
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


# --- Issue 59: score columns in another order ---------------------------------------------------------------


IFD_COLUMNS = ("ppl_conditional", "ppl_direct")


def ifd_rows() -> Dataset:
    return Dataset.from_list([{"instruction": f"Say {i}.", "input": "", "output": "A fox. " * (1 + i % 3)}
                              for i in range(10)])


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




# --- The choices every process makes, and the job's size the backend is told -----------------------------


def test_a_process_other_than_0_makes_the_choices_process_0_measured(monkeypatch):
    """Under accelerate, process 0 shares the choices it measured on its first chunk (a broadcast), and every
    other process makes them before scoring its own chunks. (A unit test, with a stand-in for process 1.)"""
    made = []

    class Scorer(LengthRatioScorer):
        def reuse_measured_choices(self, choices):
            made.append(choices)

    class ProcessOne:
        num_processes, process_index, is_main_process = 2, 1, False

    monkeypatch.setattr(local, "_from_main_process", lambda value, state: {"compile": True})  # process 0's
    assert local._share_choices(Scorer(), {}, ProcessOne()) == {"compile": True} and made == [{"compile": True}]


def test_the_backend_is_told_the_jobs_tokens_before_it_scores_the_first_chunk(tmp_path, model, tokenizer):
    """So that compile=auto decides on the job's size (the first chunk's tokens per row x the job's rows),
    once, before the first chunk is saved."""
    from hf_adapters.engines.job_estimate import recorded_work

    rows = [{"id": f"r{i}", "text": "ab " * (i + 1)} for i in range(12)]
    told = []

    class Told(TransformersBackend):
        def score(self, items, **settings):
            told.append(self.job_tokens)
            return super().score(items, **settings)

    backend = Told(model, tokenizer)
    backend.identity = lambda: {"model": "tiny"}
    scorer = PerplexityScorer(backend=backend, batch_size=4)
    run_scoring_job(Dataset.from_list(rows), scorer, tmp_path / "scores.jsonl", progress=False)
    first = recorded_work(scorer, {"id": [row["id"] for row in rows[:4]], "text": [row["text"] for row in rows[:4]]})
    assert told and set(told) == {math.ceil(first[1] * 12 / 4)}
