"""Module paths from before the package had layer folders, kept importable for one release.

``import hf_adapters.jobs`` (say) still works: it gives the module now at ``hf_adapters.engines.local``,
the same object under both names, with a :class:`DeprecationWarning` naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib.machinery import PathFinder
from types import ModuleType

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
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its new name."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once, right after the finder of files on ``sys.path`` (so a
    module that exists at a path is always that module, and an editable install's finder comes later)."""
    if any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        return
    after = next((i + 1 for i, finder in enumerate(sys.meta_path) if finder is PathFinder), len(sys.meta_path))
    sys.meta_path.insert(after, MovedModuleFinder())
