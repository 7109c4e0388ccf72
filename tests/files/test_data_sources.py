"""``hf-adapters score`` reads what people have: a file, a folder or glob of shards, a save_to_disk
folder, a hub id; in memory or streamed; and writes JSONL or Parquet shards, resumably."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from hf_adapters import cli
from hf_adapters.engines.local import run_scoring_job
from hf_adapters.engines.work_folder import work_dir_for
from hf_adapters.files.data_io import data_fingerprint, read_rows
from tests.cli.test_score_command import OutputLengthScorer, config  # noqa: F401  (registers the scorer)
from tests.conftest import write_jsonl
from tests.engines.test_local import CrashAfter, LengthRatioScorer, expected_lines, make_rows

ROWS = [{"id": f"r{i:02d}", "instruction": "Repeat.", "input": "", "output": "ab" * (i % 3)} for i in range(23)]


@pytest.fixture
def shards(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(ROWS[:10]), folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[10:]), folder / "part-1.parquet")
    return folder


def score(tmp_path, data, *extra):
    output = tmp_path / "out.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress",
                     *extra]) == 0
    return output.read_text(encoding="utf-8")


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_a_folder_a_glob_and_a_saved_dataset_give_the_single_files_output(tmp_path, shards, streaming):
    single = score(tmp_path, write_jsonl(tmp_path / "all.jsonl", ROWS))
    assert len(single.splitlines()) == len(ROWS)
    assert score(tmp_path, shards, *streaming) == single
    assert score(tmp_path, f"{tmp_path}/shards/*.parquet", *streaming) == single
    Dataset.from_list(ROWS).save_to_disk(tmp_path / "saved")
    assert score(tmp_path, tmp_path / "saved", *streaming) == single
    assert score(tmp_path, tmp_path / "all.jsonl", *streaming) == single


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: f"{tmp}/nothing/*.jsonl", "matches no file"),
    (lambda tmp: tmp / "empty_folder", "holds no data files"),
])
def test_a_glob_or_folder_without_data_is_a_clear_error(tmp_path, capsys, make, message):
    (tmp_path / "empty_folder").mkdir()
    assert cli.main(["score", config(tmp_path), "--data", str(make(tmp_path)), "--output",
                     str(tmp_path / "o.jsonl")]) == 2
    assert message in capsys.readouterr().err


def test_shards_with_different_columns_are_named(tmp_path, capsys):
    write_jsonl(tmp_path / "a.jsonl", ROWS[:2])
    write_jsonl(tmp_path / "b.jsonl", [{"id": "x", "prompt": "p", "output": "o"}])
    assert cli.main(["score", config(tmp_path), "--data", f"{tmp_path}/*.jsonl", "--output",
                     str(tmp_path / "out" / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "different columns" in err and "b.jsonl" in err and "'prompt'" in err


def test_shards_of_several_types_are_refused(tmp_path, shards):
    write_jsonl(shards / "extra.jsonl", ROWS[:1])
    with pytest.raises(ValueError, match="shards of several types"):
        read_rows(shards)


def test_a_hub_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="not a local file, folder or pattern, and the hub cannot be reached"):
        read_rows("someone/some-dataset", split="train")


def test_the_fingerprint_of_shards_follows_their_content(tmp_path, shards):
    before = data_fingerprint(shards)
    assert data_fingerprint(f"{shards}/*.parquet") == before
    pq.write_table(pa.Table.from_pylist(ROWS[10:12]), shards / "part-1.parquet")
    assert data_fingerprint(shards) != before


def test_parquet_output_is_a_folder_of_shards_with_the_rows_when_asked(tmp_path, shards):
    output = tmp_path / "scores"
    base = ["score", config(tmp_path), "--data", str(shards), "--output", str(output), "--no-progress",
            "--output-format", "parquet", "--rows-per-shard", "10"]
    assert cli.main(base) == 0
    assert sorted(path.name for path in output.iterdir()) == ["part-00000.parquet", "part-00001.parquet",
                                                              "part-00002.parquet"]
    table = pa.concat_tables([pq.read_table(path) for path in sorted(output.iterdir())])
    assert table.column_names == ["id", "score"] and table.column("id").to_pylist() == [row["id"] for row in ROWS]
    expected = [float(len(row["output"])) if row["output"] else None for row in ROWS]
    assert table.column("score").to_pylist() == expected
    assert cli.main([*base, "--keep-columns"]) == 0  # a rerun replaces the folder of shards
    kept = pa.concat_tables([pq.read_table(path) for path in sorted(output.iterdir())])
    assert kept.column_names == ["id", "instruction", "input", "output", "score"]
    assert kept.column("output").to_pylist() == [row["output"] for row in ROWS]


def test_a_parquet_output_folder_holding_other_files_is_refused(tmp_path, shards, capsys):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert cli.main(["score", config(tmp_path), "--data", str(shards), "--output", str(tmp_path / "busy"),
                     "--output-format", "parquet"]) == 2
    assert "holds other files" in capsys.readouterr().err and (tmp_path / "busy" / "notes.txt").is_file()


def test_jsonl_with_the_rows_keeps_every_column_as_it_was(tmp_path):
    rows = [{"id": "a", "instruction": "I.", "input": "", "output": "xy", "reward": 0.123456789012345678}]
    output = score(tmp_path, write_jsonl(tmp_path / "rows.jsonl", rows), "--keep-columns")
    assert json.loads(output) == {**rows[0], "score": 2.0}


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_a_file_whose_name_holds_glob_characters_is_read_as_that_file(tmp_path, streaming):
    """A folder holding ``p1.jsonl`` and ``p[1].jsonl`` is read as both, each once (not p1's rows
    twice); ``--data 'a[1].jsonl'``, a path or a ``file://`` URL, reads that file, not ``a1.jsonl``,
    and the job's fingerprint is that file's.

    Round six: a file name is a name, not a glob.
    """
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "p1.jsonl", ROWS[:2])
    write_jsonl(folder / "p[1].jsonl", ROWS[2:5])

    def ids(output: str) -> list[str]:
        return [json.loads(line)["id"] for line in output.splitlines()]

    assert ids(score(tmp_path, folder, *streaming)) == [row["id"] for row in ROWS[:5]]
    named = write_jsonl(tmp_path / "a[1].jsonl", ROWS[5:7])
    write_jsonl(tmp_path / "a1.jsonl", ROWS[7:9])
    for data in (named, f"file://{named}"):
        assert ids(score(tmp_path, data, *streaming)) == ["r05", "r06"]
    assert data_fingerprint(named) == data_fingerprint(write_jsonl(tmp_path / "copy.jsonl", ROWS[5:7]))


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_a_file_whose_name_holds_a_double_colon_is_read_as_that_file(tmp_path, monkeypatch, streaming):
    """``--data rows::v2.jsonl`` (a path, alone or in a folder) reads that file: fsspec's ``::``, which
    chains URLs, is part of a local name that exists."""
    monkeypatch.setenv("HF_ADAPTERS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "shards"
    folder.mkdir()
    named = write_jsonl(folder / "rows::v2.jsonl", ROWS[:3])

    def ids(output: str) -> list[str]:
        return [json.loads(line)["id"] for line in output.splitlines()]

    for data in (named, folder):
        assert ids(score(tmp_path, data, *streaming)) == ["r00", "r01", "r02"]


def test_an_output_matching_the_data_glob_is_refused(tmp_path, capsys):
    write_jsonl(tmp_path / "a.jsonl", ROWS)
    assert cli.main(["score", config(tmp_path), "--data", f"{tmp_path}/*.jsonl", "--output",
                     str(tmp_path / "scores.jsonl")]) == 2
    assert "matches the input data" in capsys.readouterr().err


def stream(rows):
    return Dataset.from_list(rows).to_iterable_dataset(num_shards=3)


def test_a_killed_streaming_job_resumes_where_it_stopped(tmp_path):
    rows = make_rows(30)
    output = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(stream(rows), CrashAfter(rows=12, batch_size=4), output, data_fingerprint="rows-30",
                        progress=False, save_every=4)
    assert not output.exists()
    scorer = LengthRatioScorer(batch_size=4)
    summary = run_scoring_job(stream(rows), scorer, output, data_fingerprint="rows-30", progress=False, save_every=4)
    assert scorer.scored_rows == [f"r{i}" for i in range(12, 30)]
    assert [json.loads(line) for line in output.read_text().splitlines()] == expected_lines(rows)
    assert (summary.rows, summary.scored) == (30, 18) and not work_dir_for(output).exists()


def test_a_streaming_job_whose_last_chunk_is_whole_knows_its_end(tmp_path):
    rows = make_rows(12)
    summary = run_scoring_job(stream(rows), LengthRatioScorer(batch_size=4), tmp_path / "o.jsonl",
                              data_fingerprint="rows-12", progress=False)
    assert summary.rows == 12 and len((tmp_path / "o.jsonl").read_text().splitlines()) == 12


def test_a_stream_checks_each_chunk_before_scoring_it_and_names_the_row(tmp_path):
    rows = make_rows(12)
    rows[9]["instruction"] = None
    scorer = LengthRatioScorer(batch_size=4)
    with pytest.raises(ValueError, match="Row 9 .*has no field 'instruction'"):
        run_scoring_job(stream(rows), scorer, tmp_path / "o.jsonl", data_fingerprint="bad", progress=False,
                        save_every=4)
    assert scorer.scored_rows == [f"r{i}" for i in range(8)]  # the chunks before it are kept for a rerun


def test_a_stream_without_a_fingerprint_is_refused(tmp_path):
    with pytest.raises(ValueError, match="pass `data_fingerprint`"):
        run_scoring_job(stream(make_rows(4)), LengthRatioScorer(), tmp_path / "o.jsonl")


def test_nan_scores_of_a_stream_are_null(tmp_path):
    rows = make_rows(6)
    rows[2]["output"] = ""
    run_scoring_job(stream(rows), LengthRatioScorer(batch_size=4), tmp_path / "o.jsonl", data_fingerprint="n",
                    progress=False)
    scores = [json.loads(line)["score"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert scores[2] is None and not any(isinstance(s, float) and math.isnan(s) for s in scores)
