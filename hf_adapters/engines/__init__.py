"""Engines that run a scoring job over a whole data set, and their registry: what ``hf-adapters score
--engine NAME`` names.

``local`` (:class:`~hf_adapters.engines.local.LocalEngine`, the default; formerly ``accelerate``) runs in
this process, or in each process of ``accelerate launch``, and resumes a killed job; ``ray``
(:class:`~hf_adapters.engines.ray.RayEngine`) scores on a pool of Ray actors. Another engine is a
subclass of :class:`Engine` in a file of its own, registered with :func:`register_engine` by a plugin
module (``--plugin``) or declared by an installed package in the entry point group ``hf_adapters.engines``
(``docs/guides/adding_an_engine.md``); either way ``--engine NAME`` then takes it, with its options.
A :class:`ScoringJob` is what every engine runs; plan one from Python with :meth:`ScoringJob.plan`.

Importing this package imports neither torch nor Ray.
"""

from __future__ import annotations

from hf_adapters.core.options import DEFAULT_ENGINE
from hf_adapters.core.plugins import ENGINE_GROUP
from hf_adapters.core.registry import Registry
from hf_adapters.engines.base import Engine, EngineError, ScoringJob
from hf_adapters.engines.job_files import JobSummary
from hf_adapters.engines.local import LocalEngine
from hf_adapters.engines.ray import RayEngine

#: Earlier names of engines, still accepted: earlier name -> name.
ENGINE_ALIASES = {"accelerate": "local"}
#: Engine classes by the name ``--engine`` gives, in the order ``--help`` lists them (a :class:`Registry`).
ENGINES: Registry[Engine] = Registry("engine", Engine, group=ENGINE_GROUP, where_named="with --engine",
                                     guide="docs/guides/adding_an_engine.md", aliases=ENGINE_ALIASES)
#: Make a class available as ``--engine cls.name`` (a class decorator); a ValueError for a class without
#: a name, with a built-in engine's name or earlier name (``local``, ``accelerate``, ``ray``), or that
#: does not define the methods an engine must (``run``, ``interrupted_message``).
register_engine = ENGINES.register
#: The package's own engines, whose names no other class may take.
BUILTIN_ENGINES = ENGINES.builtins

register_engine(LocalEngine)
register_engine(RayEngine)
ENGINES.reserve_builtins()


def engine_name(text: str) -> str:
    """An engine's name, an earlier name (``accelerate``) read as today's.

    Example:
        >>> engine_name("accelerate"), engine_name("ray")
        ('local', 'ray')
    """
    return ENGINE_ALIASES.get(text, text)


def engine_class(name: str) -> type[Engine]:
    """The engine class registered as ``name`` (or an earlier name of it), else the one an installed
    package declares under that name in the entry point group :data:`ENGINE_GROUP` (imported now, and
    registered); a ValueError lists the valid names.

    Example:
        >>> engine_class("accelerate") is LocalEngine
        True
    """
    return ENGINES.lookup(name)


def engine_names() -> list[str]:
    """The names ``--engine`` takes: the registered engines' and the entry points' of :data:`ENGINE_GROUP`."""
    return ENGINES.names()


__all__ = [
    "BUILTIN_ENGINES",
    "DEFAULT_ENGINE",
    "ENGINES",
    "Engine",
    "EngineError",
    "JobSummary",
    "LocalEngine",
    "RayEngine",
    "ScoringJob",
    "engine_class",
    "engine_name",
    "engine_names",
    "register_engine",
]
