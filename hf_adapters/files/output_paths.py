"""Outputs checked before any work: a command never destroys its input or fails to write at the end."""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from hf_adapters.files.remote_files import local_path
from hf_adapters.files.score_files import check_parquet_folder


def output_location(output: str | Path) -> Path:
    """The local path an output names: itself, or the path of a ``file://`` URL; a ValueError for a URL of
    another filesystem, since outputs are written on this machine.

    Example:
        >>> output_location("file:///tmp/scores.jsonl"), output_location("scores.jsonl")
        (PosixPath('/tmp/scores.jsonl'), PosixPath('scores.jsonl'))
    """
    if (path := local_path(output)) is None:
        raise ValueError(f"The output {output} is a URL: outputs are written on this machine. Give a local path "
                         "and copy the finished file where it should go.")
    return path


def check_output_path(output_path: str | Path, inputs: Mapping[str, str | Path | None] | None = None, *,
                      folder: bool = False, work_files: Iterable[str | Path] = ()) -> None:
    """Refuse, before any work, an output that would destroy something or could not be written: an
    existing path that is not a regular file (a directory, a FIFO, a device; with ``folder``, one
    that is not a folder of Parquet shards), one that is or lies inside an input (``inputs``: what
    each is -> its path, such as ``{"data": ..., "config": ...}``; links followed), one that an
    input's glob matches, or any of the ``work_files`` the command writes on the way (a later run
    would read them as data), or whose folder is a file or is not writable. Raises a ValueError.

    An input that exists is never a glob (``p[1].jsonl`` is that file); a ``file://`` URL is the path
    it names (:func:`~hf_adapters.files.remote_files.local_path`); data at another URL is not on this
    machine, so no output here destroys it or is read as it."""
    output = output_location(output_path).absolute()
    if folder:
        check_parquet_folder(output)
    elif output.exists() and not output.is_file():
        raise ValueError(f"The output {output} exists and is not a regular file (a directory, FIFO or device); "
                         "refusing to replace it.")
    target = output.resolve()
    written = [target, *(Path(path).absolute() for path in work_files)]
    for what, given in (inputs or {}).items():
        if given is None or (path := local_path(given)) is None:
            continue
        if not path.exists() and glob.has_magic(str(path)):
            if matched := next((file for file in written if _matches(file, str(path))), None):
                name = "The output" if matched == target else f"The output's work file {matched} (of {output})"
                raise ValueError(f"{name} matches the input {what} {given}; a rerun would read it as data.")
        if not path.exists():  # a glob or a hub id: nothing there to destroy
            continue
        source = path.resolve()
        if target == source:
            raise ValueError(f"The output {output} is the input {what} {source}; refusing to overwrite the input.")
        if source.is_dir() and source in target.parents:
            raise ValueError(f"The output {output} is inside the input {what} {source}; refusing to write into "
                             "the input (and a job writing there would change the data it resumes from).")
    folder = output.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"The output {output} cannot be created: {folder} is a file, not a folder.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"The output {output} cannot be written: no permission to write in {folder}.")


def _matches(path: Path, pattern: str) -> bool:
    """Whether ``path`` is one of the files the glob ``pattern`` names (``*`` within one folder, ``**`` across)."""
    pattern = str(Path(pattern).expanduser().absolute())
    return fnmatch.fnmatch(str(path), pattern) if "**" in pattern else path.match(pattern)
