"""Reading instruction rows from JSONL, JSON, CSV, Parquet and save_to_disk directories."""

from __future__ import annotations

import json
import os

import pytest
from datasets import Dataset, DatasetDict

from hf_adapters.files.data_io import data_fingerprint, read_rows, row_ids

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
    [("empty.jsonl", "", "the file is empty"), ("blank.jsonl", "\n \n", "the file is empty"),
     ("header.csv", "instruction,input,output\n", "a header but no rows"),
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
