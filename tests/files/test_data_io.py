"""Reading instruction rows from JSONL, JSON, CSV, Parquet and save_to_disk directories, directly and
through ``hf-adapters score`` (in memory and streamed): nothing lost, nothing silently wrong."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, DatasetDict

from hf_adapters.cli import main
from hf_adapters.files.data_io import data_fingerprint, parse_jsonl, read_records, read_rows, row_ids
from tests.conftest import ppl_config, read_jsonl, write_jsonl

ROWS = [
    {"id": "b", "instruction": "Name a colour.", "input": "", "output": "Blue."},
    {"id": "a", "instruction": "Add the numbers.", "input": "2, 3", "output": "5"},
    {"id": "c", "instruction": "Say nothing.", "input": "", "output": ""},
]


def write(path, rows, kind):
    if kind == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif kind == "json":
        path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    elif kind == "csv":
        Dataset.from_list(rows).to_csv(str(path), index=False)
    elif kind == "parquet":
        Dataset.from_list(rows).to_parquet(str(path))
    else:
        Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "parquet", "saved"])
def test_every_format_reads_the_same_rows_in_file_order(tmp_path, kind):
    path = write(tmp_path / (f"rows.{kind}" if kind != "saved" else "rows"), ROWS, kind)
    assert read_rows(path).to_list() == ROWS


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv"])
@pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streaming"])
def test_rows_without_an_id_column_get_none_and_are_named_by_their_row_number(tmp_path, kind, streaming):
    """Data without ids is read as it is (no empty ``id`` added, which would name no row): a job and
    ``select`` name each row by its number.

    Round five, item 6.
    """
    rows = [{key: value for key, value in row.items() if key != "id"} for row in ROWS]
    dataset = read_rows(write(tmp_path / f"rows.{kind}", rows, kind), streaming=streaming)
    assert list(dataset) == [{key: str(value) for key, value in row.items()} for row in rows]
    if not streaming:
        assert "id" not in dataset.column_names and row_ids(dataset) == [0, 1, 2]
        assert dataset["input"] == ["", "2, 3", ""]  # empty CSV cells stay empty strings


def test_rows_with_a_missing_id_among_others_get_an_empty_id(tmp_path):
    rows = [ROWS[0], {key: value for key, value in ROWS[1].items() if key != "id"}]
    assert read_rows(write(tmp_path / "rows.jsonl", rows, "jsonl"))["id"] == ["b", ""]


def test_a_dataset_dict_with_one_split_is_read_and_with_several_is_refused(tmp_path):
    DatasetDict({"train": Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "one"))
    assert read_rows(tmp_path / "one").to_list() == ROWS
    DatasetDict({"train": Dataset.from_list(ROWS), "test": Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "two"))
    with pytest.raises(ValueError, match=r"splits \['test', 'train'\]; point at one of them"):
        read_rows(tmp_path / "two")


def test_unknown_file_types_and_missing_files_get_clear_errors(tmp_path):
    (tmp_path / "rows.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"unknown file type '\.txt'; use one of \['\.csv', '\.json', '\.jsonl'"):
        read_rows(tmp_path / "rows.txt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_rows(tmp_path / "absent.jsonl")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(ValueError, match="not one written by save_to_disk"):
        read_rows(tmp_path / "empty_dir")


def test_a_malformed_file_gets_a_clear_error(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"instruction": "a"}\n{"instruction": \n')
    with pytest.raises(ValueError, match="Cannot read .*bad.jsonl.* as json"):
        read_rows(tmp_path / "bad.jsonl")


def test_data_fingerprint_follows_content_not_modification_time(tmp_path):
    path = write(tmp_path / "rows.jsonl", ROWS, "jsonl")
    before = data_fingerprint(path)
    os.utime(path, (1, 1))
    assert data_fingerprint(path) == before
    write(path, ROWS[:2], "jsonl")
    assert data_fingerprint(path) != before
    saved = write(tmp_path / "saved", ROWS, "saved")
    assert data_fingerprint(saved) == data_fingerprint(saved)


def test_the_shared_alpaca_list_of_records_reads_without_ids(shared_dir):
    dataset = read_rows(shared_dir / "data" / "alpaca_cherry_5pct.json")
    assert len(dataset) == 3111 and "id" not in dataset.column_names and row_ids(dataset) == list(range(3111))
    assert dataset[0]["instruction"] == "Design a wellness plan for the given audience"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [("empty.jsonl", "", "the file holds no rows"), ("blank.jsonl", "\n \n", "the file holds no rows"),
     ("header.csv", "instruction,input,output\n", "the file holds no rows"),
     ("corrupt.jsonl", '{"instruction": "a", "output": "b"}\n{"instruction": "c", "output": \n',
      "Line 2 is not valid JSON"),
     ("array_line.jsonl", '{"instruction": "a", "output": "b"}\n[1, 2]\n', "Line 2 is JSON but not an object")],
)
def test_unreadable_files_get_a_reason_a_person_can_act_on(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_rows(path)


@pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streaming"])
def test_a_json_id_above_2_63_is_read_exactly_and_the_other_ids_stay_integers(tmp_path, streaming):
    """pyarrow reads a column of integers one of which is above ``2**63 - 1`` as floats
    (``12345678901234567890`` -> ``1.2345678901234567e+19``, ``5`` -> ``5.0``): ids are read as
    unsigned 64-bit integers instead, exactly, in a JSON list of records too.

    Round five, item 7.
    """
    ids = [5, 12345678901234567890, 2**64 - 1, None]
    for kind in ("jsonl", "json"):
        path = write(tmp_path / f"rows.{kind}", [{**ROWS[0], "id": value} for value in ids], kind)
        assert [row["id"] for row in read_rows(path, streaming=streaming)] == ids
        assert all(type(row["id"]) in (int, type(None)) for row in read_rows(path, streaming=streaming))


@pytest.mark.parametrize("other", [-1, 0.5])
def test_an_integer_id_that_only_a_float_column_could_hold_is_refused_naming_its_line(tmp_path, other):
    """Where the other ids (a negative one, a fraction) rule out 64-bit unsigned integers, an id a float
    cannot hold exactly is refused naming its file and line; ids a float holds exactly read as before.

    Round five, item 7.
    """
    path = write(tmp_path / "rows.jsonl", [{**ROWS[0], "id": value} for value in (other, 7, 12345678901234567890)],
                 "jsonl")
    with pytest.raises(ValueError, match=r"rows\.jsonl.*Line 3: the id 12345678901234567890 would be read as the "
                       r"float 1\.2345678901234567e\+19.*write the ids as strings"):
        read_rows(path)
    write(path, [{**ROWS[0], "id": value} for value in (other, 7)], "jsonl")
    assert read_rows(path)["id"] == [other, 7]


@pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streaming"])
def test_a_column_of_integers_holding_one_above_2_63_reads_exactly_and_one_a_float_would_change_is_refused(
        tmp_path, streaming):
    """Issue 59: a column other than the id holding an integer above ``2**63 - 1`` read as floats
    (``1`` -> ``1.0``, ``2**64 - 1`` -> ``1.8446744073709552e+19``): it reads as unsigned 64-bit
    integers; where the column also holds a fraction or a negative number, an integer a float would
    change is refused naming its line and column. Fractions and large floats read as before."""
    path = write(tmp_path / "rows.jsonl", [{**ROWS[0], "big": 1, "x": 0.5}, {**ROWS[1], "big": 2**64 - 1, "x": 1e300}],
                 "jsonl")
    rows = list(read_rows(path, streaming=streaming))
    assert [(row["big"], type(row["big"]), row["x"]) for row in rows] == [(1, int, 0.5), (2**64 - 1, int, 1e300)]
    write(path, [{**ROWS[0], "big": -1}, {**ROWS[1], "big": 2**63 + 1}], "jsonl")
    with pytest.raises(ValueError, match=r"rows\.jsonl.*Line 2: 9223372036854775809 in column 'big' would be read as "
                       r"the float 9\.223372036854776e\+18.*write the numbers as strings"):
        read_rows(path, streaming=streaming)


def test_pasted_jsonl_ends_lines_only_at_newlines(tmp_path):
    """Issue 59: JSON strings may hold U+2028, U+0085 or a lone carriage return raw, which
    ``str.splitlines()`` took for line ends (``select`` refused the score file ``score`` wrote)."""
    rows = [{"id": f"a{separator}b", "n": number} for number, separator in enumerate("\u2028\u2029\u0085\x1c\x0b")]
    text = "".join(json.dumps(row, ensure_ascii=False) + "\r\n" for row in rows)
    assert parse_jsonl(text) == rows
    assert read_records(write_jsonl(tmp_path / "rows.jsonl", rows)) == rows


# --- From the round-four review: data reading through ``hf-adapters score``, in memory and streamed ---------

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


@STREAMING
def test_a_wrongly_typed_value_in_a_later_jsonl_shard_is_refused_naming_file_line_and_column(
        tmp_path, model_dir, capsys, streaming):
    """From the round-four review, case 1."""
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
    """From the round-four review, case 1."""
    records = [{"id": i, "output": f"Over sea poem {i} " + "x" * 100} for i in range(100_000)]
    records[-2]["output"] = 42
    data = write_jsonl(tmp_path / "big.jsonl", records)
    assert data.stat().st_size > 10 << 20
    with pytest.raises(ValueError, match=rf"big\.jsonl.*Line {len(records) - 1}.*'output'"):
        read_all(data, streaming)


@STREAMING
def test_shard_strings_that_look_like_json_read_back_as_written(tmp_path, streaming):
    """From the round-four review, case 1."""
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", rows(0, 2))
    write_jsonl(folder / "b.jsonl", [dict(row, output=text) for row, text in zip(rows(2, 3), ['"quoted"', "42", "null"],
                                                                                 strict=True)])
    assert [row["output"] for row in read_all(folder, streaming)] == [
        "Over sea poem 0.", "Over sea poem 1.", '"quoted"', "42", "null"]


@STREAMING
def test_a_column_null_in_one_shard_takes_the_type_of_the_others(tmp_path, streaming):
    """From the round-four review, case 1."""
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [dict(row, note=None) for row in rows(0, 2)])
    write_jsonl(folder / "b.jsonl", [dict(row, note="kept") for row in rows(2, 2)])
    assert [row["note"] for row in read_all(folder, streaming)] == [None, None, "kept", "kept"]


@STREAMING
def test_a_zero_row_parquet_shard_is_skipped(tmp_path, model_dir, streaming):
    """From the round-four review, case 9."""
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


@pytest.mark.parametrize(("kind", "empty"), [("jsonl", ""), ("jsonl", "\n  \n"), ("json", "[ ]\n"),
                                            ("csv", "id,instruction,input,output\n"), ("csv", "")])
def test_an_empty_shard_of_any_type_is_skipped_unless_every_shard_is_empty(tmp_path, model_dir, capsys, kind,
                                                                           empty):
    """An empty JSONL, JSON or CSV shard holds no rows and is skipped, as an empty Parquet shard is;
    shards that are all empty stay a clear error.

    Round six: an empty ``.jsonl`` shard was refused while an empty Parquet shard was skipped.
    """
    folder = tmp_path / "shards"
    folder.mkdir()
    data = rows(0, 5)
    write(folder / f"part-0.{kind}", data[:3], kind)
    (folder / f"part-1.{kind}").write_text(empty, encoding="utf-8")
    write(folder / f"part-2.{kind}", data[3:], kind)
    expected = [{key: str(value) for key, value in row.items()} for row in data] if kind == "csv" else data
    assert read_all(folder, False) == expected and read_all(folder, True) == expected
    code, sharded = score(tmp_path, folder, False, model_dir=model_dir)
    assert code == 0 and len(read_jsonl(sharded)) == 5
    for name in ("part-0", "part-2"):
        (folder / f"{name}.{kind}").write_text(empty, encoding="utf-8")
    capsys.readouterr()
    refused(capsys, score(tmp_path, folder, False, model_dir=model_dir)[0], "each of its 3 files holds no rows")


@STREAMING
def test_parquet_shards_that_all_hold_no_rows_are_a_clear_error(tmp_path, model_dir, capsys, streaming):
    """From the round-four review, case 9."""
    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows(0, 1)).schema.empty_table(), folder / "part-0.parquet")
    code, _ = score(tmp_path, folder, streaming, model_dir=model_dir)
    refused(capsys, code, "part-0.parquet", "no rows")


def rows_with_integer_ids(tmp_path: Path) -> Path:
    records = [dict(row, id=number) for number, row in zip([1, None, 3], rows(0, 3), strict=True)]
    return write_jsonl(tmp_path / "rows.jsonl", records)


@STREAMING
def test_a_null_among_integer_ids_is_written_as_an_empty_string_and_the_others_as_ints(tmp_path, model_dir,
                                                                                        streaming):
    """From the round-four review, case 10."""
    code, output = score(tmp_path, rows_with_integer_ids(tmp_path), streaming, model_dir=model_dir)
    assert code == 0
    assert [line["id"] for line in read_jsonl(output)] == [1, "", 3]


def test_a_null_among_integer_ids_stays_a_null_integer_in_parquet_output(tmp_path, model_dir):
    """From the round-four review, case 10."""
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


def test_a_null_among_integer_ids_is_written_as_an_empty_string_on_ray(ray_cluster, tmp_path, model_dir):
    """From the round-four review, case 10."""
    code, output = score(tmp_path, rows_with_integer_ids(tmp_path), False, "--engine", "ray", "--num-workers", "1",
                         model_dir=model_dir)
    assert code == 0
    assert [line["id"] for line in read_jsonl(output)] == [1, "", 3]


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
    """From the round-four review, case 14."""
    folder = tmp_path / "shards"
    folder.mkdir()
    for name, content in bad_shards(kind).items():
        (folder / name).write_bytes(content)
    code, output = score(tmp_path, folder, streaming, model_dir=model_dir)
    refused(capsys, code, *parts)
    assert not output.exists()


@STREAMING
def test_parquet_shards_whose_column_types_differ_are_named(tmp_path, model_dir, capsys, streaming):
    """From the round-four review, case 14."""
    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows(0, 2)), folder / "a.parquet")
    pq.write_table(pa.Table.from_pylist([dict(row, id=i) for i, row in enumerate(rows(2, 2))]), folder / "b.parquet")
    code, _ = score(tmp_path, folder, streaming, model_dir=model_dir)
    refused(capsys, code, "a.parquet", "b.parquet", "'id'", "string", "int64")


@pytest.fixture
def saved_splits(tmp_path) -> Path:
    folder = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_list(rows(0, 3)), "test": Dataset.from_list(rows(10, 2))}).save_to_disk(folder)
    return folder


@STREAMING
def test_split_chooses_the_split_of_a_saved_dataset_dict(tmp_path, model_dir, saved_splits, streaming):
    """From the round-four review, case 16b."""
    code, output = score(tmp_path, saved_splits, streaming, "--split", "test", model_dir=model_dir)
    assert code == 0
    assert [line["id"] for line in read_jsonl(output)] == ["r10", "r11"]
    assert [row["id"] for row in read_all(saved_splits, streaming, split="train")] == ["r0", "r1", "r2"]
    assert data_fingerprint(saved_splits, "test") != data_fingerprint(saved_splits, "train")


@STREAMING
def test_an_unknown_split_of_a_saved_dataset_dict_is_an_error_listing_its_splits(tmp_path, model_dir, saved_splits,
                                                                                 capsys, streaming):
    """From the round-four review, case 16b."""
    capsys.readouterr()  # save_to_disk's progress bar
    code, _ = score(tmp_path, saved_splits, streaming, "--split", "validation", model_dir=model_dir)
    refused(capsys, code, "'validation'", "['test', 'train']")
    one = tmp_path / "one"
    DatasetDict({"train": Dataset.from_list(rows(0, 2))}).save_to_disk(one)
    capsys.readouterr()  # save_to_disk's progress bar
    code, _ = score(tmp_path, one, streaming, "--split", "test", model_dir=model_dir)
    refused(capsys, code, "'test'", "['train']")


def test_score_echoes_csv_ids_as_they_are_written(tmp_path, model_dir):
    """From the round-three review: data lost or changed in what we write."""
    data = tmp_path / "rows.csv"
    data.write_text("id,instruction,input,output\n001,Say a.,,aa\n002,Say b.,,bb\n1e3,Say c.,,cc\n", encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    assert main(["score", ppl_config(tmp_path), "--data", str(data), "--output", str(output), "--model", model_dir,
                 "--no-progress"]) == 0
    assert [line["id"] for line in read_jsonl(output)] == ["001", "002", "1e3"]


def test_score_reads_csv_cells_as_strings(tmp_path, model_dir):
    data = tmp_path / "rows.csv"
    data.write_text("id,instruction,input,output\na,Add the numbers.,2 + 3,5\nb,Add the numbers.,1 + 1,2\n",
                    encoding="utf-8")
    config = tmp_path / "ppl.yaml"
    config.write_text("name: PPLScorer\nmax_length: 64\n", encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    assert main(["score", str(config), "--data", str(data), "--output", str(output), "--model", model_dir,
                 "--no-progress"]) == 0
    assert [line["id"] for line in read_jsonl(output)] == ["a", "b"]


# --- Data at a URL (fsspec): memory:// stands in for s3://, gs://, hf://; file:// reaches Ray's workers ----


@pytest.fixture
def bucket() -> str:
    """A fresh folder of fsspec's in-memory filesystem (the ``datasets`` download cache keys on the URL)."""
    import uuid

    return f"memory://bucket-{uuid.uuid4().hex}"


def put(url: str, content: bytes) -> str:
    import fsspec

    with fsspec.open(url, "wb") as handle:
        handle.write(content)
    return url


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "parquet"])
def test_a_file_at_a_url_reads_the_rows_a_local_copy_reads(tmp_path, bucket, kind):
    local = write(tmp_path / f"rows.{kind}", ROWS, kind)
    url = put(f"{bucket}/rows.{kind}", local.read_bytes())
    assert read_rows(url).to_list() == read_rows(local).to_list()
    assert list(read_rows(url, streaming=True)) == list(read_rows(local, streaming=True))


def test_a_folder_or_glob_at_a_url_reads_its_shards_in_name_order_and_is_fingerprinted_by_content(tmp_path, bucket):
    for name, part in (("b.jsonl", rows(3, 2)), ("a.jsonl", rows(0, 3)), ("notes.txt", [])):
        put(f"{bucket}/shards/{name}", jsonl_text(part))
    expected = rows(0, 5)
    assert read_rows(f"{bucket}/shards").to_list() == expected
    assert read_rows(f"{bucket}/shards/*.jsonl").to_list() == expected
    fingerprint = data_fingerprint(f"{bucket}/shards")
    put(f"{bucket}/shards/b.jsonl", jsonl_text(rows(3, 1)))
    assert data_fingerprint(f"{bucket}/shards") != fingerprint


def test_a_url_is_read_by_score_with_the_local_files_errors(tmp_path, bucket, model_dir, capsys):
    put(f"{bucket}/shards/a.jsonl", jsonl_text(rows(0, 2)))
    put(f"{bucket}/shards/b.jsonl", jsonl_text(rows(2, 2)))
    local = tmp_path / "shards"
    local.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (local / name).write_bytes(jsonl_text(rows(0, 2) if name == "a.jsonl" else rows(2, 2)))
    code, from_url = score(tmp_path, f"{bucket}/shards", False, model_dir=model_dir)
    assert code == 0
    assert from_url.read_bytes() == score(tmp_path, local, False, model_dir=model_dir)[1].read_bytes()
    for name, content in bad_shards("not_json").items():
        put(f"{bucket}/bad/{name}", content)
    refused(capsys, score(tmp_path, f"{bucket}/bad", True, model_dir=model_dir)[0],
            f"{bucket}/bad/b.jsonl", "Line 2", "not valid JSON")
    refused(capsys, score(tmp_path, f"{bucket}/none/*.jsonl", False, model_dir=model_dir)[0], "matches no file")
    refused(capsys, score(tmp_path, "nosuch://bucket/rows.jsonl", False, model_dir=model_dir)[0],
            "'nosuch://bucket/rows.jsonl'", "nosuch")


# --- Data over HTTP, from a server on 127.0.0.1; what a URL that cannot be read says ----------------------


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    """A folder's files as ``http.server`` serves them: with their size and ``Last-Modified``, no ``ETag``."""

    def log_message(self, *args: object) -> None:
        pass


class UnversionedFiles(QuietFiles):
    """A folder's files with their size only: no header tells a changed file from the one before."""

    def send_header(self, keyword: str, value: str) -> None:
        if keyword != "Last-Modified":
            super().send_header(keyword, value)


@contextlib.contextmanager
def served(folder: Path, handler: type) -> Iterator[str]:
    """``folder`` served over HTTP on 127.0.0.1 by ``handler``, for the block; its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def same_size_change(path: Path, when: int) -> list[dict]:
    """Rewrite the JSONL file ``path`` (of ``rows(0, 2)``) with other rows of the same size, modified at ``when``."""
    changed = [dict(row, output=row["output"].replace("poem", "POEM")) for row in rows(0, 2)]
    before = path.stat().st_size
    write(path, changed, "jsonl")
    assert path.stat().st_size == before
    os.utime(path, (when, when))
    return changed


def test_an_http_file_changed_without_a_size_change_is_fetched_again(tmp_path, model_dir, monkeypatch):
    """A server that sends ``Last-Modified`` but no ``ETag`` (``http.server``): a change of the same
    size is fetched again, not read from the earlier copy, and a rerun scores it rather than calling
    the old output finished.

    Round six: the version keys lacked Last-Modified, Content-MD5 and Digest.
    """
    monkeypatch.setenv("HF_ADAPTERS_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    path = write(site / "rows.jsonl", rows(0, 2), "jsonl")
    os.utime(path, (1_000_000, 1_000_000))
    config, output = ppl_config(tmp_path), tmp_path / "scores.jsonl"
    with served(site, QuietFiles) as base:
        url = f"{base}/rows.jsonl"
        command = ["score", config, "--data", url, "--output", str(output), "--model", model_dir, "--no-progress"]
        assert read_all(url, False) == rows(0, 2) and main(command) == 0
        before, scores = data_fingerprint(url), output.read_bytes()
        changed = same_size_change(path, 2_000_000)
        assert read_all(url, False) == changed and data_fingerprint(url) != before
        assert main(command) == 0 and output.read_bytes() != scores


def test_an_http_file_that_reports_no_version_is_fetched_again_by_each_process(tmp_path, monkeypatch):
    """A server that sends a file's size and nothing that names its version: its copy is never taken
    from an earlier process, so a change of the same size is read (and changes the fingerprint);
    within one process it is fetched once, and its copy is named by its content."""
    from hf_adapters.files import remote_files

    monkeypatch.setenv("HF_ADAPTERS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(remote_files, "_UNVERSIONED", {}, raising=False)
    site = tmp_path / "site"
    site.mkdir()
    path = write(site / "rows.jsonl", rows(0, 2), "jsonl")
    with served(site, UnversionedFiles) as base:
        url = f"{base}/rows.jsonl"
        assert read_all(url, False) == rows(0, 2)
        before = data_fingerprint(url)
        changed = same_size_change(path, int(path.stat().st_mtime))
        monkeypatch.setattr(remote_files, "_UNVERSIONED", {}, raising=False)  # as a new process, a rerun, starts
        assert read_all(url, False) == changed and data_fingerprint(url) != before
    copies = sorted((tmp_path / "cache" / "remote").glob("*/rows.jsonl"))
    assert len(copies) == 2 and {copy.read_bytes() for copy in copies} == {jsonl_text(rows(0, 2)),
                                                                          jsonl_text(changed)}


def one_error_line(capsys, code: int, *parts: str) -> None:
    """A refused command printed one line, ``error: ...``, naming each of ``parts``."""
    err = refused(capsys, code, *parts)
    assert len(err.strip().splitlines()) == 1, err


def test_an_unreachable_url_is_one_error_line_saying_so(tmp_path, model_dir, capsys):
    """Round six: 44-87 lines of traceback became one line saying what to do."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/rows.jsonl"
    one_error_line(capsys, score(tmp_path, url, False, model_dir=model_dir)[0], url, "cannot reach it")


def test_a_cache_folder_that_cannot_be_created_is_one_error_line_naming_its_variable(tmp_path, model_dir, capsys,
                                                                                      monkeypatch):
    """Round six: ``HF_ADAPTERS_CACHE`` under a file stopped data at a URL with a traceback."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    monkeypatch.setenv("HF_ADAPTERS_CACHE", str(tmp_path / "a-file" / "cache"))
    data = write(tmp_path / "rows.jsonl", rows(0, 2), "jsonl")
    one_error_line(capsys, score(tmp_path, f"file://{data}", False, model_dir=model_dir)[0], "HF_ADAPTERS_CACHE",
                   "cache folder")


def test_s3_without_credentials_is_one_error_line_saying_how_to_give_them(tmp_path, model_dir, capsys, monkeypatch):
    """Round six: ``s3://`` without credentials stopped with botocore's traceback."""
    pytest.importorskip("s3fs")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "FSSPEC_S3",
                 "FSSPEC_S3_ANON", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    url = "s3://hf-adapters-test-no-such-bucket/rows.jsonl"
    one_error_line(capsys, score(tmp_path, url, False, model_dir=model_dir)[0], url, "AWS_ACCESS_KEY_ID")
