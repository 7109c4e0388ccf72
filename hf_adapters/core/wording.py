"""How messages word what they count."""

from __future__ import annotations

import errno
from pathlib import Path

#: What a failed write's errno says of a full device.
FULL_DISK = {errno.ENOSPC: "no space left", errno.EDQUOT: "the disk quota is exceeded"}


def noun_for(count: int, noun: str) -> str:
    """``noun``, with an ``s`` unless ``count`` is one."""
    return noun if count == 1 else f"{noun}s"


def plural(count: int, noun: str) -> str:
    """``count`` and its noun (:func:`noun_for`): ``1 response``, ``2 responses``."""
    return f"{count} {noun_for(count, noun)}"


def longer_than_max_length(count: int, noun: str, max_length: int | None, cut: str | None = None) -> str:
    """The warning for ``count`` texts, rows or turns (``noun``) longer than ``max_length`` and truncated to fit,
    worded one way by every formula; ``cut`` names the part of each that was cut, where not the whole.

    Example:
        >>> longer_than_max_length(2, "row", 512, "output")
        '2 rows longer than max_length=512 were truncated (their outputs cut to fit).'
        >>> longer_than_max_length(1, "text", 2048)
        '1 text longer than max_length=2048 was truncated.'
    """
    one = count == 1
    part = "" if cut is None else f" ({'its' if one else 'their'} {cut if one else noun_for(count, cut)} cut to fit)"
    return f"{plural(count, noun)} longer than max_length={max_length} {'was' if one else 'were'} truncated{part}."


def full_disk(error: OSError, folder: str | Path) -> str | None:
    """What stopped a command when a write failed with ``error`` on a full device (no space left, or the
    disk quota exceeded), as its ``error:`` line begins: where (the file ``error`` names, else the
    device holding ``folder``, where the command writes), and to free some space there; None for
    another error."""
    said = FULL_DISK.get(error.errno)
    if said is None:
        return None
    where = (f"the device holding {error.filename}" if error.filename else
             f"a device this job writes to, such as the one holding {Path(folder).absolute()}")
    return f"error: {said} on {where} (free some space there)"
