"""Score a whole data set with a row scorer: sharded over accelerate's processes, crash-safe, resumable.

Layout of a job writing ``OUTPUT``: a work directory ``OUTPUT.parts/`` holds ``lock`` (process 0
holds an exclusive lock on it while the job runs, so a second identical command stops at once),
``manifest.json`` (what the job is: scorer config, data fingerprint, row count, and the chunk size
it started with), ``choices.json`` (what process 0's backend chose by measuring, such as the CPU
kernel of the float32 products: a rerun makes the same choices, so that a resumed file is the file
of an uninterrupted run) and one append-only ``rank-00000.jsonl`` per process. The rows are cut into
chunks once, when the job starts; each run splits the chunks still to do into contiguous runs,
one per process, so a job may resume with any number of processes and any batch size (neither
changes a score). A process appends a chunk's lines and fsyncs them before starting the next
chunk; after a kill, a torn chunk at the end of a part is dropped and scored again. When every
chunk is done, process 0 merges them in input order into ``OUTPUT.tmp`` (JSONL, or a folder of
Parquet shards), renames that onto ``OUTPUT``, records the manifest as ``complete.json`` and
removes the work directory, that record last: a run that finds it (a kill during the cleanup)
does no work. A run that fails or is stopped before any chunk is saved removes the work directory,
so that nothing is left behind to refuse the corrected command.

A finished job is recorded in the cache folder (:func:`hf_adapters.backends.loading.cache_folder`, under
``jobs/``), by the output's path: what the job is, and the size and modification time of what it
wrote. Running the same job again finds its output unchanged and does nothing
(:attr:`JobSummary.skipped`); ``overwrite`` scores it again.

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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list
from datasets import Dataset, IterableDataset
from tqdm.auto import tqdm

from hf_adapters.backends.base import is_out_of_memory
from hf_adapters.backends.loading import cache_folder
from hf_adapters.columns.dataset_columns import add_score_columns
from hf_adapters.core.options import DEFAULT_BATCH_SIZE
from hf_adapters.core.wording import plural
from hf_adapters.files.data_io import row_id
from hf_adapters.files.json_values import json_safe, to_json_value, truncate_file, whole_json_lines, write_atomically
from hf_adapters.files.output_paths import check_output_path
from hf_adapters.files.score_files import SCORE, SHARD_PATTERN, OutputFormat, count_valid, records, write_output
from hf_adapters.scorers import RowScorer, build_scorer
from hf_adapters.scorers.base import ModelRowScorer, row_name

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
#: The manifest, renamed once ``OUTPUT`` is in place: the output is this job's, complete.
COMPLETE = "complete.json"
LOCK = "lock"
#: Written by the process that reaches the end of a stream: how many rows it has.
STREAM_ROWS = "rows.json"
#: Choices process 0's backend made by measuring (which CPU kernel runs the products): a rerun reuses them.
CHOICES = "choices.json"
#: Chunk size for scorers whose config has no ``batch_size``.
DEFAULT_CHUNK_SIZE = DEFAULT_BATCH_SIZE
#: Rows converted to dicts at a time when checking a data set before scoring.
CHECK_CHUNK_SIZE = 10_000
#: Seconds between looks at the other processes' progress while waiting for them.
POLL_SECONDS = 0.5


#: The folder of the cache (:func:`~hf_adapters.backends.loading.cache_folder`) recording finished jobs.
FINISHED_JOBS = "jobs"


class JobConflictError(ValueError):
    """Partial results on disk belong to a different job (another config or other data),
    or another job is writing the same output."""


@dataclass(frozen=True)
class JobSummary:
    """What a scoring job did.

    Attributes:
        rows: rows in the data set (all of them are in the output).
        valid: rows with a finite score (the others are written as ``null``).
        seconds: wall time of this run.
        scored: rows scored by this run; the others came from an earlier run (interrupted, or finished).
        skipped: the output was already this job's, complete and unchanged: this run did nothing.
    """

    rows: int
    valid: int
    seconds: float
    scored: int
    skipped: bool = False

    @property
    def rows_per_second(self) -> float:
        """The rows this run scored per second of it (rows an earlier run saved are not counted)."""
        return self.scored / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        done = f"{plural(self.rows, 'row')}, {plural(self.valid, 'valid score')}"
        if self.scored == self.rows:
            return f"{done}, {self.rows_per_second:.1f} rows/s"
        if not self.scored:
            return f"{done}, all scored by an earlier run"
        return f"{done}; this run scored {self.scored} of them, {self.rows_per_second:.1f} rows/s"


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


def work_dir_for(output_path: str | Path) -> Path:
    """The directory holding a job's manifest and part files: ``OUTPUT.parts`` beside ``OUTPUT``."""
    output_path = Path(output_path)
    return output_path.with_name(output_path.name + ".parts")


def work_files(output_path: str | Path, output: OutputFormat) -> list[Path]:
    """Files a job writes on the way to ``output_path`` (one of each kind): its part, manifest and
    markers in the work directory, the temporary output and, for Parquet, the shards."""
    output_path, work_dir = Path(output_path), work_dir_for(output_path)
    temporary = output_path.with_name(output_path.name + ".tmp")
    files = [work_dir / name for name in ("rank-00000.jsonl", "rank-00000.done", MANIFEST, COMPLETE, STREAM_ROWS,
                                          CHOICES, LOCK)]
    if output.kind == "parquet":
        return [*files, *(folder / SHARD_PATTERN.format(0) for folder in (output_path, temporary))]
    return [*files, temporary]


def saved_rows(output_path: str | Path) -> tuple[int, int | None]:
    """How many rows the job writing ``output_path`` has saved (the rows of the complete chunks in its
    part files; all of them once its output is complete), and how many rows its data has (None for a
    stream whose end no process has reached yet). ``(0, None)`` before the job has a manifest. Quick
    on parts of millions of lines: only their newlines are counted, and their last lines read."""
    work_dir = work_dir_for(output_path)
    manifest = _read_json(work_dir / MANIFEST)
    if not isinstance(manifest, dict):
        complete = _read_json(work_dir / COMPLETE)
        total = complete.get("total_rows") if isinstance(complete, dict) else None
        return (total, total) if isinstance(total, int) else (0, None)
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
    ``overwrite`` scores it again. Rows without an ``id`` are written with their row number.
    ``data_fingerprint`` identifies the data (default: ``dataset._fingerprint``; a stream needs
    one); the command line passes a hash of the input files. Every row of a ``Dataset`` is checked
    with ``scorer.check_rows`` before any is scored; a stream's rows are checked chunk by chunk. The
    output appears only once complete. Every process returns the same summary. ``expected_rows``
    gives the progress bar of a stream its total (the stream's own end still decides where it ends).

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
    state = PartialState()
    streaming = isinstance(dataset, IterableDataset)
    if streaming and data_fingerprint is None:
        raise ValueError("A stream has no fingerprint: pass `data_fingerprint` (what identifies its data) to make "
                         "the job resumable.")
    dataset = dataset if streaming else dataset.with_format(None)
    chunk_size = int(scorer.config.get("batch_size") or DEFAULT_CHUNK_SIZE)
    columns = output.columns_of(scorer.outputs)
    scorer.use_columns(_column_names(dataset))
    manifest = job_manifest(scorer, data_fingerprint or dataset._fingerprint, None if streaming else len(dataset),
                            chunk_size, columns)
    finished = None if overwrite or not state.is_main_process else finished_job(output_path, output, manifest)
    [finished] = broadcast_object_list([finished]) if state.num_processes > 1 else [finished]
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


def job_manifest(scorer: RowScorer, data: str, rows: int | None, chunk_size: int,
                 columns: Mapping[str, str]) -> dict[str, Any]:
    """What a job is, as its manifest records it: the scorer's config (less the batch size) and
    columns, the model's identity, the data's fingerprint and row count (None for a stream), the
    chunk size it starts with and the score ``columns`` it writes. Batch size and process count are
    not part of the job: scores do not depend on them. A model the job cannot identify (an object, a
    backend whose identity() is None) makes results no run ever reuses."""
    identity = scorer.model_identity()
    return _jsonable({
        "scorer": {key: value for key, value in scorer.fingerprint().items() if key != "batch_size"},
        "model": identity,
        "identified": identity is not None or not isinstance(scorer, ModelRowScorer),
        "data": data,
        "rows": rows,
        "chunk_size": chunk_size,
        **({"columns": list(columns.values())} if len(columns) > 1 else {}),
    })


def finished_job(output_path: Path, output: OutputFormat, manifest: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(rows, valid scores)`` of ``output_path`` where it is the complete output of the job
    ``manifest`` describes, written in the format ``output`` asks for and unchanged since (its
    size and modification time are those recorded when it was written); else None."""
    record = _read_json(_finished_record(output_path))
    if not (isinstance(record, dict) and isinstance(record.get("job"), dict) and output.is_complete(output_path)):
        return None
    try:
        unchanged = record.get("format") == _format_record(output) and record.get("stamp") == _stamp(output_path)
    except OSError:  # removed meanwhile
        return None
    if not (unchanged and _same_job(record["job"], manifest)):
        return None
    return record["rows"], record["valid"]


def record_finished_job(output_path: Path, output: OutputFormat, manifest: Mapping[str, Any], rows: int,
                        valid: int) -> None:
    """Record that ``output_path`` is now the complete output of the job ``manifest`` describes (for
    :func:`finished_job`). Where the cache folder cannot be written, nothing is recorded: a rerun
    then scores the rows again."""
    path = _finished_record(output_path)
    try:
        record = {"output": str(output_path.absolute()), "job": {**manifest, "rows": rows},
                  "format": _format_record(output), "stamp": _stamp(output_path), "rows": rows, "valid": valid}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(record, sort_keys=True))
    except OSError as error:
        logger.debug("cannot record the finished job in %s: %s", path, error)


def _finished_record(output_path: Path) -> Path:
    """Where the record of the finished job writing ``output_path`` is kept: by its absolute path."""
    key = hashlib.sha256(str(output_path.resolve()).encode()).hexdigest()[:32]
    return cache_folder() / FINISHED_JOBS / f"{key}.json"


def _format_record(output: OutputFormat) -> dict[str, Any]:
    """What of an output's format changes the output (the score columns are in the manifest)."""
    return {"kind": output.kind, "keep_columns": output.keep_columns, "rows_per_shard": output.rows_per_shard}


def _stamp(path: Path) -> list[list[Any]]:
    """The name, size and modification time of the output file (of each file of an output folder)."""
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    return [[file.name, (stat := file.stat()).st_size, stat.st_mtime_ns] for file in files]


def _column_names(dataset: Dataset | IterableDataset) -> list[str]:
    """The data's columns (of a stream that does not say them, those of its first row)."""
    names = dataset.column_names
    return list(next(iter(dataset), {})) if names is None else names


def _discard_if_nothing_saved(output_path: Path) -> None:
    """Remove the work directory of a run that failed or was stopped before any row was saved: there
    is nothing to resume, and a corrected command must not be refused as another job."""
    if _nothing_saved(output_path):
        shutil.rmtree(work_dir_for(output_path), ignore_errors=True)


def _nothing_saved(output_path: Path) -> bool:
    """Whether the work directory of ``output_path`` holds no saved row and no completed output (False
    where its manifest is not one a job wrote, whose rows cannot be counted)."""
    work_dir = work_dir_for(output_path)
    manifest = _read_json(work_dir / MANIFEST)
    if (work_dir / COMPLETE).exists() or (manifest is not None and not (
            isinstance(manifest, dict) and isinstance(manifest.get("chunk_size"), int))):
        return False
    return saved_rows(output_path)[0] == 0


def _run_locked(dataset: Dataset | IterableDataset, scorer: RowScorer, plan: _Plan, manifest: dict[str, Any],
                overwrite: bool, started: float) -> JobSummary:
    state = PartialState()
    output_path, output = plan.output_path, plan.output
    work_dir = work_dir_for(output_path)
    decision, chunk_size = _open_work_dir(work_dir, output_path, manifest, overwrite, state, output)
    if decision == "complete":
        valid = None
        if state.is_main_process:
            logger.info("%s is already this job's complete output; finishing its cleanup.", output_path)
            complete = json.loads((work_dir / COMPLETE).read_text(encoding="utf-8"))
            rows = complete["total_rows"]
            valid = (rows, count_valid(output_path, output))
            _remove_work_dir(work_dir)
            record_finished_job(output_path, output, complete, *valid)
        [valid] = broadcast_object_list([valid]) if state.num_processes > 1 else [valid]
        return JobSummary(valid[0], valid[1], time.perf_counter() - started, 0)

    # Process 0 cuts every part back to its complete chunks and says which are done.
    num_rows = _known_rows(work_dir, manifest)
    done = _recover(work_dir, num_rows, chunk_size, _columns(manifest)) if state.is_main_process else None
    [done] = broadcast_object_list([done]) if state.num_processes > 1 else [done]
    already = sum(len(_chunk_rows(chunk, num_rows, chunk_size)) for chunk in done)
    if already and state.is_main_process:
        logger.info("resuming: %d of %s rows already scored", already, "?" if num_rows is None else num_rows)
    choices = _read_json(work_dir / CHOICES) or {}
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
            if isinstance(dataset, IterableDataset):
                scorer.check_rows(rows, start)
            values = score_chunk(scorer, rows, start, plan.columns)
            if state.is_main_process and (made := scorer.measured_choices()) != choices:
                write_atomically(work_dir / CHOICES, json.dumps(made, sort_keys=True))  # before the scores
                choices = made
            handle.write(b"".join(_part_line(i, row_id(row, i), cells)
                                  for i, (row, cells) in enumerate(zip(rows, values, strict=True), start)))
            handle.flush()
            os.fsync(handle.fileno())
            bar.update(len(rows))
    (work_dir / f"rank-{state.process_index:05d}.done").touch()

    _wait_for_parts(work_dir, state.num_processes)
    num_rows = _known_rows(work_dir, manifest)
    valid = None
    if state.is_main_process:
        valid = _merge(work_dir, num_rows, chunk_size, dataset, plan)
    [valid] = broadcast_object_list([valid]) if state.num_processes > 1 else [valid]
    return JobSummary(num_rows, valid, time.perf_counter() - started, num_rows - already)


def check_dataset(dataset: Dataset | IterableDataset, scorer: RowScorer, output: OutputFormat,
                  columns: Mapping[str, str]) -> None:
    """Before anything is scored: adapt ``scorer`` to the data's columns, refuse a data column that
    ``output`` would overwrite with one of the score ``columns`` (output -> column), and check every
    row of a ``Dataset`` with ``scorer.check_rows`` (a ValueError names the first bad row). A
    stream's rows are checked as they are read."""
    names = _column_names(dataset)
    scorer.use_columns(names)
    if output.keep_columns and (taken := [column for column in columns.values() if column in names]):
        raise ValueError(f"The data has a column {taken[0]!r}: with keep_columns the scores would replace it.")
    if isinstance(dataset, Dataset):
        for start in range(0, len(dataset), CHECK_CHUNK_SIZE):
            scorer.check_rows(_rows(dataset, start, min(start + CHECK_CHUNK_SIZE, len(dataset))), start)


def iter_rows(dataset: Dataset | IterableDataset) -> Iterator[dict[str, Any]]:
    """Every row of ``dataset`` as a dict, in order, read a chunk of columns at a time."""
    for batch in dataset.iter(batch_size=CHECK_CHUNK_SIZE):
        yield from (dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True))


def _my_chunks(dataset: Dataset | IterableDataset, done: set[int], num_rows: int | None, chunk_size: int,
               work_dir: Path, state: PartialState) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(first row index, rows) of each chunk this process scores: of a ``Dataset``, a contiguous run of
    the chunks still to do; of a stream, read from the start, the chunks not done whose number modulo
    the process count is this process's rank (a JobConflictError where the stream has other than the
    ``num_rows`` rows the job started with in memory)."""
    if isinstance(dataset, Dataset):
        todo = [chunk for chunk in range(math.ceil(num_rows / chunk_size)) if chunk not in done]
        for chunk in (todo[i] for i in shard_range(len(todo), 1, state.process_index, state.num_processes)):
            span = _chunk_rows(chunk, num_rows, chunk_size)
            yield span.start, _rows(dataset, span.start, span.stop)
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
    recorded = _read_json(work_dir / MANIFEST)
    rows = recorded.get("rows") if isinstance(recorded, dict) else None
    return rows if isinstance(rows, int) else _stream_rows(work_dir)


def _stream_rows(work_dir: Path) -> int | None:
    """A stream's row count, once a process has read to its end; None before."""
    try:
        return int(_read_json(work_dir / STREAM_ROWS)["rows"])
    except (ValueError, KeyError, TypeError):
        return None


def _read_json(path: Path) -> Any:
    """The value of a JSON file the job wrote (atomically); None where there is none."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def score_dataset(
    dataset: Dataset,
    scorer: RowScorer | Mapping[str, Any],
    *,
    column: str = "score",
    output_path: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Dataset:
    """Return ``dataset`` with a ``column`` of scores (the scorer's first output; NaN where a row has none).

    ``scorer`` is a ``RowScorer`` or a config dict such as ``{"name": "PPLScorer"}``. Without
    ``output_path`` the rows are scored in this process through ``Dataset.map``
    (:func:`hf_adapters.columns.dataset_columns.add_score_columns`). With it the work goes through
    :func:`run_scoring_job` (resumable, sharded over the processes of ``accelerate launch``; point it
    at storage every process sees) and the scores also stay in that JSONL file.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.engines.local import score_dataset
        >>> rows = Dataset.from_list([{"instruction": "Say hi.", "input": "", "output": "Hi!"}])
        >>> score_dataset(rows, {"name": "PPLScorer"})["score"]  # doctest: +SKIP
        [23.7]
    """
    if not isinstance(scorer, RowScorer):
        scorer = build_scorer(scorer)
    if output_path is None:
        if PartialState().num_processes > 1:
            raise ValueError("Pass `output_path` (on storage every process sees) when running on several processes.")
        scores = add_score_columns(dataset, scorer, names={scorer.outputs[0]: column})[column]
    else:
        run_scoring_job(dataset, scorer, output_path, overwrite=overwrite, progress=progress)
        with open(output_path, encoding="utf-8") as handle:
            scores = [json.loads(line)["score"] for line in handle]
    return dataset.add_column(column, [math.nan if score is None else float(score) for score in scores])


def _rows(dataset: Dataset, start: int, stop: int) -> list[dict[str, Any]]:
    columns = dataset[start:stop]
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _part_line(index: int, id_value: Any, cells: Mapping[str, Any]) -> bytes:
    record = {"i": index, "id": to_json_value(id_value), **json_safe(dict(cells))}
    return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode()


@contextlib.contextmanager
def _job_lock(work_dir: Path, state: PartialState) -> Iterator[None]:
    """Process 0 holds an exclusive lock on ``work_dir/lock`` for the whole job; if another job holds
    it, every process raises a JobConflictError at once."""
    handle, refusal = None, None
    if state.is_main_process:
        work_dir.mkdir(parents=True, exist_ok=True)
        handle = open(work_dir / LOCK, "a+b")  # noqa: SIM115 (held open for the whole job)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            handle = None
            refusal = (f"Another job is writing {work_dir.name.removesuffix('.parts')} (it holds {work_dir / LOCK}); "
                       "wait for it to finish, or choose another output.")
    if state.num_processes > 1:
        [refusal] = broadcast_object_list([refusal])
    if refusal:
        raise JobConflictError(refusal)
    try:
        yield
    finally:
        if handle is not None:
            handle.close()


def _open_work_dir(work_dir: Path, output_path: Path, manifest: dict[str, Any], overwrite: bool,
                   state: PartialState, output: OutputFormat) -> tuple[str, int]:
    """Process 0 decides between starting afresh, resuming, finding the job complete and refusing;
    every process follows. Returns ``"fresh"``, ``"resume"`` or ``"complete"``, and the chunk size
    in force: the one the job started with, whatever the batch size of this run."""
    decision = _decide(work_dir, output_path, manifest, overwrite, output) if state.is_main_process else None
    if state.num_processes > 1:
        [decision] = broadcast_object_list([decision])
    if not isinstance(decision, tuple):
        raise JobConflictError(decision)
    if decision[0] == "fresh" and state.is_main_process:
        for entry in work_dir.iterdir():
            if entry.name != LOCK:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        write_atomically(work_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    state.wait_for_everyone()
    return decision


def _same_job(old: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether two manifests describe one job: its rows read as a stream (whose count is not known
    up front) or not make no difference."""
    same = all(old.get(key) == manifest[key] for key in ("scorer", "model", "data")) and _same_rows(old, manifest)
    return same and old.get("identified", True) and manifest["identified"] and _same_columns(old, manifest)


def _same_rows(old: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether two jobs' row counts agree, where both are known."""
    return old.get("rows") is None or manifest["rows"] is None or old.get("rows") == manifest["rows"]


def _same_columns(old: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether two jobs write the same score columns, in whatever order."""
    return sorted(_columns(old)) == sorted(_columns(manifest))


def _decide(work_dir: Path, output_path: Path, manifest: dict[str, Any], overwrite: bool,
            output: OutputFormat) -> tuple[str, int] | str:
    """``("fresh" | "resume" | "complete", chunk size)`` (complete: a kill interrupted the cleanup after
    the output was in place), or the message refusing to mix with another job's results."""
    try:
        old = json.loads((work_dir / COMPLETE).read_text(encoding="utf-8"))
        if _same_job(old, manifest) and output.is_complete(output_path):
            return "complete", old["chunk_size"]
    except (OSError, ValueError, KeyError):
        pass
    try:
        old = json.loads((work_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "fresh", manifest["chunk_size"]  # no job yet, or one killed before its manifest was written
    if _same_job(old, manifest) and isinstance(old.get("chunk_size"), int):
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
    reasons = []
    if old.get("scorer") != manifest["scorer"]:
        reasons.append(f"the scorer config changed (was {old.get('scorer')}, now {manifest['scorer']})")
    if not (old.get("identified", True) and manifest["identified"]):
        reasons.append("the model has no identity (a model object, or a backend whose identity() is None), so "
                       "nothing can tell that its results are this model's")
    elif old.get("model") != manifest["model"]:
        reasons.append("the model changed (its weight files, or the dtype or device type it scores in)")
    if old.get("data") != manifest["data"] or not _same_rows(old, manifest):
        counts = (f" ({old.get('rows')} rows before, {manifest['rows']} now)"
                  if old.get("rows") is not None and manifest["rows"] is not None else "")
        reasons.append(f"the input data changed{counts}")
    if not _same_columns(old, manifest):
        reasons.append(f"the score columns changed (were {', '.join(_columns(old))}, now "
                       f"{', '.join(_columns(manifest))})")
    return _refusal(work_dir, "; ".join(reasons) or "its manifest differs")


def _refusal(work_dir: Path, reasons: str) -> str:
    """The message refusing to mix this run's results with those of another job in ``work_dir``."""
    return (f"{work_dir} holds partial results of a different job: {reasons}. Rerun the original job to resume it, "
            "or pass --overwrite to discard those results and start again.")


def _columns(manifest: Mapping[str, Any]) -> list[str]:
    """The score columns a manifest's job writes: ``score``, and those it records beside it."""
    return manifest.get("columns") or [SCORE]


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
    PartialState().wait_for_everyone()


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
                         plan.schema)
    manifest = json.loads((work_dir / MANIFEST).read_text(encoding="utf-8"))
    write_atomically(work_dir / COMPLETE, json.dumps({**manifest, "total_rows": num_rows}))
    (work_dir / MANIFEST).unlink()
    _remove_work_dir(work_dir)
    record_finished_job(plan.output_path, plan.output, manifest, num_rows, valid)
    return valid


def score_schema(scorer: RowScorer, columns: Mapping[str, str]) -> Any:
    """The Parquet types of the score ``columns`` (output -> column): a float64 ``score``, the other
    outputs of the types the scorer declares (:meth:`~hf_adapters.scorers.RowScorer.output_features`)."""
    from datasets import Features, Value

    features = scorer.output_features()
    first = next(iter(columns))
    return Features({column: Value("float64") if output == first else features[output]
                     for output, column in columns.items()}).arrow_schema.remove_metadata()


def output_schema(dataset: Dataset | IterableDataset, output: OutputFormat, scores: Any) -> Any:
    """The Parquet schema of an output: keeping the rows' columns, theirs, of the types the data holds
    (those ``output.column_types`` names, as the source stores them), then the score columns of the
    types ``scores`` gives (:func:`score_schema`); without them, the id's type (:func:`id_type`)
    and ``scores``. A stream that does not say its types is read once to learn them, so that a
    column empty in its first rows still gets the type of its later values; types that cannot be
    reconciled are a ValueError. None for JSONL."""
    if output.kind != "parquet":
        return None
    import pyarrow as pa

    columns = dataset.features.arrow_schema if dataset.features is not None else _stream_schema(dataset)
    if not output.keep_columns:
        written = id_type(columns.field("id").type if "id" in columns.names else None)
        return pa.schema([pa.field("id", written), *scores]) if written is not None else scores
    if output.column_types is not None:
        source = output.column_types
        columns = pa.schema([source.field(field.name) if field.name in source.names else field
                             for field in columns])
    return pa.schema([*columns.remove_metadata(), *scores])


def id_type(stored: Any) -> Any:
    """The Parquet type of the ids a job writes, for an id column of the pyarrow type ``stored``
    (None: the data has none, and its rows are written with their numbers, int64): a number, a
    boolean, text or nulls as they are; other scalars (dates, bytes, decimals) as the text
    :func:`~hf_adapters.files.json_values.to_json_value` makes of them; None (the first shard's type) for
    nested values."""
    import pyarrow as pa

    if stored is None:
        return pa.int64()
    if pa.types.is_nested(stored):
        return None
    plain = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
             pa.types.is_large_string, pa.types.is_null)
    return stored if any(kind(stored) for kind in plain) else pa.string()


def _stream_schema(dataset: IterableDataset) -> Any:
    """The types of a stream's columns, unified over all its rows (null promoted to any type)."""
    import pyarrow as pa

    schema = None
    for start, batch in enumerate(dataset.iter(batch_size=CHECK_CHUNK_SIZE)):
        try:
            types = pa.Table.from_pydict(batch).schema
            schema = types if schema is None else pa.unify_schemas([schema, types], promote_options="permissive")
        except (pa.ArrowException, OverflowError) as error:
            raise ValueError(f"The rows' columns cannot be kept in Parquet: from row {start * CHECK_CHUNK_SIZE} on, "
                             f"{error}") from None
    return schema if schema is not None else pa.schema([])


def _remove_work_dir(work_dir: Path) -> None:
    """Remove the parts first and the completion record last, so that a kill at any moment leaves
    either a resumable job or a record that the output is complete."""
    for entry in work_dir.iterdir():
        if entry.name not in (COMPLETE, LOCK):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (work_dir / COMPLETE).unlink(missing_ok=True)
    shutil.rmtree(work_dir)
