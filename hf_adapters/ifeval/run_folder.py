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
that finishes removes it.
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

from hf_adapters.files.json_values import TORN, json_lines, json_safe, truncate_file, write_atomically
from hf_adapters.ifeval.lm_eval_logs import remove_logs
from hf_adapters.ifeval.prompts import is_prompt_key

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
    reason = manifest_changes(old, _jsonable(manifest)) if isinstance(old, dict) else f"it has no readable {MANIFEST}"
    raise RunFolderError(f"{folder} holds samples of another run ({reason}); rerun that run's command to resume "
                         "it, choose another --output, or pass --overwrite to discard them.")


#: The parts of a manifest, and how a refusal names each.
PARTS = {"settings": "settings", "model": "model", "data": "prompt file"}
#: Stands for a key one manifest lacks.
_ABSENT = object()


def manifest_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What changed from the ``old`` manifest to the ``new`` one, part by part, e.g. ``its settings
    changed: max_new_tokens 48 -> 64; its model changed: file model.safetensors size 10 -> 12 bytes``."""
    said = [f"its {label} changed: {', '.join(changes)}" for part, label in PARTS.items()
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


@contextlib.contextmanager
def locked(folder: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/run.lock`` (created with the folder) while the body runs;
    remove the file when the body has finished without an error."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with _locked_file(folder / LOCK):
        yield
        # Removed while still locked, so no run can lock this file afterwards and think it holds the
        # folder. A run that opened it just before still can: it then sees that the path no longer
        # names the file it locked (_locked_file), and locks a new one. A run that fails keeps the
        # file; the next run locks it as it is.
        (folder / LOCK).unlink(missing_ok=True)


@contextlib.contextmanager
def _locked_file(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file at ``path`` (created if absent): the file ``path`` names when
    the lock is taken, not one another process removed in between."""
    while True:
        with open(path, "a+b") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunFolderError(f"Another run is writing {path.parent} (it holds {path}).") from None
            if _names_file(path, handle.fileno()):
                yield
                return


def _names_file(path: Path, descriptor: int) -> bool:
    """Whether ``path`` still names the open file ``descriptor``."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


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
