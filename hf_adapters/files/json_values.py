"""Values as JSON can hold them (JSON has no NaN or infinity: a missing score is written as null;
no dates and no bytes), and JSON files written whole or not at all."""

from __future__ import annotations

import datetime
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple


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


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a fsynced temporary file renamed over it: a reader (or a
    killed run's successor) sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


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
