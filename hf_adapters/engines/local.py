"""The local engine (``hf-adapters score``'s default, :class:`LocalEngine`): score a whole data set with
a row scorer in this process, or sharded over accelerate's processes; crash-safe, resumable.

Layout of a job writing ``OUTPUT``: a work directory ``OUTPUT.parts/`` holds ``lock`` (process 0
holds an exclusive lock on it while the job runs, so a second identical command stops at once),
``manifest.json`` (what the job is: scorer config, data fingerprint, row count, and the chunk size
it started with), ``choices.json`` (what process 0's backend chose by measuring, such as the CPU
kernel of the float32 products, or the token budget chosen from a GPU's free memory: a rerun makes
the same choices, so that a resumed file is the file of an uninterrupted run) and one append-only
``rank-00000.jsonl`` per process. The rows are cut into chunks once, when the job starts, of
``save_every`` rows (``--save-every``; default :func:`default_save_every`: 16 on the CPU, 4,096 on
an accelerator); the batch size has no say in it. A chunk's rows are scored together (the backend
batches them as it likes) and saved together. Each run splits the chunks still to do into
contiguous runs, one per process, so a job may resume with any number of processes, any batch
size and any ``save_every`` (none of them changes a score beyond float rounding; a resumed job keeps
its first chunks, so that its file is that of an uninterrupted run).
A process appends a chunk's lines and fsyncs them before starting the next chunk; after a kill, a
torn chunk at the end of a part is dropped and scored again. When every
chunk is done, process 0 merges them in input order into ``OUTPUT.tmp`` (JSONL, or a folder of
Parquet shards), renames that onto ``OUTPUT``, records the manifest as ``complete.json`` (with the
output's format) and removes the work directory, that record last: a run that finds it (a kill
during the cleanup) does no work, unless it asks for another format (then it scores the job
again). A run that fails or is stopped before any chunk is saved removes the work directory,
so that nothing is left behind to refuse the corrected command. The lock, the atomic writes and the
fsynced appends are those of every run folder (:mod:`hf_adapters.files.run_folder`).

A finished job is recorded as every engine records it (:mod:`hf_adapters.engines.job_files`): running
the same job again finds its output unchanged and does nothing (:attr:`JobSummary.skipped`);
``overwrite`` scores it again.

A stream (an ``IterableDataset``) has no length and no random access: every process reads it from
the start, in chunks, scores the chunks that are its own (chunk number modulo the number of
processes) and are not done yet, and checks each chunk's rows just before scoring it. Process 0
writes the row count to ``rows.json`` when it reaches the end (before its last, partial chunk),
so the merge, and a rerun, know where the data ends.

A part line is ``{"i", "id", "score"}``: the row's index, its id (its row number where it has none:
:func:`hf_adapters.files.data_io.row_id`) and the scorer's first output. A job
asked for more of the scorer's outputs (``OutputFormat.score_columns``) writes each of them in every
line, under its own name, and records their columns in the manifest (``columns``): a rerun asking
for other columns is another job. Reading the data as a stream or not is no part of the job: a job
started one way resumes the other.

Importing this module imports neither torch nor ``datasets`` (the command line's ``--help`` lists this
engine): the functions import what they run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from hf_adapters.core.options import DEFAULT_BATCH_SIZE, positive_int
from hf_adapters.engines.base import Engine, ScoringJob
from hf_adapters.engines.job_files import (
    CHOICES,
    COMPLETE,
    LOCK,
    MANIFEST,
    STREAM_ROWS,
    WRITTEN_FORMAT,
    JobSummary,
    check_dataset,
    column_names,
    finished_in_other_layout,
    finished_job,
    format_record,
    interrupted_line,
    is_stream,
    iter_rows,
    job_changes,
    job_manifest,
    manifest_columns,
    output_schema,
    read_json,
    record_finished_job,
    rows_of,
    rows_without_manifest,
    same_job,
    score_schema,
    scored_record,
    work_dir_for,
    written_in,
)
from hf_adapters.files.json_values import truncate_file, whole_json_lines, write_atomically
from hf_adapters.files.output_paths import check_output_path
from hf_adapters.files.run_folder import LockHeld, append_durably, exclusive_lock
from hf_adapters.files.score_files import SCORE, OutputFormat, count_valid, records, write_output

if TYPE_CHECKING:
    from accelerate import PartialState
    from datasets import Dataset, IterableDataset

    from hf_adapters.scorers import RowScorer

logger = logging.getLogger(__name__)

#: Rows per chunk (scored together, then saved) on the CPU when the job does not say: 16, the
#: default batch size, as chunks were before they had a setting of their own.
CPU_SAVE_EVERY = DEFAULT_BATCH_SIZE
#: Rows per chunk on an accelerator when the job does not say: a chunk's rows are batched by the
#: token budget among themselves, so a chunk holds several budgets' worth of Alpaca-length rows.
ACCELERATOR_SAVE_EVERY = 4096
#: Seconds between looks at the other processes' progress while waiting for them.
POLL_SECONDS = 0.5


class JobConflictError(ValueError):
    """Partial results on disk belong to a different job (another config or other data),
    or another job is writing the same output."""


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
        state = _processes()
        job.check_output()
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
        return interrupted_line(*saved_rows(job.output_path), work_dir_for(job.output_path), stopped)


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


def default_save_every(device_type: str) -> int:
    """Rows per chunk of a job on a device of this type when the job does not say.

    Example:
        >>> default_save_every("cpu"), default_save_every("cuda")
        (16, 4096)
    """
    return CPU_SAVE_EVERY if device_type == "cpu" else ACCELERATOR_SAVE_EVERY


def _device_type(scorer: RowScorer, state: PartialState) -> str:
    """The type of the device the scorer's model runs on, as far as it is known before loading it:
    its identity's, a loaded model's, else accelerate's device."""
    identity = scorer.model_identity() or {}
    model = getattr(scorer, "model_object", None)
    device = getattr(model, "device", None)
    return identity.get("device_type") or getattr(device, "type", None) or state.device.type


def saved_rows(output_path: str | Path) -> tuple[int, int | None]:
    """How many rows the job writing ``output_path`` has saved (the rows of the complete chunks in its
    part files; all of them once its output is complete), and how many rows its data has (None for a
    stream whose end no process has reached yet). ``(0, None)`` before the job has a manifest. Quick
    on parts of millions of lines: only their newlines are counted, and their last lines read."""
    work_dir = work_dir_for(output_path)
    manifest = read_json(work_dir / MANIFEST)
    if not isinstance(manifest, dict):
        return rows_without_manifest(work_dir)
    num_rows = manifest.get("rows")
    num_rows = num_rows if num_rows is not None else _stream_rows(work_dir)
    saved = sum(_saved_in_part(part, num_rows, manifest["chunk_size"]) for part in work_dir.glob("rank-*.jsonl"))
    return saved, num_rows


def _saved_in_part(path: Path, num_rows: int | None, chunk_size: int) -> int:
    """The rows of a part's complete chunks. A run starts from parts cut back to complete chunks and
    appends whole chunks, so only the last chunk can be unfinished: its whole lines are left out."""
    lines, last = _whole_lines(path)
    try:
        index = json.loads(last)["i"]
    except (TypeError, ValueError, KeyError):
        return 0
    if index + 1 == _chunk_rows(index // chunk_size, num_rows, chunk_size).stop:
        return lines
    return lines - index % chunk_size - 1


def _whole_lines(path: Path) -> tuple[int, bytes | None]:
    """How many newline-ended lines a file has, and the last of them (None for none)."""
    count, last, pending = 0, None, b""
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            pending += block
            if newlines := pending.count(b"\n"):
                count += newlines
                body, _, pending = pending.rpartition(b"\n")
                last = body.rpartition(b"\n")[2]
    return count, last


def shard_range(num_rows: int, chunk_size: int, rank: int, world_size: int) -> range:
    """The rows process ``rank`` scores: a contiguous run of whole chunks, earlier ranks taking the remainder."""
    per_rank, extra = divmod(math.ceil(num_rows / chunk_size), world_size)
    first = rank * per_rank + min(rank, extra)
    last = first + per_rank + (rank < extra)
    return range(min(first * chunk_size, num_rows), min(last * chunk_size, num_rows))


def score_chunk(scorer: RowScorer, rows: Sequence[Mapping[str, Any]], offset: int = 0,
                columns: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each row's ``{column: value}`` of the outputs ``columns`` maps (output -> column; default: the
    first output, as ``score``), told that the rows begin at row ``offset`` of the data (so that
    messages name a row by its index in the data and its id); on an out-of-memory error, score each
    half separately instead. The first output is a float, as ``scorer.score_rows`` gives it.

    Halving the rows halves the batch's token budget; it recurses down to a single row, and a row
    that does not fit alone raises a RuntimeError naming it. No row is ever dropped.
    """
    from hf_adapters.backends.base import is_out_of_memory
    from hf_adapters.scorers.base import row_name

    columns = columns or {scorer.outputs[0]: SCORE}
    try:
        values = _output_values(scorer, rows, offset, list(columns))
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        if len(rows) == 1:
            raise RuntimeError(
                f"{row_name(rows[0], offset)} runs out of memory even alone; "
                "lower the scorer's max_length or use a device with more memory."
            ) from error
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
    else:
        if wrong := [len(values[output]) for output in columns if len(values[output]) != len(rows)]:
            raise RuntimeError(f"{type(scorer).__name__} returned {wrong[0]} scores for {len(rows)} rows.")
        first = next(iter(columns))
        return [{column: float(values[output][i]) if output == first else _plain(values[output][i])
                 for output, column in columns.items()} for i in range(len(rows))]
    # Outside the except block, so the failed batch's tensors can be freed before the retry.
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = len(rows) // 2
    logger.warning(
        "Out of memory on rows %d-%d (%s); halving the batch and retrying as %d + %d rows.",
        offset, offset + len(rows) - 1, message, half, len(rows) - half,
    )
    return (score_chunk(scorer, rows[:half], offset, columns)
            + score_chunk(scorer, rows[half:], offset + half, columns))


def _output_values(scorer: RowScorer, rows: Sequence[Mapping[str, Any]], offset: int,
                   outputs: Sequence[str]) -> Mapping[str, Sequence[Any]]:
    """``{output: one value per row}``: the first output alone through ``score_rows``, several through
    ``score_batch`` (which computes every output at once)."""
    if len(outputs) == 1:
        return {outputs[0]: scorer.score_rows_from(rows, offset)}
    return scorer.score_batch(scorer.rows_to_batch(rows, offset), offset)


def _plain(value: Any) -> Any:
    """An output value as Python holds it (a numpy or torch value or array as numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return [_plain(item) for item in value] if isinstance(value, (list, tuple)) else value


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
    state = _processes()
    streaming = is_stream(dataset)
    if streaming and data_fingerprint is None:
        raise ValueError("A stream has no fingerprint: pass `data_fingerprint` (what identifies its data) to make "
                         "the job resumable.")
    dataset = dataset if streaming else dataset.with_format(None)
    if save_every is not None and (isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 1):
        raise ValueError(f"`save_every` must be a positive whole number of rows, got {save_every!r}.")
    chunk_size = save_every or default_save_every(_device_type(scorer, state))
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
    with _job_lock(work_dir_for(output_path), state):
        try:
            return _run_locked(dataset, scorer, plan, manifest, overwrite, started)
        except BaseException:
            if state.is_main_process:
                _discard_if_nothing_saved(output_path)
            raise


def _discard_if_nothing_saved(output_path: Path) -> None:
    """Remove the work directory of a run that failed or was stopped before any row was saved: there
    is nothing to resume, and a corrected command must not be refused as another job."""
    if _nothing_saved(output_path):
        shutil.rmtree(work_dir_for(output_path), ignore_errors=True)


def _nothing_saved(output_path: Path) -> bool:
    """Whether the work directory of ``output_path`` holds no saved row and no completed output (False
    where its manifest is not one a job wrote, whose rows cannot be counted)."""
    work_dir = work_dir_for(output_path)
    manifest = read_json(work_dir / MANIFEST)
    if (work_dir / COMPLETE).exists() or (manifest is not None and not (
            isinstance(manifest, dict) and isinstance(manifest.get("chunk_size"), int))):
        return False
    return saved_rows(output_path)[0] == 0


def _run_locked(dataset: Dataset | IterableDataset, scorer: RowScorer, plan: _Plan, manifest: dict[str, Any],
                overwrite: bool, started: float) -> JobSummary:
    state = _processes()
    output_path, output = plan.output_path, plan.output
    work_dir = work_dir_for(output_path)
    decision, chunk_size = _open_work_dir(work_dir, output_path, manifest, overwrite, state, output)
    if decision == "complete":
        valid = None
        if state.is_main_process:
            logger.info("%s is already this job's complete output; finishing its cleanup.", output_path)
            complete = json.loads((work_dir / COMPLETE).read_text(encoding="utf-8"))
            rows = complete["total_rows"]
            valid = (rows, count_valid(output_path, output, next(iter(plan.columns.values()))))
            _remove_work_dir(work_dir)
            record_finished_job(output_path, output, complete, *valid)
        valid = _from_main_process(valid, state)
        return JobSummary(valid[0], valid[1], time.perf_counter() - started, 0)

    # Process 0 cuts every part back to its complete chunks and says which are done.
    num_rows = _known_rows(work_dir, manifest)
    done = _recover(work_dir, num_rows, chunk_size, manifest_columns(manifest)) if state.is_main_process else None
    done = _from_main_process(done, state)
    already = sum(len(_chunk_rows(chunk, num_rows, chunk_size)) for chunk in done)
    if already and state.is_main_process:
        logger.info("resuming: %d of %s rows already scored", already, "?" if num_rows is None else num_rows)
    choices = read_json(work_dir / CHOICES) or {}
    scorer.reuse_measured_choices(choices)  # the kernels that scored the done chunks score the rest
    state.wait_for_everyone()

    part = work_dir / f"rank-{state.process_index:05d}.jsonl"
    mine = _my_chunks(dataset, done, num_rows, chunk_size, work_dir, state)
    known = num_rows if num_rows is not None else plan.expected_rows
    bar = tqdm(total=None if known is None else max(known - already, 0), unit="row",
               disable=not (plan.progress and state.is_main_process),
               desc="Scoring" if state.num_processes == 1 else f"Scoring (process 0 of {state.num_processes})")
    with open(part, "ab") as handle, bar:
        for start, rows in mine:
            if is_stream(dataset):
                scorer.check_rows(rows, start)
            values = score_chunk(scorer, rows, start, plan.columns)
            if state.is_main_process and (made := scorer.measured_choices()) != choices:
                write_atomically(work_dir / CHOICES, json.dumps(made, sort_keys=True))  # before the scores
                choices = made
            append_durably(handle, b"".join(_part_line(i, row, cells)
                                            for i, (row, cells) in enumerate(zip(rows, values, strict=True), start)))
            bar.update(len(rows))
    (work_dir / f"rank-{state.process_index:05d}.done").touch()

    _wait_for_parts(work_dir, state.num_processes)
    num_rows = _known_rows(work_dir, manifest)
    valid = None
    if state.is_main_process:
        valid = _merge(work_dir, num_rows, chunk_size, dataset, plan)
    valid = _from_main_process(valid, state)
    return JobSummary(num_rows, valid, time.perf_counter() - started, num_rows - already)


def _my_chunks(dataset: Dataset | IterableDataset, done: set[int], num_rows: int | None, chunk_size: int,
               work_dir: Path, state: PartialState) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(first row index, rows) of each chunk this process scores: of a ``Dataset``, a contiguous run of
    the chunks still to do; of a stream, read from the start, the chunks not done whose number modulo
    the process count is this process's rank (a JobConflictError where the stream has other than the
    ``num_rows`` rows the job started with in memory)."""
    if not is_stream(dataset):
        todo = [chunk for chunk in range(math.ceil(num_rows / chunk_size)) if chunk not in done]
        for chunk in (todo[i] for i in shard_range(len(todo), 1, state.process_index, state.num_processes)):
            span = _chunk_rows(chunk, num_rows, chunk_size)
            yield span.start, rows_of(dataset, span.start, span.stop)
        return
    start = 0
    for chunk, batch in enumerate(dataset.iter(batch_size=chunk_size)):
        rows = [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]
        if num_rows is not None and start + len(rows) > num_rows:  # a job started on fewer rows
            raise JobConflictError(_refusal(work_dir, f"the input data changed ({num_rows} rows before, more now)"))
        if len(rows) < chunk_size and state.is_main_process:  # the end: say where it is before scoring it
            write_atomically(work_dir / STREAM_ROWS, json.dumps({"rows": start + len(rows)}))
        if chunk not in done and chunk % state.num_processes == state.process_index:
            yield start, rows
        start += len(rows)
    if num_rows is not None and start != num_rows:
        raise JobConflictError(_refusal(work_dir, f"the input data changed ({num_rows} rows before, {start} now)"))
    if state.is_main_process:
        write_atomically(work_dir / STREAM_ROWS, json.dumps({"rows": start}))


def _known_rows(work_dir: Path, manifest: Mapping[str, Any]) -> int | None:
    """The job's row count: this run's data's, else (a stream) the one the work directory's manifest
    records (a job started in memory), else the count a process wrote on reaching the stream's end;
    None before any process has."""
    if manifest["rows"] is not None:
        return manifest["rows"]
    recorded = read_json(work_dir / MANIFEST)
    rows = recorded.get("rows") if isinstance(recorded, dict) else None
    return rows if isinstance(rows, int) else _stream_rows(work_dir)


def _stream_rows(work_dir: Path) -> int | None:
    """A stream's row count, once a process has read to its end; None before."""
    try:
        return int(read_json(work_dir / STREAM_ROWS)["rows"])
    except (ValueError, KeyError, TypeError):
        return None


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
        if _processes().num_processes > 1:
            raise ValueError("Pass `output_path` (on storage every process sees) when running on several processes.")
        scores = add_score_columns(dataset, scorer, names={scorer.outputs[0]: column})[column]
    else:
        run_scoring_job(dataset, scorer, output_path, overwrite=overwrite, progress=progress, save_every=save_every)
        with open(output_path, encoding="utf-8") as handle:
            scores = [json.loads(line)["score"] for line in handle]
    return dataset.add_column(column, [math.nan if score is None else float(score) for score in scores])


def _part_line(index: int, row: Mapping[str, Any], cells: Mapping[str, Any]) -> bytes:
    record = {"i": index, **scored_record(row, index, cells)}
    return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode()


@contextlib.contextmanager
def _job_lock(work_dir: Path, state: PartialState) -> Iterator[None]:
    """Process 0 holds an exclusive lock on ``work_dir/lock`` for the whole job; if another job holds
    it, every process raises a JobConflictError at once (:func:`~hf_adapters.files.run_folder.exclusive_lock`)."""
    with contextlib.ExitStack() as held:
        refusal = None
        if state.is_main_process:
            try:
                held.enter_context(exclusive_lock(work_dir / LOCK))
            except LockHeld:
                refusal = (f"Another job is writing {work_dir.name.removesuffix('.parts')} (it holds "
                           f"{work_dir / LOCK}); wait for it to finish, or choose another output.")
        refusal = _from_main_process(refusal, state)
        if refusal:
            raise JobConflictError(refusal)
        yield


def _open_work_dir(work_dir: Path, output_path: Path, manifest: dict[str, Any], overwrite: bool,
                   state: PartialState, output: OutputFormat) -> tuple[str, int]:
    """Process 0 decides between starting afresh, resuming, finding the job complete and refusing;
    every process follows. Returns ``"fresh"``, ``"resume"`` or ``"complete"``, and the chunk size
    in force: the one the job started with, whatever the batch size of this run."""
    decision = _decide(work_dir, output_path, manifest, overwrite, output) if state.is_main_process else None
    decision = _from_main_process(decision, state)
    if not isinstance(decision, tuple):
        raise JobConflictError(decision)
    if decision[0] == "fresh" and state.is_main_process:
        for entry in work_dir.iterdir():
            if entry.name != LOCK:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        write_atomically(work_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    state.wait_for_everyone()
    return decision


def _decide(work_dir: Path, output_path: Path, manifest: dict[str, Any], overwrite: bool,
            output: OutputFormat) -> tuple[str, int] | str:
    """``("fresh" | "resume" | "complete", chunk size)`` (complete: a kill interrupted the cleanup after
    the output was in place, in the format ``output`` asks for), or the message refusing to mix with
    another job's results."""
    try:
        old = json.loads((work_dir / COMPLETE).read_text(encoding="utf-8"))
        if same_job(old, manifest) and written_in(old, output) and output.is_complete(output_path):
            return "complete", old["chunk_size"]
    except (OSError, ValueError, KeyError):
        pass
    try:
        old = json.loads((work_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "fresh", manifest["chunk_size"]  # no job yet, or one killed before its manifest was written
    if same_job(old, manifest) and isinstance(old.get("chunk_size"), int):
        if old.get("rows") is None and manifest["rows"] is not None and \
                _stream_rows(work_dir) not in (None, manifest["rows"]):
            return _refusal(work_dir, f"the input data changed ({_stream_rows(work_dir)} rows before, "
                                      f"{manifest['rows']} now)")
        return "resume", old["chunk_size"]
    if _nothing_saved(output_path):
        logger.info("%s holds no saved row of another job; starting afresh", work_dir)
        return "fresh", manifest["chunk_size"]
    if overwrite:
        logger.info("overwrite: discarding the partial results in %s", work_dir)
        return "fresh", manifest["chunk_size"]
    return _refusal(work_dir, job_changes(old, manifest))


def _refusal(work_dir: Path, reasons: str) -> str:
    """The message refusing to mix this run's results with those of another job in ``work_dir``."""
    return (f"{work_dir} holds partial results of a different job: {reasons}. Rerun the original job to resume it, "
            "or pass --overwrite to discard those results and start again.")


def _chunk_rows(chunk: int, num_rows: int | None, chunk_size: int) -> range:
    """The rows of a chunk (of a stream whose end is not known yet, a whole chunk's)."""
    stop = (chunk + 1) * chunk_size
    return range(chunk * chunk_size, stop if num_rows is None else min(stop, num_rows))


def _part_chunks(path: Path, num_rows: int | None, chunk_size: int,
                 columns: Sequence[str]) -> tuple[dict[int, list[dict[str, Any]]], int]:
    """The complete chunks a part file holds (a process writes whole chunks, in any order, each line
    with every one of the score ``columns``), and the byte offset where the last of them ends:
    anything after it is a torn write."""
    chunks: dict[int, list[dict[str, Any]]] = {}
    block: list[dict[str, Any]] = []
    offset = keep = 0
    for record, size in whole_json_lines(path):
        if not (isinstance(record, dict) and isinstance(record.get("i"), int)
                and all(column in record for column in columns)):
            break
        index = record["i"]
        expected = block[-1]["i"] + 1 if block else index - index % chunk_size
        if index != expected or index < 0 or (num_rows is not None and index >= num_rows):
            break
        block.append(record)
        offset += size
        chunk = index // chunk_size
        if index + 1 == _chunk_rows(chunk, num_rows, chunk_size).stop:
            chunks[chunk], block, keep = block, [], offset
    return chunks, keep


def _recover(work_dir: Path, num_rows: int | None, chunk_size: int, columns: Sequence[str]) -> set[int]:
    """Cut every part back to its complete chunks, drop the last run's done markers, and return the
    chunks the parts hold."""
    done: set[int] = set()
    for part in sorted(work_dir.glob("rank-*.jsonl")):
        chunks, keep = _part_chunks(part, num_rows, chunk_size, columns)
        done.update(chunks)
        truncate_file(part, keep)
    for marker in work_dir.glob("rank-*.done"):
        marker.unlink()
    return done


def _wait_for_parts(work_dir: Path, world_size: int) -> None:
    """Wait, without a collective's timeout, until every process has finished its part."""
    markers = [work_dir / f"rank-{rank:05d}.done" for rank in range(world_size)]
    while not all(marker.exists() for marker in markers):
        time.sleep(POLL_SECONDS)
    _processes().wait_for_everyone()


def _merge(work_dir: Path, num_rows: int, chunk_size: int, dataset: Dataset | IterableDataset, plan: _Plan) -> int:
    """Write every chunk of every part, in input order (with the rows' own columns when the output keeps
    them, read again from ``dataset``), to the output of the plan's schema (:func:`output_schema`);
    then mark the job complete and clean up. Returns the valid count."""
    chunks: dict[int, list[dict[str, Any]]] = {}
    for part in sorted(work_dir.glob("rank-*.jsonl")):
        chunks.update(_part_chunks(part, num_rows, chunk_size, list(plan.columns.values()))[0])
    if missing := [chunk for chunk in range(math.ceil(num_rows / chunk_size)) if chunk not in chunks]:
        raise RuntimeError(f"The parts in {work_dir} lack {len(missing)} chunk(s), the first at row "
                           f"{missing[0] * chunk_size}.")
    scored = (record for chunk in sorted(chunks) for record in chunks[chunk])
    rows = iter_rows(dataset) if plan.output.keep_columns else None
    valid = write_output(plan.output_path, plan.output, records(scored, rows, list(plan.columns.values())),
                         plan.schema, next(iter(plan.columns.values())))
    manifest = json.loads((work_dir / MANIFEST).read_text(encoding="utf-8"))
    write_atomically(work_dir / COMPLETE, json.dumps({**manifest, "total_rows": num_rows,
                                                      WRITTEN_FORMAT: format_record(plan.output)}))
    (work_dir / MANIFEST).unlink()
    _remove_work_dir(work_dir)
    record_finished_job(plan.output_path, plan.output, manifest, num_rows, valid)
    return valid


def _remove_work_dir(work_dir: Path) -> None:
    """Remove the parts first and the completion record last, so that a kill at any moment leaves
    either a resumable job or a record that the output is complete."""
    for entry in work_dir.iterdir():
        if entry.name not in (COMPLETE, LOCK):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (work_dir / COMPLETE).unlink(missing_ok=True)
    shutil.rmtree(work_dir)


def _processes() -> PartialState:
    """accelerate's state of this process: its rank among the processes ``accelerate launch`` started
    (the only one without it)."""
    from accelerate import PartialState

    return PartialState()


def _from_main_process(value: Any, state: PartialState) -> Any:
    """``value`` as process 0 has it, on every process (a collective: every process calls it)."""
    if state.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    [value] = broadcast_object_list([value])
    return value
