"""A job's work folder, ``OUTPUT.parts/`` beside its output: :class:`WorkFolder`, one per job's output,
whatever the engine that runs the job.

- ``lock``: the command (process 0 of ``accelerate launch``) holds an exclusive lock on it while the
  job runs, so that a second identical command stops at once (:meth:`WorkFolder.locked`);
- ``manifest.json``: what the job is (:func:`~hf_adapters.engines.job_files.job_manifest`: the
  scorer, the model's identity, the data's fingerprint and row count, the score columns), and how the
  engine running it cuts its rows (its ``layout``: the local engine's ``chunk_size``; the Ray engine
  names itself, ``engine``, and gives ``rows_per_block`` and ``rows_per_chunk``). A rerun keeps them;
- the rows saved so far, as the engine keeps them (the local engine's ``rank-*.jsonl``, the Ray
  engine's part per block), which the engine counts for the folder (its ``count_saved``);
- ``rows.json``: a stream's row count, written by the process that reaches its end;
- ``complete.json``: once the output is in place, the manifest with the rows, the valid scores and the
  output's format (:meth:`WorkFolder.finish`): the output is this job's, complete.

Holding the lock, :meth:`WorkFolder.open` starts the job afresh, resumes it, or finds it complete (a
kill came during the cleanup); partial results of another job are a :class:`JobConflictError` unless
``overwrite`` or nothing is saved in them. Once the output is in place, :meth:`WorkFolder.finish`
records the job as complete, removes the folder, that record last, and records the finished job for
any engine's rerun (:func:`~hf_adapters.engines.job_files.record_finished_job`): a kill at any moment
leaves a job that the same command resumes. A run that fails or is stopped before any row is saved
removes the folder (:meth:`WorkFolder.discard_if_nothing_saved`), so that nothing is left behind to
refuse the corrected command. The lock and the atomic writes are those of every run folder
(:mod:`hf_adapters.files.run_folder`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_adapters.core.options import DEFAULT_ENGINE
from hf_adapters.engines.job_files import (
    PARTS,
    WRITTEN_FORMAT,
    format_record,
    job_changes,
    read_json,
    record_finished_job,
    same_job,
    written_in,
)
from hf_adapters.files.json_values import TEMPORARY, remove_temporary_files, write_atomically
from hf_adapters.files.run_folder import LockHeld, exclusive_lock
from hf_adapters.files.score_files import SHARD_PATTERN, OutputFormat, count_valid

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
#: The manifest, with the rows and valid scores, once ``OUTPUT`` is in place: the output is this job's, complete.
COMPLETE = "complete.json"
LOCK = "lock"
#: Written by the process that reaches the end of a stream: how many rows it has.
STREAM_ROWS = "rows.json"
#: Choices process 0's backend made by measuring (which CPU kernel runs the products): a rerun reuses them.
CHOICES = "choices.json"

#: How an engine counts the rows a work folder holds: (the folder, the job's manifest, the data's rows,
#: None for a stream whose end no process has reached) -> the rows saved.
SavedRows = Callable[[Path, Mapping[str, Any], "int | None"], int]


class JobConflictError(ValueError):
    """Partial results on disk belong to a different job (another config or other data),
    or another job is writing the same output."""


def work_dir_for(output_path: str | Path) -> Path:
    """The directory holding a job's manifest and part files: ``OUTPUT.parts`` beside ``OUTPUT``.

    Example:
        >>> work_dir_for("scores/ppl.jsonl").as_posix()
        'scores/ppl.jsonl.parts'
    """
    output_path = Path(output_path)
    return output_path.with_name(output_path.name + ".parts")


def work_files(output_path: str | Path, output: OutputFormat, parts: Iterable[str] = ()) -> list[Path]:
    """Files a job writes on the way to ``output_path`` (one of each kind): in the work directory,
    the engine's ``parts`` (the names of the files it saves rows in) and the folder's manifest and
    markers; the temporary output and, for Parquet, the shards."""
    output_path, work_dir = Path(output_path), work_dir_for(output_path)
    temporary = output_path.with_name(output_path.name + ".tmp")
    files = [work_dir / name for name in (*parts, MANIFEST, COMPLETE, STREAM_ROWS, CHOICES, LOCK)]
    if output.kind == "parquet":
        return [*files, *(folder / SHARD_PATTERN.format(0) for folder in (output_path, temporary))]
    return [*files, temporary]


def engine_of(manifest: Mapping[str, Any]) -> str:
    """The engine that started the job a manifest describes (:data:`DEFAULT_ENGINE` where it names none)."""
    return manifest.get("engine") or DEFAULT_ENGINE


@dataclass(frozen=True)
class WorkFolder:
    """The work folder of the job writing ``output_path``, as the engine named ``engine`` keeps it: it
    counts the rows saved with ``count_saved``, and its manifests give each key of ``layout`` as a
    whole number (how it cuts the rows), which a resumed job keeps.

    Example:
        >>> folder = WorkFolder(Path("scores/ppl.jsonl"), "local", lambda path, manifest, rows: 0)
        >>> folder.path.as_posix(), folder.saved_rows()
        ('scores/ppl.jsonl.parts', (0, None))
    """

    output_path: Path
    engine: str
    count_saved: SavedRows
    layout: Sequence[str] = ("chunk_size",)

    @property
    def path(self) -> Path:
        """The folder: ``OUTPUT.parts`` (:func:`work_dir_for`)."""
        return work_dir_for(self.output_path)

    def file(self, name: str) -> Path:
        """The file ``name`` of the folder."""
        return self.path / name

    def manifest(self) -> Any:
        """The manifest on disk; None where there is none (or it cannot be read)."""
        return read_json(self.file(MANIFEST))

    def stream_rows(self) -> int | None:
        """A stream's row count, once a process has read to its end; None before."""
        try:
            return int(read_json(self.file(STREAM_ROWS))["rows"])
        except (ValueError, KeyError, TypeError):
            return None

    def write_stream_rows(self, rows: int) -> None:
        """Say where the stream ends: it has ``rows`` rows."""
        write_atomically(self.file(STREAM_ROWS), json.dumps({"rows": rows}))

    def saved_rows(self) -> tuple[int, int | None]:
        """How many rows the job has saved (all of them once its output is complete), and how many rows
        its data has (None for a stream whose end no process has reached yet). ``(0, None)`` before
        the job has a manifest."""
        manifest = self.manifest()
        if not isinstance(manifest, dict):
            complete = read_json(self.file(COMPLETE))
            total = complete.get("total_rows") if isinstance(complete, dict) else None
            return (total, total) if isinstance(total, int) else (0, None)
        rows = manifest.get("rows")
        rows = rows if rows is not None else self.stream_rows()
        return (self.count_saved(self.path, manifest, rows) if self._is_mine(manifest) else 0), rows

    def stopped_line(self, stopped: str = "Interrupted") -> str:
        """What a Ctrl-C prints (or what another cause that ``stopped`` the job, a full disk, prints after
        saying so): the rows saved (of the data's, where known) in the folder, and that the same
        command resumes; or that nothing was saved."""
        saved, total = self.saved_rows()
        if not saved:
            return f"{stopped} before any row was saved; the same command starts again."
        of = "" if total is None else f" of {total:,}"
        return f"{stopped}: {saved:,}{of} rows are saved in {self.path}; run the same command again to resume."

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock while the body runs (the folder is created); a JobConflictError at
        once where another command holds it (:func:`~hf_adapters.files.run_folder.exclusive_lock`)."""
        try:
            with exclusive_lock(self.file(LOCK)):
                yield
        except LockHeld:
            raise JobConflictError(f"Another job is writing {self.output_path.name} (it holds {self.file(LOCK)}); "
                                   "wait for it to finish, or choose another output.") from None

    def open(self, manifest: dict[str, Any], output: OutputFormat, overwrite: bool) -> tuple[str, dict[str, Any]]:
        """Start the job ``manifest`` describes afresh, resume it or find it complete (a kill came after
        its output was in place, in the format ``output`` asks for): ``("fresh" | "resume" | "complete",
        the manifest in force)``, the one on disk where it resumes (with its layout, whatever this run's)
        or is complete. Partial results of another job (another engine's included) are a
        JobConflictError, unless ``overwrite`` (or nothing is saved in them): then they are discarded.
        What killed writes left half written in the folder is removed. Call it holding the lock."""
        remove_temporary_files(self.path)
        complete = read_json(self.file(COMPLETE))
        if isinstance(complete, dict) and same_job(complete, manifest) and written_in(complete, output) and \
                output.is_complete(self.output_path) and \
                (PARTS not in manifest or complete.get(PARTS, manifest[PARTS]) == manifest[PARTS]):
            return "complete", complete
        old = self.manifest()
        if isinstance(old, dict) and self._is_mine(old) and same_job(old, manifest) and \
                old.get(PARTS) == manifest.get(PARTS):
            if old.get("rows") is None and manifest["rows"] is not None and \
                    (rows := self.stream_rows()) not in (None, manifest["rows"]):
                raise JobConflictError(self.refusal(f"the input data changed ({rows} rows before, "
                                                    f"{manifest['rows']} now)"))
            return "resume", old
        if isinstance(old, dict):
            if self.nothing_saved():
                logger.info("%s holds no saved row of another job; starting afresh", self.path)
            elif overwrite:
                logger.info("overwrite: discarding the partial results in %s", self.path)
            elif engine_of(old) == DEFAULT_ENGINE != self.engine:
                raise JobConflictError(f"{self.path} holds partial results of a job of the default engine: finish it "
                                       f"(run the command without --engine {self.engine}), or pass --overwrite to "
                                       "discard them.")
            else:
                raise JobConflictError(self.refusal(job_changes(old, manifest)))
        self.path.mkdir(parents=True, exist_ok=True)
        self._remove(keep=(LOCK,))
        write_atomically(self.file(MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        return "fresh", manifest

    def refusal(self, reasons: str) -> str:
        """The message refusing to mix this run's results with those of another job in the folder."""
        return (f"{self.path} holds partial results of a different job: {reasons}. Rerun the original job to resume "
                "it, or pass --overwrite to discard those results and start again.")

    def nothing_saved(self) -> bool:
        """Whether the folder holds no saved row and no completed output: of a job of this engine, as it
        counts them; of another engine's, no file with something in it beside the lock, the manifest
        and the stream's row count."""
        if self.file(COMPLETE).exists():
            return False
        manifest = self.manifest()
        if manifest is None:
            return True
        if isinstance(manifest, dict) and self._is_mine(manifest):
            return self.saved_rows()[0] == 0
        return not any(entry.name not in (LOCK, MANIFEST, CHOICES, STREAM_ROWS) and TEMPORARY not in entry.name
                       and (entry.is_dir() or entry.stat().st_size) for entry in self.path.iterdir())

    def discard_if_nothing_saved(self) -> None:
        """Remove the folder of a run that failed or was stopped before any row was saved: there is
        nothing to resume, and a corrected command must not be refused as another job."""
        if self.path.is_dir() and self.nothing_saved():
            shutil.rmtree(self.path, ignore_errors=True)

    def clean_up_complete(self, complete: Mapping[str, Any], output: OutputFormat, column: str) -> tuple[int, int]:
        """Finish the cleanup of a job whose output was complete (``complete``, its record) when a kill
        stopped it; its ``(rows, valid scores)`` (of the score ``column``, counted where an earlier
        version's record does not say)."""
        logger.info("%s is already this job's complete output; finishing its cleanup.", self.output_path)
        rows = complete["total_rows"]
        valid = complete["valid"] if "valid" in complete else count_valid(self.output_path, output, column)
        self.finish(output, complete, rows, valid)
        return rows, valid

    def finish(self, output: OutputFormat, manifest: Mapping[str, Any], rows: int, valid: int) -> None:
        """With the output in place: record the job ``manifest`` describes as complete (a kill from here
        on leaves a job whose rerun only cleans up), remove the folder, that record last, and record
        the finished job for any engine's rerun (:func:`~hf_adapters.engines.job_files.record_finished_job`)."""
        job = {key: value for key, value in manifest.items() if key not in ("total_rows", "valid", WRITTEN_FORMAT)}
        complete = {**job, "total_rows": rows, "valid": valid, WRITTEN_FORMAT: format_record(output)}
        write_atomically(self.file(COMPLETE), json.dumps(complete, sort_keys=True))
        self._remove(keep=(COMPLETE, LOCK))
        self.file(COMPLETE).unlink(missing_ok=True)
        shutil.rmtree(self.path, ignore_errors=True)
        record_finished_job(self.output_path, output, job, rows, valid)

    def _is_mine(self, manifest: Mapping[str, Any]) -> bool:
        """Whether ``manifest`` is that of a job of this engine, giving its whole layout."""
        return engine_of(manifest) == self.engine and all(isinstance(manifest.get(key), int) for key in self.layout)

    def _remove(self, keep: Sequence[str]) -> None:
        """Remove everything in the folder but the files ``keep`` names (the manifest first, so that a
        kill meanwhile leaves no manifest of a job whose rows are gone)."""
        self.file(MANIFEST).unlink(missing_ok=True)
        for entry in self.path.iterdir():
            if entry.name not in keep:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
