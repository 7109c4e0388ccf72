"""Read rows from the files people keep them in: a data set of any size as a ``datasets.Dataset``
(:func:`read_rows`), a small file as plain dicts (:func:`read_records`), pasted JSONL text (:func:`parse_jsonl`)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # datasets is imported where rows are read: the command line's --help does without it
    from datasets import Dataset

#: File suffix -> datasets loader.
LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def read_rows(path: str | Path) -> Dataset:
    """Load a JSONL, JSON (lines or a list of records), CSV or Parquet file, or a ``save_to_disk``
    directory, as a ``datasets.Dataset`` in file order. Rows without an ``id`` get ``""``.

    CSV cells are read as the strings they are (an id ``001`` stays ``"001"``, an output ``42``
    stays ``"42"``); empty ones stay empty strings (not nulls), so an empty ``input`` is still an input.

    Example:
        >>> from hf_adapters.data_io import read_rows
        >>> rows = read_rows("alpaca.json")  # doctest: +SKIP
        >>> rows[0]["id"]  # doctest: +SKIP
        ''
    """
    from datasets import load_dataset

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Data file {str(path)!r} does not exist.")
    if path.is_dir():
        dataset = _load_saved(path)
    else:
        loader = LOADERS.get(path.suffix.lower())
        if loader is None:
            raise ValueError(
                f"Cannot read {str(path)!r}: unknown file type {path.suffix!r}; use one of {sorted(LOADERS)} "
                "or a directory written by Dataset.save_to_disk."
            )
        if _is_blank(path):
            raise ValueError(f"Cannot read {str(path)!r}: the file is empty.")
        options = _csv_options(path) if loader == "csv" else {}
        try:
            dataset = load_dataset(loader, data_files=str(path), split="train", **options)
        except Exception as error:  # datasets wraps parse errors in several types
            raise ValueError(f"Cannot read {str(path)!r} as {loader}: {_reason(path, loader, error)}") from error
    return _with_ids(dataset.with_format(None))


def _csv_options(path: Path) -> dict[str, Any]:
    """A CSV holds text: every cell a string as written (ids 001 and 1e3 stay so), an empty cell ""."""
    from datasets import Features, Value

    with open(path, encoding="utf-8-sig", newline="") as handle:
        header = next(csv.reader(handle), [])
    return {"keep_default_na": False, "features": Features({name: Value("string") for name in header})}


def _is_blank(path: Path) -> bool:
    """Whether the file holds nothing but white space (read only up to its first other byte)."""
    with open(path, "rb") as handle:
        while block := handle.read(1 << 16):
            if block.strip():
                return False
    return True


def _reason(path: Path, loader: str, error: Exception) -> str:
    """What is wrong with a file the datasets loader refused, in words a person can act on."""
    if loader == "csv" and len([line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]) < 2:
        return "it has a header but no rows."
    if loader == "json":
        text = path.read_text(encoding="utf-8")
        try:
            json.loads(text)
        except json.JSONDecodeError:  # not one JSON document: name the first line that is not a JSON object
            try:
                parse_jsonl(text)
            except ValueError as line_error:
                return str(line_error)
    return str(error)


def _load_saved(path: Path) -> Dataset:
    from datasets import DatasetDict, load_from_disk

    try:
        saved = load_from_disk(str(path))
    except FileNotFoundError as error:
        raise ValueError(f"{str(path)!r} is a directory but not one written by save_to_disk: {error}") from error
    if isinstance(saved, DatasetDict):
        if len(saved) != 1:
            raise ValueError(
                f"{str(path)!r} holds the splits {sorted(saved)}; point at one of them, e.g. {str(path / 'train')!r}."
            )
        saved = next(iter(saved.values()))
    return saved


def _with_ids(dataset: Dataset) -> Dataset:
    if "id" not in dataset.column_names:
        return dataset.add_column("id", [""] * len(dataset))
    if dataset.data.column("id").null_count:
        return dataset.map(lambda row: {"id": "" if row["id"] is None else row["id"]}, desc="Filling missing ids")
    return dataset


def data_fingerprint(path: str | Path) -> str:
    """SHA-256 of a data file's bytes (or of every file in a directory, with their relative paths).

    It depends only on content, never on modification times or cache locations, so every
    process on every node computes the same value, and only a real change of data changes it.
    """
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        if path.is_dir():
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with open(file, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def parse_jsonl(text: str, source: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects of the non-blank lines of ``text``; errors name the line (and ``source``)."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source}:{number}: " if source else ""
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}Line {number} is not valid JSON ({error.msg}): {line[:80]!r}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}Line {number} is JSON but not an object: {line[:80]!r}")
        rows.append(row)
    return rows


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a small ``.jsonl``, ``.json`` (lines, or a list of objects) or ``.csv`` file as
    plain dicts, each as written: CSV cells stay strings, a row's missing fields stay missing (no
    Arrow schema is imposed); errors name the file (and the line). For uploads to the Space, score
    files and parallel corpora; :func:`read_rows` reads data sets of any size."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text.") from None
    if path.suffix.lower() == ".csv":
        rows = []
        for row in csv.DictReader(io.StringIO(text)):
            if None in row:
                raise ValueError(f"{path.name}: CSV line {len(rows) + 2} has more cells than the header.")
            rows.append(row)
        return rows
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path.name} is not valid JSON ({error.msg}).") from None
        if not all(isinstance(row, dict) for row in rows):
            raise ValueError(f"{path.name} must be a JSON list of objects.")
        return rows
    return parse_jsonl(text, path.name)
