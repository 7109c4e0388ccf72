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
does no work.

A stream (an ``IterableDataset``) has no length and no random access: every process reads it from
the start, in chunks, scores the chunks that are its own (chunk number modulo the number of
processes) and are not done yet, and checks each chunk's rows just before scoring it. Process 0
writes the row count to ``rows.json`` when it reaches the end (before its last, partial chunk),
so the merge, and a rerun, know where the data ends.

A part line is ``{"i", "id", "score"}``: the row's index, its id and the scorer's first output. A job
asked for more of the scorer's outputs (``OutputFormat.score_columns``) writes each of them in every
line, under its own name, and records their columns in the manifest (``columns``): a rerun asking
for other columns is another job.
"""

from __future__ import annotations

import contextlib
import fcntl
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

from .columns import add_score_columns
from .json_values import json_safe, to_json_value, truncate_file, whole_json_lines, write_atomically
from .options import DEFAULT_BATCH_SIZE
from .output_paths import check_output_path
from .score_files import SCORE, SHARD_PATTERN, OutputFormat, count_valid, records, write_output
from .scorers import RowScorer, build_scorer
from .scorers.base import ModelRowScorer, row_name
from .wording import plural

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
        scored: rows scored by this run; the others came from an earlier, interrupted run.
    """

    rows: int
    valid: int
    seconds: float
    scored: int

    @property
    def rows_per_second(self) -> float:
        return self.scored / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        return f"{plural(self.rows, 'row')}, {plural(self.valid, 'valid score')}, {self.rows_per_second:.1f} rows/s"


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


def is_out_of_memory(error: BaseException) -> bool:
    """True for CUDA's out-of-memory error and for the RuntimeErrors other backends raise for it."""
    return isinstance(error, torch.cuda.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "out of memory" in str(error)
    )


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
    rerun. Partial results of a different job (another scorer config or other data) raise a
    ``JobConflictError`` unless ``overwrite`` is set.
    ``data_fingerprint`` identifies the data (default: ``dataset._fingerprint``; a stream needs
    one); the command line passes a hash of the input files. Every row of a ``Dataset`` is checked
    with ``scorer.check_rows`` before any is scored; a stream's rows are checked chunk by chunk. The
    output appears only once complete. Every process returns the same summary. ``expected_rows``
    gives the progress bar of a stream its total (the stream's own end still decides where it ends).

    Example:
        >>> from hf_adapters.data_io import read_rows
        >>> from hf_adapters.jobs import run_scoring_job
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
    check_dataset(dataset, scorer, output, columns)
    schema = output_schema(dataset, output, score_schema(scorer, columns))
    scorer.prepare()  # a model that fails to load leaves no work directory behind

    # Batch size and process count are not part of the job: scores do not depend on them. A model the
    # job cannot identify (an object, a backend whose identity() is None) makes results it never reuses.
    identity = scorer.model_identity()
    manifest = {
        "scorer": {key: value for key, value in scorer.fingerprint().items() if key != "batch_size"},
        "model": identity,
        "identified": identity is not None or not isinstance(scorer, ModelRowScorer),
        "data": data_fingerprint or dataset._fingerprint,
        "rows": None if streaming else len(dataset),
        "chunk_size": chunk_size,
        **({"columns": list(columns.values())} if len(columns) > 1 else {}),
    }
    plan = _Plan(output_path, output, columns, schema, progress, expected_rows)
    with _job_lock(work_dir_for(output_path), state):
        return _run_locked(dataset, scorer, plan, _jsonable(manifest), overwrite, started)


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
            rows = json.loads((work_dir / COMPLETE).read_text(encoding="utf-8"))["total_rows"]
            _remove_work_dir(work_dir)
            valid = (rows, count_valid(output_path, output))
        [valid] = broadcast_object_list([valid]) if state.num_processes > 1 else [valid]
        return JobSummary(valid[0], valid[1], time.perf_counter() - started, 0)

    # Process 0 cuts every part back to its complete chunks and says which are done.
    num_rows = manifest["rows"] if manifest["rows"] is not None else _stream_rows(work_dir)
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
            handle.write(b"".join(_part_line(i, row.get("id", ""), cells)
                                  for i, (row, cells) in enumerate(zip(rows, values, strict=True), start)))
            handle.flush()
            os.fsync(handle.fileno())
            bar.update(len(rows))
    (work_dir / f"rank-{state.process_index:05d}.done").touch()

    _wait_for_parts(work_dir, state.num_processes)
    num_rows = manifest["rows"] if manifest["rows"] is not None else _stream_rows(work_dir)
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
    names = dataset.column_names
    if names is None:  # a stream that does not say its columns: its first row does
        names = list(next(iter(dataset), {}))
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
    the process count is this process's rank."""
    if isinstance(dataset, Dataset):
        todo = [chunk for chunk in range(math.ceil(num_rows / chunk_size)) if chunk not in done]
        for chunk in (todo[i] for i in shard_range(len(todo), 1, state.process_index, state.num_processes)):
            span = _chunk_rows(chunk, num_rows, chunk_size)
            yield span.start, _rows(dataset, span.start, span.stop)
        return
    start = 0
    for chunk, batch in enumerate(dataset.iter(batch_size=chunk_size)):
        rows = [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]
        if len(rows) < chunk_size and state.is_main_process:  # the end: say where it is before scoring it
            write_atomically(work_dir / STREAM_ROWS, json.dumps({"rows": start + len(rows)}))
        if chunk not in done and chunk % state.num_processes == state.process_index:
            yield start, rows
        start += len(rows)
    if state.is_main_process:
        write_atomically(work_dir / STREAM_ROWS, json.dumps({"rows": start}))


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
    (:func:`hf_adapters.columns.add_score_columns`). With it the work goes through
    :func:`run_scoring_job` (resumable, sharded over the processes of ``accelerate launch``; point it
    at storage every process sees) and the scores also stay in that JSONL file.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.jobs import score_dataset
        >>> rows = Dataset.from_list([{"instruction": "Say hi.", "input": "", "output": "Hi!"}])
        >>> score_dataset(rows, {"name": "PPLScorer"})["score"]  # doctest: +SKIP
        [23.7]
    """
    if not isinstance(scorer, RowScorer):
        scorer = build_scorer(scorer)
    # Scorers see rows as the command line gives them: with an ``id`` ("" when the data has none).
    work_data = dataset if "id" in dataset.column_names else dataset.add_column("id", [""] * len(dataset))
    if output_path is None:
        if PartialState().num_processes > 1:
            raise ValueError("Pass `output_path` (on storage every process sees) when running on several processes.")
        scores = add_score_columns(work_data, scorer, names={scorer.outputs[0]: column})[column]
    else:
        run_scoring_job(work_data, scorer, output_path, overwrite=overwrite, progress=progress)
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
    same = all(old.get(key) == manifest[key] for key in ("scorer", "model", "data", "rows"))
    return same and old.get("identified", True) and manifest["identified"] and _same_columns(old, manifest)


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
        return "resume", old["chunk_size"]
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
    if old.get("data") != manifest["data"] or old.get("rows") != manifest["rows"]:
        counts = (f" ({old.get('rows')} rows before, {manifest['rows']} now)"
                  if old.get("rows") is not None and manifest["rows"] is not None else "")
        reasons.append(f"the input data changed{counts}")
    if not _same_columns(old, manifest):
        reasons.append(f"the score columns changed (were {', '.join(_columns(old))}, now "
                       f"{', '.join(_columns(manifest))})")
    return (
        f"{work_dir} holds partial results of a different job: {'; '.join(reasons) or 'its manifest differs'}. "
        "Rerun the original job to resume it, or pass --overwrite to discard those results and start again."
    )


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
    types ``scores`` gives (:func:`score_schema`); without them, ``scores`` alone (the id's type is
    the first shard's). A stream that does not say its types is read once to learn them, so that a
    column empty in its first rows still gets the type of its later values; types that cannot be
    reconciled are a ValueError. None for JSONL."""
    if output.kind != "parquet":
        return None
    if not output.keep_columns:
        return scores
    import pyarrow as pa

    columns = dataset.features.arrow_schema if dataset.features is not None else _stream_schema(dataset)
    if output.column_types is not None:
        source = output.column_types
        columns = pa.schema([source.field(field.name) if field.name in source.names else field
                             for field in columns])
    return pa.schema([*columns.remove_metadata(), *scores])


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
