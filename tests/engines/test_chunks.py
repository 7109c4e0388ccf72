"""Scoring a chunk of rows (:func:`~hf_adapters.engines.chunks.score_chunk`), through the local engine:
an out-of-memory error halves the rows, down to one row, and loses none."""

from __future__ import annotations

import logging

import pytest
import torch
from datasets import Dataset

from hf_adapters.engines.local import run_scoring_job
from tests.engines.test_local import (  # noqa: F401  (chunks_of_four_rows: the chunks these tests were written for)
    LengthRatioScorer,
    chunks_of_four_rows,
    expected_lines,
    make_rows,
    read_jsonl,
)


class OutOfMemoryAbove(LengthRatioScorer):
    """Raises CUDA's out-of-memory error for any chunk longer than ``fits`` rows."""

    def __init__(self, fits: int, error: type[Exception] = torch.cuda.OutOfMemoryError, **config):
        super().__init__(**config)
        self.fits, self.error = fits, error

    def score_rows(self, rows):
        if len(rows) > self.fits:
            raise self.error("CUDA out of memory. Tried to allocate 20.00 GiB")
        return super().score_rows(rows)


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError, RuntimeError])
def test_out_of_memory_halves_the_batch_and_keeps_every_row(tmp_path, caplog, error):
    rows = make_rows(19)
    scorer = OutOfMemoryAbove(fits=2, error=error, batch_size=8)
    with caplog.at_level(logging.WARNING, logger="hf_adapters.engines.chunks"):
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
