"""A similarity threshold read from the data: the cosine similarity that a given share of the pairs of
rows stays at or below.

A threshold such as DEITA's 0.9 fits the embedder it was set for. Another embedder's cosines lie
elsewhere: the last-token states of a small language model put random instruction rows at a cosine of
0.8 or more, so 0.9 removes rows that are merely alike in form. The same quantile of the data's own
cosines means the same for any embedder: 0.99 removes a row only when it is more similar to a kept row
than 99% of the pairs of rows are to each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Rows whose pairs the quantile is taken over at most: a random sample of a larger data set (seeded,
#: so the same embeddings give the same threshold). 2,000 rows make 1,999,000 pairs.
SAMPLE_ROWS = 2000


@dataclass(frozen=True)
class QuantileThreshold:
    """The ``quantile`` of the cosine similarities of ``pairs`` pairs of distinct rows: ``threshold``."""

    quantile: float
    threshold: float
    pairs: int

    def describe(self) -> str:
        return (f"Similarity threshold {self.threshold:.4g}: the {self.quantile:g} quantile of the cosine "
                f"similarities of {self.pairs:,} pairs of rows")


def check_quantile(quantile: float) -> None:
    """Raise a ValueError for a quantile that is not a number in (0, 1]."""
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) or not 0 < quantile <= 1:
        raise ValueError(f"`similarity_quantile` must be a share of the pairs of rows in (0, 1], got {quantile!r}.")


def quantile_threshold(embeddings: np.ndarray, quantile: float, *, sample_rows: int = SAMPLE_ROWS,
                       seed: int = 0) -> QuantileThreshold:
    """The ``quantile`` of the cosine similarities between the distinct pairs of rows of ``embeddings``
    (of ``sample_rows`` rows drawn at random when there are more), in float64. Rows without a direction
    (NaN, infinity, all zero) are left out here; the rules refuse them when they compare them.

    Example:
        >>> vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> quantile_threshold(vectors, 1.0).threshold, quantile_threshold(vectors, 1.0).pairs
        (0.7071067811865475, 3)
    """
    check_quantile(quantile)
    rows = np.arange(len(embeddings))
    if len(rows) > sample_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(rows), size=sample_rows, replace=False))
    values = np.asarray(embeddings[rows], dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(values, axis=1)
    usable = np.isfinite(norms) & (norms > 0)
    units = values[usable] / norms[usable, None]
    if len(units) < 2:
        raise ValueError("A similarity threshold from the data needs two rows with a usable embedding; "
                         f"there are {len(units)}.")
    upper = np.triu_indices(len(units), k=1)
    cosines = (units @ units.T)[upper]
    threshold = float(np.clip(np.quantile(cosines, quantile, method="inverted_cdf"), -1.0, 1.0))
    return QuantileThreshold(quantile, threshold, math.comb(len(units), 2))
