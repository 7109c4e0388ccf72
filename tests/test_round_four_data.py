"""Regressions of issue "round four": data reading cases (nothing lost, nothing silently wrong).

Each case through the public entry points: ``hf-adapters score`` (``hf_adapters.cli.main``), in memory
and with ``--streaming``, and ``hf_adapters.files.data_io.read_rows``; each failed on the code it was written
against.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, DatasetDict

from hf_adapters.cli import main
from hf_adapters.files.data_io import data_fingerprint, read_rows
from tests.conftest import read_jsonl, write_jsonl
from tests.test_ray import ray_cluster  # noqa: F401  (fixture)

STREAMING = pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streaming"])


def rows(first: int, count: int) -> list[dict]:
    return [{"id": f"r{i}", "instruction": f"Say {i}.", "input": "", "output": f"Over sea poem {i}."}
            for i in range(first, first + count)]


def score(tmp_path: Path, data: Path | str, streaming: bool, *extra: str, model_dir: str) -> tuple[int, Path]:
    """Run ``hf-adapters score`` with a perplexity config; the exit code and the output path."""
    config = tmp_path / "ppl.yaml"
    config.write_text("name: PPLScorer\nmax_length: 64\nbatch_size: 2\n", encoding="utf-8")
    output = tmp_path / f"scores-{len(list(tmp_path.glob('scores-*')))}.jsonl"
    flags = ["--streaming"] if streaming else []
    code = main(["score", str(config), "--data", str(data), "--output", str(output), "--model", model_dir,
                 "--no-progress", *flags, *extra])
    return code, output


def refused(capsys, code: int, *parts: str) -> str:
    """The one-line error of a refused command, checked to name every one of ``parts``."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err, err
    assert "An error occurred while generating the dataset" not in err
    for part in parts:
        assert part in err, (part, err)
    return err


def read_all(source: Path | str, streaming: bool, split: str | None = None) -> list[dict]:
    return list(read_rows(source, split=split, streaming=streaming))


# ---------------------------------------------------------------------- 1. a wrongly typed value in a shard


@STREAMING
def test_a_wrongly_typed_value_in_a_later_jsonl_shard_is_refused_naming_file_line_and_column(
        tmp_path, model_dir, capsys, streaming):
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", rows(0, 3))
    later = rows(3, 3)
    later[1]["output"] = 42
    write_jsonl(folder / "b.jsonl", later)
    code, output = score(tmp_path, folder, streaming, model_dir=model_dir)
    refused(capsys, code, "b.jsonl", "Line 2", "'output'")
    assert not output.exists()
    with pytest.raises(ValueError, match=r"b\.jsonl.*Line 2.*'output'"):
        read_all(folder, streaming)


@STREAMING
def test_a_wrongly_typed_value_past_the_first_10_mb_of_one_file_is_refused_not_json_encoded(tmp_path, streaming):
    records = [{"id": i, "output": f"Over sea poem {i} " + "x" * 100} for i in range(100_000)]
    records[-2]["output"] = 42
    data = write_jsonl(tmp_path / "big.jsonl", records)
    assert data.stat().st_size > 10 << 20
    with pytest.raises(ValueError, match=rf"big\.jsonl.*Line {len(records) - 1}.*'output'"):
        read_all(data, streaming)


@STREAMING
def test_shard_strings_that_look_like_json_read_back_as_written(tmp_path, streaming):
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", rows(0, 2))
    write_jsonl(folder / "b.jsonl", [dict(row, output=text) for row, text in zip(rows(2, 3), ['"quoted"', "42", "null"],
                                                                                 strict=True)])
    assert [row["output"] for row in read_all(folder, streaming)] == [
        "Over sea poem 0.", "Over sea poem 1.", '"quoted"', "42", "null"]


@STREAMING
def test_a_column_null_in_one_shard_takes_the_type_of_the_others(tmp_path, streaming):
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [dict(row, note=None) for row in rows(0, 2)])
    write_jsonl(folder / "b.jsonl", [dict(row, note="kept") for row in rows(2, 2)])
    assert [row["note"] for row in read_all(folder, streaming)] == [None, None, "kept", "kept"]


# ------------------------------------------------------------------------------ 9. a 0-row Parquet shard


@STREAMING
def test_a_zero_row_parquet_shard_is_skipped(tmp_path, model_dir, streaming):
    folder = tmp_path / "shards"
    folder.mkdir()
    data = rows(0, 5)
    schema = pa.Table.from_pylist(data).schema
    pq.write_table(pa.Table.from_pylist(data[:3], schema=schema), folder / "part-0.parquet")
    pq.write_table(schema.empty_table(), folder / "part-1.parquet")
    pq.write_table(pa.Table.from_pylist(data[3:], schema=schema), folder / "part-2.parquet")
    assert read_all(folder, streaming) == data
    code, single = score(tmp_path, write_jsonl(tmp_path / "all.jsonl", data), False, model_dir=model_dir)
    assert code == 0
    code, sharded = score(tmp_path, folder, streaming, model_dir=model_dir)
    assert code == 0 and sharded.read_text(encoding="utf-8") == single.read_text(encoding="utf-8")


@STREAMING
def test_parquet_shards_that_all_hold_no_rows_are_a_clear_error(tmp_path, model_dir, capsys, streaming):
    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows(0, 1)).schema.empty_table(), folder / "part-0.parquet")
    code, _ = score(tmp_path, folder, streaming, model_dir=model_dir)
    refused(capsys, code, "part-0.parquet", "no rows")


# ------------------------------------------------------------------------------ 10. a null among integer ids


def rows_with_integer_ids(tmp_path: Path) -> Path:
    records = [dict(row, id=number) for number, row in zip([1, None, 3], rows(0, 3), strict=True)]
    return write_jsonl(tmp_path / "rows.jsonl", records)


@STREAMING
def test_a_null_among_integer_ids_is_written_as_an_empty_string_and_the_others_as_ints(tmp_path, model_dir,
                                                                                        streaming):
    code, output = score(tmp_path, rows_with_integer_ids(tmp_path), streaming, model_dir=model_dir)
    assert code == 0
    assert [line["id"] for line in read_jsonl(output)] == [1, "", 3]


def test_a_null_among_integer_ids_stays_a_null_integer_in_parquet_output(tmp_path, model_dir):
    output = tmp_path / "scores"
    config = tmp_path / "ppl.yaml"
    config.write_text("name: PPLScorer\nmax_length: 64\nbatch_size: 2\n", encoding="utf-8")
    assert main(["score", str(config), "--data", str(rows_with_integer_ids(tmp_path)), "--output", str(output),
                 "--model", model_dir, "--no-progress", "--output-format", "parquet"]) == 0
    ids = pq.read_table(output).column("id")
    assert pa.types.is_integer(ids.type) and ids.to_pylist() == [1, None, 3]


@STREAMING
@pytest.mark.parametrize("keep", [[], ["--keep-columns"]], ids=["ids", "kept_columns"])
def test_integer_ids_whose_first_is_null_are_written_to_parquet_shards_of_one_row(tmp_path, model_dir, streaming,
                                                                                  keep):
    """Parquet output of integer ids whose first row's id is null, one row a shard, failed at the merge
    with "Invalid null value" (the first shard's all-null ids typed the rest), after scoring and on
    every rerun: the ids take the data's type.

    Round five, item 9.
    """
    records = [dict(row, id=number) for number, row in zip([None, 2, 3], rows(0, 3), strict=True)]
    data = write_jsonl(tmp_path / "rows.jsonl", records)
    output = tmp_path / "scores"
    config = tmp_path / "ppl.yaml"
    config.write_text("name: PPLScorer\nmax_length: 64\nbatch_size: 2\n", encoding="utf-8")
    flags = ["--streaming"] if streaming else []
    assert main(["score", str(config), "--data", str(data), "--output", str(output), "--model", model_dir,
                 "--no-progress", "--output-format", "parquet", "--rows-per-shard", "1", *flags, *keep]) == 0
    shards = sorted(output.iterdir())
    assert len(shards) == 3 and sorted(path.name for path in tmp_path.iterdir()) == ["ppl.yaml", "rows.jsonl",
                                                                                       "scores"]
    ids = pa.concat_tables([pq.read_table(shard) for shard in shards]).column("id")
    assert pa.types.is_integer(ids.type) and ids.to_pylist() == [None, 2, 3]


def test_a_null_among_integer_ids_is_written_as_an_empty_string_on_ray(ray_cluster, tmp_path, model_dir):  # noqa: F811
    code, output = score(tmp_path, rows_with_integer_ids(tmp_path), False, "--engine", "ray", "--num-workers", "1",
                         model_dir=model_dir)
    assert code == 0
    assert [line["id"] for line in read_jsonl(output)] == [1, "", 3]


# ------------------------------------------------------------------ 14. read errors name the file and line


def jsonl_text(records: list[dict]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def bad_shards(kind: str) -> dict[str, bytes]:
    """Two shards, the second of which is bad in the way ``kind`` says (at line 2 where a line applies)."""
    good = jsonl_text(rows(0, 2))
    later = rows(2, 3)
    if kind == "not_utf8":
        return {"a.jsonl": good, "b.jsonl": jsonl_text(later).replace(b"poem 3", b"po\xffem 3")}
    if kind == "not_json":
        return {"a.jsonl": good, "b.jsonl": jsonl_text(later).replace(b'"Say 3."', b'"Say 3.",')}
    if kind == "id_type":
        return {"a.jsonl": good, "b.jsonl": jsonl_text([dict(row, id=i) for i, row in enumerate(later)])}
    if kind == "extra_key":
        later[1]["extra"] = "x"
        return {"a.jsonl": good, "b.jsonl": jsonl_text(later)}
    header = b"id,instruction,input,output\n"
    if kind == "csv_not_utf8":
        return {"a.csv": header + b"r0,Say.,,ok\n", "b.csv": header + b"r1,Say.,,ok\nr2,Say.,,n\xffo\n"}
    assert kind == "csv_cells"
    return {"a.csv": header + b"r0,Say.,,ok\n", "b.csv": header + b"r1,Say.,,ok\nr2,Say.,,ok,surplus\n"}


@STREAMING
@pytest.mark.parametrize(("kind", "parts"), [
    ("not_utf8", ["b.jsonl", "Line 2", "UTF-8", "0xff"]),
    ("not_json", ["b.jsonl", "Line 2", "not valid JSON"]),
    ("id_type", ["b.jsonl", "Line 1", "'id'", "a.jsonl"]),
    ("extra_key", ["b.jsonl", "Line 2", "'extra'"]),
    ("csv_not_utf8", ["b.csv", "Line 3", "UTF-8", "0xff"]),
    ("csv_cells", ["b.csv", "Line 3", "5 cells", "4"]),
])
def test_a_bad_shard_is_named_with_its_line_and_what_is_wrong(tmp_path, model_dir, capsys, streaming, kind, parts):
    folder = tmp_path / "shards"
    folder.mkdir()
    for name, content in bad_shards(kind).items():
        (folder / name).write_bytes(content)
    code, output = score(tmp_path, folder, streaming, model_dir=model_dir)
    refused(capsys, code, *parts)
    assert not output.exists()


@STREAMING
def test_parquet_shards_whose_column_types_differ_are_named(tmp_path, model_dir, capsys, streaming):
    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows(0, 2)), folder / "a.parquet")
    pq.write_table(pa.Table.from_pylist([dict(row, id=i) for i, row in enumerate(rows(2, 2))]), folder / "b.parquet")
    code, _ = score(tmp_path, folder, streaming, model_dir=model_dir)
    refused(capsys, code, "a.parquet", "b.parquet", "'id'", "string", "int64")


# --------------------------------------------------------------------- 16b. --split of a save_to_disk DatasetDict


@pytest.fixture
def saved_splits(tmp_path) -> Path:
    folder = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_list(rows(0, 3)), "test": Dataset.from_list(rows(10, 2))}).save_to_disk(folder)
    return folder


@STREAMING
def test_split_chooses_the_split_of_a_saved_dataset_dict(tmp_path, model_dir, saved_splits, streaming):
    code, output = score(tmp_path, saved_splits, streaming, "--split", "test", model_dir=model_dir)
    assert code == 0
    assert [line["id"] for line in read_jsonl(output)] == ["r10", "r11"]
    assert [row["id"] for row in read_all(saved_splits, streaming, split="train")] == ["r0", "r1", "r2"]
    assert data_fingerprint(saved_splits, "test") != data_fingerprint(saved_splits, "train")


@STREAMING
def test_an_unknown_split_of_a_saved_dataset_dict_is_an_error_listing_its_splits(tmp_path, model_dir, saved_splits,
                                                                                 capsys, streaming):
    capsys.readouterr()  # save_to_disk's progress bar
    code, _ = score(tmp_path, saved_splits, streaming, "--split", "validation", model_dir=model_dir)
    refused(capsys, code, "'validation'", "['test', 'train']")
    one = tmp_path / "one"
    DatasetDict({"train": Dataset.from_list(rows(0, 2))}).save_to_disk(one)
    capsys.readouterr()  # save_to_disk's progress bar
    code, _ = score(tmp_path, one, streaming, "--split", "test", model_dir=model_dir)
    refused(capsys, code, "'test'", "['train']")
