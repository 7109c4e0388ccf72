"""Outputs checked before any work: a command never destroys its input or fails to write at the end."""

from __future__ import annotations

import os
from pathlib import Path


def check_output_path(output_path: str | Path, data_path: str | Path | None = None) -> None:
    """Refuse, before any work, an output that would destroy something or could not be written: an
    existing path that is not a regular file (a directory, a FIFO, a device), the input data itself
    (also through a link), or a folder that is a file or is not writable. Raises a ValueError."""
    output = Path(output_path).absolute()
    if output.exists() and not output.is_file():
        raise ValueError(f"The output {output} exists and is not a regular file (a directory, FIFO or device); "
                         "refusing to replace it.")
    if data_path is not None and output.exists() and os.path.samefile(output, data_path):
        raise ValueError(f"The output {output} is the input data {data_path}; refusing to overwrite the input.")
    folder = output.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"The output {output} cannot be created: {folder} is a file, not a folder.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"The output {output} cannot be written: no permission to write in {folder}.")
