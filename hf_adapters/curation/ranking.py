"""Ranking scores: the cut-offs, the conventions and the top rows a selection keeps, as row indices
(what :func:`~hf_adapters.curation.selection.select` and the diversity rules share)."""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Mapping, Sequence

from hf_adapters.core.conventions import SELECTION_CONVENTIONS
from hf_adapters.core.options import check_choice

logger = logging.getLogger(__name__)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_selection(top: float | None, top_n: int | None, order: str | None, convention: str = "exact",
                    max_score: float | None = None, min_score: float | None = None) -> None:
    """Raise a ValueError for a fraction outside (0, 1], a negative count, both, a bound that is not a
    number (or is NaN), or an unknown order or convention. NumPy numbers count as numbers."""
    check_choice("convention", convention, SELECTION_CONVENTIONS)
    if top is not None and top_n is not None:
        raise ValueError("Pass `top` (a fraction of the rows) or `top_n` (a number of rows), not both.")
    if top is not None and (not _is_number(top) or not 0 < top <= 1):
        raise ValueError(f"`top` must be a fraction in (0, 1], got {top!r}.")
    if top_n is not None and (not isinstance(top_n, numbers.Integral) or isinstance(top_n, bool) or top_n < 0):
        raise ValueError(f"`top_n` must be a non-negative integer, got {top_n!r}.")
    for name, bound in (("max_score", max_score), ("min_score", min_score)):
        if bound is not None and (not _is_number(bound) or math.isnan(bound)):
            raise ValueError(f"`{name}` must be a number (not NaN), got {bound!r}.")
    if order not in (None, "input", "score"):
        raise ValueError(f"`order` must be 'input' or 'score', got {order!r}.")


def check_scores(scores: Sequence, name: str = "the scores") -> list[float]:
    """The scores as floats (None: NaN); a ValueError names the first that is not one number (a list,
    a string, a boolean)."""
    checked = []
    for row, score in enumerate(scores):
        if score is not None and not _is_number(score):
            raise ValueError(f"Row {row}: {name} must hold one number per row (or null), got "
                             f"{type(score).__name__}: {score!r:.60}.")
        checked.append(math.nan if score is None else float(score))
    return checked


def check_exclusions(exclusions: Mapping[str, Sequence[bool]], rows: int) -> dict[str, Sequence[bool]]:
    """The ``exclusions`` of :func:`selection_indices`, each checked to say something of every one of the ``rows``."""
    for rule, removes in exclusions.items():
        if len(removes) != rows:
            raise ValueError(f"The rule {rule!r} says which of {len(removes)} rows it removes, for {rows} rows.")
    return dict(exclusions)


def cut_off(convention: str, max_score: float | None) -> tuple[float | None, bool]:
    """The ``max_score`` in force (the convention's when none is given) and whether it keeps only the
    scores strictly below it."""
    rules = SELECTION_CONVENTIONS[convention]
    return (rules.max_score if max_score is None else max_score), rules.strictly_below


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
    exclusions: Mapping[str, Sequence[bool]] | None = None,
) -> tuple[list[int], dict[str, int]]:
    """The indices of the kept rows, and how many rows each rule removed.

    In order: rows that one of the ``exclusions`` removes go (each rule's name to whether it removes
    each row, as :func:`~hf_adapters.curation.score_bounds.bound_exclusions` gives them for other
    score columns; a row is counted under the first), then rows with no score (None or NaN), then
    rows above ``max_score`` or below ``min_score``, then all but the ``top`` fraction of the *input*
    row count (rounded down) or the ``top_n`` best; best is highest with ``highest``, ties broken by
    input order. The indices come in input order (default), or best first with ``order="score"``.

    A peer's ``convention`` follows its selection script (``conventions.SELECTION_CONVENTIONS``;
    ``max_score`` then defaults to 1): ``"cherry"`` (Cherry_LLM's ``data_by_IFD.py``) takes the
    ``top`` fraction of the rows left after the cut-offs, and of tied rows the later one first;
    ``"superfiltering"`` (its ``select_data.py``) keeps only scores *below* ``max_score`` and
    returns best first.
    """
    check_selection(top, top_n, order, convention, max_score, min_score)
    scores = check_scores(scores)
    rules = SELECTION_CONVENTIONS[convention]
    max_score, strictly_below = cut_off(convention, max_score)
    above = "at or above max_score" if strictly_below else "above max_score"
    exclusions = check_exclusions(exclusions or {}, len(scores))
    removed = {**dict.fromkeys(exclusions, 0), "no score": 0, above: 0, "below min_score": 0, "outside the top": 0}
    kept = []
    for index, score in enumerate(scores):
        if rule := next((rule for rule, removes in exclusions.items() if removes[index]), None):
            removed[rule] += 1
        elif math.isnan(score):
            removed["no score"] += 1
        elif max_score is not None and (score >= max_score if strictly_below else score > max_score):
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
    if not chosen and scores:
        logger.warning("The selection keeps none of the %d rows (removed: %s).", len(scores),
                       ", ".join(f"{n} {rule}" for rule, n in removed.items() if n))
    order = order or rules.order
    return (chosen if order == "score" else sorted(chosen)), removed
