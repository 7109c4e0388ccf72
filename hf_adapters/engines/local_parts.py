"""The local engine's rows in its work folder (:class:`~hf_adapters.engines.work_folder.WorkFolder`):
one append-only part per process, ``rank-00000.jsonl``, and a marker, ``rank-00000.done``, once
that process has scored its rows; and the output merged from them.

The rows are cut into chunks of the ``chunk_size`` the job started with; a process appends a
chunk's lines, each ``{"i", "id", "score"}`` (the row's index, its id and its score columns), and
fsyncs them before it starts the next chunk. A part holds whole chunks, in any order: after a kill,
a torn chunk at the end of a part is dropped (:func:`recover`) and scored again. Counting the rows
saved (:func:`saved_in_parts`) reads only the parts' newlines and last lines, quick on parts of
millions of lines.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.engines.job_files import iter_rows, scored_record
from hf_adapters.files.json_values import truncate_file, whole_json_lines
from hf_adapters.files.score_files import OutputFormat, records, write_output

if TYPE_CHECKING:
    from datasets import Dataset, IterableDataset

#: What the local engine's manifests give as whole numbers: how it cuts the rows.
LAYOUT = ("chunk_size",)


def part_path(work_dir: Path, rank: int) -> Path:
    """The part file process ``rank`` appends its chunks to."""
    return work_dir / f"rank-{rank:05d}.jsonl"


def done_marker(work_dir: Path, rank: int) -> Path:
    """The file process ``rank`` creates once it has scored all its chunks."""
    return work_dir / f"rank-{rank:05d}.done"


#: The names of one of each kind of file in which the processes save their rows (for the output's check).
PART_FILES = (part_path(Path(), 0).name, done_marker(Path(), 0).name)


def chunk_rows(chunk: int, num_rows: int | None, chunk_size: int) -> range:
    """The rows of a chunk (of a stream whose end is not known yet, a whole chunk's)."""
    stop = (chunk + 1) * chunk_size
    return range(chunk * chunk_size, stop if num_rows is None else min(stop, num_rows))


def part_line(index: int, row: Mapping[str, Any], cells: Mapping[str, Any]) -> bytes:
    """Row ``index``'s line in a part: its index, id and score ``cells`` (column -> value)."""
    record = {"i": index, **scored_record(row, index, cells)}
    return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode()


def saved_in_parts(work_dir: Path, manifest: Mapping[str, Any], num_rows: int | None) -> int:
    """The rows of the complete chunks in the parts of ``work_dir`` (of a job of ``num_rows`` rows cut
    into the manifest's ``chunk_size``)."""
    return sum(_saved_in_part(part, num_rows, manifest["chunk_size"]) for part in work_dir.glob("rank-*.jsonl"))


def _saved_in_part(path: Path, num_rows: int | None, chunk_size: int) -> int:
    """The rows of a part's complete chunks. A run starts from parts cut back to complete chunks and
    appends whole chunks, so only the last chunk can be unfinished: its whole lines are left out."""
    lines, last = _whole_lines(path)
    try:
        index = json.loads(last)["i"]
    except (TypeError, ValueError, KeyError):
        return 0
    if index + 1 == chunk_rows(index // chunk_size, num_rows, chunk_size).stop:
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


def part_chunks(path: Path, num_rows: int | None, chunk_size: int,
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
        if index + 1 == chunk_rows(chunk, num_rows, chunk_size).stop:
            chunks[chunk], block, keep = block, [], offset
    return chunks, keep


def recover(work_dir: Path, num_rows: int | None, chunk_size: int, columns: Sequence[str]) -> set[int]:
    """Cut every part back to its complete chunks, drop the last run's done markers, and return the
    chunks the parts hold."""
    done: set[int] = set()
    for part in sorted(work_dir.glob("rank-*.jsonl")):
        chunks, keep = part_chunks(part, num_rows, chunk_size, columns)
        done.update(chunks)
        truncate_file(part, keep)
    for marker in work_dir.glob("rank-*.done"):
        marker.unlink()
    return done


def merge_parts(work_dir: Path, num_rows: int, chunk_size: int, dataset: Dataset | IterableDataset,
                output_path: Path, output: OutputFormat, columns: Mapping[str, str], schema: Any) -> int:
    """Write every chunk of every part, in input order (with the rows' own columns when the output keeps
    them, read again from ``dataset``), to ``output_path`` as ``output`` asks, the score ``columns``
    (output -> column) of ``schema`` (:func:`~hf_adapters.engines.job_files.output_schema`). Returns
    the valid count."""
    names = list(columns.values())
    chunks: dict[int, list[dict[str, Any]]] = {}
    for part in sorted(work_dir.glob("rank-*.jsonl")):
        chunks.update(part_chunks(part, num_rows, chunk_size, names)[0])
    if missing := [chunk for chunk in range(math.ceil(num_rows / chunk_size)) if chunk not in chunks]:
        raise RuntimeError(f"The parts in {work_dir} lack {len(missing)} chunk(s), the first at row "
                           f"{missing[0] * chunk_size}.")
    scored = (record for chunk in sorted(chunks) for record in chunks[chunk])
    rows = iter_rows(dataset) if output.keep_columns else None
    return write_output(output_path, output, records(scored, rows, names), schema, names[0])
