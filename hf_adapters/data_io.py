"""Read rows from the files people keep them in: a data set of any size as a ``datasets.Dataset``
(:func:`read_rows`), a small file as plain dicts (:func:`read_records`), pasted JSONL text (:func:`parse_jsonl`)."""

from __future__ import annotations

import csv
import glob
import hashlib
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # datasets is imported where rows are read: the command line's --help does without it
    from datasets import Dataset, IterableDataset

#: File suffix -> datasets loader.
LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def read_rows(source: str | Path, *, split: str | None = None, streaming: bool = False) -> Dataset | IterableDataset:
    """The rows people keep, as a ``datasets.Dataset`` in file order (with ``streaming``: an
    ``IterableDataset`` that reads them as it goes). Rows without an ``id`` get ``""``.

    ``source`` is a JSONL, JSON (lines or a list of records), CSV or Parquet file; a folder of such
    shards, or a glob of them (``data/*.parquet``, ``shards/**/*.jsonl``), read in name order; a
    ``save_to_disk`` folder; or a data set id on the hub (``split`` names the split, default
    ``train``; offline, a clear error). Shards must all be of one type and hold the same columns.

    CSV cells are read as the strings they are (an id ``001`` stays ``"001"``, an output ``42``
    stays ``"42"``); empty ones stay empty strings (not nulls), so an empty ``input`` is still an input.

    Example:
        >>> from hf_adapters.data_io import read_rows
        >>> rows = read_rows("alpaca.json")  # doctest: +SKIP
        >>> rows[0]["id"]  # doctest: +SKIP
        ''
    """
    from datasets import load_dataset

    source = str(source)
    if is_saved_dataset(source):
        dataset = _load_saved(Path(source))
        dataset = dataset.to_iterable_dataset() if streaming else dataset
    elif (shards := data_files(source)) is not None:
        loader, files = shards
        options = _csv_options(files[0]) if loader == "csv" else {}
        try:
            dataset = load_dataset(loader, data_files=[str(file) for file in files], split="train",
                                   streaming=streaming, **options)
        except Exception as error:  # datasets wraps parse errors in several types
            where = files[0] if len(files) == 1 else Path(source)
            raise ValueError(f"Cannot read {str(where)!r} as {loader}: {_reason(files, loader, error)}") from error
    else:
        dataset = _load_hub(source, split, streaming)
    return _with_ids(dataset if streaming else dataset.with_format(None))


def is_saved_dataset(source: str | Path) -> bool:
    """Whether ``source`` is a folder written by ``Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``)."""
    folder = Path(source)
    return folder.is_dir() and any((folder / name).is_file() for name in ("state.json", "dataset_dict.json"))


def data_files(source: str | Path) -> tuple[str, list[Path]] | None:
    """The loader and the files (in name order) that ``source`` names: a file, a folder of shards or a
    glob; None for a name that is neither a local path nor a glob (a hub id). A ValueError says what
    is wrong: a glob or folder without data files, shards of several types or with other columns."""
    source = str(source)
    path = Path(source)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(file for file in path.rglob("*") if file.is_file() and file.suffix.lower() in LOADERS)
        if not files:
            raise ValueError(f"The folder {source!r} holds no data files ({', '.join(sorted(LOADERS))}) and is not one "
                             "written by save_to_disk.")
    elif glob.has_magic(source):
        files = sorted(Path(name) for name in glob.glob(source, recursive=True) if Path(name).is_file())
        if not files:
            raise ValueError(f"The pattern {source!r} matches no file.")
    elif source.startswith(("/", ".", "~")) or Path(source).suffix.lower() in LOADERS:
        raise FileNotFoundError(f"Data file {source!r} does not exist.")
    else:
        return None
    if unknown := [file for file in files if file.suffix.lower() not in LOADERS]:
        raise ValueError(f"Cannot read {str(unknown[0])!r}: unknown file type {unknown[0].suffix!r}; use one of "
                         f"{sorted(LOADERS)} or a directory written by Dataset.save_to_disk.")
    loaders = {LOADERS[file.suffix.lower()] for file in files}
    if len(loaders) > 1:
        raise ValueError(f"{source!r} names shards of several types ({', '.join(sorted(loaders))}); keep one type.")
    for file in files:
        if _is_blank(file):
            raise ValueError(f"Cannot read {str(file)!r}: the file is empty.")
    _check_same_columns(files)
    return loaders.pop(), files


def _columns(file: Path) -> list[str] | None:
    """The columns a shard's first row (or its schema) has; None where that takes parsing the whole file."""
    suffix = file.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet

        return pyarrow.parquet.read_schema(file).names
    with open(file, encoding="utf-8-sig", newline="") as handle:
        if suffix == ".csv":
            return next(csv.reader(handle), [])
        for line in handle:
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    return None  # one JSON document (a list of records), or a bad line the loader will name
                return sorted(row) if isinstance(row, dict) else None
    return None


def _check_same_columns(files: list[Path]) -> None:
    """Raise a ValueError naming two shards whose columns differ."""
    first, first_columns = files[0], None
    for file in files:
        columns = _columns(file)
        if columns is None:
            continue
        if first_columns is None:
            first, first_columns = file, columns
        elif sorted(columns) != sorted(first_columns):
            raise ValueError(f"The shards have different columns: {str(first)!r} has {sorted(first_columns)}, "
                             f"{str(file)!r} has {sorted(columns)}.")


def _load_hub(name: str, split: str | None, streaming: bool) -> Dataset | IterableDataset:
    """A data set on the hub, by id; offline or unreachable, an error saying so."""
    from datasets import load_dataset

    from .models import hub_unavailable

    if hub_unavailable():
        raise ValueError(f"{name!r} is not a local file, folder or pattern, and the hub cannot be reached (offline): "
                         "give a local path, or run where the hub is reachable.")
    try:
        return load_dataset(name, split=split or "train", streaming=streaming)
    except Exception as error:  # datasets raises several types for a missing repository or split
        raise ValueError(f"Cannot load the data set {name!r} (split {split or 'train'!r}) from the hub: "
                         f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from error


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


def _reason(files: list[Path], loader: str, error: Exception) -> str:
    """What is wrong with the files the datasets loader refused, in words a person can act on."""
    for path in files:
        if loader == "csv" and len([line for line in path.read_text(encoding="utf-8").splitlines()
                                    if line.strip()]) < 2:
            return f"{path.name if len(files) > 1 else 'it'} has a header but no rows."
        if loader == "json":
            text = path.read_text(encoding="utf-8")
            try:
                json.loads(text)
            except json.JSONDecodeError:  # not one JSON document: name the first line that is not a JSON object
                try:
                    parse_jsonl(text, path.name if len(files) > 1 else None)
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


def _with_ids(dataset: Dataset | IterableDataset) -> Dataset | IterableDataset:
    """Rows without an ``id`` (or with a null one) get ``""``."""
    from datasets import IterableDataset

    if isinstance(dataset, IterableDataset):
        if dataset.column_names is not None and "id" not in dataset.column_names:
            return dataset.map(lambda batch: {"id": [""] * len(next(iter(batch.values())))}, batched=True)
        return dataset.map(lambda batch: {"id": ["" if value is None else value for value in batch["id"]]},
                           batched=True)
    if "id" not in dataset.column_names:
        return dataset.add_column("id", [""] * len(dataset))
    if dataset.data.column("id").null_count:
        return dataset.map(lambda row: {"id": "" if row["id"] is None else row["id"]}, desc="Filling missing ids")
    return dataset


def data_fingerprint(source: str | Path, split: str | None = None) -> str:
    """What identifies the data ``source`` names (as :func:`read_rows` reads it): a SHA-256 of its
    files' bytes with their relative paths (a file, a folder of shards, a glob, a ``save_to_disk``
    folder), or, for a data set on the hub, its id, split and commit.

    Local data is identified by content, never by modification times or cache locations, so every
    process on every node computes the same value, and only a real change of data changes it.
    """
    source = str(source)
    if is_saved_dataset(source):
        root, files = Path(source), sorted(path for path in Path(source).rglob("*") if path.is_file())
    elif (shards := data_files(source)) is not None:
        files = shards[1]
        root = Path(os.path.commonpath([str(file.absolute().parent) for file in files]))
    else:
        return f"hub:{source}:{split or 'train'}:{_hub_revision_of_dataset(source)}"
    digest = hashlib.sha256()
    for file in files:
        if len(files) > 1 or Path(source).is_dir():
            digest.update(file.absolute().relative_to(root.absolute()).as_posix().encode() + b"\0")
        with open(file, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def _hub_revision_of_dataset(name: str) -> str | None:
    """The commit of a data set on the hub, if it can be asked."""
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(name, timeout=10).sha
    except Exception:  # unreachable, unknown or gated: the job is then identified by the id alone
        return None


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
