"""Regressions of the outside run "Nothing lost, nothing silently wrong: round four", the job cases:
what ``hf-adapters score`` writes with ``--keep-columns``, where it may write, and what a resumed job
may reuse. Each test failed on the code it was written against."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import math
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from hf_adapters import cli
from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.transformers import cpu_kernels
from hf_adapters.engines.local import JobConflictError, run_scoring_job, work_dir_for
from hf_adapters.scorers import PerplexityScorer
from tests.conftest import read_jsonl, write_jsonl
from tests.test_jobs import CrashAfter, LengthRatioScorer, make_rows
from tests.test_score_command import OutputLengthScorer, config  # noqa: F401  (registers the scorer)


def parquet_rows(tmp_path, table: pa.Table, name: str = "rows.parquet"):
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    pq.write_table(table, folder / name)
    return folder / name


def score(tmp_path, data, output, *extra) -> int:
    return cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress", *extra])


def read_parquet_folder(folder) -> pa.Table:
    return pa.concat_tables([pq.read_table(path) for path in sorted(folder.glob("part-*.parquet"))])


# ------------------------------------------------------------------ 2, 3: every kept value as it was read

TYPED = pa.table({
    "id": pa.array(["a", "b", "c"]),
    "output": pa.array(["xx", "", "yyy"]),
    "when": pa.array([1_000_000_001, 2_000_000_002, 3], pa.timestamp("ns")),
    "small": pa.array([1, -2, 3], pa.int8()),
    "counts": pa.array([[1], [2, 3], []], pa.list_(pa.int32())),
    "price": pa.array([decimal.Decimal("1.50"), decimal.Decimal("22.25"), None], pa.decimal128(10, 2)),
    "label": pa.array(["cat", "dog", "cat"]).dictionary_encode(),
    "big": pa.array([2**63 + 5, 1, 2**64 - 1], pa.uint64()),
})


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_kept_parquet_columns_keep_their_types_and_values(tmp_path, streaming):
    data = parquet_rows(tmp_path, TYPED)
    output = tmp_path / "scores"
    assert score(tmp_path, data, output, "--output-format", "parquet", "--keep-columns", "--rows-per-shard", "2",
                 *streaming) == 0
    table = read_parquet_folder(output)
    assert table.schema.remove_metadata() == TYPED.schema.append(pa.field("score", pa.float64()))
    assert table.drop_columns(["score"]).to_pylist() == TYPED.to_pylist()
    assert table.column("score").to_pylist() == [2.0, None, 3.0]


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
@pytest.mark.parametrize("late", [["x"], {"k": 1}, "text"])
def test_a_column_empty_in_the_first_shard_and_filled_later_is_written(tmp_path, streaming, late):
    rows = [{"id": f"r{i}", "output": "ab", "extra": (late if i >= 5 else None)} for i in range(8)]
    rows[1]["extra"] = [] if isinstance(late, list) else rows[1]["extra"]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    output = tmp_path / "scores"
    assert score(tmp_path, data, output, "--output-format", "parquet", "--keep-columns", "--rows-per-shard", "2",
                 *streaming) == 0
    assert read_parquet_folder(output).column("extra").to_pylist() == [row["extra"] for row in rows]
    assert not (tmp_path / "scores.tmp").exists()


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_jsonl_keeps_the_rows_columns_both_ways(tmp_path, streaming):
    rows = [{"id": f"r{i}", "output": "ab", "extra": (["x"] if i >= 5 else None)} for i in range(8)]
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, write_jsonl(tmp_path / "rows.jsonl", rows), output, "--keep-columns", *streaming) == 0
    assert read_jsonl(output) == [{**row, "score": 2.0} for row in rows]


# ----------------------------------------------------------------------- 4: a data column named score


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_data_column_named_score_is_refused_both_ways(tmp_path, capsys, streaming, kind):
    rows = [{"id": f"r{i}", "output": "ab", "score": 0.5} for i in range(6)]
    data = (write_jsonl(tmp_path / "rows.jsonl", rows) if kind == "jsonl"
            else parquet_rows(tmp_path, pa.Table.from_pylist(rows)))
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, data, output, "--keep-columns", *streaming) == 2
    assert "column 'score'" in capsys.readouterr().err
    assert not output.exists() and not work_dir_for(output).exists()


# ---------------------------------------------------------- 5: a backend that cannot say what it runs


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


# ------------------------------------------------------------ 6: the kernel choice is part of the job


def test_a_resumed_job_reuses_the_first_runs_cpu_kernel_choice(tmp_path, model, tokenizer, monkeypatch):
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


def test_a_model_whose_weights_are_truncated_is_one_error_line(tmp_path, model_dir, capsys):
    broken = tmp_path / "broken-model"
    shutil.copytree(model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "text": "ab"}])
    scorer = tmp_path / "ppl.yaml"
    scorer.write_text("name: PerplexityScorer\n", encoding="utf-8")
    assert cli.main(["score", str(scorer), "--data", str(data), "--output", str(tmp_path / "o.jsonl"),
                     "--model", str(broken), "--no-progress"]) == 2
    assert "error: Could not load model" in capsys.readouterr().err


# ------------------------------------------------------------------- 8: the job's files and the data glob


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_output_whose_work_files_the_data_glob_would_match_is_refused(tmp_path, capsys, kind):
    folder = tmp_path / "ee"
    (folder / "sub").mkdir(parents=True)
    if kind == "jsonl":
        write_jsonl(folder / "sub" / "rows.jsonl", make_rows(6))
        pattern, output = f"{folder}/**/*.jsonl", folder / "scores.out"
        extra = []
    else:
        pq.write_table(pa.Table.from_pylist(make_rows(6)), folder / "sub" / "rows.parquet")
        pattern, output = f"{folder}/**/*.parquet", folder / "scores"
        extra = ["--output-format", "parquet"]
    assert score(tmp_path, pattern, output, *extra) == 2
    assert "matches the input data" in capsys.readouterr().err
    assert not output.exists() and not work_dir_for(output).exists()


# --------------------------------------------------------------------- 16: what a refusal says of a stream


def test_a_changed_stream_is_refused_without_row_counts_nobody_knows(tmp_path):
    rows = make_rows(12)
    output = tmp_path / "o.jsonl"
    stream = Dataset.from_list(rows).to_iterable_dataset()
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(stream, CrashAfter(rows=4, batch_size=4), output, data_fingerprint="before", progress=False)
    with pytest.raises(JobConflictError) as refusal:
        run_scoring_job(stream, LengthRatioScorer(batch_size=4), output, data_fingerprint="after", progress=False)
    assert "the input data changed" in str(refusal.value) and "None" not in str(refusal.value)


def test_an_in_memory_job_still_says_how_many_rows_changed(tmp_path):
    rows = make_rows(12)
    output = tmp_path / "o.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=4, batch_size=4), output, progress=False)
    with pytest.raises(JobConflictError, match="12 rows before, 13 now"):
        run_scoring_job(Dataset.from_list(make_rows(13)), LengthRatioScorer(batch_size=4), output, progress=False)


def test_scores_of_kept_rows_are_finite_or_null(tmp_path):
    rows = [{"id": "a", "output": ""}, {"id": "b", "output": "x"}]
    output = tmp_path / "scores"
    assert score(tmp_path, write_jsonl(tmp_path / "rows.jsonl", rows), output, "--output-format", "parquet",
                 "--keep-columns") == 0
    scores = read_parquet_folder(output).column("score").to_pylist()
    assert scores[0] is None and scores[1] == 1.0 and not any(isinstance(s, float) and math.isnan(s) for s in scores)


def test_timestamps_in_kept_jsonl_columns_are_iso_text(tmp_path):
    table = pa.table({"id": ["a"], "output": ["x"], "when": pa.array([datetime.datetime(2024, 5, 1, 12)])})
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, parquet_rows(tmp_path, table), output, "--keep-columns") == 0
    assert read_jsonl(output)[0]["when"] == "2024-05-01T12:00:00"
