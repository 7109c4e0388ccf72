"""Read rows from the files people keep them in: a data set of any size as a ``datasets.Dataset``
(:func:`read_rows`), a small file as plain dicts (:func:`read_records`), pasted JSONL text (:func:`parse_jsonl`)."""

from __future__ import annotations

import contextlib
import csv
import glob
import hashlib
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

from hf_adapters.files.json_values import to_json_value
from hf_adapters.files.remote_files import (
    RemoteFile,
    UnreadableURL,
    is_url,
    open_data_file,
    readable_path,
    remote_files,
)

if TYPE_CHECKING:  # datasets is imported where rows are read: the command line's --help does without it
    import pyarrow as pa
    from datasets import Dataset, IterableDataset

#: File suffix -> datasets loader.
LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
#: Bytes of a JSON or CSV file checked at a time: the datasets json loader's chunk (then a line's end).
CHUNK_BYTES = 10 << 20


def read_rows(source: str | Path, *, split: str | None = None, streaming: bool = False) -> Dataset | IterableDataset:
    """The rows people keep, as a ``datasets.Dataset`` in file order (with ``streaming``: an
    ``IterableDataset`` that reads them as it goes). An ``id`` column is kept as it is, null ids in
    a column of text read as ``""`` (a column of numbers keeps its nulls: a job writes them as
    ``""``); data without one gets none (a job names those rows by their number: :func:`row_id`).
    JSON ids are read exactly: a column of integers one of which is above ``2**63 - 1`` reads as
    unsigned 64-bit integers (not as floats, which would change them), and an integer id that only
    a float column could hold, inexactly, is refused naming its line; so are the other columns'
    integers (a column of them with one above ``2**63 - 1`` keeps every value as it was), and a NaN or
    infinite id (it names no row) is refused naming its file and row.

    ``source`` is a JSONL, JSON (lines or a list of records), CSV or Parquet file; a folder of such
    shards, or a glob of them (``data/*.parquet``, ``shards/**/*.jsonl``), read in name order, local
    or at a URL fsspec reads (``s3://bucket/rows/*.jsonl``: :mod:`~hf_adapters.files.remote_files`); a
    ``save_to_disk`` folder (of a ``DatasetDict``: ``split`` names the split); or a data set id on the
    hub (``split`` names the split, default ``train``; offline, a clear error). Shards must all be of
    one type and hold the same columns, each of one type; shards of no rows are skipped. A name is
    a name: a file is read as itself, even where its name holds a glob's characters (``p[1].jsonl``) or
    fsspec's ``::`` (``rows::v2.jsonl``).
    Every shard is read through once before the rows are loaded: an error names the file, the
    line and what is wrong with it.

    CSV cells are read as the strings they are (an id ``001`` stays ``"001"``, an output ``42``
    stays ``"42"``); empty ones stay empty strings (not nulls), so an empty ``input`` is still an input.

    Example:
        >>> from hf_adapters.files.data_io import read_rows
        >>> rows = read_rows("alpaca.json")  # doctest: +SKIP
        >>> rows.column_names  # doctest: +SKIP
        ['instruction', 'input', 'output']
    """
    from datasets import load_dataset

    source = str(source)
    if is_saved_dataset(source):
        dataset = _load_saved(Path(source), split)
        dataset = dataset.to_iterable_dataset() if streaming else dataset
    elif (shards := data_files(source)) is not None:
        loader, files = shards
        options = _loader_options(loader, files)
        exact = _exact_columns(loader, files, options)
        if loader == "parquet":
            _check_finite_ids(files)
        patterns = [loader_pattern(file) for file in files]
        try:
            dataset = load_dataset(loader, data_files=patterns, split="train", streaming=streaming, **options)
        except Exception as error:  # datasets wraps parse errors in several types
            where = files[0] if len(files) == 1 else source if is_url(source) else Path(source)
            raise ValueError(f"Cannot read {str(where)!r} as {loader}: {_innermost(error)}") from error
        dataset = _with_exact_columns(dataset, exact)
    else:
        dataset = _load_hub(source, split, streaming)
    return _with_ids(dataset if streaming else dataset.with_format(None))


def is_saved_dataset(source: str | Path) -> bool:
    """Whether ``source`` is a folder written by ``Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``)."""
    folder = Path(source)
    return folder.is_dir() and any((folder / name).is_file() for name in ("state.json", "dataset_dict.json"))


def data_files(source: str | Path) -> tuple[str, list[Path]] | None:
    """The loader and the files (in name order) that ``source`` names: a file (even one whose name
    holds a glob's characters), a folder of shards or a glob, local or at a URL
    (:class:`~hf_adapters.files.remote_files.RemoteFile` each), less the shards of no rows (empty,
    or a CSV header, a JSON ``[]``, a Parquet file of none); None for a name that is neither a path, a
    URL nor a glob (a hub id). A ValueError says what is wrong: a glob or folder without data files,
    shards of several types or with other columns, no shard with rows."""
    source = str(source)
    path = Path(source)
    if is_url(source):
        files = remote_files(source, tuple(LOADERS))
    elif path.is_file():
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
    loader = loaders.pop()
    files = _with_rows(files, source, loader)
    _check_same_columns(files)
    return loader, files


def loader_pattern(file: Path) -> str:
    """What the ``datasets`` loader is given to read ``file`` (a local path, or a
    :class:`~hf_adapters.files.remote_files.RemoteFile` from its local copy) and no other: its path with
    a glob's characters escaped, since the loader reads each of its ``data_files`` as a glob.

    Example:
        >>> loader_pattern(Path("/data/p[1].jsonl"))
        '/data/p[[]1].jsonl'
    """
    return glob.escape(str(_unchained(readable_path(file))))


def _unchained(path: Path) -> Path:
    """``path``, or where its name holds fsspec's ``::`` (which the loader reads as URLs chained, as in
    ``rows::v2.jsonl``), a link to it whose name does not, in the cache folder's ``linked/`` (one per
    file, named by its absolute path)."""
    if "::" not in str(path):
        return path
    from hf_adapters.backends.loading import cache_folder

    target = path.resolve()
    key = hashlib.sha256(str(target).encode()).hexdigest()[:32]
    link = cache_folder() / "linked" / key / path.name.replace(":", "_")
    if not (link.is_symlink() and link.resolve() == target):
        from hf_adapters.backends.loading import CACHE_ENV

        partial = link.with_name(f".{link.name}.{os.getpid()}.partial")
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            partial.unlink(missing_ok=True)
            partial.symlink_to(target)
            os.replace(partial, link)
        except OSError as error:
            raise ValueError(f"Cannot read {str(path)!r}: a name holding '::' is read through a link in the cache "
                             f"folder {link.parent}, which cannot be written ({error.strerror or error}); set "
                             f"{CACHE_ENV} to a folder this process can write, or rename the file.") from None
    return link


def _with_rows(files: list[Path], source: str, loader: str) -> list[Path]:
    """The shards that hold rows: an empty file, a CSV of a header only, a JSON ``[]`` and a Parquet
    file of none are skipped (Spark and pyarrow write such shards, which the loader cannot read); a
    ValueError where none holds any."""
    kept = []
    for file in files:
        with _naming(file, loader):
            if not _holds_no_rows(file, loader):
                kept.append(file)
    if not kept:
        where = f"{str(files[0])!r}: the file" if len(files) == 1 else f"{source!r}: each of its {len(files)} files"
        raise ValueError(f"Cannot read {where} holds no rows.")
    return kept


def _holds_no_rows(file: Path, loader: str) -> bool:
    """Whether a shard holds no rows, read from its start (only as far as its first row) or, for
    Parquet, its metadata."""
    if loader == "parquet":
        return not parquet_rows(file)
    with open_data_file(file, head=True) as handle:
        start = b""
        while len(start) < 3 and (block := handle.read(1 << 16)):
            start += re.sub(rb"\s+", b"", block if start else block.removeprefix(b"\xef\xbb\xbf"))
    if loader == "json" or not start:
        return start[:3] in (b"", b"[]")
    try:
        with open_data_file(file, "r", head=True, encoding="utf-8-sig", newline="") as handle:
            rows = csv.reader(handle)
            next(rows, None)
            return not any(cells for cells in rows)
    except UnicodeDecodeError:
        return False  # the check of the whole file names the line


def _columns(file: Path) -> list[str] | None:
    """The columns a shard's first row (or its schema) has; None where that takes parsing the whole file."""
    suffix = file.suffix.lower()
    if suffix == ".parquet":

        return _parquet_types(file).names
    try:
        with open_data_file(file, "r", head=True, encoding="utf-8-sig", newline="") as handle:
            if suffix == ".csv":
                return next(csv.reader(handle), [])
            for line in handle:
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        return None  # one JSON document (a list of records), or a bad line the loader will name
                    return sorted(row) if isinstance(row, dict) else None
    except UnicodeDecodeError:
        return None  # the check of the whole file names the line
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

    from hf_adapters.backends.loading import hub_unavailable

    if hub_unavailable():
        raise ValueError(f"{name!r} is not a local file, folder or pattern, and the hub cannot be reached (offline): "
                         "give a local path, or run where the hub is reachable.")
    try:
        return load_dataset(name, split=split or "train", streaming=streaming)
    except Exception as error:  # datasets raises several types for a missing repository or split
        raise ValueError(f"Cannot load the data set {name!r} (split {split or 'train'!r}) from the hub: "
                         f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from error


def _loader_options(loader: str, files: list[Path]) -> dict[str, Any]:
    """What the datasets loader is given for ``files``, once each is read through and found sound (a
    ValueError names the file, the line and what is wrong): the types of every shard's columns, so
    that the loader never casts one shard's values to another's types (nor JSON-encodes them)."""
    from datasets import Features

    if loader == "csv":
        for file in files:
            _check_csv(file)
        return _csv_options(files[0])
    schema = _json_schema(files) if loader == "json" else _parquet_schema(files)
    return {} if schema is None else {"features": Features.from_arrow_schema(schema)}


def _csv_options(path: Path) -> dict[str, Any]:
    """A CSV holds text: every cell a string as written (ids 001 and 1e3 stay so), an empty cell ""."""
    from datasets import Features, Value

    with open_data_file(path, "r", head=True, encoding="utf-8-sig", newline="") as handle:
        header = next(csv.reader(handle), [])
    return {"keep_default_na": False, "features": Features({name: Value("string") for name in header})}


@contextlib.contextmanager
def _naming(file: Path, loader: str) -> Iterator[None]:
    """Name ``file`` in a ValueError raised while it is read (a URL's own error names it already)."""
    try:
        yield
    except UnreadableURL:
        raise
    except ValueError as error:
        raise ValueError(f"Cannot read {str(file)!r} as {loader}: {error}") from None


def _innermost(error: BaseException) -> str:
    """The message of the first error in the chain of causes of ``error`` (datasets wraps them in its own)."""
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    return str(error).strip() or type(error).__name__


def _line_chunks(file: Path) -> Iterator[tuple[int, bytes]]:
    """The bytes of a text file in chunks of whole lines, about :data:`CHUNK_BYTES` each, with the number of
    each chunk's first line; a ValueError names the first byte that is not UTF-8."""
    number = 1
    with open_data_file(file) as handle:
        while chunk := handle.read(CHUNK_BYTES) + handle.readline():
            try:
                chunk.decode("utf-8")
            except UnicodeDecodeError as error:
                raise _not_utf8(chunk, number, error.start) from None
            yield number, chunk
            number += chunk.count(b"\n")


def _not_utf8(chunk: bytes, first_line: int, start: int) -> ValueError:
    """The error for the byte at ``start`` of ``chunk`` (whose first line is ``first_line``), which is not UTF-8."""
    line = first_line + chunk.count(b"\n", 0, start)
    column = start - chunk.rfind(b"\n", 0, start)
    return ValueError(f"Line {line} is not UTF-8 text: its byte {column} is {chunk[start]:#04x}.")


def _check_csv(file: Path) -> None:
    """Raise a ValueError naming the first line of a CSV file that is not UTF-8 or has more cells than
    its header, or saying that it has no rows."""
    with _naming(file, "csv"):
        try:
            rows = _csv_rows(file)
        except UnicodeDecodeError:
            _check_utf8(file)  # names the line and the byte
            raise
        if not rows:
            raise ValueError("it has a header but no rows.")


def _csv_rows(file: Path) -> int:
    """How many rows (not blank) a CSV file has below its header; a ValueError names the first line
    with more cells than the header."""
    with open_data_file(file, "r", encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        width = len(next(reader, []))
        rows = 0
        for cells in reader:
            if len(cells) > width:
                raise ValueError(f"Line {reader.line_num} has {len(cells)} cells; the header has {width}.")
            rows += bool(cells)
    return rows


def _check_utf8(file: Path) -> None:
    """Raise a ValueError naming the first byte of a text file that is not UTF-8."""
    for _ in _line_chunks(file):
        pass


class _JsonChunk(NamedTuple):
    """Whole JSON lines of a file, from line ``first_line`` on (``unit`` ``Record``: the records of a
    JSON list, one a line)."""

    first_line: int
    data: bytes
    unit: str

    def line(self, row: int) -> tuple[int, bytes]:
        """The number and text of the line of the chunk's ``row``-th row (pyarrow skips blank lines)."""
        for number, line in enumerate(io.BytesIO(self.data), self.first_line):
            if line.strip():
                if not row:
                    return number, line
                row -= 1
        return self.first_line, b""

    def place(self, row: int) -> str:
        """``Line 7`` (or ``Record 7``): where the chunk's ``row``-th row is."""
        return f"{self.unit} {self.line(row)[0]}"


def _json_chunks(file: Path) -> Iterator[_JsonChunk]:
    """A JSON file in the chunks the datasets loader reads: a list of records whole, JSON lines about
    :data:`CHUNK_BYTES` at a time."""
    chunks = _line_chunks(file)
    first_line, data = next(chunks)
    if re.match(rb"(\xef\xbb\xbf)?\s*\[", data):
        yield _JsonChunk(1, _records_as_lines(data + b"".join(chunk for _, chunk in chunks)), "Record")
        return
    yield _JsonChunk(first_line, data, "Line")
    yield from (_JsonChunk(first_line, data, "Line") for first_line, data in chunks)


def _records_as_lines(data: bytes) -> bytes:
    """A JSON list of records as JSON lines, one record a line."""
    try:
        records = json.loads(data)
    except json.JSONDecodeError as error:
        raise ValueError(f"Line {error.lineno} is not valid JSON ({error.msg}).") from None
    if not isinstance(records, list):
        raise ValueError("it is one JSON value, not JSON lines or a list of records.")
    if bad := next((number for number, record in enumerate(records, 1) if not isinstance(record, dict)), None):
        raise ValueError(f"Record {bad} is JSON but not an object: {json.dumps(records[bad - 1])[:80]!r}")
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode()


def _read_json_chunk(chunk: _JsonChunk) -> pa.Table:
    """The chunk's rows as pyarrow reads them (in blocks, on several threads); a ValueError names the
    line pyarrow refuses and says what is wrong with it."""
    import pyarrow as pa
    import pyarrow.json

    blocks = pyarrow.json.ReadOptions(block_size=max(len(chunk.data) // 16, 1 << 20))
    try:
        return pyarrow.json.read_json(io.BytesIO(chunk.data), read_options=blocks)
    except pa.ArrowInvalid:  # a line longer than a block, or a bad line: read as one block, which names its row
        pass
    try:
        whole = pyarrow.json.ReadOptions(block_size=len(chunk.data) + 1, use_threads=False)
        return pyarrow.json.read_json(io.BytesIO(chunk.data), read_options=whole)
    except pa.ArrowInvalid as error:
        raise _json_line_error(chunk, str(error)) from None


def _json_line_error(chunk: _JsonChunk, message: str) -> ValueError:
    """What is wrong with the line of ``chunk`` that pyarrow refused with ``message``, in words."""
    found = re.fullmatch(r"JSON parse error: (.*) in row (\d+)", message.strip())
    if found is None:
        return ValueError(f"{chunk.unit}s {chunk.first_line} on: {message}")
    number, line = chunk.line(int(found[2]))
    where, text = f"{chunk.unit} {number}", line.decode("utf-8").strip()
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        return ValueError(f"{where} is not valid JSON ({error.msg}): {text[:80]!r}")
    if not isinstance(value, dict):
        return ValueError(f"{where} is JSON but not an object: {text[:80]!r}")
    change = re.fullmatch(r"Column\(/?(.*)\) changed from (\w+) to (\w+)", found[1])
    if change is None:
        return ValueError(f"{where}: {found[1]}")
    return ValueError(f"{where}: column {change[1]!r} holds a {change[3]} here but a {change[2]} in the "
                      f"{chunk.unit.lower()}s before.")


def _json_schema(files: list[Path]) -> pa.Schema:
    """The columns of JSON shards and their types, as pyarrow reads every chunk of every shard, merged
    (null fits any type, integers and floats make floats). A ValueError names the file and the line of
    a value of another type than the column's, of a column the first shard lacks (or the column a
    shard lacks), besides the lines :func:`_read_json_chunk` and :func:`_line_chunks` refuse."""
    import pyarrow as pa

    fields: dict[str, pa.Field] = {}
    origins: dict[str, str] = {}  # where each column was first seen
    for index, file in enumerate(files):
        with _naming(file, "json"):
            columns = set()
            for chunk in _json_chunks(file):
                table = _read_json_chunk(chunk)
                for field in table.schema:
                    if field.name not in fields:
                        if index:
                            raise ValueError(f"{_place(chunk, table, field.name)} has the column {field.name!r}, "
                                             f"which {str(files[0])!r} has not; shards must have the same columns.")
                        fields[field.name] = field
                        origins[field.name] = f"{str(file)!r} ({_place(chunk, table, field.name).lower()})"
                    elif (merged := _merged(fields[field.name], field)) is None:
                        raise ValueError(f"{_place(chunk, table, field.name)}: column {field.name!r} holds "
                                         f"{field.type} values, where {origins[field.name]} has "
                                         f"{fields[field.name].type} ones.")
                    else:
                        fields[field.name] = merged
                columns.update(table.column_names)
            if missing := [name for name in fields if name not in columns]:
                raise ValueError(f"it has no column {missing[0]!r}, which {origins[missing[0]]} has; shards must "
                                 "have the same columns.")
    return pa.schema(list(fields.values()))


def _parquet_schema(files: list[Path]) -> pa.Schema | None:
    """The columns of Parquet shards and their types, merged as :func:`_json_schema` merges them; None
    where every shard has the first one's. A ValueError names two shards whose column types differ."""
    import pyarrow as pa
    import pyarrow.parquet

    schemas = []
    for file in files:
        with _naming(file, "parquet"):
            schemas.append(_parquet_types(file))
    if all(schema.equals(schemas[0]) for schema in schemas):
        return None
    fields = {field.name: field for field in schemas[0]}
    for file, schema in zip(files[1:], schemas[1:], strict=True):
        for field in schema:
            if (merged := _merged(fields[field.name], field)) is None:
                raise ValueError(f"Cannot read {str(file)!r} as parquet: its column {field.name!r} holds {field.type} "
                                 f"values, where {str(files[0])!r} has {fields[field.name].type} ones.")
            fields[field.name] = merged
    return pa.schema(list(fields.values()))


def parquet_rows(file: Path) -> int:
    """The rows of a Parquet file, as its metadata says (read from its end, local or at a URL)."""
    import pyarrow.parquet

    with open_data_file(file, head=True) as handle:
        return pyarrow.parquet.read_metadata(handle).num_rows


def _parquet_types(file: Path) -> pa.Schema:
    """The schema a Parquet file stores (read from its end, local or at a URL)."""
    import pyarrow.parquet

    with open_data_file(file, head=True) as handle:
        return pyarrow.parquet.read_schema(handle)


def stored_types(source: str | Path) -> pa.Schema | None:
    """The column types a local Parquet source stores (its shards' own, merged as :func:`read_rows`
    reads them), some of which ``datasets`` does not keep (a dictionary column reads as plain
    strings): for an output that keeps every value as it was. None for other sources."""

    shards = None if is_saved_dataset(source) else data_files(source)
    if shards is None or shards[0] != "parquet":
        return None
    return _parquet_schema(shards[1]) or _parquet_types(shards[1][0])


def _merged(field: pa.Field, other: pa.Field) -> pa.Field | None:
    """The type two shards' columns share (null fits any type, ints and floats make floats, structs
    take the fields of both); None where they hold values of different kinds."""
    import pyarrow as pa

    try:
        return pa.unify_schemas([pa.schema([field]), pa.schema([other])], promote_options="permissive").field(0)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return None


def _place(chunk: _JsonChunk, table: pa.Table, column: str) -> str:
    """Where the chunk's first value (not null) of ``column`` is: ``Line 7`` (its first line where it has none)."""
    import pyarrow.compute

    return chunk.place(max(pyarrow.compute.index(table.column(column).is_valid(), True).as_py(), 0))


def _load_saved(path: Path, split: str | None) -> Dataset:
    """A ``save_to_disk`` folder's data set; of a ``DatasetDict``, the split ``split`` names (or its only one)."""
    from datasets import DatasetDict, load_from_disk

    try:
        saved = load_from_disk(str(path))
    except FileNotFoundError as error:
        raise ValueError(f"{str(path)!r} is a directory but not one written by save_to_disk: {error}") from error
    if not isinstance(saved, DatasetDict):
        return saved
    if split is not None:
        if split not in saved:
            raise ValueError(f"{str(path)!r} has no split {split!r}; its splits are {sorted(saved)}.")
        return saved[split]
    if len(saved) != 1:
        raise ValueError(f"{str(path)!r} holds the splits {sorted(saved)}; point at one of them, e.g. "
                         f"{str(path / 'train')!r}, or name it with --split.")
    return next(iter(saved.values()))


def _reads_as_floats(options: dict[str, Any], column: str) -> bool:
    """Whether the loader ``options`` read ``column`` as floats."""
    feature = options.get("features", {}).get(column)
    return getattr(feature, "dtype", None) in ("float16", "float32", "float64")


def _exact_ids(files: list[Path], column: str = "id") -> pa.Array | None:
    """The ids (the values of ``column``) of JSON shards whose ``id`` column (``column``) reads as
    floats, exactly, as unsigned 64-bit integers where every id is a whole number from 0 to
    ``2**64 - 1`` (pyarrow reads a column holding one above ``2**63 - 1`` as floats, which would
    write ``12345678901234567890`` as ``1.2345678901234567e+19`` and ``5`` as ``5.0``); None where
    the ids are floats that lose nothing (fractions, and integers a float holds exactly). A
    ValueError names the line of an integer id that a float would change (or of a NaN id)."""
    import pyarrow as pa
    import pyarrow.json

    ids = pyarrow.json.ParseOptions(explicit_schema=pa.schema([pa.field(column, pa.uint64())]),
                                    unexpected_field_behavior="ignore")
    arrays = []
    try:
        for file in files:
            for chunk in _json_chunks(file):
                arrays.append(pyarrow.json.read_json(io.BytesIO(chunk.data), parse_options=ids).column(column))
    except pa.ArrowInvalid:  # a fraction, a negative id or one beyond 64 bits: floats, if they lose nothing
        for file in files:
            with _naming(file, "json"):
                _check_float_ids(file, column)
        return None
    return pa.chunked_array(arrays, pa.uint64()).combine_chunks()


#: An integer in JSON text with more digits than a float holds exactly (2**53 has 16), after the
#: ``:``, ``,`` or ``[`` before a value: a file without one reads every number of a column of floats
#: exactly. Text in strings may match too (then the columns are checked for nothing). Searched at
#: some 80 MB/s, where a pattern starting at any digit is several times slower.
_LONG_INTEGER = re.compile(rb"[:,\[]\s*-?\d{16,}(?![\d.eE])")


def _exact_columns(loader: str, files: list[Path], options: dict[str, Any]) -> dict[str, pa.Array]:
    """The columns of JSON shards (the ``id`` among them) that the loader ``options`` read as floats
    and that hold integers only, exactly, as unsigned 64-bit integers (:func:`_exact_ids`): a column
    of integers one of which is above ``2**63 - 1`` keeps every digit, and ``1`` is not read as
    ``1.0``. Columns other than the id are read so only where the files hold an integer of 16 digits
    or more (else floats hold every value exactly). A ValueError names the line and the column of an
    integer that a float would change, or of a NaN id."""
    floats = [name for name in options.get("features", {}) if loader == "json" and _reads_as_floats(options, name)]
    if any(name != "id" for name in floats) and not _holds_long_integers(files):
        floats = [name for name in floats if name == "id"]
    return {column: values for column in floats if (values := _exact_ids(files, column)) is not None}


def _holds_long_integers(files: list[Path]) -> bool:
    """Whether JSON shards hold an integer of 16 digits or more (:data:`_LONG_INTEGER`)."""
    return any(_LONG_INTEGER.search(chunk.data) for file in files for chunk in _json_chunks(file))


def _check_float_ids(file: Path, column: str = "id") -> None:
    """Raise a ValueError naming the first line of a JSON file whose id (the value of ``column``)
    is an integer that a float cannot hold exactly, or NaN or an infinity (:func:`not_an_id`)."""
    for chunk in _json_chunks(file):
        for number, line in enumerate(io.BytesIO(chunk.data), chunk.first_line):
            if not line.strip() or (column != "id" and not _LONG_INTEGER.search(line)):
                continue
            value = json.loads(line).get(column)
            if column == "id" and (problem := not_an_id(value)) is not None:
                raise ValueError(f"{chunk.unit} {number}: {problem}")
            if isinstance(value, int) and not isinstance(value, bool) and float(value) != value:
                what, kind = (f"the id {value}", "ids") if column == "id" else (f"{value} in column {column!r}",
                                                                               "numbers")
                raise ValueError(f"{chunk.unit} {number}: {what} would be read as the float "
                                 f"{float(value)!r} (the column also holds fractions, negative {kind} or {kind} "
                                 f"beyond 64 bits, so it is read as floats); write the {kind} as strings "
                                 f'("{value}") to keep them exactly.')


def not_an_id(value: Any) -> str | None:
    """What is wrong with ``value`` as a row's id, in words: NaN or an infinity names no row (it
    equals no other id, and a JSON score file cannot hold it); None for any other value.

    Example:
        >>> not_an_id(float("nan")), not_an_id(7)
        ('the id NaN is not a number (NaN and infinities name no row); give the row an id.', None)
    """
    if isinstance(value, float) and not math.isfinite(value):
        return f"the id {json.dumps(value)} is not a number (NaN and infinities name no row); give the row an id."
    return None


def _check_finite_ids(files: list[Path]) -> None:
    """Raise a ValueError naming the file and row of the first NaN or infinite id of Parquet shards
    whose ``id`` column holds floats (each shard's id column read alone)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in files:
        with _naming(file, "parquet"):
            types = _parquet_types(file)
            if "id" not in types.names or not pa.types.is_floating(types.field("id").type):
                continue
            with open_data_file(file) as handle:
                _check_id_column(pq.read_table(handle, columns=["id"]).column("id"), "of the file")


def _check_dataset_ids(dataset: Dataset) -> None:
    """Raise a ValueError naming the first row of ``dataset`` whose id is NaN or an infinity."""
    import pyarrow as pa

    if "id" in dataset.column_names and pa.types.is_floating(dataset.data.schema.field("id").type):
        _check_id_column(dataset.data.column("id"), "of the data")


def _check_id_column(ids: pa.ChunkedArray, where: str) -> None:
    """Raise a ValueError naming (``Row 3 {where}``) the first NaN or infinity of a column of float ids."""
    import pyarrow.compute as pc

    bad = pc.index(pc.fill_null(pc.is_finite(ids), True), False).as_py()
    if bad >= 0:
        raise ValueError(f"Row {bad} {where}: {not_an_id(ids[bad].as_py())}")


def _with_exact_columns(dataset: Dataset | IterableDataset,
                        exact: Mapping[str, pa.Array]) -> Dataset | IterableDataset:
    """``dataset`` (as the loader read it) with each column of ``exact``, read as floats, replaced by
    its values there, unsigned 64-bit integers (:func:`_exact_columns`)."""
    import pyarrow as pa
    from datasets import Dataset, Features, Value

    if not exact:
        return dataset
    features = Features({**dataset.features, **{column: Value("uint64") for column in exact}})
    if not isinstance(dataset, Dataset):
        return dataset.map(lambda batch, indices: {column: values.slice(indices[0] if indices else 0, len(indices))
                                                   .to_pylist() for column, values in exact.items()},
                           with_indices=True, batched=True, features=features)
    digest = hashlib.sha256(dataset._fingerprint.encode())
    table = dataset.data
    for column, values in exact.items():
        digest.update(column.encode() + b"\0")
        for buffer in values.buffers():
            digest.update(b"" if buffer is None else buffer)
        table = table.set_column(dataset.column_names.index(column), pa.field(column, pa.uint64()),
                                 pa.chunked_array([values]))
    info = dataset.info.copy()
    info.features = features
    return Dataset(table, info=info, split=dataset.split, fingerprint=digest.hexdigest()[:32])


def _holds_text(feature: Any) -> bool:
    """Whether a column of ``feature`` can hold ``""``: text or nulls only."""
    return getattr(feature, "dtype", None) in ("string", "large_string", "null")


def _with_ids(dataset: Dataset | IterableDataset) -> Dataset | IterableDataset:
    """Null ids in a column that can hold text read as ``""``; a column of other values (integers)
    keeps its type and its nulls, which :func:`written_id` writes as ``""``. Data without an ``id``
    column gets none: a job names its rows by their number (:func:`row_id`)."""
    from datasets import Features, IterableDataset, Value

    if isinstance(dataset, IterableDataset):
        features = dataset.features
        if features is None:
            return dataset.map(_filled_ids, batched=True, with_indices=True)
        if "id" in features and getattr(features["id"], "dtype", None) in ("float16", "float32", "float64"):
            return dataset.map(_filled_ids, batched=True, with_indices=True, features=features)
        if "id" not in features or not _holds_text(features["id"]):
            return dataset
        return dataset.map(_filled_ids, batched=True, with_indices=True,
                           features=Features({**features, "id": Value("string")}))
    if "id" not in dataset.column_names:
        return dataset
    _check_dataset_ids(dataset)
    if _holds_text(dataset.features["id"]) and dataset.data.column("id").null_count:
        return dataset.map(lambda row: {"id": "" if row["id"] is None else row["id"]}, desc="Filling missing ids")
    return dataset


def _filled_ids(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
    """A batch's text ids, ``""`` for a null one (nothing for a batch without ids or of other ids); a
    NaN or infinite id is a ValueError naming its row (of a stream, read as the rows are scored)."""
    if "id" not in batch:
        return {}
    for index, value in zip(indices, batch["id"], strict=True):
        if (problem := not_an_id(value)) is not None:
            raise ValueError(f"Row {index} of the data: {problem}")
    if not all(value is None or isinstance(value, str) for value in batch["id"]):
        return {}
    return {"id": ["" if value is None else value for value in batch["id"]]}


def row_id(row: Mapping[str, Any], index: int) -> Any:
    """A row's id as a job writes it: its ``id`` field, or, for a row without one, its row number
    ``index`` (its 0-based position in the data), so that every row of a score file is named and
    can be joined to its data.

    Example:
        >>> row_id({"id": "a7", "text": "Hi."}, 3), row_id({"text": "Hi."}, 3)
        ('a7', 3)
    """
    return row["id"] if "id" in row else index


def row_ids(dataset: Dataset) -> list[Any]:
    """Every row's id as :func:`row_id` gives it: the ``id`` column, else the row numbers."""
    return dataset["id"] if "id" in dataset.column_names else list(range(len(dataset)))


def written_id(value: Any) -> Any:
    """A row's id as a JSON score file holds it: a null id as ``""`` (as a row without one gets),
    any other as :func:`~hf_adapters.files.json_values.to_json_value` gives it. Score files are written,
    and joined to their data, with it.

    A whole number in a column of floats (``2`` among ``1.5``) is written as the integer it is
    (``2``, not ``2.0``): a float id is a whole number only where it was one, exactly (an integer
    id a float would change is refused when the data is read).

    Example:
        >>> written_id(None), written_id(7), written_id(b"id-7"), written_id(2.0), written_id(1.5)
        ('', 7, 'id-7', 2, 1.5)
    """
    if value is None:
        return ""
    return int(value) if isinstance(value, float) and value.is_integer() else to_json_value(value)


def data_fingerprint(source: str | Path, split: str | None = None) -> str:
    """What identifies the data ``source`` names (as :func:`read_rows` reads it): a SHA-256 of its
    files' bytes with their relative paths (a file, a folder of shards, a glob, a ``save_to_disk``
    folder: of a ``DatasetDict``, those of the split ``split`` names), or, for a data set on the hub,
    its id, split and commit.

    Local data is identified by content, never by modification times or cache locations, so every
    process on every node computes the same value, and only a real change of data changes it.
    """
    source = str(source)
    if is_saved_dataset(source):
        root = Path(source)
        folder = root / split if split is not None and (root / "dataset_dict.json").is_file() else root
        files = sorted(path for path in folder.rglob("*") if path.is_file())
    elif (shards := data_files(source)) is not None:
        files = shards[1]
    else:
        return f"hub:{source}:{split or 'train'}:{_hub_revision_of_dataset(source)}"
    digest = hashlib.sha256()
    for file, name in zip(files, _relative_names(files), strict=True):
        folder = Path(source).is_dir() or (is_url(source) and files[0] != source and not glob.has_magic(source))
        if len(files) > 1 or folder:
            digest.update(name.encode() + b"\0")
        with open_data_file(file) as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def _relative_names(files: list[Path]) -> list[str]:
    """Each file's path below the innermost folder holding them all, with ``/`` (URLs alike)."""
    if isinstance(files[0], RemoteFile):
        paths = [PurePosixPath(file.split("://", 1)[1]) for file in files]
    else:
        paths = [file.absolute() for file in files]
    root = Path(os.path.commonpath([str(path.parent) for path in paths]))
    return [PurePosixPath(os.path.relpath(path, root)).as_posix() for path in paths]


def _hub_revision_of_dataset(name: str) -> str | None:
    """The commit of a data set on the hub, if it can be asked."""
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(name, timeout=10).sha
    except Exception:  # unreachable, unknown or gated: the job is then identified by the id alone
        return None


def parse_jsonl(text: str, source: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects of the non-blank lines of ``text``, split on ``\n`` only (JSON Lines' rule:
    a text's U+2028 or U+0085, which JSON strings may hold raw, is no line's end); errors name the
    line (and ``source``)."""
    return list(jsonl_objects(text.split("\n"), source))


def jsonl_objects(lines: Iterable[str], source: str | None = None) -> Iterator[dict[str, Any]]:
    """The JSON objects of the non-blank ``lines`` (a text's, or an open file's, read as they come);
    errors name the line (and ``source``)."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}: " if source else ""
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}Line {number} is not valid JSON ({error.msg}): {line[:80]!r}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}Line {number} is JSON but not an object: {line[:80]!r}")
        yield row


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
