"""The step after scoring: keep the rows whose scores pass a cut-off and rank highest (or lowest)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .conventions import SELECTION_CONVENTIONS
from .options import check_choice

if TYPE_CHECKING:  # the command line's help needs no datasets
    from datasets import Dataset

logger = logging.getLogger(__name__)


def check_selection(top: float | None, top_n: int | None, order: str | None, convention: str = "exact") -> None:
    """Raise a ValueError for a fraction outside (0, 1], a negative count, both, or an unknown order
    or convention."""
    check_choice("convention", convention, SELECTION_CONVENTIONS)
    if top is not None and top_n is not None:
        raise ValueError("Pass `top` (a fraction of the rows) or `top_n` (a number of rows), not both.")
    if top is not None and (isinstance(top, bool) or not isinstance(top, (int, float)) or not 0 < top <= 1):
        raise ValueError(f"`top` must be a fraction in (0, 1], got {top!r}.")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0):
        raise ValueError(f"`top_n` must be a non-negative integer, got {top_n!r}.")
    if order not in (None, "input", "score"):
        raise ValueError(f"`order` must be 'input' or 'score', got {order!r}.")


def selection_indices(
    scores: Sequence[float | None],
    *,
    top: float | None = None,
    top_n: int | None = None,
    max_score: float | None = None,
    min_score: float | None = None,
    highest: bool = True,
    order: str | None = None,
    convention: str = "exact",
) -> tuple[list[int], dict[str, int]]:
    """The indices of the kept rows, and how many rows each rule removed.

    In order: rows with no score (None or NaN) go, then rows above ``max_score`` or below
    ``min_score``, then all but the ``top`` fraction of the *input* row count (rounded down) or the
    ``top_n`` best; best is highest with ``highest``, ties broken by input order. The indices come
    in input order (default), or best first with ``order="score"``.

    A peer's ``convention`` follows its selection script (``max_score`` then defaults to 1):
    ``"cherry"`` (Cherry_LLM's ``data_by_IFD.py``) takes the ``top`` fraction of the rows left
    after the cut-offs, and of tied rows the later one first; ``"superfiltering"`` (its
    ``select_data.py``) keeps only scores *below* ``max_score`` and returns best first.
    """
    check_selection(top, top_n, order, convention)
    rules = SELECTION_CONVENTIONS[convention]
    if max_score is None:
        max_score = rules.max_score
    above = "at or above max_score" if rules.strictly_below else "above max_score"
    removed = {"no score": 0, above: 0, "below min_score": 0, "outside the top": 0}
    kept = []
    for index, score in enumerate(scores):
        if score is None or math.isnan(score):
            removed["no score"] += 1
        elif max_score is not None and (score >= max_score if rules.strictly_below else score > max_score):
            removed[above] += 1
        elif min_score is not None and score < min_score:
            removed["below min_score"] += 1
        else:
            kept.append(index)
    tie = -1 if rules.later_first_on_ties else 1
    ranked = sorted(kept, key=lambda index: (-scores[index] if highest else scores[index], tie * index))
    base = len(kept) if rules.top_of_kept else len(scores)
    count = int(base * top) if top is not None else top_n if top_n is not None else len(ranked)
    chosen = ranked[:count]
    removed["outside the top"] = len(ranked) - len(chosen)
    order = order or rules.order
    return (chosen if order == "score" else sorted(chosen)), removed


def select(
    ds: Dataset,
    column: str = "ifd",
    *,
    top: float | None = None,
    top_n: int | None = None,
    max_score: float | None = None,
    min_score: float | None = None,
    highest: bool = True,
    order: str | None = None,
    convention: str = "exact",
) -> Dataset:
    """The rows of ``ds`` to keep by their ``column`` score (see :func:`selection_indices`); the log
    says how many rows each rule removed.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import select
        >>> ds = Dataset.from_dict({"id": ["a", "b", "c", "d"], "ifd": [0.9, 1.2, None, 0.7]})
        >>> list(select(ds, "ifd", top=0.5, max_score=1.0)["id"])
        ['a', 'd']
    """
    if column not in ds.column_names:
        raise ValueError(f"Column {column!r} not found; available: {ds.column_names}")
    indices, removed = selection_indices(list(ds[column]), top=top, top_n=top_n, max_score=max_score,
                                         min_score=min_score, highest=highest, order=order, convention=convention)
    logger.info("Selected %d of %d rows (removed: %s).", len(indices), len(ds),
                ", ".join(f"{count} {rule}" for rule, count in removed.items()))
    return ds.select(indices)
