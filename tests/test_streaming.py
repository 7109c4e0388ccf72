"""Streams (``IterableDataset``) take score columns lazily, with the in-memory path's values."""

from __future__ import annotations

import json
import math

import pytest
from datasets import Dataset, IterableDataset, IterableDatasetDict, load_dataset

from hf_adapters import add_ifd_column, add_ifeval_columns, add_perplexity_column, select
from hf_adapters.ifeval import demo_rows
from tests.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS

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
