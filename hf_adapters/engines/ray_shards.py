"""The data of a Ray job, read by Ray's workers, never by the command's own process: its shards, what
each holds, and each block of rows as the job reads it.

:func:`list_shards` names the shards where the command runs, without reading rows: the files of a
JSONL, JSON, CSV or Parquet source (a file, a folder or a glob, as
:func:`~hf_adapters.files.data_io.data_files` finds them), or the Arrow files of a ``save_to_disk``
folder or of a hub data set in ``datasets``' cache. :func:`plan_data` then has one Ray task per
shard read it through (:func:`report_shard`) as :func:`~hf_adapters.files.data_io.read_rows` reads a
source: its own checks (a bad line named by file and line), the types of its columns, its row count
and, unless the rows are streamed, every row checked with the scorer's ``check_rows``. The command
takes what the tasks found in shard order, so the first error it raises is the one ``read_rows`` and
the default engine raise; where the shards' types cannot go together, it runs ``read_rows``' own
check over the shards up to that one, which names the line. A worker reads each block of rows
(:func:`block_tables`) with the types of the whole data set, as the default engine sees the rows.

Importing this module imports neither Ray, ``datasets`` nor pyarrow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.engines.job_files import CHECK_CHUNK_SIZE
from hf_adapters.files.data_io import (
    _check_csv,
    _check_finite_ids,
    _csv_options,
    _exact_ids,
    _holds_long_integers,
    _innermost,
    _json_schema,
    _load_saved,
    _loader_options,
    _merged,
    _parquet_schema,
    _parquet_types,
    _reads_as_floats,
    data_files,
    is_saved_dataset,
    loader_pattern,
    parquet_rows,
    read_rows,
)
from hf_adapters.files.remote_files import as_data_file

if TYPE_CHECKING:
    import pyarrow as pa
    from datasets import Features

    from hf_adapters.engines.base import ScoringJob
    from hf_adapters.scorers import RowScorer

#: The loader name of the Arrow files ``datasets`` writes (a ``save_to_disk`` folder, its cache).
ARROW = "arrow"


@dataclass(frozen=True)
class Shard:
    """One file of the data: its path (absolute: every node reads it there), its rows, and the index
    in the whole data of its first row."""

    index: int
    path: str
    rows: int
    first_row: int

    def blocks(self, rows_per_block: int) -> list[range]:
        """Its rows (counted from its first) cut into blocks of ``rows_per_block`` rows, the last one shorter.

        Example:
            >>> Shard(0, "/data/a.jsonl", 10, 0).blocks(4)
            [range(0, 4), range(4, 8), range(8, 10)]
        """
        return [range(start, min(start + rows_per_block, self.rows)) for start in range(0, self.rows, rows_per_block)]


@dataclass(frozen=True)
class ShardedData:
    """How the workers read the data: the loader (``json``, ``csv``, ``parquet``, or :data:`ARROW`), the
    features it is given (the types of the whole data set; None for Arrow files, which hold theirs),
    the schema of the rows as the job sees them (ids read exactly or filled), the JSON columns read
    exactly as unsigned 64-bit integers (:func:`exact_columns`), and the shards in input order."""

    loader: str
    features: Features | None
    schema: pa.Schema
    exact_columns: tuple[str, ...]
    shards: tuple[Shard, ...]

    @property
    def rows(self) -> int:
        return sum(shard.rows for shard in self.shards)

    @property
    def column_names(self) -> list[str]:
        return list(self.schema.names)


@dataclass(frozen=True)
class ShardReport:
    """What the task reading a shard found: an error (``missing``, ``value`` or ``load`` for one the
    ``datasets`` loader raised, which the command words, and its message), else the types of its
    columns (JSON), its rows, whether it holds an integer of 16 digits or more, its columns of numbers
    or nulls whose values read exactly as unsigned 64-bit integers (:func:`_exact_in_shard`), and its
    first row that ``check_rows`` refuses (a one-row table, its index in the shard, its values of
    those columns, exactly)."""

    error: tuple[str, str] | None = None
    schema: Any = None
    rows: int = 0
    long_integers: bool = False
    uint64_columns: tuple[str, ...] = ()
    bad_row: Any = None
    bad_index: int | None = None
    bad_values: Mapping[str, Any] | None = None


def list_shards(data: str, split: str | None, streaming: bool) -> tuple[str, list[Path], Features | None]:
    """The loader, the shards (in input order, named as :func:`~hf_adapters.files.data_io.read_rows`
    names them) and, for Arrow files, their features: what ``read_rows`` would read for ``data``.
    Only a hub data set is read here (into ``datasets``' cache, where every node must see it); a
    stream of one is refused."""
    if is_saved_dataset(data):
        dataset = _load_saved(Path(data), split)
        return ARROW, _arrow_files(dataset), dataset.features
    shards = data_files(data)
    if shards is not None:
        return *shards, None
    if streaming:
        raise ValueError(f"--streaming with --engine ray reads files on the workers; {data!r} is a data set on the "
                         "hub, read here first: leave out --streaming (or download it and give its files).")
    dataset = read_rows(data, split=split)
    return ARROW, _arrow_files(dataset), dataset.features


def _arrow_files(dataset: Any) -> list[Path]:
    """The Arrow files holding a ``Dataset``'s rows, in order."""
    if dataset._indices is not None or not dataset.cache_files:
        raise ValueError("--engine ray reads a data set from its files; this one is held in memory or selects rows "
                         "of them: save it with save_to_disk and give that folder.")
    return [Path(file["filename"]) for file in dataset.cache_files]


def report_shard(loader: str, path: str, scorer: Any = None) -> ShardReport:
    """Read the shard at ``path`` through, as the default engine reads a source: its own checks and
    types, its rows and, given the job's ``scorer`` (a :class:`~hf_adapters.engines.ray_blocks.WorkerScorer`
    that builds it here), its first row the scorer refuses. Runs in a Ray task; what is wrong with the
    shard comes back in the report, for the command to raise in shard order."""
    checker = scorer.build() if scorer is not None else None
    try:
        own = _own_types(loader, as_data_file(path))
        if loader == "parquet":
            _check_finite_ids([as_data_file(path)])
        rows, bad, negative = 0, None, set()
        if checker is None and loader in ("parquet", ARROW):
            rows = _stored_rows(loader, path)
        else:
            for table in shard_tables(loader, path, own, CHECK_CHUNK_SIZE):
                if checker is not None and bad is None and (found := _first_refused(checker, table)) is not None:
                    bad = (rows + found, table.slice(found, 1))
                if loader == "json":
                    negative |= _negative_columns(table)
                rows += table.num_rows
        long_integers, exact = _exact_in_shard(loader, path, own, negative)
    except FileNotFoundError as error:
        return ShardReport(error=("missing", str(error)))
    except ValueError as error:
        return ShardReport(error=("value", str(error)))
    except Exception as error:  # noqa: BLE001 - what the datasets loader raises, worded as read_rows words it
        return ShardReport(error=("load", _innermost(error)))
    found = ShardReport(schema=own.arrow_schema if loader == "json" else None, rows=rows,
                        long_integers=long_integers, uint64_columns=tuple(exact))
    if bad is None:
        return found
    index, row = bad
    values = {column: (row.column(column) if read is None else read.slice(index, 1))[0].as_py()
              for column, read in exact.items()}
    return replace(found, bad_row=row, bad_index=index, bad_values=values)


def _stored_rows(loader: str, path: str) -> int:
    """The rows of a Parquet or Arrow file, as its metadata says."""
    if loader == ARROW:
        from datasets import Dataset

        return Dataset.from_file(path).num_rows
    return parquet_rows(as_data_file(path))


def _own_types(loader: str, path: Path) -> Features | None:
    """The features the loader reads one shard with, after ``read_rows``' own checks of it (a
    ValueError names the line): for JSON the types of all its lines, for CSV text; None for Parquet
    and Arrow files (the loader reads their own types)."""
    if loader == "json":
        return _loader_options(loader, [path])["features"]
    if loader == "csv":
        _check_csv(path)
        return _csv_options(path)["features"]
    return None


def shard_tables(loader: str, path: str, features: Features | None, batch_rows: int) -> Iterator[pa.Table]:
    """The rows of one shard as Arrow tables of ``batch_rows`` rows (the last one shorter), read by the
    ``datasets`` loader with ``features`` as :func:`~hf_adapters.files.data_io.read_rows` reads them
    (an Arrow file as ``datasets`` reads it)."""
    from datasets import Dataset, load_dataset

    if loader == ARROW:
        dataset = Dataset.from_file(path)
    else:
        options = {"keep_default_na": False} if loader == "csv" else {}
        dataset = load_dataset(loader, data_files=[loader_pattern(as_data_file(path))], split="train",
                               streaming=True, features=features, **options)
    yield from dataset.with_format("arrow").iter(batch_size=batch_rows)


def _first_refused(scorer: Any, table: pa.Table) -> int | None:
    """The index in ``table`` of its first row ``scorer.check_rows`` refuses; None where it takes them all."""
    rows = table.to_pylist()
    try:
        scorer.check_rows(rows)
    except ValueError:
        for index, row in enumerate(rows):
            try:
                scorer.check_rows([row], index)
            except ValueError:
                return index
    return None


def _negative_columns(table: pa.Table) -> set[str]:
    """The columns of signed integers of a table that hold a negative one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return {field.name for field in table.schema
            if pa.types.is_signed_integer(field.type) and (pc.min(table.column(field.name)).as_py() or 0) < 0}


def _exact_in_shard(loader: str, path: str, own: Features | None,
                    negative: set[str]) -> tuple[bool, dict[str, pa.Array | None]]:
    """Whether a JSON shard holds an integer of 16 digits or more, and its columns whose values would
    read exactly as unsigned 64-bit integers, as ``read_rows`` reads the JSON columns of floats of a
    data set (:func:`exact_columns`): its columns of nulls and of integers none of which is in
    ``negative`` (None: their values are the shard's own), and its columns of floats (the ``id``,
    others where the shard holds a long integer) with their values so read."""
    if loader != "json" or own is None:
        return False, {}
    file = as_data_file(path)
    long_integers = _holds_long_integers([file])
    exact: dict[str, pa.Array | None] = {}
    for column, feature in own.items():
        kind = getattr(feature, "dtype", None)
        if kind == "null" or (kind is not None and kind.startswith(("int", "uint")) and column not in negative):
            exact[column] = None
        elif _reads_as_floats({"features": own}, column) and (column == "id" or long_integers):
            try:
                values = _exact_ids([file], column)
            except ValueError:  # an integer a float would change: the command names it, in shard order
                continue
            if values is not None:
                exact[column] = values
    return long_integers, exact


def plan_data(ray: Any, job: ScoringJob, worker_scorer: Any,
              task_options: dict[str, Any]) -> tuple[ShardedData, tuple[Shard, ShardReport] | None]:
    """Read every shard of ``job``'s data on the cluster, one Ray task each (``task_options``: their
    resources and environment), and return how the workers read it (its types, ids and shards) and
    the shard holding the first row the job's scorer refuses, with its report (for
    :func:`refuse_row`; None where there is none). Unless the job streams (its rows are then checked
    as they are scored), every row is checked, with the scorer ``worker_scorer`` builds on the
    workers. Raises the error the default engine raises for the same data while reading it, and the
    first of them."""
    loader, files, features = list_shards(job.data, job.split, job.streaming)
    paths = [str(file.absolute()) for file in files]
    report = ray.remote(report_shard).options(**task_options)
    reports = ray.get([report.remote(loader, path, None if job.streaming else worker_scorer) for path in paths])
    for file, path, found in zip(files, paths, reports, strict=True):
        if found.error is not None:
            kind, message = found.error
            if kind == "load":
                where = files[0] if len(files) == 1 else job.data
                raise ValueError(f"Cannot read {str(where)!r} as {loader}: {message}")
            raise (FileNotFoundError if kind == "missing" else ValueError)(message.replace(path, str(file)))
    if loader == "json":
        features = _features(_json_types(files, [found.schema for found in reports]))
    elif loader == "csv":
        features = _csv_options(files[0])["features"]
    elif loader == "parquet":
        features = _features(_parquet_schema(files) or _parquet_types(files[0]))
    exact = exact_columns(loader, features, files, reports)
    shards, first_row = [], 0
    for index, (path, found) in enumerate(zip(paths, reports, strict=True)):
        shards.append(Shard(index, path, found.rows, first_row))
        first_row += found.rows
    data = ShardedData(loader, None if loader == ARROW else features, rows_schema(features.arrow_schema, exact),
                       exact, tuple(shards))
    refused = next(((shard, found) for shard, found in zip(shards, reports, strict=True) if found.bad_row is not None),
                   None)
    return data, refused


def _features(schema: pa.Schema) -> Features:
    from datasets import Features

    return Features.from_arrow_schema(schema)


def _json_types(files: list[Path], schemas: list[pa.Schema]) -> pa.Schema:
    """The types of JSON shards, each shard's own merged in order as ``read_rows`` merges them; where
    two cannot go together, ``read_rows``' own check over the shards up to that one, which raises
    naming the line (and is the answer, should it not)."""
    import pyarrow as pa

    fields = {field.name: field for field in schemas[0]}
    for count, schema in enumerate(schemas[1:], 2):
        if set(schema.names) != set(fields):
            return _json_schema(files[:count])
        for field in schema:
            if (merged := _merged(fields[field.name], field)) is None:
                return _json_schema(files[:count])
            fields[field.name] = merged
    return pa.schema(list(fields.values()))


def exact_columns(loader: str, features: Features, files: list[Path],
                  reports: Sequence[ShardReport]) -> tuple[str, ...]:
    """The columns of JSON shards read exactly as unsigned 64-bit integers, as ``read_rows`` reads them
    (:func:`~hf_adapters.files.data_io._exact_columns`): of those the data set's ``features`` hold
    as floats (the ``id``; the others where a shard holds an integer of 16 digits or more), each whose
    values read so in every shard; where a shard's do not, ``read_rows``' own reading of the column
    decides (and names the line of an integer a float would change)."""
    if loader != "json":
        return ()
    floats = [column for column in features if _reads_as_floats({"features": features}, column)]
    if not any(found.long_integers for found in reports):
        floats = [column for column in floats if column == "id"]
    return tuple(column for column in floats if all(column in found.uint64_columns for found in reports)
                 or _exact_ids(files, column) is not None)


def rows_schema(schema: pa.Schema, exact_columns: Sequence[str]) -> pa.Schema:
    """The schema of the rows as a job sees them, for a loader's ``schema``: the ``exact_columns`` as
    unsigned 64-bit integers; ids in a column that can hold text as text (a missing one as ``""``)."""
    import pyarrow as pa

    for column in exact_columns:
        schema = schema.set(schema.get_field_index(column), pa.field(column, pa.uint64()))
    if "id" not in schema.names or "id" in exact_columns:
        return schema
    index, stored = schema.get_field_index("id"), schema.field("id").type
    if pa.types.is_string(stored) or pa.types.is_large_string(stored) or pa.types.is_null(stored):
        return schema.set(index, pa.field("id", pa.string()))
    return schema


def as_job_reads(table: pa.Table, data: ShardedData, exact: Mapping[str, pa.Array] | None = None) -> pa.Table:
    """A table of a shard's rows as the job sees them (:func:`rows_schema`): of the data set's types,
    the values of its columns read exactly (:attr:`ShardedData.exact_columns`) those ``exact`` gives,
    text ids' nulls as ``""``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from datasets.table import table_cast

    if data.features is not None and table.schema != data.features.arrow_schema:
        table = table_cast(table, data.features.arrow_schema)
    for column, values in (exact or {}).items():
        table = table.set_column(table.column_names.index(column), data.schema.field(column), values)
    if "id" not in table.column_names or "id" in data.exact_columns:
        return table
    index, ids, wanted = table.column_names.index("id"), table.column("id"), data.schema.field("id").type
    if pa.types.is_string(wanted) and (ids.type != wanted or ids.null_count):
        return table.set_column(index, pa.field("id", wanted), pc.fill_null(ids.cast(wanted), ""))
    return table


def block_tables(data: ShardedData, shard: Shard, rows_per_block: int, blocks: Sequence[int],
                 columns: Sequence[str]) -> Iterator[tuple[int, pa.Table]]:
    """``(start, table)`` of each block of ``shard`` that starts at one of ``blocks`` (rows of the
    shard), its ``columns`` as the job reads them (:func:`as_job_reads`). The shard is read from its
    start to its last such block; a ValueError says that it no longer has the rows it had when the
    job started."""
    wanted = set(blocks)
    exact = {column: _exact_ids([as_data_file(shard.path)], column) for column in data.exact_columns
             if column in columns}
    start = 0
    for table in shard_tables(data.loader, shard.path, data.features, rows_per_block):
        if not wanted:
            return
        if table.num_rows != min(rows_per_block, shard.rows - start):
            break
        if start in wanted:
            wanted.remove(start)
            values = {column: read.slice(start, table.num_rows) for column, read in exact.items()}
            yield start, as_job_reads(table, data, values).select(list(columns))
        start += table.num_rows
    if wanted:
        raise ValueError(f"{shard.path} changed while the job ran: it had {shard.rows} rows when the job started. "
                         "Run the command again: the job then starts afresh on the new data.")


def refuse_row(data: ShardedData, shard: Shard, found: ShardReport, scorer: RowScorer) -> None:
    """Raise the error ``scorer.check_rows`` raises for the row the task reading ``shard`` found bad,
    named by its index in the whole data and its id as the job reads it."""
    import pyarrow as pa

    exact = {column: pa.array([found.bad_values[column]], pa.uint64()) for column in data.exact_columns}
    row = as_job_reads(found.bad_row, data, exact).to_pylist()[0]
    index = shard.first_row + found.bad_index
    scorer.check_rows([row], index)
    raise ValueError(f"Row {index} cannot be scored: the scorer refused it on a worker.")  # where it takes it here
