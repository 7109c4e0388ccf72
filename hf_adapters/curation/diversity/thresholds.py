"""A similarity threshold read from the data: the cosine similarity that a given share of the rows'
nearest neighbours stay at or below.

A threshold such as DEITA's 0.9 fits the embedder it was set for. Another embedder's cosines lie
elsewhere: the last-token states of a small language model put random instruction rows at a median
cosine of 0.8, so 0.9 removes rows that are merely alike in form. A quantile of the data's own
nearest-neighbour similarities means the same for any embedder: DEITA's rule (and SemDeDup's) removes
a row only when a better row is more similar to it than the threshold, so at most the rows whose
nearest neighbour is that similar go; with the 0.95 quantile, at most 5% of the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hf_adapters.formulas.similarity import BLOCK_VALUES

#: Rows whose nearest neighbours the quantile is taken over at most: a random sample of a larger data
#: set (seeded, so the same embeddings give the same threshold), each compared with every row.
SAMPLE_ROWS = 2000


@dataclass(frozen=True)
class QuantileThreshold:
    """The ``quantile`` of the nearest-neighbour cosine similarities of ``rows`` rows: ``threshold``."""

    quantile: float
    threshold: float
    rows: int

    def describe(self) -> str:
        return (f"Similarity threshold {self.threshold:.4g}: the {self.quantile:g} quantile of the cosine similarity "
                f"of each of {self.rows:,} rows to its most similar other row, so at most about "
                f"{100 * (1 - self.quantile):.3g}% of the rows can be removed as too similar")


def check_quantile(quantile: float) -> None:
    """Raise a ValueError for a quantile that is not a number in (0, 1]."""
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) or not 0 < quantile <= 1:
        raise ValueError(f"`similarity_quantile` must be a share of the rows in (0, 1], got {quantile!r}.")


def nearest_similarities(embeddings: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The largest cosine similarity (float64) of each of ``rows`` to any other row of ``embeddings``
    with a direction (rows of NaN, infinity or zeros are no one's neighbour), a block of rows at a time."""
    sample = _units(embeddings[rows])[0]
    nearest = np.full(len(rows), -np.inf)
    step = max(1, BLOCK_VALUES // max(len(rows), 1))
    for start in range(0, len(embeddings), step):
        units, usable = _units(embeddings[start:start + step])
        similarities = sample @ units.T
        similarities[:, ~usable] = -np.inf
        inside = (rows >= start) & (rows < start + len(units))
        similarities[np.flatnonzero(inside), rows[inside] - start] = -np.inf  # a row is not its own neighbour
        np.maximum(nearest, similarities.max(axis=1, initial=-np.inf), out=nearest)
    return nearest


def _units(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``block`` scaled to length 1 in float64 (zeros where a row has no direction), and which have one."""
    values = np.asarray(block, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(values, axis=1)
    usable = np.isfinite(norms) & (norms > 0)
    return np.where(usable[:, None], values / np.where(usable, norms, 1.0)[:, None], 0.0), usable


def quantile_threshold(embeddings: np.ndarray, quantile: float, *, sample_rows: int = SAMPLE_ROWS,
                       seed: int = 0) -> QuantileThreshold:
    """The ``quantile`` of the rows' nearest-neighbour cosine similarities (:func:`nearest_similarities`),
    over every row with a direction, or over ``sample_rows`` of them drawn at random when there are more
    (each still compared with every row). Rows without a direction (NaN, infinity, all zero) are left
    out here; the rules refuse them when they compare them.

    Example:
        >>> vectors = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
        >>> quantile_threshold(vectors, 0.5)
        QuantileThreshold(quantile=0.5, threshold=0.8, rows=3)
    """
    check_quantile(quantile)
    rows = np.flatnonzero(_usable_rows(embeddings))
    if len(rows) < 2:
        raise ValueError("A similarity threshold from the data needs two rows with a usable embedding; "
                         f"there are {len(rows)}.")
    if len(rows) > sample_rows:
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=sample_rows, replace=False))
    nearest = nearest_similarities(embeddings, rows)
    threshold = float(np.clip(np.quantile(nearest, quantile, method="inverted_cdf"), -1.0, 1.0))
    return QuantileThreshold(quantile, threshold, len(rows))


def _usable_rows(embeddings: np.ndarray) -> np.ndarray:
    """Which rows have a direction, read a block at a time."""
    step = max(1, BLOCK_VALUES // max(embeddings.shape[1], 1))
    return np.concatenate([_units(embeddings[start:start + step])[1] for start in range(0, len(embeddings), step)]
                          or [np.zeros(0, dtype=bool)])
