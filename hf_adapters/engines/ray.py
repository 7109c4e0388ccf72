"""The Ray engine (``hf-adapters score --engine ray``, :class:`RayEngine`): score a data set into an
output file on a Ray cluster, the rows read and the scores written by the workers; resumable.

The command's own process (Ray's driver) reads no row and holds no score:

1. Ray tasks, one per shard, read the data through with the default engine's checks and types
   (:mod:`hf_adapters.engines.ray_shards`): the same errors, in the same order, and, unless
   ``--streaming``, every row checked with the scorer before any is scored. The driver only merges
   what they found: each shard's types and row count.
2. Ray Data reads each shard on the workers in blocks of ``rows_per_block`` rows, and a pool of
   actors scores each block and writes it as a part file in the output's work folder, named by
   shard file and row range (:mod:`hf_adapters.engines.ray_blocks`, :mod:`hf_adapters.engines.ray_parts`).
   The driver counts the rows for the progress bar.
3. The driver merges the parts, one at a time, into the file the default engine writes (JSONL, or
   Parquet shards of ``rows_per_shard`` rows), or, with ``file_per_block``, makes the parts
   themselves the Parquet output; it appears whole or not at all.

Killed at any point (the driver, a worker, a node) and run again, the job skips the parts already
written, after the local engine's identity checks (model, options, data fingerprint, score
columns) and a check that this run writes the records as the parts hold them (the format, the
rows' own columns or not, the score columns' order; else it is refused, naming the option): its
output is the file of an uninterrupted run, byte for byte where the scores are deterministic: on a
CPU with ``HF_ADAPTERS_CPU_LINEAR`` pinning the kernel, on a GPU with ``--compile on|off`` and
``--max-batch-tokens`` given (each worker measures its own token budget and ``compile=auto``
choice, and no run records them, so a rerun's workers may choose otherwise). Ray also replaces a worker that dies
during the run. With ``--streaming`` each block's rows are checked just before they are scored,
not all first. A finished job is recorded as the default engine records it: running it again (on
either engine) does nothing, unless it asks for the other Parquet layout (``file_per_block`` or
not), which is refused, naming the flag.

The data must be files every node reads at the same path, and the output's folder one every node
writes (a local cluster, or shared storage); a hub data set is read into ``datasets``' cache first.

Importing this module imports neither Ray nor torch: the command line's ``--help`` lists this engine's
options without them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from hf_adapters.core.options import non_negative_float, positive_int
from hf_adapters.core.scored_rows import declared_fields, default_save_every
from hf_adapters.engines.base import Engine, EngineError, ScoringJob
from hf_adapters.engines.job_files import (
    FILE_PER_BLOCK,
    PARTS,
    JobSummary,
    check_dataset,
    finished_in_other_layout,
    finished_job,
    job_manifest,
    output_schema,
    part_layout,
    score_schema,
)
from hf_adapters.engines.ray_parts import (
    ENGINE,
    block_name,
    finished_parts,
    merge_parts,
    part_files,
    work_folder,
)
from hf_adapters.files.score_files import OutputFormat

if TYPE_CHECKING:
    from hf_adapters.engines.ray_blocks import WorkerScorer
    from hf_adapters.engines.ray_shards import ShardedData
    from hf_adapters.engines.work_folder import WorkFolder
    from hf_adapters.scorers import RowScorer

logger = logging.getLogger(__name__)

#: Most rows per block, where the command does not say: the unit of work of a worker, and of resuming.
DEFAULT_ROWS_PER_BLOCK = 4096
#: Blocks per worker a job of few rows is cut into, at least, so that the workers share them out.
BLOCKS_PER_WORKER = 8
#: The level of Ray's C++ logs (``trace`` ... ``fatal``), read when Ray connects.
BACKEND_LOG_LEVEL = "RAY_BACKEND_LOG_LEVEL"


class RayJobError(EngineError):
    """Scoring failed in a Ray worker (a model that does not load, an error in a batch)."""


@dataclass(frozen=True)
class RayEngine(Engine):
    """``--engine ray``: :func:`run_ray_scoring_job` on ``num_workers`` Ray actors with ``gpus_per_worker``
    GPUs each, on the cluster at ``address`` (see :func:`hf_adapters.engines.ray_cluster.connect`), in
    blocks of ``rows_per_block`` rows (None: :func:`default_rows_per_block`; a resumed job keeps its own), the
    workers importing the ``plugins`` first; with ``file_per_block``, a Parquet output is a file per
    block. Resumable.

    Example:
        >>> job = ScoringJob.plan({"name": "PPLScorer"}, data="rows.jsonl", output="ppl.jsonl")
        >>> print(RayEngine(num_workers=2).run(job))  # doctest: +SKIP
        1000 rows, 998 valid scores, 85.0 rows/s
    """

    name = "ray"
    summary = "a pool of Ray actors, each loading the model once; the workers read the data and write the output"
    title = "Ray engine"
    description = ("score on a Ray cluster (pip install 'hf_adapters[ray]'): same rows, order and scores as the "
                   "default engine; the workers read the shards and write a part per block of rows into OUTPUT.parts, "
                   "which the command merges; resumable (the same command skips the blocks already written)")

    num_workers: int = 1
    gpus_per_worker: float = 0
    address: str | None = None
    rows_per_block: int | None = None
    file_per_block: bool = False
    plugins: tuple[tuple[str, str], ...] = ()

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--num-workers", type=positive_int, default=None, metavar="N",
                           help="Ray actors scoring at once, each with its own copy of the model (default: 1)")
        group.add_argument("--gpus-per-worker", type=non_negative_float, default=None, metavar="G",
                           help="GPUs each Ray actor takes (default: 0, scoring on CPU); fractions share a GPU")
        group.add_argument("--ray-address", default=None, metavar="ADDRESS",
                           help="the cluster: its head's HOST:PORT (e.g. 10.0.0.1:6379) or auto (default: "
                           "$RAY_ADDRESS, else the cluster `ray start` runs on this machine, else a new local one)")
        group.add_argument("--rows-per-block", type=positive_int, default=None, metavar="N",
                           help="rows of a shard each worker call scores and writes as one part file: the unit of "
                           f"resuming (default: {BLOCKS_PER_WORKER} blocks per worker, at most "
                           f"{DEFAULT_ROWS_PER_BLOCK:,} rows; a resumed job keeps its own)")
        group.add_argument("--file-per-block", action="store_true", default=None,
                           help="with --output-format parquet: leave the output as the workers wrote it, one Parquet "
                           "file per block (part-SHARD-FILE-FIRST-STOP.parquet, in input order by name), as Ray "
                           "Data's write_parquet does, instead of merging them into --rows-per-shard shards")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> RayEngine:
        from hf_adapters.core.plugins import plugin_modules

        return cls(args.num_workers or 1, args.gpus_per_worker or 0, args.ray_address, args.rows_per_block,
                   bool(args.file_per_block), tuple(plugin_modules(getattr(args, "plugin", None))))

    def run(self, job: ScoringJob) -> JobSummary:
        """Refuse what Ray cannot do (:meth:`check`), check the output and the scorer, and score the
        rows on Ray (:func:`run_ray_scoring_job`)."""
        from hf_adapters.core.processes import process_state

        self.check(job, process_state().num_processes)
        if self.file_per_block and job.output_format.kind != "parquet":
            raise ValueError("--file-per-block: only with --output-format parquet (a JSONL output is one file).")
        job.check_output(parts=part_files(job.output_format))
        job.build_scorer()  # an unknown scorer or output is refused before Ray starts
        return run_ray_scoring_job(job, num_workers=self.num_workers, gpus_per_worker=self.gpus_per_worker,
                                   address=self.address, rows_per_block=self.rows_per_block,
                                   file_per_block=self.file_per_block, plugins=self.plugins)

    @staticmethod
    def check(job: ScoringJob, num_processes: int = 1) -> None:
        """Refuse, before anything is read, a job the Ray engine cannot run: a ``device`` (workers
        score on the GPUs they are given), or one started as ``num_processes`` > 1 processes of
        ``accelerate launch``."""
        if job.device is not None:
            raise ValueError("--device does not apply to --engine ray: its workers score on the GPUs "
                             "--gpus-per-worker gives them, else on CPU.")
        if num_processes > 1:
            raise ValueError(f"--engine ray runs from one process, not under accelerate launch ({num_processes} "
                             "processes): start the command directly; Ray spreads the work over its workers.")

    def interrupted_message(self, job: ScoringJob) -> str:
        """The rows saved in the job's work folder, and that the same command resumes."""
        return self.stopped_message(job, "Interrupted")

    def stopped_message(self, job: ScoringJob, stopped: str) -> str:
        return work_folder(job.output_path).stopped_line(stopped)


def run_ray_scoring_job(job: ScoringJob, *, num_workers: int = 1, gpus_per_worker: float = 0,
                        address: str | None = None, rows_per_block: int | None = None, file_per_block: bool = False,
                        plugins: Sequence[tuple[str, str]] = ()) -> JobSummary:
    """Score every row of ``job`` on ``num_workers`` Ray actors with ``gpus_per_worker`` GPUs each, into
    its output: the file :func:`~hf_adapters.engines.local.run_scoring_job` writes, row for row (with
    ``file_per_block``, a Parquet output is a file per block instead). The workers read the data in
    blocks of ``rows_per_block`` rows and write a part per block into the output's work folder;
    they import the ``plugins`` (``(module, where it was named)``) before building the scorer.

    Connects to the Ray cluster at ``address`` (see :func:`hf_adapters.engines.ray_cluster.connect`; a
    local one it starts stops at the end). An unreachable cluster or workers it cannot place are a
    ``RayClusterError`` (a ValueError); the data's errors are the default engine's ValueErrors; a
    failure in a worker is a :class:`RayJobError`. Rerun after a kill, it resumes; a job whose output
    is already complete (from either engine) and unchanged is not run again (the summary says
    ``skipped``) unless ``job.overwrite``. With ``job.progress``, one bar counts the rows as the
    workers save them (Ray Data's own bars and logs are off).

    Example:
        >>> from hf_adapters.engines import ScoringJob
        >>> from hf_adapters.engines.ray import run_ray_scoring_job
        >>> job = ScoringJob.plan({"name": "PPLScorer", "batch_size": 8}, data="rows.jsonl", output="scores.jsonl")
        >>> print(run_ray_scoring_job(job, num_workers=2))  # doctest: +SKIP
        1000 rows, 998 valid scores, 85.0 rows/s
    """
    from hf_adapters.engines.ray_blocks import WorkerScorer
    from hf_adapters.engines.ray_cluster import check_resources, ray_session
    from hf_adapters.engines.ray_shards import plan_data, refuse_row

    started = time.perf_counter()
    output = job.with_stored_types().output_format
    scorer = job.build_scorer()
    columns = output.columns_of(scorer.outputs, scorer.named_outputs)
    on_cpu = not gpus_per_worker and scorer.runs_model
    workers = WorkerScorer(dataclasses.replace(job, device="cpu" if on_cpu else None, output_format=output),
                           tuple(plugins))
    with _backend_errors_hidden(), ray_session(address) as ray:
        check_resources(num_workers, gpus_per_worker)
        _hide_ray_progress(ray, job.progress)
        environment = _runtime_environment(plugins)
        tasks = {"num_cpus": 1, **({"runtime_env": environment} if environment else {})}
        with _worker_errors(ray):
            fingerprint = _data_fingerprint(ray, job, tasks)
            planned = {**job_manifest(scorer, fingerprint, None, None, columns), FILE_PER_BLOCK: file_per_block}
            if not job.overwrite and (finished := finished_job(job.output_path, output, planned)) is not None:
                return JobSummary(*finished, time.perf_counter() - started, 0, skipped=True)
            if not job.overwrite and (refusal := finished_in_other_layout(job.output_path, output, planned)):
                raise ValueError(refusal)
            data, refused = plan_data(ray, job, workers, tasks)
        check_dataset(_no_rows(data), scorer, output, columns)
        if refused is not None:
            refuse_row(data, *refused, scorer)
        chunk = default_save_every("cuda" if gpus_per_worker else "cpu")
        manifest = {**job_manifest(scorer, fingerprint, data.rows, None, columns), "engine": ENGINE,
                    "rows_per_block": rows_per_block or default_rows_per_block(data.rows, num_workers, chunk),
                    "rows_per_chunk": chunk, PARTS: part_layout(output, columns), FILE_PER_BLOCK: file_per_block}
        run = _Run(ray, job, output, data, columns, _part_schema(data, output, scorer, columns), workers,
                   num_workers, gpus_per_worker, environment, file_per_block)
        folder = work_folder(job.output_path)
        with folder.locked():
            try:
                return run.resume(folder, manifest, scorer, started)
            except BaseException:
                folder.discard_if_nothing_saved()
                raise


def default_rows_per_block(rows: int, num_workers: int, rows_per_chunk: int) -> int:
    """Rows per block of a job that does not say: :data:`BLOCKS_PER_WORKER` blocks per worker at least,
    in whole chunks of ``rows_per_chunk`` rows (those the local engine scores together), and at
    most :data:`DEFAULT_ROWS_PER_BLOCK` rows. A resumed job keeps its own, whatever its workers.

    Example:
        >>> default_rows_per_block(160, 2, 16), default_rows_per_block(200_000, 2, 16)
        (16, 4096)
    """
    per_block = -(-rows // (num_workers * BLOCKS_PER_WORKER))
    return min(max(-(-per_block // rows_per_chunk) * rows_per_chunk, rows_per_chunk), DEFAULT_ROWS_PER_BLOCK)


@dataclass(frozen=True)
class _Run:
    """One run of a Ray job, its data planned and its work folder locked."""

    ray: Any
    job: ScoringJob
    output: OutputFormat
    data: ShardedData
    columns: dict[str, str]
    schema: Any
    workers: WorkerScorer
    num_workers: int
    gpus_per_worker: float
    environment: dict[str, Any]
    file_per_block: bool

    def resume(self, folder: WorkFolder, manifest: dict[str, Any], scorer: RowScorer, started: float) -> JobSummary:
        """Open the work folder (fresh, resumed or complete), score the blocks that have no part yet and
        merge the parts into the output."""
        work_dir, output_path = folder.path, self.job.output_path
        decision, in_force = folder.open(manifest, self.output, self.job.overwrite)
        if decision == "complete":
            rows, valid = folder.clean_up_complete(in_force, self.output, next(iter(self.columns.values())))
            return JobSummary(rows, valid, time.perf_counter() - started, 0)
        blocks = [(shard, block, block_name(shard, block)) for shard in self.data.shards
                  for block in shard.blocks(in_force["rows_per_block"])]
        names = [name for _, _, name in blocks]
        done = finished_parts(work_dir, names, self.output)
        todo: dict[int, list[int]] = {}
        for shard, block, name in blocks:
            if name not in done:
                todo.setdefault(shard.index, []).append(block.start)
        already = sum(rows for rows, _ in done.values())
        if todo:
            self.score_blocks(todo, in_force, scorer, already)
            done = finished_parts(work_dir, names, self.output)
        if missing := [name for name in names if name not in done]:
            raise RuntimeError(f"{len(missing)} block(s) have no part in {work_dir}, the first {missing[0]}.")
        valid = sum(found for _, found in done.values())
        merge_parts(work_dir, output_path, self.output, names, self.schema, self.data.rows, self.file_per_block)
        folder.finish(self.output, {**in_force, FILE_PER_BLOCK: self.file_per_block}, self.data.rows, valid)
        return JobSummary(self.data.rows, valid, time.perf_counter() - started, self.data.rows - already)

    def score_blocks(self, todo: Mapping[int, list[int]], manifest: Mapping[str, Any], scorer: RowScorer,
              already: int) -> None:
        """Read and score the blocks ``todo`` (shard number -> rows where its blocks start) on Ray: a read
        task per shard, a pool of scoring actors, each block written as its part."""
        from hf_adapters.engines.ray_blocks import ScoreBlocks, read_blocks
        from hf_adapters.engines.ray_columns import remote_arguments_allowed, scoring_actors, worker_threads

        ray, data = self.ray, self.data
        shipped = data.column_names if self.output.keep_columns else \
            [column for column in data.column_names if column in declared_fields(scorer)]
        items = [{"shard": index, "starts": starts} for index, starts in todo.items()]
        shards = ray.data.from_items(items, override_num_blocks=len(items))
        shards.context.target_max_block_size = 1  # each block of rows a block of Ray's, whatever its size
        remote = {"runtime_env": self.environment} if self.environment else {}
        with remote_arguments_allowed():
            blocks = shards.map_batches(read_blocks, batch_size=1, batch_format="pyarrow", num_cpus=0,
                                        fn_kwargs={"data": data, "rows_per_block": manifest["rows_per_block"],
                                                   "columns": shipped}, **remote)
            scored = blocks.map_batches(
                ScoreBlocks, batch_size=1, batch_format="pyarrow",
                fn_constructor_kwargs={"scorer": self.workers, "work_dir": str(work_folder(self.job.output_path).path),
                                       "data_columns": data.column_names, "columns": self.columns,
                                       "rows_per_chunk": manifest["rows_per_chunk"], "schema": self.schema,
                                       "check": self.job.streaming, "threads": worker_threads(self.gpus_per_worker)},
                **scoring_actors(ray, self.num_workers, self.gpus_per_worker, self.environment))
            bar = tqdm(total=data.rows - already, unit="row", desc="Scoring", disable=not self.job.progress)
            with bar, _worker_errors(ray):
                for summary in scored.iter_rows():
                    if summary["errno"] is not None:  # a full disk: the command says so, and the rows saved
                        raise OSError(summary["errno"], summary["error"], summary["filename"])
                    if summary["error"] is not None:
                        raise ValueError(summary["error"])
                    bar.update(summary["rows"])


def _no_rows(data: ShardedData) -> Any:
    """A ``Dataset`` without rows, of the data's columns and types: what the default engine's checks of
    the columns and its output schema read."""
    from datasets import Dataset, Features

    return Dataset.from_dict({name: [] for name in data.column_names}, features=Features.from_arrow_schema(data.schema))


def _part_schema(data: ShardedData, output: OutputFormat, scorer: RowScorer, columns: Mapping[str, str]) -> Any:
    """The Parquet schema of the output's records (:func:`~hf_adapters.engines.job_files.output_schema`),
    with the data's own type for ids of nested values (each part is written alone); None for JSONL.
    Keeping the rows' columns, the records are the rows': an ``id`` only where the data has one."""
    import pyarrow as pa

    schema = output_schema(_no_rows(data), output, score_schema(scorer, columns))
    if schema is None or output.keep_columns or "id" in schema.names:
        return schema
    return pa.schema([data.schema.field("id") if "id" in data.column_names else pa.field("id", pa.int64()), *schema])


def _data_fingerprint(ray: Any, job: ScoringJob, tasks: Mapping[str, Any]) -> str:
    """What identifies the job's data (:meth:`ScoringJob.data_fingerprint`): for files, a hash of their
    bytes, computed by a Ray task (the command's machine reads no row); for a hub data set, its commit."""
    from hf_adapters.files.data_io import data_files, data_fingerprint, is_saved_dataset
    from hf_adapters.files.remote_files import is_url

    if not (is_saved_dataset(job.data) or data_files(job.data) is not None):
        return job.data_fingerprint()
    data = job.data if is_url(job.data) else os.path.abspath(job.data)
    return ray.get(ray.remote(data_fingerprint).options(**tasks).remote(data, job.split))


def _runtime_environment(plugins: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The workers' ``runtime_env``: this process's settings that change scores or speed
    (:func:`~hf_adapters.engines.ray_columns.worker_environment`), and, first on their ``PYTHONPATH``,
    the folders of the plugin modules that are not installed packages (a module of one's own, in a
    folder every node sees at the same path), so that the workers import them as this process did."""
    from hf_adapters.engines.ray_columns import worker_environment

    variables = worker_environment()
    folders = []
    for module, _ in plugins:
        top = sys.modules.get(module.partition(".")[0])
        path = getattr(top, "__file__", None)
        if path is None or {"site-packages", "dist-packages"} & set(Path(path).parts):
            continue
        folder = str(Path(path).parent.parent if hasattr(top, "__path__") else Path(path).parent)
        if folder not in folders:
            folders.append(folder)
    if folders:
        variables["PYTHONPATH"] = os.pathsep.join([*folders, "${PYTHONPATH}"])  # Ray expands the node's own
    return {"env_vars": variables} if variables else {}


@contextlib.contextmanager
def _worker_errors(ray: Any) -> Iterator[None]:
    """Turn a failure in a Ray worker into a :class:`RayJobError` that says it in one line."""
    try:
        yield
    except ray.exceptions.RayError as error:
        raise RayJobError(f"Scoring failed in a Ray worker: {worker_error(error)}") from None


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
