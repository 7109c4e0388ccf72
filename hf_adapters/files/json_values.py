"""Values as JSON can hold them (JSON has no NaN or infinity: a missing score is written as null;
no dates and no bytes), and files written whole or not at all."""

from __future__ import annotations

import datetime
import glob
import json
import math
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float in it (through dicts, lists and tuples) as None.

    Example:
        >>> json_safe({"scores": [1.5, float("nan")], "mean": float("inf")})
        {'scores': [1.5, None], 'mean': None}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def to_json_value(value: Any) -> Any:
    """A value JSON cannot hold as it is, as JSON holds it: a date or time in ISO format, bytes as
    their UTF-8 text (else hex), anything else as its string; JSON's own types unchanged. A row's id
    goes through this both when a score file is written and when it is joined to its data.

    Example:
        >>> to_json_value(datetime.date(2024, 5, 1)), to_json_value(b"id-7"), to_json_value(7)
        ('2024-05-01', 'id-7', 7)
    """
    if value is None or isinstance(value, (str, int, float, bool, list, dict)):
        return value
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.hex()
    return str(value)


#: What the name of a file :func:`write_atomically` is writing has after the final file's name (then
#: a hex number of that write's own).
TEMPORARY = ".tmp-"


def write_atomically(path: Path, content: str | bytes | Callable[[BinaryIO], Any]) -> None:
    """Write ``content`` to ``path`` through a fsynced temporary file of this call's own, renamed over
    it: a reader (or a killed run's successor) sees the old file or the new one, never half of one,
    and two processes writing the same file at once (two Ray workers saving the same block) each
    write a whole one. ``content`` is text (UTF-8), bytes, or a function that writes the file into
    the binary handle it is given (a Parquet table, say); the temporary file is removed where writing
    fails, and what a killed write leaves by :func:`remove_temporary_files`.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "done.json"
        >>> write_atomically(path, '{"rows": 3}')
        >>> path.read_text()
        '{"rows": 3}'
    """
    temporary = path.with_name(f"{path.name}{TEMPORARY}{uuid.uuid4().hex}")
    try:
        with open(temporary, "wb") as handle:
            if isinstance(content, str):
                handle.write(content.encode("utf-8"))
            elif isinstance(content, bytes):
                handle.write(content)
            else:
                content(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def remove_temporary_files(folder: Path, of: str | None = None) -> None:
    """Remove the temporary files that killed writes (:func:`write_atomically`) left in ``folder``: all
    of them, or those of the file named ``of``. Call it where no other process is writing them (the
    folder's lock held)."""
    for entry in folder.glob(f"{'*' if of is None else glob.escape(of)}{TEMPORARY}*"):
        if entry.is_file():
            entry.unlink(missing_ok=True)


def jsonable(value: Any) -> Any:
    """``value`` as JSON gives it back: keys sorted, tuples as lists, what JSON cannot hold as its
    string. What a manifest on disk is compared with.

    Example:
        >>> jsonable({"b": (1, 2), "a": Path("x")})
        {'a': 'x', 'b': [1, 2]}
    """
    return json.loads(json.dumps(value, sort_keys=True, default=str))


#: What :func:`json_lines` says of a last line without a newline at its end: a killed writer's torn write.
TORN = "torn: no newline at its end"


class JsonLine(NamedTuple):
    """One line of a JSON Lines file: its number (from 1), its length in bytes with its newline, its
    value, and what is wrong with it (None for a whole JSON line; then ``value`` is the line's JSON)."""

    number: int
    size: int
    value: Any
    problem: str | None


def _read_line(line: bytes) -> tuple[Any, str | None]:
    if not line.endswith(b"\n"):
        return None, TORN
    if not line.strip():
        return None, "blank"
    try:
        return json.loads(line), None
    except ValueError:
        return None, "not JSON"


def json_lines(path: Path) -> Iterator[JsonLine]:
    """Every line of a JSON Lines file, read as JSON. Only the last line can be torn (:data:`TORN`); a
    blank or non-JSON line before it is not a torn write, and the lines after it are read as well."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            yield JsonLine(number, len(line), *_read_line(line))


def whole_json_lines(path: Path) -> Iterator[tuple[Any, int]]:
    """Each line of a JSON Lines file as (its value, its length in bytes), up to the first line that
    is torn, blank or not JSON: for a file whose lines must follow on from each other (a job's part)."""
    for line in json_lines(path):
        if line.problem is not None:
            return
        yield line.value, line.size


def truncate_file(path: Path, size: int) -> None:
    """Cut ``path`` back to its first ``size`` bytes (a no-op when that is its size), durably."""
    if path.stat().st_size != size:
        with open(path, "r+b") as handle:
            handle.truncate(size)
            os.fsync(handle.fileno())
