"""The Ray engine's work on the workers: each block of rows read from its shard (:func:`read_blocks`, a
Ray Data task per shard), then scored and saved as its part by an actor (:class:`ScoreBlocks`).

Both are Ray Data UDFs for ``map_batches``, wired by :func:`hf_adapters.engines.ray.run_ray_scoring_job`.
A block travels from one to the other as one row (its part's name, the index of its first row in
the data, its rows as Arrow IPC bytes), so that however Ray cuts and joins its own blocks, a part
is always one whole block of the data. Every worker builds the job's scorer as the command does
(:class:`WorkerScorer`: the job's config through :meth:`~hf_adapters.engines.base.ScoringJob.build_scorer`,
after the command's plugin modules), so any scorer the command runs, a score set included, runs on
the workers unchanged.

Importing this module imports neither Ray nor torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.core.scored_rows import UndeclaredFieldError
from hf_adapters.core.wording import FULL_DISK
from hf_adapters.engines.chunks import score_chunk
from hf_adapters.engines.job_files import scored_record
from hf_adapters.engines.ray_parts import block_name, save_part
from hf_adapters.engines.ray_shards import ShardedData, block_tables
from hf_adapters.files.data_io import not_an_id
from hf_adapters.files.score_files import jsonl_line, records

if TYPE_CHECKING:
    import pyarrow as pa

    from hf_adapters.engines.base import ScoringJob
    from hf_adapters.scorers import RowScorer


@dataclass(frozen=True)
class WorkerScorer:
    """How a worker builds the job's scorer: it imports the ``plugins`` (``(module, where it was named)``,
    as :func:`~hf_adapters.core.plugins.plugin_modules` lists the command's ``--plugin`` and
    ``$HF_ADAPTERS_PLUGINS``), then builds the scorer of ``job`` as the command does."""

    job: ScoringJob
    plugins: tuple[tuple[str, str], ...] = ()

    def build(self) -> RowScorer:
        from hf_adapters.core.plugins import import_plugins

        import_plugins(self.plugins)
        return self.job.build_scorer()


def read_blocks(batch: pa.Table, *, data: ShardedData, rows_per_block: int, columns: Sequence[str]) -> Iterator[Any]:
    """Ray Data generator UDF: for each row of ``batch`` (a shard's number, ``shard``, and the rows of
    that shard where its blocks still to score start, ``starts``), one row per block: the name of
    its part, the index in the data of its first row, and its ``columns`` as the job reads them
    (:func:`~hf_adapters.engines.ray_shards.block_tables`), as Arrow IPC bytes."""
    import pyarrow as pa

    for item in batch.to_pylist():
        shard = data.shards[item["shard"]]
        for start, table in block_tables(data, shard, rows_per_block, item["starts"], columns):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            yield pa.table({"block": [block_name(shard, range(start, start + table.num_rows))],
                            "first_row": [shard.first_row + start], "rows": [sink.getvalue().to_pybytes()]})


class ScoreBlocks:
    """A Ray Data callable class (``map_batches(ScoreBlocks, batch_size=1, batch_format="pyarrow", ...)``):
    each actor builds the job's scorer (``scorer``, adapted to the data's ``data_columns``) and loads
    its model once; each call scores one block (a row of :func:`read_blocks`), ``rows_per_chunk`` rows
    at a time as the local engine scores a chunk
    (:func:`~hf_adapters.engines.chunks.score_chunk`), and saves the output records of its score
    ``columns`` (output -> column) as the block's part in ``work_dir``
    (:func:`~hf_adapters.engines.ray_parts.save_part`; Parquet of ``schema``). It returns the
    block's name, rows and valid scores, and, with ``check`` (a stream, not checked before), the
    error ``check_rows`` raised for a bad row, the block unsaved (as it does a scorer reading a field it
    does not declare); a part that a full disk (no space
    left, or the disk quota exceeded) left unsaved returns its OSError's errno, message and file
    name, which the command raises again as its own. ``threads`` sets torch's thread
    count (see :func:`~hf_adapters.engines.ray_columns.worker_threads`)."""

    def __init__(self, scorer: WorkerScorer, work_dir: str, data_columns: Sequence[str], columns: Mapping[str, str],
                 rows_per_chunk: int, schema: Any = None, check: bool = False, threads: int | None = None):
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.output = scorer.job.output_format
        self.scorer = scorer.build()
        self.scorer.use_columns(list(data_columns))
        self.scorer.prepare()
        self.work_dir, self.columns, self.rows_per_chunk = Path(work_dir), dict(columns), rows_per_chunk
        self.schema, self.check = schema, check

    def __call__(self, batch: pa.Table) -> pa.Table:
        import pyarrow as pa

        [block] = batch.column("block").to_pylist()
        [first_row] = batch.column("first_row").to_pylist()
        rows = pa.ipc.open_stream(batch.column("rows")[0].as_py()).read_all().to_pylist()
        if self.check:
            try:
                self.scorer.check_rows(rows, first_row)
            except ValueError as error:
                return _summary(block, 0, 0, str(error))
        if bad := next(((index, problem) for index, row in enumerate(rows, first_row)
                        if (problem := not_an_id(row.get("id"))) is not None), None):
            return _summary(block, 0, 0, f"Row {bad[0]} of the data: {bad[1]}")  # a source read unchecked
        cells = []
        try:
            for start in range(0, len(rows), self.rows_per_chunk):
                cells += score_chunk(self.scorer, rows[start:start + self.rows_per_chunk], first_row + start,
                                     self.columns)
        except UndeclaredFieldError as error:  # the command says it as the local engine does
            return _summary(block, 0, 0, str(error))
        names = list(self.columns.values())
        scored = (scored_record(row, index, values) for index, (row, values) in enumerate(zip(rows, cells, strict=True),
                                                                                         first_row))
        items = list(records(scored, rows if self.output.keep_columns else None, names))
        valid = sum(item[names[0]] is not None for item in items)
        if self.output.kind == "jsonl":
            content = "".join(jsonl_line(item, self.output) for item in items).encode()
        else:
            content = pa.Table.from_pylist(items, schema=self.schema)
        try:
            save_part(self.work_dir, block, self.output, content, len(rows), valid)
        except OSError as error:
            if error.errno not in FULL_DISK:
                raise
            return _summary(block, 0, 0, error.strerror, error.errno, error.filename)
        return _summary(block, len(rows), valid, None)


def _summary(block: str, rows: int, valid: int, error: str | None, errno: int | None = None,
             filename: str | None = None) -> pa.Table:
    """What a scored block tells the command: its rows and valid scores, or the ``error`` that left it
    unsaved (with the ``errno`` and ``filename`` of an OSError)."""
    import pyarrow as pa

    return pa.table({"block": [block], "rows": [rows], "valid": [valid], "error": pa.array([error], pa.string()),
                     "errno": pa.array([errno], pa.int64()),
                     "filename": pa.array([None if filename is None else str(filename)], pa.string())})
