"""The output folder of an IFEval run, crash-safe and resumable like ``hf-adapters score``.

``run.json`` says what the run is (model identity, settings, prompt file); it is written once the
model has loaded, before any sample. ``samples.jsonl`` gets one line per prompt, appended and
fsynced as its response ends, so a killed run loses only the responses in flight; when the run
resumes, a torn last line is cut off, and any other line that is not a sample is skipped with a
warning naming it (the samples after it are kept). Once every prompt has its line the file is
rewritten in prompt order and ``results.json`` is written (or lm-eval's files:
:mod:`hf_adapters.ifeval.lm_eval_logs`). A folder holding another run's samples (another model,
other settings or another prompt file) is refused unless ``overwrite`` is set; it removes that
run's results too.
``run.lock`` is held while a run writes, so a second run on the same folder stops at once; a run
that finishes removes it. The lock, the appends and the description of a changed manifest are those
of every run folder (:mod:`hf_adapters.files.run_folder`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hf_adapters.files.json_values import (
    TORN,
    json_lines,
    json_safe,
    jsonable,
    remove_temporary_files,
    truncate_file,
    write_atomically,
)
from hf_adapters.files.run_folder import LockHeld, append_durably, exclusive_lock, manifest_changes
from hf_adapters.ifeval.lm_eval_logs import remove_logs
from hf_adapters.ifeval.prompts import is_prompt_key

logger = logging.getLogger(__name__)

MANIFEST = "run.json"
SAMPLES = "samples.jsonl"
RESULTS = "results.json"
LOCK = "run.lock"


class RunFolderError(ValueError):
    """The output folder cannot be used: it holds another run's samples, or is being written."""


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
    if old == jsonable(manifest):
        return
    reason = (manifest_changes(old, jsonable(manifest), PARTS) if isinstance(old, dict)
              else f"it has no readable {MANIFEST}")
    raise RunFolderError(f"{folder} holds samples of another run ({reason}); rerun that run's command to resume "
                         "it, choose another --output, or pass --overwrite to discard them.")


#: The parts of a manifest, and how a refusal names each.
PARTS = {"settings": "settings", "model": "model", "data": "prompt file"}


@contextlib.contextmanager
def locked(folder: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/run.lock`` (created with the folder) while the body runs;
    remove the file when the body has finished without an error
    (:func:`~hf_adapters.files.run_folder.exclusive_lock`)."""
    path = Path(folder) / LOCK
    try:
        with exclusive_lock(path, remove=True):
            yield
    except LockHeld:
        raise RunFolderError(f"Another run is writing {path.parent} (it holds {path}).") from None


def start(folder: str | Path, manifest: Mapping[str, Any], overwrite: bool = False) -> list[dict[str, Any]]:
    """Check ``folder`` (:func:`check_folder`), write the manifest, and return the samples already
    there: none for a new run or with ``overwrite`` (the old files are removed), else those of
    ``samples.jsonl`` (:func:`recover_samples`). What killed writes left half written is removed."""
    folder = Path(folder)
    check_folder(folder, manifest, overwrite)
    remove_temporary_files(folder)
    manifest = jsonable(manifest)
    same = (folder / SAMPLES).exists() and not overwrite
    if not same:
        for name in (SAMPLES, RESULTS, MANIFEST):
            (folder / name).unlink(missing_ok=True)
        remove_logs(folder)
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


def saved_keys(folder: str | Path) -> set[Any]:
    """The keys of the prompts whose samples ``folder/samples.jsonl`` holds, read without changing it."""
    path = Path(folder) / SAMPLES
    if not path.is_file():
        return set()
    return {line.value["key"] for line in json_lines(path)
            if line.problem is None and _sample_problem(line.value) is None}


def _line(sample: Mapping[str, Any]) -> bytes:
    return (json.dumps(sample, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def append_samples(folder: str | Path, samples: Sequence[Mapping[str, Any]]) -> None:
    """Append sample lines to ``samples.jsonl`` and fsync them."""
    with open(Path(folder) / SAMPLES, "ab") as handle:
        append_durably(handle, b"".join(_line(sample) for sample in samples))


def rewrite_samples(folder: str | Path, samples: Sequence[Mapping[str, Any]]) -> None:
    """Replace ``samples.jsonl`` with these lines, atomically."""
    write_atomically(Path(folder) / SAMPLES, b"".join(_line(sample) for sample in samples).decode("utf-8"))


def write_results(folder: str | Path, results: Mapping[str, Any]) -> None:
    """Write ``results.json`` atomically (NaN as null)."""
    text = json.dumps(json_safe(dict(results)), indent=2, ensure_ascii=False, allow_nan=False, default=str)
    write_atomically(Path(folder) / RESULTS, text + "\n")
