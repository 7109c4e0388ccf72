"""Selection on more than one score of a row: bounds on any score column (``perplexity<50``), and the
rank product that ranks rows by several columns at once; what ``hf-adapters select --where`` and
``--rank-product`` take."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The comparisons a bound may make, by their sign.
OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
#: What a score that a bound removes is, by the bound's sign.
_OUTSIDE = {"<": "at or above", "<=": "above", ">": "at or below", ">=": "below"}
#: The name under which ``select`` writes the rank product.
RANK_PRODUCT = "rank_product"
#: The name under which ``select --score-product`` writes the product of the columns' scores.
SCORE_PRODUCT = "score_product"


@dataclass(frozen=True)
class Bound:
    """Keep the rows whose ``column`` score is ``sign`` ``value`` (``perplexity < 50``); a row without
    that score (null or NaN) is not kept."""

    column: str
    sign: str
    value: float

    def keeps(self, score: float) -> bool:
        return OPERATORS[self.sign](score, self.value)  # False for NaN

    def outside(self) -> str:
        """The rule's name for the rows it removes: ``perplexity at or above 50``."""
        return f"{self.column} {_OUTSIDE[self.sign]} {self.value:g}"


def parse_bound(text: str) -> Bound:
    """``COLUMN<VALUE``, ``COLUMN<=VALUE``, ``COLUMN>VALUE`` or ``COLUMN>=VALUE`` as a :class:`Bound`;
    a ValueError says what is wrong.

    Example:
        >>> parse_bound("perplexity<=50")
        Bound(column='perplexity', sign='<=', value=50.0)
    """
    match = re.fullmatch(r"\s*([^<>=]+?)\s*(<=|>=|<|>)\s*(\S+)\s*", text)
    if not match:
        raise ValueError(f"A bound is COLUMN<VALUE, COLUMN<=VALUE, COLUMN>VALUE or COLUMN>=VALUE (e.g. "
                         f"'perplexity<50'), got {text!r}.")
    column, sign, number = match.groups()
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"The bound {text!r} compares with {number!r}, which is not a number.") from None
    if math.isnan(value):
        raise ValueError(f"The bound {text!r} compares with NaN, which no score passes.")
    return Bound(column, sign, value)


def bound_exclusions(scores: Mapping[str, Sequence[float]], bounds: Sequence[Bound]) -> dict[str, list[bool]]:
    """For each rule the ``bounds`` make, in order, whether it removes each row: ``no score in COLUMN``
    (null or NaN) and each bound's :meth:`Bound.outside`; ``scores`` holds each bound's column (floats,
    NaN for none), as :func:`~hf_adapters.curation.ranking.selection_indices` takes them as ``exclusions``.

    Example:
        >>> bound_exclusions({"ppl": [3.0, float("nan"), 80.0]}, [parse_bound("ppl<50")])
        {'no score in ppl': [False, True, False], 'ppl at or above 50': [False, False, True]}
    """
    exclusions: dict[str, list[bool]] = {}
    for bound in bounds:
        values = scores[bound.column]
        exclusions.setdefault(f"no score in {bound.column}", [math.isnan(value) for value in values])
        exclusions[bound.outside()] = [not math.isnan(value) and not bound.keeps(value) for value in values]
    return exclusions


def parse_ranked_column(text: str) -> tuple[str, bool]:
    """``COLUMN``, ``COLUMN:highest`` (the highest score ranks first) or ``COLUMN:lowest``: the column's
    name, and whether its highest score ranks first.

    Example:
        >>> parse_ranked_column("ifd"), parse_ranked_column("perplexity:lowest")
        (('ifd', True), ('perplexity', False))
    """
    column, _, direction = text.rpartition(":")
    if not column or direction not in ("highest", "lowest"):
        return text, True
    return column, direction == "highest"


def rank_product(columns: Sequence[Sequence[float]], highest: Sequence[bool],
                 candidates: Sequence[bool] | None = None) -> list[float]:
    """Each row's rank product over ``columns``: the geometric mean of its ranks in the columns (1: the
    best score of a column, the highest or the lowest as ``highest`` says; tied scores share their
    average rank), divided by the number of rows ranked. It lies in (0, 1]; the lower, the better in
    every column at once (a row in the top 10% of each column has at most 0.1). Rows are ranked among
    the ``candidates`` (default: all) that have a score (not NaN) in every column; the others get NaN.

    Example:
        >>> rank_product([[0.9, 0.5, 0.7], [10.0, 2.0, 3.0]], highest=[True, False])
        [0.5773502691896257, 0.5773502691896257, 0.6666666666666666]
    """
    import numpy as np

    from hf_adapters.curation.score_stats import average_ranks

    values = np.array(columns, dtype=float).reshape(len(columns), -1)
    ranked = ~np.isnan(values).any(axis=0)
    if candidates is not None:
        ranked &= np.asarray(candidates, dtype=bool)
    rows = np.flatnonzero(ranked)
    # Twice the average ranks are whole numbers: their product, in Python integers, is exact, so rows
    # with equal products tie exactly (and go in input order).
    doubled = [np.rint(2 * average_ranks(-column[rows] if best else column[rows])).astype(np.int64).tolist()
               for column, best in zip(values, highest, strict=True)]
    products = [math.prod(ranks) for ranks in zip(*doubled, strict=True)]
    result = [math.nan] * values.shape[1]
    for row, product in zip(rows.tolist(), products, strict=True):
        result[row] = _root(product, len(columns)) / (2 * rows.size)
    return result


def _root(number: int, degree: int) -> float:
    """The ``degree``-th root of a positive whole ``number`` of any size."""
    try:
        return float(number) ** (1 / degree)
    except OverflowError:
        return math.exp(math.log(number) / degree)
