"""The Ray engine (``hf-adapters score --engine ray``, :class:`RayEngine`): score a data set into an
output file on a Ray cluster.

The rows are read and checked here, exactly as :func:`hf_adapters.engines.local.run_scoring_job` does, then
handed to Ray as Arrow tables that carry each row's index; a pool of actors scores them
(:mod:`hf_adapters.engines.ray_columns`) and this process writes the scores, in input order, with the
job's own writer: the output appears whole or not at all. Not resumable: a killed job starts
again from the first row (Ray retries failed tasks itself). A finished job is recorded as the
default engine records it: running it again (on either engine) does nothing.

Importing this module imports neither Ray nor torch: the command line's ``--help`` lists this engine's
options without them.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from hf_adapters.core.options import DEFAULT_BATCH_SIZE, non_negative_float, positive_int
from hf_adapters.engines.base import Engine, EngineError, ScoringJob
from hf_adapters.engines.job_files import (
    JobSummary,
    check_dataset,
    finished_job,
    iter_rows,
    job_manifest,
    output_schema,
    record_finished_job,
    score_schema,
    work_dir_for,
)
from hf_adapters.engines.ray_columns import ROW_COLUMN, add_ray_score_columns
from hf_adapters.files.json_values import json_safe, to_json_value
from hf_adapters.files.output_paths import check_output_path
from hf_adapters.files.score_files import SCORE, OutputFormat, records, write_output

if TYPE_CHECKING:
    from datasets import Dataset

#: Blocks (Ray's unit of work) per worker the rows are cut into, so that the workers share them out.
BLOCKS_PER_WORKER = 8
#: Most batches in one block.
MAX_BATCHES_PER_BLOCK = 64
#: The level of Ray's C++ logs (``trace`` ... ``fatal``), read when Ray connects.
BACKEND_LOG_LEVEL = "RAY_BACKEND_LOG_LEVEL"


class RayJobError(EngineError):
    """Scoring failed in a Ray worker (a model that does not load, an error in a batch)."""


@dataclass(frozen=True)
class RayEngine(Engine):
    """``--engine ray``: :func:`run_ray_scoring_job` on ``num_workers`` Ray actors with ``gpus_per_worker``
    GPUs each, on the cluster at ``address`` (see :func:`hf_adapters.engines.ray_cluster.connect`); not
    resumable.

    Example:
        >>> job = ScoringJob.plan({"name": "PPLScorer"}, data="rows.jsonl", output="ppl.jsonl")
        >>> print(RayEngine(num_workers=2).run(job))  # doctest: +SKIP
        1000 rows, 998 valid scores, 85.0 rows/s
    """

    name = "ray"
    summary = "a pool of Ray actors, each loading the model once"
    title = "Ray engine"
    description = ("score on a Ray cluster (pip install 'hf_adapters[ray]'): same rows, order and scores as the "
                   "default engine, but not resumable (a killed job starts again; Ray retries failed tasks itself)")

    num_workers: int = 1
    gpus_per_worker: float = 0
    address: str | None = None

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--num-workers", type=positive_int, default=None, metavar="N",
                           help="Ray actors scoring at once, each with its own copy of the model (default: 1)")
        group.add_argument("--gpus-per-worker", type=non_negative_float, default=None, metavar="G",
                           help="GPUs each Ray actor takes (default: 0, scoring on CPU); fractions share a GPU")
        group.add_argument("--ray-address", default=None, metavar="ADDRESS",
                           help="the cluster: its head's HOST:PORT (e.g. 10.0.0.1:6379) or auto (default: "
                           "$RAY_ADDRESS, else the cluster `ray start` runs on this machine, else a new local one)")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> RayEngine:
        return cls(args.num_workers or 1, args.gpus_per_worker or 0, args.ray_address)

    def run(self, job: ScoringJob) -> JobSummary:
        """Refuse what Ray cannot do (:meth:`check`), check the output and the scorer, read the rows and
        score them on Ray (:func:`run_ray_scoring_job`)."""
        from accelerate import PartialState

        self.check(job, PartialState().num_processes)
        job.check_output()
        job.build_scorer()  # an unknown scorer or output is refused before the data is read
        dataset = job.read_rows()
        return run_ray_scoring_job(dataset, job.config, job.output_path, num_workers=self.num_workers,
                                   gpus_per_worker=self.gpus_per_worker, address=self.address,
                                   progress=job.progress, output=job.with_stored_types().output_format,
                                   data_fingerprint=job.data_fingerprint(), overwrite=job.overwrite)

    @staticmethod
    def check(job: ScoringJob, num_processes: int = 1) -> None:
        """Refuse, before anything is read, a job the Ray engine cannot run: a stream, a ``device``
        (workers score on the GPUs they are given), or one started as ``num_processes`` > 1 processes
        of ``accelerate launch``."""
        if job.streaming:
            raise ValueError("--streaming does not apply to --engine ray: the rows are read and checked first, then "
                             "handed to Ray. Leave out --streaming (or use the default engine to stream).")
        if job.device is not None:
            raise ValueError("--device does not apply to --engine ray: its workers score on the GPUs "
                             "--gpus-per-worker gives them, else on CPU.")
        if num_processes > 1:
            raise ValueError(f"--engine ray runs from one process, not under accelerate launch ({num_processes} "
                             "processes): start the command directly; Ray spreads the work over its workers.")

    def interrupted_message(self, job: ScoringJob) -> str:
        return "Interrupted: nothing was saved (the Ray engine does not resume); the same command starts again."


def run_ray_scoring_job(
    dataset: Dataset,
    config: Mapping[str, Any],
    output_path: str | Path,
    *,
    num_workers: int = 1,
    gpus_per_worker: float = 0,
    address: str | None = None,
    progress: bool = True,
    output: OutputFormat | None = None,
    data_fingerprint: str | None = None,
    overwrite: bool = False,
) -> JobSummary:
    """Score every row of ``dataset`` with the scorer ``config`` names, on ``num_workers`` Ray actors
    with ``gpus_per_worker`` GPUs each, into ``output_path``: the same file, row for row, as
    :func:`~hf_adapters.engines.local.run_scoring_job` writes (JSONL ``{"id", "score"}`` in input order;
    ``output`` chooses Parquet shards, the rows' own columns and more of the scorer's outputs).

    Connects to the Ray cluster at ``address`` (see :func:`hf_adapters.engines.ray_cluster.connect`; a local
    one it starts stops at the end). Every row is checked before Ray starts; an unreachable cluster
    or workers it cannot place are a ``RayClusterError`` (a ValueError), a failure in a worker a
    :class:`RayJobError`. Nothing is written under ``output_path`` until every row is scored. With
    ``progress``, one bar counts the rows as they come back (Ray Data's own bars and logs are off).
    Rows without an ``id`` are written with their row number. ``data_fingerprint`` identifies the
    data (default: ``dataset._fingerprint``): a job whose output is already complete (from either
    engine) and unchanged is not run again (the summary says ``skipped``) unless ``overwrite``.

    Example:
        >>> from hf_adapters.files.data_io import read_rows
        >>> from hf_adapters.engines.ray import run_ray_scoring_job
        >>> config = {"name": "PPLScorer", "batch_size": 8}
        >>> print(run_ray_scoring_job(read_rows("rows.jsonl"), config, "scores.jsonl", num_workers=2))  # doctest: +SKIP
        1000 rows, 998 valid scores, 85.0 rows/s
    """
    from hf_adapters.engines.ray_cluster import ray_session
    from hf_adapters.scorers import build_scorer

    started = time.perf_counter()
    output = output or OutputFormat()
    output_path = Path(output_path)
    check_output_path(output_path, folder=output.kind == "parquet")
    if work_dir_for(output_path).exists():
        raise ValueError(f"{work_dir_for(output_path)} holds the partial results of a job run without Ray; finish "
                         "it (rerun it without --engine ray) or remove that folder first.")
    scorer = build_scorer(config)
    dataset = dataset.with_format(None)
    columns = output.columns_of(scorer.outputs)
    scorer.use_columns(dataset.column_names)
    # A model that cannot be found fails here, before Ray starts.
    manifest = job_manifest(scorer, data_fingerprint or dataset._fingerprint, len(dataset),
                            int(scorer.config.get("batch_size") or DEFAULT_BATCH_SIZE), columns)
    if not overwrite and (finished := finished_job(output_path, output, manifest)) is not None:
        return JobSummary(*finished, time.perf_counter() - started, 0, skipped=True)
    check_dataset(dataset, scorer, output, columns)
    schema = output_schema(dataset, output, score_schema(scorer, columns))
    with _backend_errors_hidden(), ray_session(address) as ray:
        _hide_ray_progress(ray, progress)
        cells = tqdm(scores_on_ray(ray, dataset, scorer, config, num_workers, gpus_per_worker, columns),
                     total=len(dataset), unit="row", desc="Scoring", disable=not progress)
        items = ({"id": to_json_value(id_value), **row} for id_value, row in zip(_ids(dataset), cells, strict=True))
        rows = iter_rows(dataset) if output.keep_columns else None
        try:
            valid = write_output(output_path, output, records(items, rows, list(columns.values())), schema)
        except ray.exceptions.RayError as error:
            raise RayJobError(f"Scoring failed in a Ray worker: {worker_error(error)}") from None
    record_finished_job(output_path, output, manifest, len(dataset), valid)
    return JobSummary(len(dataset), valid, time.perf_counter() - started, len(dataset))


def scores_on_ray(ray: Any, dataset: Dataset, scorer: Any, config: Mapping[str, Any], num_workers: int,
                  gpus_per_worker: float, columns: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """Each row's score ``columns`` (output -> column), in input order, as Ray's actors return them:
    the rows go to Ray as Arrow blocks of the columns the scorer reads (and ``id``), scored lazily as
    the caller iterates."""
    if not len(dataset):
        return iter(())
    batch_size = int(scorer.config.get("batch_size") or DEFAULT_BATCH_SIZE)
    shipped = [column for column in dict.fromkeys([*scorer.source_columns, "id"]) if column in dataset.column_names]
    blocks = list(arrow_blocks(dataset.select_columns(shipped), num_workers, batch_size))
    scored = add_ray_score_columns(ray.data.from_arrow(blocks), config, num_workers=num_workers,
                                   gpus_per_worker=gpus_per_worker, names=columns, keep_columns=False)
    return ordered_columns(scored, len(dataset), list(columns.values()))


def arrow_blocks(dataset: Dataset, num_workers: int, batch_size: int) -> Iterator[Any]:
    """The rows as Arrow tables of whole batches, each with a :data:`ROW_COLUMN` of the rows' indices:
    about ``BLOCKS_PER_WORKER`` per worker, at most ``MAX_BATCHES_PER_BLOCK`` batches each."""
    import pyarrow as pa

    batches = math.ceil(len(dataset) / (batch_size * num_workers * BLOCKS_PER_WORKER))
    rows_per_block = batch_size * min(max(batches, 1), MAX_BATCHES_PER_BLOCK)
    arrow = dataset.with_format("arrow")
    for start in range(0, len(dataset), rows_per_block):
        stop = min(start + rows_per_block, len(dataset))
        yield arrow[start:stop].append_column(ROW_COLUMN, pa.array(range(start, stop), pa.int64()))


def ordered_scores(scored: Any, num_rows: int) -> Iterator[float | None]:
    """The ``score`` of each row of the Ray data set ``scored``, as the job writes it (NaN or inf as
    None), checked to come back in input order."""
    return (row[SCORE] for row in ordered_columns(scored, num_rows, [SCORE]))


def ordered_columns(scored: Any, num_rows: int, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The ``columns`` of each row of the Ray data set ``scored``, as the job writes them (``score`` a
    float; NaN or inf, in lists too, as None), checked to come back in input order."""
    expected = 0
    for table in scored.iter_batches(batch_format="pyarrow", batch_size=None):
        indices = table.column(ROW_COLUMN).to_pylist()
        if indices != list(range(expected, expected + len(indices))):
            raise RuntimeError(f"Ray returned the rows out of order (row {indices[0]} where {expected} was due).")
        expected += len(indices)
        values = [[_cell(column, value) for value in table.column(column).to_pylist()] for column in columns]
        yield from (dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True))
    if expected != num_rows:
        raise RuntimeError(f"Ray returned {expected} rows of {num_rows}.")


def _cell(column: str, value: Any) -> Any:
    """A value as the job writes it: the score as a float, NaN or inf (in lists too) as None."""
    if column == SCORE and value is not None:
        value = float(value)
    return json_safe(value)


def worker_error(error: BaseException) -> str:
    """What went wrong in a worker, in one line: the last ``SomeError: message`` line of Ray's report
    that is not one of Ray's own exceptions (Ray Data raises a worker's exception again as
    ``ray.exceptions.UserCodeException``, whose line comes last), else Ray's exception and the
    report's first line (a worker that died)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [line for line in lines if _names_an_exception(line) and not line.startswith("ray.")]
    if causes:
        return causes[-1]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _names_an_exception(line: str) -> bool:
    """Whether ``line`` reads ``SomeError: message`` (or ``package.SomeException: message``)."""
    name, separator, _ = line.partition(": ")
    return bool(separator) and " " not in name and name.rpartition(".")[2].endswith(("Error", "Exception"))


def _ids(dataset: Dataset) -> Iterator[Any]:
    """Each row's id, as the job writes it (its row number for data without ids, as
    :func:`~hf_adapters.files.data_io.row_id` gives it)."""
    if "id" not in dataset.column_names:
        return iter(range(len(dataset)))
    return (row["id"] for row in iter_rows(dataset.select_columns(["id"])))


def _hide_ray_progress(ray: Any, progress: bool) -> None:
    """Turn off Ray Data's progress bars (the job draws its own, of rows: Ray's count blocks of an
    unknown total, ``0/?``, and without a terminal are logged every 10 s instead) and its execution
    plans; without ``progress``, its warnings and errors too (a failure is told by the job's own error)."""
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING if progress else logging.CRITICAL)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "Progress bars disabled..."


@contextlib.contextmanager
def _backend_errors_hidden() -> Iterator[None]:
    """Keep the C++ log of this process's Ray core worker (and of a local cluster it starts) to fatal
    errors while Ray is used, unless ``RAY_BACKEND_LOG_LEVEL`` says otherwise: Ray Data's actor pool
    logs an error-level line on every run (its workers' constructor arguments are in the object
    store, ray-project/ray#57733) that stops nothing. A worker's failure still stops the job with
    its own message (:class:`RayJobError`)."""
    given = os.environ.get(BACKEND_LOG_LEVEL)
    os.environ.setdefault(BACKEND_LOG_LEVEL, "fatal")
    try:
        yield
    finally:
        if given is None:
            os.environ.pop(BACKEND_LOG_LEVEL, None)

