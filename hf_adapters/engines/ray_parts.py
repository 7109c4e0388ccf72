"""A Ray job's rows in its work folder, ``OUTPUT.parts/`` (:class:`~hf_adapters.engines.work_folder.WorkFolder`:
the lock, the manifest, ``complete.json``), and the output made of them.

- the manifest says what the job is (:func:`~hf_adapters.engines.job_files.job_manifest`: the scorer,
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
shards of ``rows_per_shard`` rows, or, with ``file_per_block``, is the parts themselves); the work
folder then records the job as complete and is removed
(:meth:`~hf_adapters.engines.work_folder.WorkFolder.finish`): a kill at any moment leaves a job that
the same command resumes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.engines.job_files import read_json
from hf_adapters.engines.work_folder import WorkFolder
from hf_adapters.files.json_values import write_atomically
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
#: What a Ray job's manifests give as whole numbers: how its rows are cut.
LAYOUT = ("rows_per_block", "rows_per_chunk")


def work_folder(output_path: Path) -> WorkFolder:
    """The work folder of the Ray job writing ``output_path``: its rows counted in its parts' records."""
    return WorkFolder(output_path, ENGINE, saved_in_parts, LAYOUT)


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


def part_files(output: OutputFormat) -> tuple[str, str]:
    """The names of a part of a job writing ``output`` and of its record (for the output's check)."""
    name = "part-00000-data-000000000000-000000000001"
    return part_file(Path(), name, output).name, f"{name}{DONE}"


def save_part(work_dir: Path, name: str, output: OutputFormat, records: bytes | pa.Table, rows: int,
              valid: int) -> None:
    """Write a block's ``records`` (JSONL bytes, or a table for Parquet) as its part, durably and
    under a temporary name first, then its record of ``rows`` and ``valid`` scores: the block is done.
    Two workers may save the same block (a retried task, a killed job's last worker): both write the same."""
    if isinstance(records, bytes):
        write_atomically(part_file(work_dir, name, output), records)
    else:
        import pyarrow.parquet as pq

        write_atomically(part_file(work_dir, name, output), lambda handle: pq.write_table(records, handle))
    write_atomically(work_dir / f"{name}{DONE}", json.dumps({"rows": rows, "valid": valid}))


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


def saved_in_parts(work_dir: Path, manifest: Mapping[str, Any], rows: int | None) -> int:
    """The rows of the finished parts in ``work_dir``, as their records say."""
    saved = 0
    for record in work_dir.glob(f"*{DONE}"):
        found = read_json(record)
        saved += found.get("rows", 0) if isinstance(found, dict) else 0
    return saved


def merge_parts(work_dir: Path, output_path: Path, output: OutputFormat, names: Sequence[str], schema: Any,
                rows: int, file_per_block: bool = False) -> None:
    """Write the output from the parts ``names`` (in input order; ``rows`` rows in all). A JSONL output
    is the parts' bytes one after another; a Parquet one is cut into shards of ``output.rows_per_shard``
    rows of ``schema``, a part at a time, or, with ``file_per_block``, is the parts themselves. The
    output is written under a temporary name, then renamed: it appears whole or not at all."""
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
