"""A scoring job's output: JSONL lines or Parquet shards, of ``{"id", "score"}`` (and the other outputs
of the scorer asked for) or of the rows with their scores, written whole under a temporary name and
then put in place."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_adapters.files.data_io import written_id
from hf_adapters.files.json_values import json_safe, to_json_value

#: The name of the score in an output record: the scorer's first output.
SCORE = "score"
#: Names an output column cannot take: the id's, and the row index's in a job's part files.
RESERVED_COLUMNS = ("i", "id", SCORE)
#: The formats a job writes.
OUTPUT_FORMATS = ("jsonl", "parquet")
#: The name of each Parquet shard in an output folder.
SHARD_PATTERN = "part-{:05d}.parquet"


@dataclass(frozen=True)
class OutputFormat:
    """How a job writes its output.

    Attributes:
        kind: ``"jsonl"`` (one line per row, in input order) or ``"parquet"`` (a folder of shards
            ``part-00000.parquet``, ... in input order).
        keep_columns: write each row's own columns beside its score (else its ``id`` and ``score``).
        rows_per_shard: most rows in one Parquet shard.
        column_types: a pyarrow schema of the rows' columns as their source stores them, for the types
            ``datasets`` does not keep (a Parquet dictionary column reads as plain strings); a kept column
            it names is written with its type.
        score_columns: the scorer's outputs written beside ``score`` (its first output), each under its
            own name: ``"all"`` of them, a sequence of their names, or None (only ``score``).
    """

    kind: str = "jsonl"
    keep_columns: bool = False
    rows_per_shard: int = 1_000_000
    column_types: Any = None
    score_columns: str | Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in OUTPUT_FORMATS:
            raise ValueError(f"Unknown output format {self.kind!r}; valid formats: {list(OUTPUT_FORMATS)}")
        if not isinstance(self.rows_per_shard, int) or self.rows_per_shard < 1:
            raise ValueError(f"`rows_per_shard` must be a positive integer, got {self.rows_per_shard!r}.")
        if self.score_columns is not None and self.score_columns != "all":
            names = self.score_columns
            if not (isinstance(names, (list, tuple)) and all(isinstance(name, str) and name for name in names)):
                raise ValueError(f"`score_columns` must be all or a list of the scorer's output names, got {names!r}.")
            object.__setattr__(self, "score_columns", tuple(names))

    def columns_of(self, outputs: Sequence[str], named: Sequence[str] = ()) -> dict[str, str]:
        """The column of each output written, for a scorer of ``outputs``: the first as ``score`` (or,
        for a score set, each of its members' first outputs, ``named``, under its own name), then those
        ``score_columns`` asks for, under their own names. A ValueError names an output the scorer does
        not have."""
        first = list(named) or [outputs[0]]
        asked = list(outputs) if self.score_columns == "all" else list(self.score_columns or ())
        if unknown := [name for name in asked if name not in outputs]:
            written = "are written under their own names" if named else f"is written as `{SCORE}`"
            raise ValueError(f"The scorer has no output {', '.join(map(repr, unknown))}; its outputs are "
                             f"{', '.join(outputs)} (the first{'s of its members' if named else ''} {written}).")
        extra = [name for name in dict.fromkeys(asked) if name not in first]
        if reserved := [name for name in [*extra, *named] if name in RESERVED_COLUMNS]:
            raise ValueError(f"The output {reserved[0]!r} cannot be a column beside the id and the score.")
        heads = {name: name for name in named} if named else {outputs[0]: SCORE}
        return {**heads, **{name: name for name in extra}}

    def is_complete(self, path: Path) -> bool:
        """Whether ``path`` holds an output of this format."""
        return path.is_dir() if self.kind == "parquet" else path.is_file()


def check_parquet_folder(path: Path) -> None:
    """Refuse a Parquet output folder that holds anything but this format's shards (a folder of
    other files, or a file): replacing it would destroy them."""
    if path.is_file():
        raise ValueError(f"The output {path} is a file; Parquet output is a folder of shards.")
    if path.is_dir() and (others := [entry.name for entry in path.iterdir() if not _is_shard(entry)]):
        raise ValueError(f"The output folder {path} holds other files ({', '.join(sorted(others)[:3])}); "
                         "refusing to replace it. Choose a new or empty folder.")


def _is_shard(entry: Path) -> bool:
    return entry.is_file() and entry.name.startswith("part-") and entry.suffix == ".parquet"


def records(scored: Iterable[Mapping[str, Any]], rows: Iterable[Mapping[str, Any]] | None,
            columns: Sequence[str] = (SCORE,)) -> Iterator[dict]:
    """The output records in input order: the ``id`` and ``columns`` of each scored record, or, given
    the rows (in the same order), each row with those ``columns``."""
    if rows is None:
        yield from ({"id": record["id"], **{column: record[column] for column in columns}} for record in scored)
        return
    for record, row in zip(scored, rows, strict=True):
        yield {**row, **{column: json_safe(record[column]) for column in columns}}


def jsonl_line(record: Mapping[str, Any], output: OutputFormat) -> str:
    """A record's line in a JSONL output. Without the rows' columns: its id as
    :func:`~hf_adapters.files.data_io.written_id` writes it (a null one as ``""``, a whole float as
    an integer) and its scores, NaN and infinities as null. With them (:func:`records`' rows, whose
    scores are null where missing): every value as it was read, a NaN or infinity of the data as
    the tokens ``NaN``, ``Infinity``, ``-Infinity`` that Python's ``json`` (and pyarrow's reader)
    reads back, a whole float id as an integer.

    Example:
        >>> jsonl_line({"id": None, "score": float("nan")}, OutputFormat())
        '{"id": "", "score": null}\\n'
        >>> jsonl_line({"id": 2.0, "x": float("nan"), "score": None}, OutputFormat(keep_columns=True))
        '{"id": 2, "x": NaN, "score": null}\\n'
    """
    if not output.keep_columns:
        record = json_safe({**record, "id": written_id(record["id"])})
    elif "id" in record and record["id"] is not None:
        record = {**record, "id": written_id(record["id"])}
    return json.dumps(record, ensure_ascii=False, default=to_json_value) + "\n"


def write_output(path: Path, output: OutputFormat, items: Iterable[dict], schema: Any = None,
                 score_column: str = SCORE) -> int:
    """Write the records to ``path`` (under a temporary name first, then renamed onto it; a failure
    removes it) and return how many have a score (in ``score_column``). ``schema`` (a pyarrow schema) types the Parquet
    columns: all of them, or, without the rows' columns, the id and the score columns (any column
    it leaves out takes the first shard's type)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    try:
        return _write_output(path, temporary, output, items, schema, score_column)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True) if temporary.is_dir() else temporary.unlink(missing_ok=True)
        raise


def _write_output(path: Path, temporary: Path, output: OutputFormat, items: Iterable[dict], schema: Any,
                  score_column: str) -> int:
    valid = 0

    def counted(records_: Iterable[dict]) -> Iterator[dict]:
        nonlocal valid
        for record in records_:
            valid += record[score_column] is not None
            yield record

    if output.kind == "jsonl":
        with open(temporary, "w", encoding="utf-8") as handle:
            for record in counted(items):
                handle.write(jsonl_line(record, output))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    else:
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
        _write_shards(temporary, counted(items), output.rows_per_shard, schema, scores_only=not output.keep_columns)
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(temporary, path)
    return valid


def _write_shards(folder: Path, items: Iterator[dict], rows_per_shard: int, schema: Any, scores_only: bool) -> None:
    """Parquet shards of at most ``rows_per_shard`` rows, of ``schema``; where it types only the id
    and score columns (``scores_only``) or there is none, the first shard's types complete it for all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shard, number = [], 0
    for item in items:
        shard.append(item)
        if len(shard) == rows_per_shard:
            schema = _write_shard(folder / SHARD_PATTERN.format(number), shard, schema, scores_only, pa, pq)
            shard, number, scores_only = [], number + 1, False
    if shard or number == 0:
        _write_shard(folder / SHARD_PATTERN.format(number), shard, schema, scores_only, pa, pq)


def _write_shard(path: Path, shard: list[dict], schema: Any, scores_only: bool, pa, pq) -> Any:
    if schema is None or scores_only:  # the ids' type as the first shard has it
        schema = _with_inferred_types(shard, schema or pa.schema([pa.field(SCORE, pa.float64())]), pa)
    table = pa.Table.from_pylist(shard, schema=schema)
    pq.write_table(table, path)
    return table.schema


def _with_inferred_types(shard: list[dict], given: Any, pa) -> Any:
    """The types of a shard's columns: those ``given`` names as it says, the others (an id of nested
    values) as the shard's values have them; None for no rows."""
    if not shard:
        return None
    names = list(shard[0])
    missing = [name for name in names if name not in given.names]
    inferred = pa.Table.from_pylist([{name: record[name] for name in missing} for record in shard]).schema
    return pa.schema([given.field(name) if name in given.names else inferred.field(name) for name in names])


def count_valid(path: Path, output: OutputFormat, score_column: str = SCORE) -> int:
    """How many rows of a complete output have a score (in ``score_column``)."""
    if output.kind == "jsonl":
        with open(path, encoding="utf-8") as handle:
            return sum(json.loads(line)[score_column] is not None for line in handle)
    import pyarrow.parquet as pq

    columns = [pq.read_table(shard, columns=[score_column]).column(score_column)
               for shard in sorted(path.glob("part-*.parquet"))]
    return sum(len(column) - column.null_count for column in columns)
