"""Checks of the numeric options every score takes, in one place: the core, the metric functions,
the ``Dataset.map`` helpers and the scorer configs all call them before any model is loaded."""

from __future__ import annotations

from typing import Any

#: Rows per batch when the caller does not say (the core also bounds each batch by a token budget).
DEFAULT_BATCH_SIZE = 16
#: IFD's and the seed configs' default truncation length, in tokens (capped at the model's limit).
DEFAULT_MAX_LENGTH = 2048


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_batch_size(batch_size: Any) -> None:
    """Raise a ValueError unless ``batch_size`` is a positive integer."""
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")


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
