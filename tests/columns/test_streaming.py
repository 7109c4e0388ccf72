"""Streams (``IterableDataset``) take score columns lazily, with the in-memory path's values."""

from __future__ import annotations

import json
import math

import pytest
from datasets import Dataset, IterableDataset, IterableDatasetDict, load_dataset

from hf_adapters import add_ifd_column, add_ifeval_columns, add_perplexity_column, select
from hf_adapters.ifeval import demo_rows
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS

ROWS = [{"id": f"r{i}", "instruction": instruction, "input": input, "output": output}
        for i, (instruction, input, output) in enumerate(zip(INSTRUCTIONS * 3, INPUTS * 3, OUTPUTS * 3, strict=True))]


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    return str(path)


def same(a, b):
    return all(math.isnan(x) and math.isnan(y) or x == pytest.approx(y, rel=1e-6) for x, y in zip(a, b, strict=True))


def test_a_streamed_json_file_gets_the_in_memory_scores_lazily(jsonl, model, tokenizer, monkeypatch):
    stream = load_dataset("json", data_files=jsonl, streaming=True)["train"]
    calls = []
    original = type(tokenizer).__call__
    monkeypatch.setattr(type(tokenizer), "__call__", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    scored = add_ifd_column(add_perplexity_column(stream, model=model, tokenizer=tokenizer), model=model,
                            tokenizer=tokenizer, batch_size=4)
    assert isinstance(scored, IterableDataset) and calls == []  # nothing is scored until it is read
    rows = list(scored)
    memory = add_ifd_column(add_perplexity_column(Dataset.from_list(ROWS), model=model, tokenizer=tokenizer),
                            model=model, tokenizer=tokenizer)
    assert [row["id"] for row in rows] == [row["id"] for row in ROWS]
    for column in ("perplexity", "ifd", "ppl_conditional", "ppl_direct"):
        assert same([row[column] for row in rows], memory[column]), column
    assert scored.features["ifd"].dtype == "float64"


def test_a_stream_split_by_split_and_an_iterable_from_a_dataset(model, tokenizer):
    parts = IterableDatasetDict({"train": Dataset.from_list(ROWS[:4]).to_iterable_dataset(num_shards=2),
                                 "test": Dataset.from_list(ROWS[4:]).to_iterable_dataset()})
    scored = add_perplexity_column(parts, model=model, tokenizer=tokenizer)
    assert isinstance(scored, IterableDatasetDict)
    assert [row["id"] for row in scored["train"]] == ["r0", "r1", "r2", "r3"]
    assert len(list(scored["test"])) == len(ROWS) - 4


def test_ifeval_columns_on_a_stream():
    stream = Dataset.from_list(demo_rows()).to_iterable_dataset()
    assert [row["ifeval_prompt_strict"] for row in add_ifeval_columns(stream)] == [True, True, False, False]


def test_a_stream_refuses_map_options_it_cannot_honour(model, tokenizer):
    stream = Dataset.from_list(ROWS).to_iterable_dataset()
    with pytest.raises(ValueError, match=r"\['load_from_cache_file'\] do not apply to a stream"):
        add_perplexity_column(stream, model=model, tokenizer=tokenizer, load_from_cache_file=False)


def test_selecting_from_a_stream_filters_by_the_cut_offs_and_refuses_ranking():
    stream = Dataset.from_dict({"id": list("abcde"), "ifd": [0.9, 1.2, None, 0.7, float("nan")]}).to_iterable_dataset()
    assert [row["id"] for row in select(stream, "ifd", max_score=1.0)] == ["a", "d"]
    assert [row["id"] for row in select(stream, "ifd", min_score=0.8, convention="superfiltering")] == ["a"]
    with pytest.raises(ValueError, match="rank the whole column"):
        select(stream, "ifd", top=0.5)


@pytest.mark.parametrize("first", [["--streaming"], []], ids=["streamed_then_in_memory", "in_memory_then_streamed"])
def test_a_job_killed_part_way_resumes_with_streaming_switched(tmp_path, monkeypatch, capsys, first):
    """Reading the rows as a stream or not changes no score, so a job killed part-way resumes with
    ``--streaming`` switched (it was refused as "the input data changed"), scoring only the chunks
    still to do, into the file of an uninterrupted run.

    Round five, item 12.
    """
    from hf_adapters import cli
    from hf_adapters.engines import local as jobs
    from tests.engines.test_local import LengthRatioScorer, make_rows, write_jsonl  # noqa: F401  (registers the scorer)

    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(10))
    config = tmp_path / "ratio.yaml"
    config.write_text("name: LengthRatioScorer\nbatch_size: 3\n", encoding="utf-8")

    def score(output, *extra: str) -> int:
        return cli.main(["score", str(config), "--data", str(data), "--output", str(output), "--no-progress",
                         "--save-every", "3", *extra])

    assert score(tmp_path / "whole.jsonl") == 0
    chunks, original = [], jobs.score_chunk

    def killed_on_the_third_chunk(scorer, rows, offset=0, columns=None):
        chunks.append(offset)
        if len(chunks) == 3:
            raise KeyboardInterrupt
        return original(scorer, rows, offset, columns)

    monkeypatch.setattr(jobs, "score_chunk", killed_on_the_third_chunk)
    output = tmp_path / "resumed.jsonl"
    assert score(output, *first) == 130
    assert score(output, *(["--streaming"] if not first else [])) == 0, capsys.readouterr().err
    assert chunks == [0, 3, 6, 6, 9]  # chunk 2 again (it was interrupted), then chunk 3
    assert output.read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    assert "this run scored 4 of them" in capsys.readouterr().out


def test_a_resumed_stream_of_other_rows_than_the_in_memory_run_is_refused(tmp_path):
    """Switching to a stream does not hide changed data: the job's row count is checked against the
    count the stream reaches (here with one data fingerprint for both, as a caller may pass).

    Round five, item 12.
    """
    from hf_adapters.engines.local import JobConflictError, run_scoring_job
    from tests.engines.test_local import CrashAfter, LengthRatioScorer, make_rows

    output = tmp_path / "o.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(make_rows(12)), CrashAfter(rows=4, batch_size=4), output,
                        data_fingerprint="rows", progress=False, save_every=4)
    stream = Dataset.from_list(make_rows(13)).to_iterable_dataset()
    with pytest.raises(JobConflictError, match="the input data changed"):
        run_scoring_job(stream, LengthRatioScorer(batch_size=4), output, data_fingerprint="rows", progress=False,
                        save_every=4)
