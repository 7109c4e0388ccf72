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
