"""A scoring job's output: JSONL lines or Parquet shards, of ``{"id", "score"}`` or of the rows with
their score, written whole under a temporary name and then put in place."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .data_io import written_id
from .json_values import json_safe, to_json_value

#: The name of the score in an output record.
SCORE = "score"
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
    """

    kind: str = "jsonl"
    keep_columns: bool = False
    rows_per_shard: int = 1_000_000
    column_types: Any = None

    def __post_init__(self) -> None:
        if self.kind not in OUTPUT_FORMATS:
            raise ValueError(f"Unknown output format {self.kind!r}; valid formats: {list(OUTPUT_FORMATS)}")
        if not isinstance(self.rows_per_shard, int) or self.rows_per_shard < 1:
            raise ValueError(f"`rows_per_shard` must be a positive integer, got {self.rows_per_shard!r}.")

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


def records(scored: Iterable[Mapping[str, Any]], rows: Iterable[Mapping[str, Any]] | None) -> Iterator[dict]:
    """The output records in input order: ``{"id", "score"}`` from each scored record, or, given the
    rows (in the same order), each row with its ``score``."""
    if rows is None:
        yield from ({"id": record["id"], SCORE: record[SCORE]} for record in scored)
        return
    for record, row in zip(scored, rows, strict=True):
        yield {**row, SCORE: record[SCORE]}


def write_output(path: Path, output: OutputFormat, items: Iterable[dict], schema: Any = None) -> int:
    """Write the records to ``path`` (under a temporary name first, then renamed onto it) and return
    how many have a score. ``schema`` (a pyarrow schema) types the Parquet columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    valid = 0

    def counted(records_: Iterable[dict]) -> Iterator[dict]:
        nonlocal valid
        for record in records_:
            valid += record[SCORE] is not None
            yield record

    if output.kind == "jsonl":
        with open(temporary, "w", encoding="utf-8") as handle:
            for record in counted(items):
                if not output.keep_columns:  # a null id as "", as a row without one gets
                    record = {**record, "id": written_id(record["id"])}
                handle.write(json.dumps(json_safe(record), ensure_ascii=False, default=to_json_value) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    else:
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
        _write_shards(temporary, counted(items), output.rows_per_shard, schema)
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(temporary, path)
    return valid


def _write_shards(folder: Path, items: Iterator[dict], rows_per_shard: int, schema: Any) -> None:
    """Parquet shards of at most ``rows_per_shard`` rows, of ``schema``; without one, the first
    shard's types hold for all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shard, number = [], 0
    for item in items:
        shard.append(item)
        if len(shard) == rows_per_shard:
            schema = _write_shard(folder / SHARD_PATTERN.format(number), shard, schema, pa, pq)
            shard, number = [], number + 1
    if shard or number == 0:
        _write_shard(folder / SHARD_PATTERN.format(number), shard, schema, pa, pq)


def _write_shard(path: Path, shard: list[dict], schema: Any, pa, pq) -> Any:
    if schema is None:  # the ids' type as the first shard has it; the score is a float64 in every shard
        inferred = pa.Table.from_pylist(shard).schema
        schema = inferred.set(inferred.get_field_index(SCORE), pa.field(SCORE, pa.float64())) if shard else None
    table = pa.Table.from_pylist(shard, schema=schema)
    pq.write_table(table, path)
    return table.schema


def count_valid(path: Path, output: OutputFormat) -> int:
    """How many rows of a complete output have a score."""
    if output.kind == "jsonl":
        with open(path, encoding="utf-8") as handle:
            return sum(json.loads(line)[SCORE] is not None for line in handle)
    import pyarrow.parquet as pq

    columns = [pq.read_table(shard, columns=[SCORE]).column(SCORE) for shard in sorted(path.glob("part-*.parquet"))]
    return sum(len(column) - column.null_count for column in columns)
