"""Reading instruction rows from JSONL, JSON, CSV, Parquet and save_to_disk directories."""

from __future__ import annotations

import json
import os

import pytest
from datasets import Dataset, DatasetDict

from hf_adapters.data_io import data_fingerprint, read_rows

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
def test_rows_without_id_get_an_empty_id(tmp_path, kind):
    rows = [{key: value for key, value in row.items() if key != "id"} for row in ROWS]
    dataset = read_rows(write(tmp_path / f"rows.{kind}", rows, kind))
    assert dataset["id"] == ["", "", ""]
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


def test_the_shared_alpaca_list_of_records_reads_with_empty_ids(shared_dir):
    dataset = read_rows(shared_dir / "data" / "alpaca_cherry_5pct.json")
    assert len(dataset) == 3111 and set(dataset["id"]) == {""}
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
