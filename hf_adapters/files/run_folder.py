"""What a crash-safe, resumable run keeps in a folder: the parts shared by scoring jobs
(:mod:`hf_adapters.engines.local`) and IFEval runs (:mod:`hf_adapters.ifeval.run_folder`).

- one run at a time: :func:`exclusive_lock` on a lock file in the folder;
- what the run is: a manifest, written whole or not at all
  (:func:`~hf_adapters.files.json_values.write_atomically`), compared with the one a rerun would
  write, and :func:`manifest_changes` to say what differs;
- its results as JSON lines appended and fsynced (:func:`append_durably`), so that a kill loses only
  what was in flight; a rerun reads the whole lines (:func:`~hf_adapters.files.json_values.json_lines`)
  and cuts a torn tail off (:func:`~hf_adapters.files.json_values.truncate_file`).

Each run keeps its own file names, formats and messages.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO


class LockHeld(Exception):  # noqa: N818 - a state, not a failure: the caller words the refusal
    """Another process holds the lock file (the exception's argument)."""


@contextlib.contextmanager
def exclusive_lock(path: Path, *, remove: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the file at ``path`` (created, with its folder, if absent) while the
    body runs: the file ``path`` names when the lock is taken, not one another process removed in
    between. :class:`LockHeld` at once when another process holds it. With ``remove``, the file is
    removed once the body has finished without an error."""
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+b") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LockHeld(path) from None
            if _names_file(path, handle.fileno()):
                yield
                if remove:
                    # Removed while still locked, so no run can lock this file afterwards and think it
                    # holds the folder. A run that opened it just before still can: it then sees that
                    # the path no longer names the file it locked, and locks a new one. A run that
                    # fails keeps the file; the next run locks it as it is.
                    path.unlink(missing_ok=True)
                return


def _names_file(path: Path, descriptor: int) -> bool:
    """Whether ``path`` still names the open file ``descriptor``."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def append_durably(handle: BinaryIO, data: bytes) -> None:
    """Append ``data`` to the file open in ``handle`` and fsync it: once this returns, it survives a
    kill or a power cut."""
    handle.write(data)
    handle.flush()
    os.fsync(handle.fileno())


#: Stands for a key one manifest lacks.
_ABSENT = object()


def manifest_changes(old: Mapping[str, Any], new: Mapping[str, Any], parts: Mapping[str, str]) -> str:
    """What changed from the ``old`` manifest to the ``new`` one, part by part (``parts``: key -> how a
    message names it), e.g. ``its settings changed: max_new_tokens 48 -> 64; its model changed: file
    model.safetensors size 10 -> 12 bytes``.

    Example:
        >>> manifest_changes({"settings": {"n": 48}}, {"settings": {"n": 64}}, {"settings": "settings"})
        'its settings changed: n 48 -> 64'
    """
    said = [f"its {label} changed: {', '.join(changes)}" for part, label in parts.items()
            if (changes := _changes(old.get(part, _ABSENT), new.get(part, _ABSENT)))]
    return "; ".join(said) or "its manifest changed"


def _changes(old: Any, new: Any, name: str = "") -> list[str]:
    """Each difference of two JSON values as ``name old -> new``, key by key in mappings, file by file
    in the model's file lists (:func:`_file_changes`)."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for key in dict.fromkeys([*old, *new])
                for change in _changes(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{name}.{key}".lstrip("."))]
    if _is_file_list(old) or _is_file_list(new):
        return _file_changes(old if _is_file_list(old) else [], new if _is_file_list(new) else [])
    return [f"{name} {_shown(old)} -> {_shown(new)}".lstrip()]


def _is_file_list(value: Any) -> bool:
    """Whether ``value`` is the list of a local model's files (:func:`hf_adapters.backends.loading.model_identity`)."""
    return isinstance(value, list) and all(isinstance(item, dict) and "name" in item for item in value)


def _file_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """How each model file changed, as precisely as its record says: added or removed, its size, its
    sampled bytes (the SHA-256 of its first and last MiB), or only its modification time."""
    old_files, new_files = ({record["name"]: record for record in records} for records in (old, new))
    changes = []
    for name in dict.fromkeys([*old_files, *new_files]):
        before, after = old_files.get(name), new_files.get(name)
        if before == after:
            continue
        if before is None or after is None:
            changes.append(f"file {name} {'added' if before is None else 'removed'}")
        elif before.get("size") != after.get("size"):
            changes.append(f"file {name} size {before.get('size')} -> {after.get('size')} bytes")
        elif before.get("head_tail_sha256") != after.get("head_tail_sha256"):
            changes.append(f"file {name} content changed (same size)")
        else:
            changes.append(f"file {name} touched (same size, same first and last MiB)")
    return changes


def _shown(value: Any) -> str:
    """A value in a message: a hash shortened to 12 digits, ``(none)`` for an absent key."""
    if value is _ABSENT:
        return "(none)"
    if isinstance(value, str) and len(value) >= 32 and all(char in "0123456789abcdef" for char in value):
        return f"{value[:12]}..."
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
