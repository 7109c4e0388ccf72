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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.engines.job_files import CHECK_CHUNK_SIZE
from hf_adapters.files.data_io import (
    _check_csv,
    _check_finite_ids,
    _csv_options,
    _exact_ids,
    _innermost,
    _json_schema,
    _load_saved,
    _loader_options,
    _merged,
    _parquet_schema,
    _parquet_types,
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
    the schema of the rows as the job sees them (ids read exactly or filled), whether JSON ids are read
    exactly as unsigned 64-bit integers, and the shards in input order."""

    loader: str
    features: Features | None
    schema: pa.Schema
    exact_ids: bool
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
    columns (JSON), its rows, whether its ids read exactly as unsigned 64-bit integers (None: it has
    no numeric ids), and its first row that ``check_rows`` refuses (a one-row table, its index in the
    shard, its exact id where its ids read so)."""

    error: tuple[str, str] | None = None
    schema: Any = None
    rows: int = 0
    uint64_ids: bool | None = None
    bad_row: Any = None
    bad_index: int | None = None
    bad_id: Any = None


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
        rows, bad, smallest = 0, None, []
        if checker is None and loader in ("parquet", ARROW):
            rows = _stored_rows(loader, path)
        else:
            for table in shard_tables(loader, path, own, CHECK_CHUNK_SIZE):
                if checker is not None and bad is None and (found := _first_refused(checker, table)) is not None:
                    bad = (rows + found, table.slice(found, 1))
                smallest.append(_smallest_id(table))
                rows += table.num_rows
        ids_exact, exact = _reads_exact_ids(loader, path, own, smallest)
    except FileNotFoundError as error:
        return ShardReport(error=("missing", str(error)))
    except ValueError as error:
        return ShardReport(error=("value", str(error)))
    except Exception as error:  # noqa: BLE001 - what the datasets loader raises, worded as read_rows words it
        return ShardReport(error=("load", _innermost(error)))
    schema = own.arrow_schema if loader == "json" else None
    if bad is None:
        return ShardReport(schema=schema, rows=rows, uint64_ids=ids_exact)
    bad_id = exact[bad[0]].as_py() if exact is not None else None
    return ShardReport(schema=schema, rows=rows, uint64_ids=ids_exact, bad_row=bad[1], bad_index=bad[0],
                       bad_id=bad_id)


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


def _smallest_id(table: pa.Table) -> Any:
    """The smallest integer id of a table (None without integer ids)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "id" not in table.column_names or not pa.types.is_integer(table.schema.field("id").type):
        return None
    return pc.min(table.column("id")).as_py()


def _reads_exact_ids(loader: str, path: str, own: Features | None, smallest: Sequence[Any]) -> tuple[bool | None, Any]:
    """Whether the shard's ids would read exactly as unsigned 64-bit integers, as ``read_rows`` reads
    the ids of JSON shards whose ``id`` column holds floats (None where its ids are neither numbers nor
    nulls), and those ids where they are floats in this shard."""
    if loader != "json" or own is None or "id" not in own:
        return None, None
    kind = getattr(own["id"], "dtype", None)
    if kind in ("float16", "float32", "float64"):
        try:
            exact = _exact_ids([as_data_file(path)])
        except ValueError:  # an integer a float would change: the command names it, in shard order
            return False, None
        return exact is not None, exact
    if kind == "null":
        return True, None
    if kind is not None and kind.startswith(("int", "uint")):
        return all(value is None or value >= 0 for value in smallest), None
    return None, None


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
    floats = getattr(features.get("id"), "dtype", None) in ("float16", "float32", "float64")
    exact = loader == "json" and floats and _exact_everywhere(files, reports)
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


def _exact_everywhere(files: list[Path], reports: Sequence[ShardReport]) -> bool:
    """Whether the ids of JSON shards whose merged ``id`` column holds floats read exactly as unsigned
    64-bit integers in every shard; where one does not, ``read_rows``' own reading of them decides
    (and names the line of an integer id a float would change)."""
    if all(found.uint64_ids for found in reports):
        return True
    return _exact_ids(files) is not None


def rows_schema(schema: pa.Schema, exact_ids: bool) -> pa.Schema:
    """The schema of the rows as a job sees them, for a loader's ``schema``: ids read exactly as
    unsigned 64-bit integers, or, in a column that can hold text, as text (a missing one as ``""``)."""
    import pyarrow as pa

    if "id" not in schema.names:
        return schema
    index, stored = schema.get_field_index("id"), schema.field("id").type
    if exact_ids:
        return schema.set(index, pa.field("id", pa.uint64()))
    if pa.types.is_string(stored) or pa.types.is_large_string(stored) or pa.types.is_null(stored):
        return schema.set(index, pa.field("id", pa.string()))
    return schema


def as_job_reads(table: pa.Table, data: ShardedData, exact_ids: pa.Array | None = None) -> pa.Table:
    """A table of a shard's rows as the job sees them (:func:`rows_schema`): of the data set's types,
    its ids ``exact_ids`` where given, text ids' nulls as ``""``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from datasets.table import table_cast

    if data.features is not None and table.schema != data.features.arrow_schema:
        table = table_cast(table, data.features.arrow_schema)
    if "id" not in table.column_names:
        return table
    index, ids, wanted = table.column_names.index("id"), table.column("id"), data.schema.field("id").type
    if exact_ids is not None:
        return table.set_column(index, pa.field("id", wanted), exact_ids)
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
    exact = _exact_ids([as_data_file(shard.path)]) if data.exact_ids else None
    start = 0
    for table in shard_tables(data.loader, shard.path, data.features, rows_per_block):
        if not wanted:
            return
        if table.num_rows != min(rows_per_block, shard.rows - start):
            break
        if start in wanted:
            wanted.remove(start)
            ids = exact.slice(start, table.num_rows) if exact is not None else None
            yield start, as_job_reads(table, data, ids).select(list(columns))
        start += table.num_rows
    if wanted:
        raise ValueError(f"{shard.path} changed while the job ran: it had {shard.rows} rows when the job started. "
                         "Run the command again: the job then starts afresh on the new data.")


def refuse_row(data: ShardedData, shard: Shard, found: ShardReport, scorer: RowScorer) -> None:
    """Raise the error ``scorer.check_rows`` raises for the row the task reading ``shard`` found bad,
    named by its index in the whole data and its id as the job reads it."""
    exact = None
    if data.exact_ids:
        import pyarrow as pa

        exact = pa.array([found.bad_id], pa.uint64())
    row = as_job_reads(found.bad_row, data, exact).to_pylist()[0]
    index = shard.first_row + found.bad_index
    scorer.check_rows([row], index)
    raise ValueError(f"Row {index} cannot be scored: the scorer refused it on a worker.")  # where it takes it here
