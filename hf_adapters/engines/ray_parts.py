"""A Ray job's work folder, ``OUTPUT.parts/`` (:func:`~hf_adapters.engines.job_files.work_dir_for`), and
the output made of it.

- ``lock``: the command holds it while the job runs, so that a second identical command stops at once;
- ``manifest.json``: what the job is (:func:`~hf_adapters.engines.job_files.job_manifest`: the scorer,
  the model's identity, the data's fingerprint and row count, the score columns), that the Ray engine
  runs it, and how its rows are cut: ``rows_per_block`` rows per block, scored ``rows_per_chunk`` at
  a time (its ``chunk_size`` is null: the local engine's chunks are another layout). A rerun keeps
  both, whatever its own options. It also says how the parts hold the output's records (``parts``,
  :func:`~hf_adapters.engines.job_files.part_layout`: the format, the rows' own columns or not, the
  score columns in order), which a rerun must write as they do to resume the job (else it is refused,
  naming the option), and whether the Parquet output is made of the parts themselves (``file_per_block``,
  the last run's: it changes nothing in the parts, and is recorded with the finished job);
- one part per finished block, written by the worker that scored it (:func:`save_part`):
  ``part-SSSSS-NAME-FIRST-STOP.jsonl`` (``.parquet`` for Parquet output), the block of rows FIRST to
  STOP of shard number SSSSS, file NAME (:func:`block_name`: the same for the same data in every run,
  whatever Ray does with its own blocks, and in input order when sorted). It holds the block's output
  records as the output holds them; beside it, ``.done`` says how many rows and valid scores it has,
  and is written last: a part without one is scored again.

When every block is done, :func:`merge_parts` writes the output from the parts in input order, a
part at a time (a JSONL output is their bytes one after another; a Parquet output is cut into
shards of ``rows_per_shard`` rows, or, with ``file_per_block``, is the parts themselves), then
records the job as complete and removes the folder, as the local engine does
(:mod:`hf_adapters.engines.local`): a kill at any moment leaves a job that the same command resumes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.engines.job_files import (
    COMPLETE,
    FILE_PER_BLOCK,
    LOCK,
    MANIFEST,
    PARTS,
    WRITTEN_FORMAT,
    format_record,
    job_changes,
    read_json,
    record_finished_job,
    rows_without_manifest,
    same_job,
    work_dir_for,
    written_in,
)
from hf_adapters.engines.local import JobConflictError
from hf_adapters.files.score_files import SHARD_PATTERN, OutputFormat, write_output

if TYPE_CHECKING:
    import pyarrow as pa

    from hf_adapters.engines.ray_shards import Shard

#: The engine a Ray job's manifest names.
ENGINE = "ray"
#: What a finished part's record is called: the part's name and this.
DONE = ".done"
#: The longest piece of a shard's file name in its parts' names.
NAME_CHARS = 40


def block_name(shard: Shard, block: range) -> str:
    """The name of the part of ``block`` (rows of ``shard``, counted from its first): shard number,
    file name, first and last row + 1, zero-padded so that the names of a job sort in input order.

    Example:
        >>> from hf_adapters.engines.ray_shards import Shard
        >>> block_name(Shard(3, "/data/train 1.jsonl", 10_000, 30_000), range(4096, 8192))
        'part-00003-train_1-000000004096-000000008192'
    """
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(shard.path).stem)[:NAME_CHARS]
    return f"part-{shard.index:05d}-{name}-{block.start:012d}-{block.stop:012d}"


def part_file(work_dir: Path, name: str, output: OutputFormat) -> Path:
    """Where the part ``name`` of a job writing ``output`` is kept."""
    return work_dir / f"{name}.{'parquet' if output.kind == 'parquet' else 'jsonl'}"


def save_part(work_dir: Path, name: str, output: OutputFormat, records: bytes | pa.Table, rows: int,
              valid: int) -> None:
    """Write a block's ``records`` (JSONL bytes, or a table for Parquet) as its part, durably and
    under a temporary name first, then its record of ``rows`` and ``valid`` scores: the block is done.
    Two workers may save the same block (a retried task, a killed job's last worker): both write the same."""
    _write_durably(part_file(work_dir, name, output), records)
    _write_durably(work_dir / f"{name}{DONE}", json.dumps({"rows": rows, "valid": valid}).encode())


def _write_durably(path: Path, content: bytes | pa.Table) -> None:
    """``content`` (bytes, or a table as Parquet) to ``path``, through a temporary file of this
    process's own, fsynced, renamed onto it."""
    temporary = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with open(temporary, "wb") as handle:
            if isinstance(content, bytes):
                handle.write(content)
            else:
                import pyarrow.parquet as pq

                pq.write_table(content, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def finished_parts(work_dir: Path, names: Sequence[str], output: OutputFormat) -> dict[str, tuple[int, int]]:
    """``{name: (rows, valid scores)}`` of the parts of ``names`` that are done (the part and its record)."""
    present = {entry.name for entry in work_dir.iterdir()} if work_dir.is_dir() else set()
    done = {}
    for name in names:
        if f"{name}{DONE}" in present and part_file(work_dir, name, output).name in present:
            record = read_json(work_dir / f"{name}{DONE}")
            if isinstance(record, dict) and isinstance(record.get("rows"), int):
                done[name] = (record["rows"], record.get("valid", 0))
    return done


def open_work_dir(work_dir: Path, output_path: Path, manifest: dict[str, Any], overwrite: bool,
                  output: OutputFormat) -> tuple[str, dict[str, Any]]:
    """Start the job afresh, resume it or find it complete (a kill came after its output was in place):
    ``("fresh" | "resume" | "complete", the manifest in force)``, the one on disk where it resumes or
    is complete. Partial results of another job, of parts that hold the records otherwise than
    ``manifest`` says (its ``parts``), or of the local engine are a JobConflictError, unless
    ``overwrite`` (or nothing is saved in them): then they are discarded. Call it holding the lock."""
    complete = read_json(work_dir / COMPLETE)
    if isinstance(complete, dict) and same_job(complete, manifest) and written_in(complete, output) and \
            output.is_complete(output_path) and complete.get(PARTS, manifest[PARTS]) == manifest[PARTS]:
        return "complete", complete
    old = read_json(work_dir / MANIFEST)
    if isinstance(old, dict) and old.get("engine") == ENGINE and same_job(old, manifest) and \
            old.get(PARTS) == manifest[PARTS] and isinstance(old.get("rows_per_block"), int) and \
            isinstance(old.get("rows_per_chunk"), int):
        return "resume", old
    if isinstance(old, dict) and not (overwrite or nothing_saved(work_dir)):
        if old.get("engine") != ENGINE:
            raise JobConflictError(f"{work_dir} holds partial results of a job of the default engine: finish it (run "
                                   "the command without --engine ray), or pass --overwrite to discard them.")
        raise JobConflictError(f"{work_dir} holds partial results of a different job: {job_changes(old, manifest)}. "
                               "Rerun the original job to resume it, or pass --overwrite to discard those results "
                               "and start again.")
    work_dir.mkdir(parents=True, exist_ok=True)
    for entry in work_dir.iterdir():
        if entry.name != LOCK:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    _write_durably(work_dir / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return "fresh", manifest


def nothing_saved(work_dir: Path) -> bool:
    """Whether ``work_dir`` holds no finished part (of this engine) and no saved row (of the local engine)."""
    if not work_dir.is_dir():
        return True
    return not any(entry.name.endswith(DONE) or (entry.name.startswith("rank-") and entry.stat().st_size)
                   for entry in work_dir.iterdir())


def remove_temporary_files(work_dir: Path) -> None:
    """Remove what a killed run's workers left half written (saving a part is renaming a whole file)."""
    for entry in work_dir.glob("*.tmp-*"):
        entry.unlink(missing_ok=True)


def saved_rows(output_path: str | Path) -> tuple[int, int | None]:
    """How many rows the Ray job writing ``output_path`` has saved (all of them once its output is
    complete), and how many the data has (None before the job has a manifest): for the line a Ctrl-C
    prints."""
    work_dir = work_dir_for(output_path)
    manifest = read_json(work_dir / MANIFEST)
    if not isinstance(manifest, dict):
        return rows_without_manifest(work_dir)
    saved = 0
    for record in work_dir.glob(f"*{DONE}"):
        found = read_json(record)
        saved += found.get("rows", 0) if isinstance(found, dict) else 0
    return saved, manifest.get("rows")


def discard_if_nothing_saved(output_path: Path) -> None:
    """Remove the work folder of a Ray job that stopped before any part was saved: there is nothing to
    resume, and the corrected command must not be refused as another job."""
    work_dir = work_dir_for(output_path)
    manifest = read_json(work_dir / MANIFEST)
    if isinstance(manifest, dict) and manifest.get("engine") == ENGINE and nothing_saved(work_dir):
        shutil.rmtree(work_dir, ignore_errors=True)


def merge_parts(work_dir: Path, output_path: Path, output: OutputFormat, names: Sequence[str], schema: Any,
                manifest: Mapping[str, Any], rows: int, valid: int, file_per_block: bool = False) -> None:
    """Write the output from the parts ``names`` (in input order), record the job as complete (its
    ``rows`` and ``valid`` scores), and remove the work folder. A JSONL output is the parts' bytes one
    after another; a Parquet one is cut into shards of ``output.rows_per_shard`` rows of ``schema``,
    a part at a time, or, with ``file_per_block``, is the parts themselves (which the record of the
    finished job says). The output is written under a temporary name, then renamed: it appears whole
    or not at all."""
    temporary = output_path.with_name(output_path.name + ".tmp")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    parts = [part_file(work_dir, name, output) for name in names]
    try:
        if output.kind == "jsonl":
            with open(temporary, "wb") as handle:
                for part in parts:
                    with open(part, "rb") as source:
                        shutil.copyfileobj(source, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, output_path)
        elif not rows:
            write_output(output_path, output, iter(()), schema)
        else:
            shutil.rmtree(temporary, ignore_errors=True)
            temporary.mkdir()
            if file_per_block:
                for part in parts:
                    os.link(part, temporary / part.name)
            else:
                _write_shards(parts, temporary, output.rows_per_shard)
            if output_path.is_dir():
                shutil.rmtree(output_path)
            os.replace(temporary, output_path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True) if temporary.is_dir() else temporary.unlink(missing_ok=True)
        raise
    finish(work_dir, output_path, output, {**manifest, FILE_PER_BLOCK: file_per_block}, rows, valid)


def _write_shards(parts: Sequence[Path], folder: Path, rows_per_shard: int) -> None:
    """The rows of Parquet ``parts``, in order, as shards of ``rows_per_shard`` rows in ``folder``,
    each written whole as the local engine writes its shards; one part is read at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pending: list[pa.Table] = []
    held = number = 0
    for part in parts:
        table = pq.read_table(part)
        while table.num_rows:
            taken = table.slice(0, rows_per_shard - held)
            pending.append(taken)
            held += taken.num_rows
            table = table.slice(taken.num_rows)
            if held == rows_per_shard:
                pq.write_table(pa.concat_tables(pending).combine_chunks(), folder / SHARD_PATTERN.format(number))
                pending, held, number = [], 0, number + 1
    if pending:
        pq.write_table(pa.concat_tables(pending).combine_chunks(), folder / SHARD_PATTERN.format(number))


def finish(work_dir: Path, output_path: Path, output: OutputFormat, manifest: dict[str, Any], rows: int,
           valid: int) -> None:
    """With the output in place: record the job as complete (a kill from here on leaves a job whose
    rerun only cleans up), remove the work folder, that record last, and record the finished job
    for any engine's rerun (:func:`~hf_adapters.engines.job_files.record_finished_job`)."""
    complete = {**manifest, "total_rows": rows, "valid": valid, WRITTEN_FORMAT: format_record(output)}
    _write_durably(work_dir / COMPLETE, json.dumps(complete, sort_keys=True).encode())
    (work_dir / MANIFEST).unlink(missing_ok=True)
    for entry in work_dir.iterdir():
        if entry.name not in (COMPLETE, LOCK):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (work_dir / COMPLETE).unlink(missing_ok=True)
    shutil.rmtree(work_dir, ignore_errors=True)
    record_finished_job(output_path, output, {key: value for key, value in manifest.items()
                                              if key not in ("total_rows", "valid", WRITTEN_FORMAT)}, rows, valid)
