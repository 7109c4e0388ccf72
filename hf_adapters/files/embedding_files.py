"""The record ``hf-adapters embed`` writes beside an embeddings ``.npy`` file, and the checks
``select --embeddings`` makes with it: which rows the array was embedded for, from which columns, and
whether the run finished. Arrays are memory-mapped, never unpickled."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.files.json_values import to_json_value

if TYPE_CHECKING:
    from datasets import Dataset

#: What ``hf-adapters embed`` records beside ``EMBEDDINGS.npy``, as ``EMBEDDINGS.npy.json``: the rows it
#: embedded (their count and fingerprints of the columns it read), the model, the pooling, and whether it finished.
RECORD_FORMAT = "hf-adapters embeddings"
#: Rows hashed at a time.
FINGERPRINT_ROWS = 4096


def record_path(path: str | Path) -> Path:
    """Where the record of an embeddings file lies: ``EMBEDDINGS.npy.json``."""
    return Path(f"{path}.json")


def embedded_columns(column_names: Sequence[str], *, text_column: str | None = None,
                     messages_column: str | None = None) -> dict[str, str | None]:
    """The columns :func:`~hf_adapters.formulas.embeddings.row_texts` reads of data with these columns,
    as ``hf-adapters embed`` reads them: ``text_column``, or ``messages_column``, or instruction, input
    (where there is one) and output."""
    return {"text_column": text_column, "messages_column": messages_column, "instruction_column": "instruction",
            "input_column": "input" if "input" in column_names else None, "output_column": "output"}


def read_columns(columns: Mapping[str, str | None]) -> list[str]:
    """The data columns :func:`~hf_adapters.formulas.embeddings.row_texts` reads under ``columns`` (its
    keyword arguments)."""
    if columns.get("text_column") is not None:
        return [columns["text_column"]]
    if columns.get("messages_column") is not None:
        return [columns["messages_column"]]
    return [columns[key] for key in ("instruction_column", "input_column", "output_column") if columns.get(key)]


def rows_fingerprint(ds: Dataset, columns: Mapping[str, str | None]) -> dict[str, str]:
    """Fingerprints of the values each row's text is made of (:func:`read_columns`): ``"in_order"``,
    of the rows in order, and ``"any_order"``, the same for the same rows in any order (a sum of
    per-row hashes), which tells rows in another order from other rows."""
    names = read_columns(columns)
    if missing := [name for name in names if name not in ds.column_names]:
        raise ValueError(f"Column {missing[0]!r} not found; available: {ds.column_names}")
    encode = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=to_json_value).encode
    in_order, any_order = hashlib.sha256(), 0
    part = ds.select_columns(names)
    for start in range(0, len(part), FINGERPRINT_ROWS):
        batch = part[start:start + FINGERPRINT_ROWS]
        digests = [hashlib.blake2b(encode(values).encode("utf-8"), digest_size=16).digest()
                   for values in zip(*(batch[name] for name in names), strict=True)]
        in_order.update(b"".join(digests))
        any_order = (any_order + sum(int.from_bytes(digest, "big") for digest in digests)) % 2**128
    return {"in_order": in_order.hexdigest(), "any_order": f"{any_order:032x}"}


def load_embeddings(path: str | Path, ds: Dataset | None = None) -> tuple[np.ndarray, str | None]:
    """The (rows x dimensions) array of an embeddings ``.npy`` file, memory-mapped (never unpickled),
    and a note when it has no record of what it holds (a file of your own: it is used as given).

    With a record (written by ``hf-adapters embed``), a ValueError refuses an array the run did not
    finish, one changed since, or one written for other rows than ``ds``'s (another count, other
    texts, or the same rows in another order), saying what differs.
    """
    path = Path(path)
    if path.name.endswith(".npy.tmp"):
        raise ValueError(f"{path} is the unfinished file of an `hf-adapters embed` run; give the .npy file a "
                         "finished run writes.")
    array = _open_npy(path)
    record = record_path(path)
    if not record.exists():
        return array, (f"{path} has no record of the rows it was embedded for ({record.name}, which "
                       "`hf-adapters embed` writes beside it): row i of the array is used for row i of the data.")
    check_record(path, _read_record(record), array.shape, ds)
    return array, None


def _open_npy(path: Path) -> np.ndarray:
    """The array of a ``.npy`` file, memory-mapped; a ValueError says what the file should be."""
    should = ("it should be the (rows x dimensions) array of numbers `hf-adapters embed` writes (or numpy.save "
              "of such an array)")
    with open(path, "rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            shape, _, dtype = (np.lib.format.read_array_header_1_0(handle) if version == (1, 0)
                               else np.lib.format.read_array_header_2_0(handle))
        except (ValueError, EOFError):
            raise ValueError(f"{path} is not a NumPy .npy array file: {should}.") from None
    if dtype.hasobject or dtype.kind not in "fiu":
        raise ValueError(f"{path} holds {'Python objects' if dtype.hasobject else f'{dtype} values'}, not numbers: "
                         f"{should}.")
    if len(shape) != 2:
        raise ValueError(f"{path} holds an array of shape {shape}, not one vector per row: {should}.")
    try:
        return np.lib.format.open_memmap(path, mode="r")
    except ValueError as error:  # a file shorter than its header says
        raise ValueError(f"{path} cannot be read as the {shape} array its header names ({error}); it may be a "
                         "copy cut short: copy or embed it again.") from None


def _read_record(record: Path) -> dict[str, Any]:
    try:
        content = json.loads(record.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"The record {record} is not JSON ({error}): embed the data again (or delete the record "
                         "to use the array as it is).") from None
    fields = {"complete": bool, "rows": int, "dimensions": int, "columns": dict, "fingerprint": dict}
    if not isinstance(content, dict) or content.get("format") != RECORD_FORMAT or not all(
            isinstance(content.get(name), kind) for name, kind in fields.items()) or not all(
            isinstance(content["fingerprint"].get(name), str) for name in ("in_order", "any_order")):
        raise ValueError(f"{record} is not a record `hf-adapters embed` wrote: embed the data again (or delete it "
                         "to use the array as it is).")
    return content


def check_record(path: Path, record: Mapping[str, Any], shape: tuple[int, ...], ds: Dataset | None) -> None:
    """Raise a ValueError when the ``record`` ``embed`` wrote says that the array at ``path`` (of
    ``shape``) is unfinished, changed since, or embedded for other rows than ``ds``'s."""
    again = "run `hf-adapters embed` on the data again"
    if not record["complete"]:
        raise ValueError(f"{path} is not the array of a finished `hf-adapters embed` run (its record "
                         f"{record_path(path).name} says the run did not finish): {again}.")
    if tuple(shape) != (record["rows"], record["dimensions"]):
        raise ValueError(f"{path} holds shape {tuple(shape)}, but its record {record_path(path).name} says `embed` "
                         f"wrote ({record['rows']}, {record['dimensions']}): the file changed since; {again}.")
    if ds is None:
        return
    if len(ds) != record["rows"]:
        raise ValueError(f"{path} holds the embeddings of {record['rows']} rows (of {record.get('data')}); the data "
                         f"has {len(ds)}: {again}.")
    missing = [name for name in read_columns(record["columns"]) if name not in ds.column_names]
    if missing:
        raise ValueError(f"{path} was embedded from column {missing[0]!r} (of {record.get('data')}), which the "
                         f"data does not have: {again}.")
    fingerprint = rows_fingerprint(ds, record["columns"])
    if fingerprint["in_order"] != record["fingerprint"]["in_order"]:
        names = read_columns(record["columns"])
        columns = f"column {names[0]!r}" if len(names) == 1 else f"columns {', '.join(map(repr, names))}"
        what = ("the same rows in another order: each row would get another row's vector"
                if fingerprint["any_order"] == record["fingerprint"]["any_order"]
                else f"other rows ({columns} held other values)")
        raise ValueError(f"{path} was embedded for {what}, not for the rows of the data (it was embedded from "
                         f"{record.get('data')}): {again}, or select on the rows in the order embedded.")
