"""The output folder of an IFEval run, crash-safe and resumable like ``hf-adapters score``.

``run.json`` says what the run is (model identity, settings, prompt file); it is written once the
model has loaded, before any sample. ``samples.jsonl`` gets one line per prompt, appended and
fsynced as its response ends, so a killed run loses only the responses in flight; when the run
resumes, a torn last line is cut off, and any other line that is not a sample is skipped with a
warning naming it (the samples after it are kept). Once every prompt has its line the file is
rewritten in prompt order and ``results.json`` is written. A folder holding another run's samples
(another model, other settings or another prompt file) is refused unless ``overwrite`` is set.
``run.lock`` is held while a run writes, so a second run on the same folder stops at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..json_values import TORN, json_lines, json_safe, truncate_file, write_atomically
from .prompts import is_prompt_key

logger = logging.getLogger(__name__)

MANIFEST = "run.json"
SAMPLES = "samples.jsonl"
RESULTS = "results.json"
LOCK = "run.lock"


class RunFolderError(ValueError):
    """The output folder cannot be used: it holds another run's samples, or is being written."""


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def check_folder(folder: str | Path, manifest: Mapping[str, Any], overwrite: bool = False) -> None:
    """Raise a RunFolderError unless ``folder`` is absent, empty of runs, or this run's (same manifest).

    With ``overwrite``, another run's files are accepted (:func:`start` removes them)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"The output {folder} exists and is not a folder.")
    if overwrite or not (folder / SAMPLES).exists():
        return
    try:
        old = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if old == _jsonable(manifest):
        return
    if old is None:
        reason = f"it has no readable {MANIFEST}"
    else:
        changed = [name for name in ("model", "settings", "data") if old.get(name) != _jsonable(manifest).get(name)]
        names = {"model": "model", "settings": "settings", "data": "prompt file"}
        reason = f"its {' and '.join(names[name] for name in changed) or 'manifest'} changed"
    raise RunFolderError(f"{folder} holds samples of another run ({reason}); rerun that run's command to resume "
                         "it, choose another --output, or pass --overwrite to discard them.")


@contextlib.contextmanager
def locked(folder: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/run.lock`` (created with the folder) while the body runs."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderError(f"Another run is writing {folder} (it holds {folder / LOCK}).") from None
        yield


def start(folder: str | Path, manifest: Mapping[str, Any], overwrite: bool = False) -> list[dict[str, Any]]:
    """Check ``folder`` (:func:`check_folder`), write the manifest, and return the samples already
    there: none for a new run or with ``overwrite`` (the old files are removed), else those of
    ``samples.jsonl`` (:func:`recover_samples`)."""
    folder = Path(folder)
    check_folder(folder, manifest, overwrite)
    manifest = _jsonable(manifest)
    same = (folder / SAMPLES).exists() and not overwrite
    if not same:
        for name in (SAMPLES, RESULTS, MANIFEST):
            (folder / name).unlink(missing_ok=True)
    if not (folder / MANIFEST).exists():
        write_atomically(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return recover_samples(folder / SAMPLES) if same else []


def _sample_problem(value: Any) -> str | None:
    """Why a JSON line of ``samples.jsonl`` is not a sample (None when it is one)."""
    if isinstance(value, dict) and is_prompt_key(value.get("key")) and isinstance(value.get("response"), str):
        return None
    return "not a sample: it needs an integer or string 'key' and a string 'response'"


def recover_samples(path: str | Path) -> list[dict[str, Any]]:
    """The sample lines of ``path``, in file order. A line that is blank, not JSON or not a sample is
    skipped, and the lines after it are kept; only a torn last line (a kill) is cut off the file, so
    that the next sample starts a line of its own. A warning names each line skipped."""
    path = Path(path)
    samples, skipped, whole = [], [], 0
    for line in json_lines(path):
        problem = line.problem or _sample_problem(line.value)
        if problem is None:
            samples.append(line.value)
        else:
            skipped.append(f"line {line.number} ({problem})")
        whole += 0 if line.problem == TORN else line.size
    if skipped:
        logger.warning("%s: skipped %s; a prompt with no other sample there is generated again.",
                       path, ", ".join(skipped))
    truncate_file(path, whole)
    return samples


def _line(sample: Mapping[str, Any]) -> bytes:
    return (json.dumps(sample, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def append_samples(folder: str | Path, samples: Sequence[Mapping[str, Any]]) -> None:
    """Append sample lines to ``samples.jsonl`` and fsync them."""
    with open(Path(folder) / SAMPLES, "ab") as handle:
        handle.write(b"".join(_line(sample) for sample in samples))
        handle.flush()
        os.fsync(handle.fileno())


def rewrite_samples(folder: str | Path, samples: Sequence[Mapping[str, Any]]) -> None:
    """Replace ``samples.jsonl`` with these lines, atomically."""
    write_atomically(Path(folder) / SAMPLES, b"".join(_line(sample) for sample in samples).decode("utf-8"))


def write_results(folder: str | Path, results: Mapping[str, Any]) -> None:
    """Write ``results.json`` atomically (NaN as null)."""
    text = json.dumps(json_safe(dict(results)), indent=2, ensure_ascii=False, allow_nan=False, default=str)
    write_atomically(Path(folder) / RESULTS, text + "\n")
