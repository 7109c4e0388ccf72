"""Options, each declared once: a frozen dataclass per metric (its ``*Options``) and one for how the
scores are computed (:class:`hf_adapters.backends.BackendOptions`). Every entry point (the
``compute_*`` functions, the scorer configs, the ``Dataset.map`` helpers, the evaluate modules, the
command line and the Space) builds them from its keyword arguments, so an option is validated once,
where it is built, and an unknown or bad one is named before any model is loaded.
"""

from __future__ import annotations

import argparse
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeVar

#: The model scored when the caller names none: the embedded GGUF copy offline
#: (see :mod:`hf_adapters.backends.loading`).
DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: The dtypes a model can score in, by their canonical names (``models.resolve_dtype`` also takes aliases).
DTYPES = ("float32", "bfloat16", "float16")
#: Whether the transformers backend compiles the model's body (:mod:`hf_adapters.backends.transformers.compilation`),
#: and the environment variable that says so where the backend is given no setting.
COMPILE_SETTINGS = ("auto", "on", "off")
COMPILE_ENV = "HF_ADAPTERS_COMPILE"
#: Whether it runs Liger's fused kernels (:mod:`hf_adapters.backends.transformers.fused_kernels`), likewise.
FUSED_KERNELS_SETTINGS = ("auto", "on", "off")
FUSED_KERNELS_ENV = "HF_ADAPTERS_FUSED_KERNELS"
#: The engine ``hf-adapters score`` runs without ``--engine``, and that of a job whose manifest names none.
DEFAULT_ENGINE = "local"
#: Rows per batch when the caller does not say (the core also bounds each batch by a token budget).
DEFAULT_BATCH_SIZE = 16
#: Prompts decoding together in generation (``LikelihoodBackend.generate``) when the caller does not say.
DEFAULT_GENERATION_BATCH_SIZE = 16
#: IFD's and the seed configs' default truncation length, in tokens (capped at the model's limit).
DEFAULT_MAX_LENGTH = 2048

Spec = TypeVar("Spec", bound="OptionSpec")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def setting(value: str | None, env: str, choices: Sequence[str], name: str) -> str:
    """``value`` (the option ``name``), else the environment variable ``env``, else the first of ``choices``,
    case and spaces aside; a ValueError names the choices for anything else.

    Example:
        >>> setting(" ON ", COMPILE_ENV, COMPILE_SETTINGS, "compile")
        'on'
    """
    chosen = (value if value is not None else os.environ.get(env, "")).strip().lower() or choices[0]
    if chosen not in choices:
        raise ValueError(f"{name if value is not None else env}={chosen!r}; use one of {', '.join(choices)}.")
    return chosen


def check_batch_size(batch_size: Any, name: str = "batch_size") -> None:
    """Raise a ValueError unless ``batch_size`` (the option ``name``) is a positive integer."""
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {batch_size!r}.")


def check_max_length(max_length: Any) -> None:
    """Raise a ValueError unless ``max_length`` is None or an integer of at least 2 (a context
    token and one scored token)."""
    if max_length is not None and (not _is_int(max_length) or max_length < 2):
        raise ValueError(f"`max_length` must be an integer of at least 2 (or None), got {max_length!r}.")


def check_lengths(max_length: Any, batch_size: Any) -> None:
    """:func:`check_max_length` and :func:`check_batch_size`."""
    check_max_length(max_length)
    check_batch_size(batch_size)


def check_stride(stride: Any, max_length: int | None) -> None:
    """Raise a ValueError unless ``stride`` is None or an integer from 1 to ``max_length``."""
    if stride is None:
        return
    if not _is_int(stride) or stride < 1:
        raise ValueError(f"`stride` must be a positive integer (or None), got {stride!r}.")
    if max_length is not None and stride > max_length:
        raise ValueError(f"`stride` ({stride}) cannot be larger than `max_length` ({max_length}): each window "
                         "predicts at most `stride` new tokens and reads at most `max_length`.")


def check_choice(name: str, value: Any, valid: Iterable[str]) -> None:
    """Raise a ValueError unless ``value`` is one of ``valid``."""
    valid = list(valid)
    if value not in valid:
        raise ValueError(f"Unknown {name} {value!r}; valid {name}s: {valid}")


@dataclass(frozen=True)
class OptionSpec:
    """Base of the option dataclasses: build one from keyword values with :meth:`build`, which names
    an unknown key; subclasses check their values in :meth:`check`, run when the object is made."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise a ValueError naming the first bad value."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(field.name for field in fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {field.name: field.default for field in fields(cls) if field.default is not MISSING}

    @classmethod
    def build(cls: type[Spec], values: Mapping[str, Any]) -> Spec:
        """The options of ``values``; a key that is not an option is a ValueError listing the valid ones."""
        if unknown := sorted(set(values) - set(cls.names())):
            raise ValueError(f"Unknown option(s) {unknown}; valid options: {sorted(cls.names())}")
        return cls(**values)

    def given(self) -> dict[str, Any]:
        """The options whose value differs from the default."""
        defaults = self.defaults()
        return {name: getattr(self, name) for name in self.names() if getattr(self, name) != defaults.get(name)}


def partition_options(values: Mapping[str, Any], *groups: Iterable[str], caller: str,
                      others: Iterable[str] = ()) -> list[dict[str, Any]]:
    """``values`` split by name into ``groups`` (a name in several goes to the first), then the values
    named in ``others`` (e.g. ``Dataset.map``'s keyword arguments); any other name is a ValueError
    naming ``caller`` and listing the valid options."""
    groups = [set(group) for group in groups]
    others = set(others)
    known = set().union(*groups)
    if unknown := sorted(set(values) - known - others):
        valid = sorted(known) + ([f"and {caller}'s other keyword arguments"] if others else [])
        raise ValueError(f"{caller} got unknown option(s) {unknown}; valid options: {valid}")
    parts: list[dict[str, Any]] = [{} for _ in range(len(groups) + 1)]
    for name, value in values.items():
        parts[next((i for i, group in enumerate(groups) if name in group), len(groups))][name] = value
    return parts


def split_options(values: Mapping[str, Any], *specs: type[OptionSpec], caller: str) -> list[OptionSpec]:
    """Each spec built from its share of ``values`` (see :func:`partition_options`)."""
    parts = partition_options(values, *(spec.names() for spec in specs), caller=caller)
    return [spec.build(part) for spec, part in zip(specs, parts, strict=False)]


F = TypeVar("F", bound=Callable[..., Any])


def takes_options(*specs: type[OptionSpec]) -> Callable[[F], F]:
    """Decorator of a function that takes ``**options``: its signature (``help()``, ``inspect``)
    lists every option of ``specs`` as a keyword argument with its default."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        rest = [p for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in own}
        added = []
        for spec in specs:
            for field in fields(spec):
                if field.name not in taken:
                    taken.add(field.name)
                    added.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                                                   annotation=field.type))
        function.__signature__ = signature.replace(parameters=[*own, *added, *rest])
        return function

    return decorate


def positive_int(text: str) -> int:
    """A command-line argument that must be a whole number of at least 1 (an argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A command-line argument that must be a number of at least 0, a fraction of a GPU say (an argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of at least 0, got {text}")
    return value
