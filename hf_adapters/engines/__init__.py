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

from hf_adapters.core.plugins import ENGINE_GROUP, entry_point_class, entry_point_names
from hf_adapters.engines.base import Engine, EngineError, ScoringJob
from hf_adapters.engines.job_files import JobSummary
from hf_adapters.engines.local import LocalEngine
from hf_adapters.engines.ray import RayEngine

#: Engine classes by the name ``--engine`` gives, in the order ``--help`` lists them.
ENGINES: dict[str, type[Engine]] = {}
#: The package's own engines, whose names no other class may take (:func:`register_engine`).
BUILTIN_ENGINES: dict[str, type[Engine]] = {}
#: Earlier names of engines, still accepted: earlier name -> name.
ENGINE_ALIASES = {"accelerate": "local"}
#: The engine ``hf-adapters score`` runs without ``--engine``.
DEFAULT_ENGINE = "local"


def register_engine(cls: type[Engine]) -> type[Engine]:
    """Class decorator: make ``cls`` available as ``--engine cls.name``. A ValueError for a class
    without a name, with a built-in engine's name or earlier name (``local``, ``accelerate``, ``ray``),
    or that does not define the methods an engine must (``run``, ``interrupted_message``)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a `name` to be registered.")
    if missing := sorted(getattr(cls, "__abstractmethods__", ())):
        raise ValueError(f"{cls.__module__}.{cls.__qualname__} cannot be registered as the engine {cls.name!r}: it "
                         f"does not define {' and '.join(missing)}. An engine defines run(job) and "
                         "interrupted_message(job); see docs/guides/adding_an_engine.md.")
    taken = BUILTIN_ENGINES.get(ENGINE_ALIASES.get(cls.name, cls.name), cls)
    if taken is not cls:
        raise ValueError(f"{cls.__module__}.{cls.__qualname__} cannot be registered as the engine {cls.name!r}: that "
                         f"is the built-in {taken.__name__}'s name, and `--engine {cls.name}` must keep running it. "
                         "Give the class a `name` of its own.")
    ENGINES[cls.name] = cls
    return cls


register_engine(LocalEngine)
register_engine(RayEngine)
BUILTIN_ENGINES.update(ENGINES)


def engine_name(text: str) -> str:
    """An engine's name, an earlier name (``accelerate``) read as today's.

    Example:
        >>> engine_name("accelerate"), engine_name("ray")
        ('local', 'ray')
    """
    return ENGINE_ALIASES.get(text, text)


def engine_class(name: str) -> type[Engine]:
    """The engine class registered as ``name`` (or an earlier name of it), else the one an installed
    package declares under that name in the entry point group ``hf_adapters.engines`` (imported now, and
    registered); a ValueError lists the valid names.

    Example:
        >>> engine_class("accelerate") is LocalEngine
        True
    """
    name = engine_name(name)
    if name not in ENGINES:
        cls = entry_point_class(ENGINE_GROUP, name, Engine)
        if cls is None:
            raise ValueError(f"Unknown engine {name!r}; valid engines: {engine_names()}")
        if cls.name != name:
            raise ValueError(f"The entry point {name!r} (group {ENGINE_GROUP}) names {cls.__name__}, whose name is "
                             f"{cls.name!r}: the two must agree.")
        register_engine(cls)
    return ENGINES[name]


def engine_names() -> list[str]:
    """The names ``--engine`` takes: the registered engines' and the entry points' of ``hf_adapters.engines``."""
    return sorted({*ENGINES, *entry_point_names(ENGINE_GROUP)})


__all__ = [
    "BUILTIN_ENGINES",
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
