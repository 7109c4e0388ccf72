"""User code that adds backends, scorers and engines: entry points of installed packages, and plugin modules.

A package declares its classes in the entry point groups :data:`BACKEND_GROUP`, :data:`SCORER_GROUP`
and :data:`ENGINE_GROUP` (``NAME = "module:Class"``); the registries import one only when a config
(or ``--engine``) names ``NAME`` and nothing registered has that name, so that no user code runs otherwise. A plugin
module (``--plugin MODULE`` or :data:`PLUGINS_VARIABLE`) is imported by the command line before it
reads a config, and registers what it defines itself (``register_backend``, ``register_scorer``,
``register_engine``). Neither may take a built-in backend's, scorer's or engine's name: a config
naming ``PPLScorer`` or ``transformers`` always scores with the package's own class, and
``--engine local`` (or no ``--engine``) always runs the package's own engine.

Importing this module imports neither torch nor any plugin.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points

#: The entry point group of backends: ``NAME = "module:LikelihoodBackendSubclass"``.
BACKEND_GROUP = "hf_adapters.backends"
#: The entry point group of scorers: ``NAME = "module:RowScorerSubclass"``.
SCORER_GROUP = "hf_adapters.scorers"
#: The entry point group of engines (``hf-adapters score --engine NAME``): ``NAME = "module:EngineSubclass"``.
ENGINE_GROUP = "hf_adapters.engines"
#: The environment variable naming plugin modules, separated by commas.
PLUGINS_VARIABLE = "HF_ADAPTERS_PLUGINS"


class PluginError(ValueError):
    """A plugin module or an entry point that cannot be loaded; the message is one line naming it."""


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}".rstrip(": ")


def entry_point_names(group: str) -> list[str]:
    """The names the installed packages declare in the entry point ``group``."""
    return sorted({entry_point.name for entry_point in entry_points(group=group)})


def _entry_point(group: str, name: str) -> EntryPoint | None:
    return next(iter(entry_points(group=group, name=name)), None)


def entry_point_class(group: str, name: str, base: type) -> type | None:
    """The subclass of ``base`` the entry point ``name`` of ``group`` names, imported now; None when no
    installed package declares ``name``. A PluginError when it cannot be imported or is no such class."""
    entry_point = _entry_point(group, name)
    if entry_point is None:
        return None
    label = f"the entry point {entry_point.name} = {entry_point.value} (group {group})"
    try:
        loaded = entry_point.load()
    except Exception as error:  # noqa: BLE001 - whatever the user's module raises, named in one line
        raise PluginError(f"cannot load {label}: {_one_line(error)}") from error
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise PluginError(f"{label} names {loaded!r}, not a {base.__name__} subclass.")
    return loaded


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
            raise PluginError(f"cannot import the plugin module {module!r} ({source}): {_one_line(error)}"
                              + (" (is its folder on PYTHONPATH?)" if _is_missing(module, error) else "")) from error
        if replaced := replaced_builtins():
            named = " or ".join(dict.fromkeys(_REGISTRIES[kind][3] for kind, _ in replaced))
            builtins = " and ".join(f"{kind} {name!r}" for kind, name in replaced)
            raise PluginError(f"the plugin module {module!r} ({source}) replaced the built-in {builtins} in the "
                              f"registry; register its class under a name of its own and name that {named}.")


#: The registries of the package, by what they hold: the module holding them, their name, the name of
#: their built-ins, and where a user names what they hold.
_REGISTRIES = {"backend": ("hf_adapters.backends", "BACKENDS", "BUILTIN_BACKENDS", "in the config"),
               "scorer": ("hf_adapters.scorers.base", "SCORERS", "BUILTIN_SCORERS", "in the config"),
               "engine": ("hf_adapters.engines", "ENGINES", "BUILTIN_ENGINES", "with --engine")}


def replaced_builtins() -> list[tuple[str, str]]:
    """The built-in backends, scorers and engines (``("backend", "transformers")``...) whose name the
    registries of the modules imported so far map to another class; a registry not imported yet holds
    only built-ins."""
    replaced = []
    for kind, (module_name, registry, builtins, _) in _REGISTRIES.items():
        if (module := sys.modules.get(module_name)) is not None:
            current = getattr(module, registry)
            replaced += [(kind, name) for name, cls in getattr(module, builtins).items()
                         if current.get(name) is not cls]
    return replaced


def refuse_builtin_name(cls: type, kind: str, builtins: Mapping[str, type]) -> None:
    """Raise a ValueError if ``cls`` would take a built-in ``kind``'s name (``builtins``: name -> class)
    from another class: a config naming it would then score with the user's class instead."""
    name = cls.name
    if builtins.get(name, cls) is not cls:
        raise ValueError(f"{cls.__module__}.{cls.__qualname__} cannot be registered as the {kind} {name!r}: that is "
                         f"the built-in {builtins[name].__name__}'s name, and configs that name it must keep scoring "
                         f"with it. Give the class a `name` of its own, and name that in the config.")


def _is_missing(module: str, error: Exception) -> bool:
    """Whether ``error`` says that ``module`` itself (or its package) is not on the path."""
    return isinstance(error, ModuleNotFoundError) and f"{module}.".startswith(f"{error.name}.")
