"""Plugin modules: user code the command line imports before it reads a config, to register its classes.

A plugin module (``--plugin MODULE`` or :data:`PLUGINS_VARIABLE`) registers what it defines itself
(``register_backend``, ``register_scorer``, ``register_engine``; :mod:`hf_adapters.core.registry`),
and may not replace a built-in backend, scorer or engine: a config naming ``PPLScorer`` or
``transformers`` always scores with the package's own class, and ``--engine local`` (or no
``--engine``) always runs the package's own engine. Installed packages need no plugin module: their
entry points are found by name.

Importing this module imports neither torch nor any plugin.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping

from hf_adapters.core.registry import PluginError, error_in_one_line, replaced_builtins

#: The environment variable naming plugin modules, separated by commas.
PLUGINS_VARIABLE = "HF_ADAPTERS_PLUGINS"
#: The entry point groups in which an installed package declares a backend, a scorer or an engine:
#: ``NAME = "module:Class"`` (a subclass of ``LikelihoodBackend``, ``RowScorer`` or ``Engine``).
BACKEND_GROUP = "hf_adapters.backends"
SCORER_GROUP = "hf_adapters.scorers"
ENGINE_GROUP = "hf_adapters.engines"


def plugin_modules(option: Iterable[str] | None, environ: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """(module, where it was named) for each module of :data:`PLUGINS_VARIABLE`, then of ``--plugin``."""
    named = [(module.strip(), PLUGINS_VARIABLE) for module in environ.get(PLUGINS_VARIABLE, "").split(",")]
    named += [(module.strip(), "--plugin") for module in option or ()]
    return [(module, source) for module, source in named if module]


def import_plugins(modules: Iterable[tuple[str, str]]) -> None:
    """Import each (module, where it was named) of :func:`plugin_modules`; a PluginError names the
    first that fails: one that raises, calls ``sys.exit`` or replaces a built-in backend, scorer or engine."""
    for module, source in modules:
        try:
            importlib.import_module(module)
        except SystemExit as error:
            raise PluginError(f"cannot import the plugin module {module!r} ({source}): it called "
                              f"sys.exit({error.code!r}) while being imported; a plugin module should only "
                              "define and register its classes") from error
        except Exception as error:  # noqa: BLE001 - whatever the user's module raises, named in one line
            raise PluginError(f"cannot import the plugin module {module!r} ({source}): {error_in_one_line(error)}"
                              + (" (is its folder on PYTHONPATH?)" if _is_missing(module, error) else "")) from error
        if replaced := replaced_builtins():
            named = " or ".join(dict.fromkeys(registry.where_named for registry, _ in replaced))
            builtins = " and ".join(f"{registry.kind} {name!r}" for registry, name in replaced)
            raise PluginError(f"the plugin module {module!r} ({source}) replaced the built-in {builtins} in the "
                              f"registry; register its class under a name of its own and name that {named}.")


def _is_missing(module: str, error: Exception) -> bool:
    """Whether ``error`` says that ``module`` itself (or its package) is not on the path."""
    return isinstance(error, ModuleNotFoundError) and f"{module}.".startswith(f"{error.name}.")
