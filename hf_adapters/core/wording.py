"""How messages word what they count."""

from __future__ import annotations


def noun_for(count: int, noun: str) -> str:
    """``noun``, with an ``s`` unless ``count`` is one."""
    return noun if count == 1 else f"{noun}s"


def plural(count: int, noun: str) -> str:
    """``count`` and its noun (:func:`noun_for`): ``1 response``, ``2 responses``."""
    return f"{count} {noun_for(count, noun)}"
