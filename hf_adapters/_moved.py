"""Module paths from before the package had layer folders, kept importable for one release.

``import hf_adapters.jobs`` (say) still works: it gives the module now at ``hf_adapters.engines.local``,
the same object under both names, with a :class:`DeprecationWarning` naming the new path. The names
such a module offered that live elsewhere now (:data:`MOVED_NAMES`: ``hf_adapters.jobs.MANIFEST``,
say) are found there, with a warning naming where; a few functions whose work moved into
:class:`~hf_adapters.engines.work_folder.WorkFolder` are kept here, as they were called.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable
from importlib.machinery import PathFinder
from pathlib import Path
from types import ModuleType
from typing import Any

#: Each earlier module path under ``hf_adapters``, and where that module lives now.
MOVED_MODULES = {
    "likelihood": "core.likelihood",
    "options": "core.options",
    "texts": "core.texts",
    "conversations": "core.conversations",
    "conventions": "core.conventions",
    "wording": "core.wording",
    "plugins": "core.plugins",
    "models": "backends.loading",
    "cpu_kernels": "backends.transformers.cpu_kernels",
    "openmp": "core.openmp",
    "backends.transformers_model": "backends.transformers.model",
    "backends.transformers_embedding": "backends.transformers.embedding",
    "backends.transformers_generation": "backends.transformers.generation",
    "backends.model_properties": "backends.transformers.model_properties",
    "backends.vllm_model": "backends.vllm",
    "ifd": "formulas.ifd",
    "perplexity": "formulas.perplexity",
    "information_parity": "formulas.information_parity",
    "parallel_corpus": "formulas.parallel_corpus",
    "excess_loss": "formulas.excess_loss",
    "reference_models": "formulas.reference_models",
    "entropy_scores": "formulas.entropy_scores",
    "miwv": "formulas.miwv",
    "embeddings": "formulas.embeddings",
    "token_selection": "formulas.token_selection",
    "diversity.similarity": "formulas.similarity",
    "columns": "columns.dataset_columns",
    "excess_loss_columns": "columns.excess_loss_columns",
    "ray_scoring": "engines.ray_columns",
    "data_io": "files.data_io",
    "score_files": "files.score_files",
    "output_paths": "files.output_paths",
    "json_values": "files.json_values",
    "jobs": "engines.local",
    "ray_jobs": "engines.ray",
    "ray_cluster": "engines.ray_cluster",
    "selection": "curation.selection",
    "selection_rules": "curation.selection_rules",
    "diversity": "curation.diversity",
    "score_stats": "curation.score_stats",
    "score_plots": "curation.score_plots",
    "module_widget": "integrations.module_widget",
}


def _interrupted_line(saved: int, total: int | None, work_dir: Path, stopped: str = "Interrupted") -> str:
    """What a Ctrl-C printed of a job with ``saved`` rows (of ``total``) in ``work_dir``
    (:meth:`~hf_adapters.engines.work_folder.WorkFolder.stopped_line` now)."""
    if not saved:
        return f"{stopped} before any row was saved; the same command starts again."
    of = "" if total is None else f" of {total:,}"
    return f"{stopped}: {saved:,}{of} rows are saved in {work_dir}; run the same command again to resume."


def _rows_without_manifest(work_dir: Path) -> tuple[int, int | None]:
    """(rows saved, rows of the data) of a work folder without a manifest: all of them once the output
    is complete, else ``(0, None)`` (:meth:`~hf_adapters.engines.work_folder.WorkFolder.saved_rows` now)."""
    from hf_adapters.engines.job_files import read_json
    from hf_adapters.engines.work_folder import COMPLETE

    complete = read_json(Path(work_dir) / COMPLETE)
    total = complete.get("total_rows") if isinstance(complete, dict) else None
    return (total, total) if isinstance(total, int) else (0, None)


def _ray_folder(output_path: str | Path) -> Any:
    """The work folder of the Ray job writing ``output_path``."""
    from hf_adapters.engines.ray_parts import work_folder

    return work_folder(Path(output_path))


def _open_work_dir(work_dir: Path, output_path: Path, manifest: dict[str, Any], overwrite: bool,
                   output: Any) -> tuple[str, dict[str, Any]]:
    """The Ray job's start, resume or completion (:meth:`~hf_adapters.engines.work_folder.WorkFolder.open` now)."""
    return _ray_folder(output_path).open(manifest, output, overwrite)


def _finish(work_dir: Path, output_path: Path, output: Any, manifest: dict[str, Any], rows: int, valid: int) -> None:
    """The Ray job's completion (:meth:`~hf_adapters.engines.work_folder.WorkFolder.finish` now)."""
    _ray_folder(output_path).finish(output, manifest, rows, valid)


def _discard_if_nothing_saved(output_path: Path) -> None:
    """Remove a Ray job's work folder with nothing saved
    (:meth:`~hf_adapters.engines.work_folder.WorkFolder.discard_if_nothing_saved` now)."""
    _ray_folder(output_path).discard_if_nothing_saved()


def _saved_rows(output_path: str | Path) -> tuple[int, int | None]:
    """The Ray job's (rows saved, rows of the data)
    (:meth:`~hf_adapters.engines.work_folder.WorkFolder.saved_rows` now)."""
    return _ray_folder(output_path).saved_rows()


_WORK_FOLDER = {name: "engines.work_folder" for name in ("COMPLETE", "LOCK", "MANIFEST", "STREAM_ROWS",
                                                          "JobConflictError", "work_dir_for")}
_JOB_FILES = {name: "engines.job_files" for name in ("WRITTEN_FORMAT", "format_record", "iter_rows", "job_changes",
                                                      "record_finished_job", "same_job", "scored_record",
                                                      "written_in")}
_RUN_FOLDER = {"LockHeld": "files.run_folder", "exclusive_lock": "files.run_folder"}
#: For a module (by its path today, under ``hf_adapters``) that an earlier module path names, each name
#: the earlier module offered that is now elsewhere: the module (under ``hf_adapters``) that holds it,
#: or the function kept here that does its work.
MOVED_NAMES: dict[str, dict[str, str | Callable[..., Any]]] = {
    "engines.local": {
        **_WORK_FOLDER, **_JOB_FILES, **_RUN_FOLDER,
        "DEFAULT_BATCH_SIZE": "core.options",
        **{name: "files.score_files" for name in ("SCORE", "count_valid", "records", "write_output")},
        **{name: "files.json_values" for name in ("truncate_file", "whole_json_lines")},
        "interrupted_line": _interrupted_line,
        "rows_without_manifest": _rows_without_manifest,
    },
    "engines.ray": {
        **_WORK_FOLDER, **_RUN_FOLDER,
        "count_valid": "files.score_files",
        "remove_temporary_files": "files.json_values",
        "interrupted_line": _interrupted_line,
        "open_work_dir": _open_work_dir,
        "finish": _finish,
        "discard_if_nothing_saved": _discard_if_nothing_saved,
        "saved_rows": _saved_rows,
    },
}


def moved_name(module: str, name: str) -> Any:
    """``name`` as the earlier module now at ``module`` (its full name) offered it, with a
    DeprecationWarning saying where it is now; an AttributeError where it offered no such name."""
    where = MOVED_NAMES.get(module.removeprefix(f"{__package__}."), {}).get(name)
    if where is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    if not isinstance(where, str):
        warnings.warn(f"{module}.{name} goes away in the next release: a job's work folder is now a "
                      f"{__package__}.engines.work_folder.WorkFolder.", DeprecationWarning, stacklevel=2)
        return where
    warnings.warn(f"{module}.{name} is now {__package__}.{where}.{name}; the old name goes away in the next release.",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(f"{__package__}.{where}"), name)


def new_module_name(name: str) -> str | None:
    """Today's full name of the module once called ``name`` (a moved module or one inside a moved
    package), or None when ``name`` did not move."""
    prefix = f"{__package__}."
    if not name.startswith(prefix):
        return None
    old = name[len(prefix):]
    for moved, new in sorted(MOVED_MODULES.items(), key=lambda item: -len(item[0])):
        if old == moved or old.startswith(f"{moved}."):
            return prefix + new + old[len(moved):]
    return None


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an earlier module path as the module that lives at the new one."""

    def find_spec(self, fullname: str, path=None, target=None):
        if new_module_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> ModuleType:
        new = new_module_name(spec.name)
        warnings.warn(f"{spec.name} is now {new}; the old path goes away in the next release.",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        if new.removeprefix(f"{__package__}.") in MOVED_NAMES and "__getattr__" not in vars(module):
            module.__getattr__ = functools.partial(moved_name, new)  # the names it offered under the old path
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its new name."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once, right after the finder of files on ``sys.path`` (so a
    module that exists at a path is always that module, and an editable install's finder comes later)."""
    if any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        return
    after = next((i + 1 for i, finder in enumerate(sys.meta_path) if finder is PathFinder), len(sys.meta_path))
    sys.meta_path.insert(after, MovedModuleFinder())
