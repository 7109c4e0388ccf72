"""What a name in a config or on the command line means: one :class:`Registry` per kind of class users add.

Each layer makes its own registry, with its base class, its built-ins and its entry point group
(the backends' in ``backends``, the scorers' in ``scorers``, the engines' in ``engines``); this
module knows none of them. A class joins a registry by :meth:`Registry.register` (a plugin module's
``register_backend``, ``register_scorer``, ``register_engine``), or is found among the entry points
installed packages declare in the registry's group (``NAME = "module:Class"``), imported only when
a name that nothing registered has is looked up, so that no user code runs otherwise. No other
class may take a built-in's name: a config naming ``PPLScorer`` or ``transformers`` always scores
with the package's own class, and ``--engine local`` always runs the package's own engine.

Importing this module imports no plugin.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, MutableMapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

Kind = TypeVar("Kind")


class PluginError(ValueError):
    """A plugin module or an entry point that cannot be loaded; the message is one line naming it."""


def error_in_one_line(error: BaseException) -> str:
    """``error``'s type and message, on one line."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}".rstrip(": ")


class Registry(MutableMapping[str, type[Kind]], Generic[Kind]):
    """The classes of one kind by the name users give them: each a subclass of the kind's base class
    whose ``name`` is its key. It reads as a dict; assigning an item stores a class unchecked, as a dict
    would (:func:`replaced_builtins` finds a built-in replaced that way), where :meth:`register` checks it.

    Args:
        kind: what the classes are, as messages say it (``"backend"``).
        base: the class each must subclass.
        group: the entry point group in which installed packages declare theirs.
        where_named: where a user names one, as messages say it (``"in the config"``, ``"with --engine"``).
        guide: the page that shows how to add one.
        aliases: earlier names still accepted: earlier name -> name.
        unknown_error: the error an unknown name raises (a ValueError subclass).
    """

    def __init__(self, kind: str, base: type[Kind], *, group: str, where_named: str, guide: str,
                 aliases: Mapping[str, str] | None = None, unknown_error: type[ValueError] = ValueError) -> None:
        self.kind, self.base, self.group, self.where_named, self.guide = kind, base, group, where_named, guide
        self.aliases = dict(aliases or {})
        self.unknown_error = unknown_error
        #: The package's own classes, whose names (and earlier names) no other class may take.
        self.builtins: dict[str, type[Kind]] = {}
        self._classes: dict[str, type[Kind]] = {}
        _REGISTRIES.append(weakref.ref(self))

    def __getitem__(self, name: str) -> type[Kind]:
        return self._classes[name]

    def __setitem__(self, name: str, cls: type[Kind]) -> None:
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __repr__(self) -> str:
        return f"<Registry of {self.kind}s: {list(self._classes)}>"

    def register(self, cls: type[Kind]) -> type[Kind]:
        """Class decorator: make ``cls`` known by its ``name``. A ValueError for a class that is not a
        subclass of the base, has no name, leaves one of the base's abstract methods undefined, or takes a
        built-in's name (or earlier name) from it."""
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise ValueError(f"{cls!r} cannot be registered among the {self.kind}s: it is not a "
                             f"{self.base.__name__} subclass.")
        name = getattr(cls, "name", "")
        if not name:
            raise ValueError(f"{cls.__name__} needs a `name` to be registered.")
        refused = f"{cls.__module__}.{cls.__qualname__} cannot be registered as the {self.kind} {name!r}"
        if missing := sorted(getattr(cls, "__abstractmethods__", ())):
            raise ValueError(f"{refused}: it does not define {' and '.join(missing)}, which every "
                             f"{self.base.__name__} subclass must define; see {self.guide}.")
        taken = self.builtins.get(self.aliases.get(name, name), cls)
        if taken is not cls:
            raise ValueError(f"{refused}: that is the built-in {taken.__name__}'s name, and {name!r} "
                             f"{self.where_named} must keep naming it. Give the class a `name` of its own, and name "
                             f"that {self.where_named}.")
        self._classes[name] = cls
        return cls

    def reserve_builtins(self) -> None:
        """Make the classes registered so far the built-ins: no other class may take their names."""
        self.builtins.update(self._classes)

    def lookup(self, name: Any) -> type[Kind]:
        """The class called ``name`` (or an earlier name of it): a registered one, else the one an
        installed package declares under that name in the entry point group (imported now, and
        registered). An unknown name raises ``unknown_error``, listing the valid names; a
        :class:`PluginError` names an entry point that cannot be loaded, or that names a class of
        another kind or another name."""
        if isinstance(name, str):
            name = self.aliases.get(name, name)
            if name in self._classes:
                return self._classes[name]
            if (cls := self._entry_point_class(name)) is not None:
                return self.register(cls)
        raise self.unknown_error(f"Unknown {self.kind} {name!r}; valid {self.kind}s: {self.names()}. Name one of "
                                 f"these, or add one as {self.guide} shows.")

    def names(self) -> list[str]:
        """The names :meth:`lookup` takes, sorted: the registered classes' and the entry points' of the group."""
        return sorted({*self._classes, *(entry_point.name for entry_point in entry_points(group=self.group))})

    def replaced_builtins(self) -> list[str]:
        """The built-ins' names that no longer name their built-in (replaced by item assignment)."""
        return [name for name, cls in self.builtins.items() if self._classes.get(name) is not cls]

    def _entry_point_class(self, name: str) -> type[Kind] | None:
        """The class the entry point ``name`` of the group names, imported now; None when no installed
        package declares ``name``."""
        entry_point = next(iter(entry_points(group=self.group, name=name)), None)
        if entry_point is None:
            return None
        label = f"the entry point {entry_point.name} = {entry_point.value} (group {self.group})"
        try:
            loaded = entry_point.load()
        except Exception as error:  # noqa: BLE001 - whatever the user's module raises, named in one line
            raise PluginError(f"cannot load {label}: {error_in_one_line(error)}") from error
        if not (isinstance(loaded, type) and issubclass(loaded, self.base)):
            raise PluginError(f"{label} names {loaded!r}, not a {self.base.__name__} subclass.")
        if (own := getattr(loaded, "name", "")) != name:
            raise PluginError(f"{label} names {loaded.__name__}, whose `name` is {own!r}: an entry point must have "
                              "its class's name.")
        return loaded


#: Every registry made, in the order made (weakly: a registry no module keeps is forgotten).
_REGISTRIES: list[weakref.ref[Registry[Any]]] = []


def replaced_builtins() -> list[tuple[Registry[Any], str]]:
    """(registry, name) for each built-in whose name a registry made so far maps to another class (or
    to none); a registry not made yet holds only built-ins."""
    return [(registry, name) for reference in _REGISTRIES if (registry := reference()) is not None
            for name in registry.replaced_builtins()]
