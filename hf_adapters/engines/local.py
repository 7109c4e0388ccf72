"""The local engine (``hf-adapters score``'s default, :class:`LocalEngine`): score a whole data set with
a row scorer in this process, or sharded over accelerate's processes; crash-safe, resumable.

A job writing ``OUTPUT`` keeps its progress in its work folder, ``OUTPUT.parts/``
(:class:`~hf_adapters.engines.work_folder.WorkFolder`: the lock process 0 holds while the job runs,
the manifest with the chunk size the job started with, ``complete.json``), and in it
``choices.json`` (what process 0's backend chose by measuring on its first chunk, such as the CPU
kernel of the float32 products, or on a GPU the token budget and whether the body is compiled: the
other processes wait for them and make the same, and so does a rerun, so that a resumed file is the
file of an uninterrupted run) and one append-only part per
process (:mod:`hf_adapters.engines.local_parts`). The rows are cut into chunks once, when the job
starts, of ``save_every`` rows (``--save-every``; default
:func:`~hf_adapters.core.scored_rows.default_save_every`: 16 on the CPU, 4,096 on an accelerator);
the batch size has no say in it. A chunk's rows are scored together (the backend batches them as it
likes) and saved together. Each run splits the chunks still to do into contiguous runs, one per
process, so a job may resume with any number of processes, any batch size and any ``save_every``
(none of them changes a score beyond float rounding; a resumed job keeps its first chunks, so that
its file is that of an uninterrupted run). When every chunk is done, process 0 merges them in input
order into ``OUTPUT.tmp`` (JSONL, or a folder of Parquet shards), renames that onto ``OUTPUT`` and
records the job as complete (:meth:`~hf_adapters.engines.work_folder.WorkFolder.finish`): running
the same job again finds its output unchanged and does nothing (:attr:`JobSummary.skipped`);
``overwrite`` scores it again.

A stream (an ``IterableDataset``) has no length and no random access: every process reads it from
the start, in chunks, scores the chunks that are its own (chunk number modulo the number of
processes) and are not done yet, and checks each chunk's rows just before scoring it. Process 0
writes the row count to ``rows.json`` when it reaches the end (before its last, partial chunk),
so the merge, and a rerun, know where the data ends.

A job asked for more of the scorer's outputs (``OutputFormat.score_columns``) writes each of them in
every line of its parts, under its own name, and records their columns in the manifest
(``columns``): a rerun asking for other columns is another job. Reading the data as a stream or not
is no part of the job: a job started one way resumes the other.

Importing this module imports neither torch nor ``datasets`` (the command line's ``--help`` lists this
engine): the functions import what they run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.core.console import progress_bar
from hf_adapters.core.options import positive_int
from hf_adapters.core.processes import process_state
from hf_adapters.core.scored_rows import ACCELERATOR_SAVE_EVERY, CPU_SAVE_EVERY, default_save_every, device_type_of
from hf_adapters.engines.base import Engine, ScoringJob
from hf_adapters.engines.chunks import score_chunk
from hf_adapters.engines.job_files import (
    JobSummary,
    check_dataset,
    column_names,
    finished_in_other_layout,
    finished_job,
    is_stream,
    job_manifest,
    manifest_columns,
    output_schema,
    read_json,
    rows_of,
    score_schema,
)
from hf_adapters.engines.local_parts import (
    LAYOUT,
    PART_FILES,
    chunk_rows,
    done_marker,
    merge_parts,
    part_line,
    part_path,
    recover,
    saved_in_parts,
)
from hf_adapters.engines.work_folder import CHOICES, JobConflictError, WorkFolder
from hf_adapters.files.json_values import write_atomically
from hf_adapters.files.output_paths import check_output_path
from hf_adapters.files.run_folder import append_durably
from hf_adapters.files.score_files import OutputFormat

if TYPE_CHECKING:
    from accelerate import PartialState
    from datasets import Dataset, IterableDataset

    from hf_adapters.scorers import RowScorer

logger = logging.getLogger(__name__)

#: Seconds between looks at the other processes' progress while waiting for them.
POLL_SECONDS = 0.5


class LocalEngine(Engine):
    """``--engine local`` (the default): :func:`run_scoring_job` in this process, or in each process of
    ``accelerate launch`` (one shard each, on one node or several); resumable.

    Example:
        >>> job = ScoringJob.plan({"name": "PPLScorer"}, data="rows.jsonl", output="ppl.jsonl")
        >>> print(LocalEngine().run(job))  # doctest: +SKIP
        1000 rows, 998 valid scores, 41.5 rows/s
    """

    name = "local"
    summary = "this process, or each process accelerate launch starts, on one node or several, resumable"
    title = "local engine options"
    description = "for --engine local (the default)"

    def __init__(self, save_every: int | None = None):
        #: Rows scored and saved together (None: :func:`default_save_every` of the job's device).
        self.save_every = save_every

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--save-every", type=positive_int, default=None, metavar="ROWS",
                           help=f"save progress every ROWS rows, scored together (default: {CPU_SAVE_EVERY} on the "
                           f"CPU, {ACCELERATOR_SAVE_EVERY:,} on a GPU); scores do not depend on it beyond float "
                           "rounding, and a resumed job keeps the chunks it started with")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> LocalEngine:
        return cls(args.save_every)

    def run(self, job: ScoringJob) -> JobSummary:
        """Check the output and the scorer, read the rows (process 0 of each node first, filling
        ``datasets``' cache) and score them (:func:`run_scoring_job`); every process returns the summary."""
        state = process_state()
        job.check_output(parts=PART_FILES)
        scorer = job.build_scorer()
        with state.local_main_process_first():
            dataset = job.read_rows()
        fingerprint = _from_main_process(job.data_fingerprint() if state.is_main_process else None, state)
        expected = job.expected_rows() if job.streaming and state.is_main_process else None
        return run_scoring_job(dataset, scorer, job.output_path, overwrite=job.overwrite, progress=job.progress,
                               data_fingerprint=fingerprint, output=job.with_stored_types().output_format,
                               expected_rows=expected, save_every=self.save_every)

    def interrupted_message(self, job: ScoringJob) -> str:
        """The rows saved in the job's work directory, and that the same command resumes."""
        return self.stopped_message(job, "Interrupted")

    def stopped_message(self, job: ScoringJob, stopped: str) -> str:
        return _work_folder(job.output_path).stopped_line(stopped)


@dataclass(frozen=True)
class _Plan:
    """What a run writes and shows: the output, the columns of the scorer's outputs in it (output ->
    column) and its Parquet schema, whether to show progress and, for a stream, how many rows to expect."""

    output_path: Path
    output: OutputFormat
    columns: dict[str, str]
    schema: Any
    progress: bool
    expected_rows: int | None


def saved_rows(output_path: str | Path) -> tuple[int, int | None]:
    """How many rows the job writing ``output_path`` has saved (the rows of the complete chunks in its
    part files; all of them once its output is complete), and how many rows its data has (None for a
    stream whose end no process has reached yet). ``(0, None)`` before the job has a manifest."""
    return _work_folder(output_path).saved_rows()


def _work_folder(output_path: str | Path) -> WorkFolder:
    """The work folder of the local job writing ``output_path``: its rows counted in its parts."""
    return WorkFolder(Path(output_path), LocalEngine.name, saved_in_parts, LAYOUT)


def shard_range(num_rows: int, chunk_size: int, rank: int, world_size: int) -> range:
    """The rows process ``rank`` scores: a contiguous run of whole chunks, earlier ranks taking the remainder."""
    per_rank, extra = divmod(math.ceil(num_rows / chunk_size), world_size)
    first = rank * per_rank + min(rank, extra)
    last = first + per_rank + (rank < extra)
    return range(min(first * chunk_size, num_rows), min(last * chunk_size, num_rows))


def run_scoring_job(
    dataset: Dataset | IterableDataset,
    scorer: RowScorer,
    output_path: str | Path,
    *,
    overwrite: bool = False,
    progress: bool = True,
    data_fingerprint: str | None = None,
    output: OutputFormat | None = None,
    expected_rows: int | None = None,
    save_every: int | None = None,
) -> JobSummary:
    """Score every row of ``dataset`` into ``output_path`` (JSONL ``{"id": ..., "score": ...}`` in input
    order, NaN as ``null``; ``output`` chooses Parquet shards, the rows' own columns and more of the
    scorer's outputs), sharded over the processes of ``accelerate launch`` and resumable.

    Rerunning an interrupted job with the same arguments continues where it stopped and gives the
    same file as an uninterrupted run, whatever the number of processes or the batch size of the
    rerun, and whether it reads the data as a stream or not. Partial results of a different job
    (another scorer config or other data) raise a ``JobConflictError`` unless ``overwrite`` is set;
    an error or a stop before any row is saved leaves no work directory behind. Running a finished
    job again does nothing while its output is as the job wrote it (the summary says ``skipped``);
    ``overwrite`` scores it again (a Parquet output that ``--engine ray --file-per-block`` wrote as a
    file per block is a ValueError saying so, unless ``overwrite``). Rows without an ``id`` are written
    with their row number. ``data_fingerprint`` identifies the data (default: ``dataset._fingerprint``; a stream needs
    one); the command line passes a hash of the input files. Every row of a ``Dataset`` is checked
    with ``scorer.check_rows`` before any is scored; a stream's rows are checked chunk by chunk. The
    output appears only once complete. Every process returns the same summary. ``expected_rows``
    gives the progress bar of a stream its total (the stream's own end still decides where it ends).
    ``save_every`` rows are scored, then saved, together (default :func:`default_save_every` of the
    model's device: 16 on the CPU, 4,096 on an accelerator); it changes no score beyond float rounding
    (a chunk's rows are batched among themselves).

    Example:
        >>> from hf_adapters.files.data_io import read_rows
        >>> from hf_adapters.engines.local import run_scoring_job
        >>> from hf_adapters.scorers import build_scorer
        >>> scorer = build_scorer({"name": "PPLScorer", "batch_size": 8})  # doctest: +SKIP
        >>> print(run_scoring_job(read_rows("rows.jsonl"), scorer, "scores.jsonl"))  # doctest: +SKIP
        1000 rows, 998 valid scores, 41.5 rows/s
    """
    started = time.perf_counter()
    output = output or OutputFormat()
    output_path = Path(output_path)
    check_output_path(output_path, folder=output.kind == "parquet")
    state = process_state()
    streaming = is_stream(dataset)
    if streaming and data_fingerprint is None:
        raise ValueError("A stream has no fingerprint: pass `data_fingerprint` (what identifies its data) to make "
                         "the job resumable.")
    dataset = dataset if streaming else dataset.with_format(None)
    if save_every is not None and (isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 1):
        raise ValueError(f"`save_every` must be a positive whole number of rows, got {save_every!r}.")
    chunk_size = save_every or default_save_every(device_type_of(scorer, default=state.device.type))
    columns = output.columns_of(scorer.outputs, scorer.named_outputs)
    scorer.use_columns(column_names(dataset))
    manifest = job_manifest(scorer, data_fingerprint or dataset._fingerprint, None if streaming else len(dataset),
                            chunk_size, columns)
    found = None if overwrite or not state.is_main_process else \
        (finished_job(output_path, output, manifest), finished_in_other_layout(output_path, output, manifest))
    finished, refusal = _from_main_process(found, state) or (None, None)
    if refusal is not None:
        raise ValueError(refusal)
    if finished is not None:
        return JobSummary(*finished, time.perf_counter() - started, 0, skipped=True)
    check_dataset(dataset, scorer, output, columns)
    schema = output_schema(dataset, output, score_schema(scorer, columns))
    scorer.prepare()  # a model that fails to load leaves no work directory behind
    plan = _Plan(output_path, output, columns, schema, progress, expected_rows)
    folder = _work_folder(output_path)
    with _job_lock(folder, state):
        try:
            return _run_locked(dataset, scorer, plan, manifest, overwrite, started)
        except BaseException:
            if state.is_main_process:
                folder.discard_if_nothing_saved()
            raise


def _run_locked(dataset: Dataset | IterableDataset, scorer: RowScorer, plan: _Plan, manifest: dict[str, Any],
                overwrite: bool, started: float) -> JobSummary:
    state = process_state()
    folder = _work_folder(plan.output_path)
    decision, in_force = _open(folder, manifest, plan.output, overwrite, state)
    if decision == "complete":
        found = folder.clean_up_complete(in_force, plan.output, next(iter(plan.columns.values()))) \
            if state.is_main_process else None
        rows, valid = _from_main_process(found, state)
        return JobSummary(rows, valid, time.perf_counter() - started, 0)

    # Process 0 cuts every part back to its complete chunks and says which are done.
    chunk_size = in_force["chunk_size"]
    num_rows = _known_rows(folder, manifest)
    done = recover(folder.path, num_rows, chunk_size, manifest_columns(manifest)) if state.is_main_process else None
    done = _from_main_process(done, state)
    already = sum(len(chunk_rows(chunk, num_rows, chunk_size)) for chunk in done)
    if already and state.is_main_process:
        logger.info("resuming: %d of %s rows already scored", already, "?" if num_rows is None else num_rows)
    choices = read_json(folder.file(CHOICES)) or {}
    scorer.reuse_measured_choices(choices)  # the kernels that scored the done chunks score the rest
    state.wait_for_everyone()

    mine = _my_chunks(dataset, done, num_rows, chunk_size, folder, state)
    known = num_rows if num_rows is not None else plan.expected_rows
    bar = progress_bar(total=None if known is None else max(known - already, 0), unit="row",
                       disable=not (plan.progress and state.is_main_process),
                       desc="Scoring" if state.num_processes == 1 else f"Scoring (process 0 of {state.num_processes})")
    shared = state.num_processes == 1 or bool(choices)  # whether every process makes process 0's choices
    first = True
    with open(part_path(folder.path, state.process_index), "ab") as handle, bar:
        for start, rows in mine:
            if is_stream(dataset):
                scorer.check_rows(rows, start)
            if not shared and not state.is_main_process:  # wait for those process 0 makes on its first chunk
                choices, shared = _share_choices(scorer, choices, state), True
            if first and not choices and known is not None:
                _tell_job_size(scorer, rows, math.ceil(max(known - already, 0) / state.num_processes))
            first = False
            values = score_chunk(scorer, rows, start, plan.columns)
            if state.is_main_process and (made := scorer.measured_choices()) != choices:
                write_atomically(folder.file(CHOICES), json.dumps(made, sort_keys=True))  # before the scores
                choices = made
            append_durably(handle, b"".join(part_line(i, row, cells)
                                            for i, (row, cells) in enumerate(zip(rows, values, strict=True), start)))
            bar.update(len(rows))
            if not shared:  # process 0, its first chunk scored
                choices, shared = _share_choices(scorer, choices, state), True
    if not shared:  # a process with no chunk to score still takes part
        _share_choices(scorer, choices, state)
    done_marker(folder.path, state.process_index).touch()

    _wait_for_parts(folder.path, state.num_processes)
    num_rows = _known_rows(folder, manifest)
    valid = None
    if state.is_main_process:
        valid = merge_parts(folder.path, num_rows, chunk_size, dataset, plan.output_path, plan.output, plan.columns,
                            plan.schema)
        folder.finish(plan.output, in_force, num_rows, valid)
    valid = _from_main_process(valid, state)
    return JobSummary(num_rows, valid, time.perf_counter() - started, num_rows - already)


def _share_choices(scorer: RowScorer, choices: dict[str, Any], state: PartialState) -> dict[str, Any]:
    """Process 0's measured choices, made by every process's scorer (a collective: process 0 calls it after
    scoring its first chunk, the others before scoring theirs), so that every row is scored as process 0's."""
    choices = _from_main_process(choices, state)
    if not state.is_main_process:
        scorer.reuse_measured_choices(choices)
    return choices


def _tell_job_size(scorer: RowScorer, rows: list[dict[str, Any]], job_rows: int) -> None:
    """Tell the scorer's backends the tokens of the ``job_rows`` rows this process scores, from those of its
    first chunk's ``rows`` (:func:`~hf_adapters.engines.job_estimate.tell_job_tokens`), so that a choice made
    on the job's size (compiling) is final once made; where they cannot be counted, the chunk's scoring
    says why."""
    from hf_adapters.engines.job_estimate import tell_job_tokens

    try:
        tell_job_tokens(scorer, rows, job_rows)
    except Exception:  # noqa: BLE001 - the chunk's own scoring reports what is wrong with its rows
        logger.debug("The job's tokens could not be counted.", exc_info=True)


def _my_chunks(dataset: Dataset | IterableDataset, done: set[int], num_rows: int | None, chunk_size: int,
               folder: WorkFolder, state: PartialState) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(first row index, rows) of each chunk this process scores: of a ``Dataset``, a contiguous run of
    the chunks still to do; of a stream, read from the start, the chunks not done whose number modulo
    the process count is this process's rank (a JobConflictError where the stream has other than the
    ``num_rows`` rows the job started with in memory)."""
    if not is_stream(dataset):
        todo = [chunk for chunk in range(math.ceil(num_rows / chunk_size)) if chunk not in done]
        for chunk in (todo[i] for i in shard_range(len(todo), 1, state.process_index, state.num_processes)):
            span = chunk_rows(chunk, num_rows, chunk_size)
            yield span.start, rows_of(dataset, span.start, span.stop)
        return
    start = 0
    for chunk, batch in enumerate(dataset.iter(batch_size=chunk_size)):
        rows = [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]
        if num_rows is not None and start + len(rows) > num_rows:  # a job started on fewer rows
            raise JobConflictError(folder.refusal(f"the input data changed ({num_rows} rows before, more now)"))
        if len(rows) < chunk_size and state.is_main_process:  # the end: say where it is before scoring it
            folder.write_stream_rows(start + len(rows))
        if chunk not in done and chunk % state.num_processes == state.process_index:
            yield start, rows
        start += len(rows)
    if num_rows is not None and start != num_rows:
        raise JobConflictError(folder.refusal(f"the input data changed ({num_rows} rows before, {start} now)"))
    if state.is_main_process:
        folder.write_stream_rows(start)


def _known_rows(folder: WorkFolder, manifest: Mapping[str, Any]) -> int | None:
    """The job's row count: this run's data's, else (a stream) the one the work directory's manifest
    records (a job started in memory), else the count a process wrote on reaching the stream's end;
    None before any process has."""
    if manifest["rows"] is not None:
        return manifest["rows"]
    recorded = folder.manifest()
    rows = recorded.get("rows") if isinstance(recorded, dict) else None
    return rows if isinstance(rows, int) else folder.stream_rows()


def score_dataset(
    dataset: Dataset,
    scorer: RowScorer | Mapping[str, Any],
    *,
    column: str = "score",
    output_path: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    save_every: int | None = None,
) -> Dataset:
    """Return ``dataset`` with a ``column`` of scores (the scorer's first output; NaN where a row has none).

    ``scorer`` is a ``RowScorer`` or a config dict such as ``{"name": "PPLScorer"}``. Without
    ``output_path`` the rows are scored in this process through ``Dataset.map``
    (:func:`hf_adapters.columns.dataset_columns.add_score_columns`). With it the work goes through
    :func:`run_scoring_job` (resumable, sharded over the processes of ``accelerate launch``; point it
    at storage every process sees; progress saved every ``save_every`` rows) and the scores also
    stay in that JSONL file.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.engines.local import score_dataset
        >>> rows = Dataset.from_list([{"instruction": "Say hi.", "input": "", "output": "Hi!"}])
        >>> score_dataset(rows, {"name": "PPLScorer"})["score"]  # doctest: +SKIP
        [23.7]
    """
    from hf_adapters.columns.dataset_columns import add_score_columns
    from hf_adapters.scorers import RowScorer, build_scorer

    if not isinstance(scorer, RowScorer):
        scorer = build_scorer(scorer)
    if output_path is None:
        if process_state().num_processes > 1:
            raise ValueError("Pass `output_path` (on storage every process sees) when running on several processes.")
        scores = add_score_columns(dataset, scorer, names={scorer.outputs[0]: column})[column]
    else:
        run_scoring_job(dataset, scorer, output_path, overwrite=overwrite, progress=progress, save_every=save_every)
        with open(output_path, encoding="utf-8") as handle:
            scores = [json.loads(line)["score"] for line in handle]
    return dataset.add_column(column, [math.nan if score is None else float(score) for score in scores])


@contextlib.contextmanager
def _job_lock(folder: WorkFolder, state: PartialState) -> Iterator[None]:
    """Process 0 holds the lock of the job's work folder for the whole job; if another job holds it,
    every process raises a JobConflictError at once (:meth:`~hf_adapters.engines.work_folder.WorkFolder.locked`)."""
    with contextlib.ExitStack() as held:
        refusal = None
        if state.is_main_process:
            try:
                held.enter_context(folder.locked())
            except JobConflictError as error:
                refusal = str(error)
        refusal = _from_main_process(refusal, state)
        if refusal:
            raise JobConflictError(refusal)
        yield


def _open(folder: WorkFolder, manifest: dict[str, Any], output: OutputFormat, overwrite: bool,
          state: PartialState) -> tuple[str, dict[str, Any]]:
    """Process 0 opens the work folder (:meth:`~hf_adapters.engines.work_folder.WorkFolder.open`:
    fresh, resumed, complete, or refused); every process follows. The manifest in force gives the
    chunk size the job started with, whatever the batch size of this run."""
    opened = None
    if state.is_main_process:
        try:
            opened = folder.open(manifest, output, overwrite)
        except JobConflictError as error:
            opened = str(error)
    opened = _from_main_process(opened, state)
    if isinstance(opened, str):
        raise JobConflictError(opened)
    state.wait_for_everyone()
    return opened


def _wait_for_parts(work_dir: Path, world_size: int) -> None:
    """Wait, without a collective's timeout, until every process has finished its part."""
    markers = [done_marker(work_dir, rank) for rank in range(world_size)]
    while not all(marker.exists() for marker in markers):
        time.sleep(POLL_SECONDS)
    process_state().wait_for_everyone()


def _from_main_process(value: Any, state: PartialState) -> Any:
    """``value`` as process 0 has it, on every process (a collective: every process calls it)."""
    if state.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    [value] = broadcast_object_list([value])
    return value
