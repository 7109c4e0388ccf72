"""Near-duplicate removal by embedding clusters, SemDeDup's rule (Abbas et al., 2023; NeMo
Curator's semantic dedup): k-means on the unit vectors, then inside each cluster a row is removed
when its cosine similarity to a row that comes before it exceeds the threshold.

SemDeDup orders a cluster's rows by their distance to the centroid; here they come best first by
score, so the best-scored row of each group of near-duplicates stays. As in SemDeDup, a row is
compared with every row before it, removed or not (DEITA's rule compares with kept rows only).
Clusters bound the work: rows^2 / clusters similarities instead of rows^2.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hf_adapters.curation.diversity.deita import RECHECK_MARGIN, check_threshold
from hf_adapters.formulas.similarity import BLOCK_VALUES, unit_rows

#: k-means rounds (SemDeDup's default number of iterations is of this order).
KMEANS_ROUNDS = 20


def spherical_kmeans(units: np.ndarray, clusters: int, *, seed: int = 0, rounds: int = KMEANS_ROUNDS) -> np.ndarray:
    """The cluster of each unit row: k-means on cosine similarity, started from ``clusters`` rows
    drawn with ``seed``; a row goes to the first of its most similar centroids. Deterministic.

    Example:
        >>> spherical_kmeans(np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]), 2).tolist()
        [0, 0, 1]
    """
    clusters = min(clusters, len(units))
    start = np.sort(np.random.default_rng(seed).choice(len(units), clusters, replace=False))
    centroids = units[start].astype(np.float64)
    labels = np.zeros(len(units), dtype=np.int64)
    step = max(1, BLOCK_VALUES // clusters)
    for _ in range(rounds):
        for first in range(0, len(units), step):
            labels[first:first + step] = np.argmax(units[first:first + step] @ centroids.T, axis=1)
        order = np.argsort(labels, kind="stable")
        present, starts = np.unique(labels[order], return_index=True)
        sums = np.zeros_like(centroids)
        sums[present] = np.add.reduceat(units[order].astype(np.float64), starts, axis=0)
        norms = np.linalg.norm(sums, axis=1)
        moved = np.where(norms[:, None] > 0, sums / np.where(norms > 0, norms, 1)[:, None], centroids)
        if np.array_equal(moved, centroids):
            break
        centroids = moved
    return labels


def semantic_dedup_indices(embeddings: np.ndarray, ranked: Sequence[int], *, threshold: float,
                           clusters: int = 1, seed: int = 0) -> list[int]:
    """The rows of ``ranked`` (best first) that are not near-duplicates: a row goes when its cosine
    similarity to a better-ranked row of its cluster is above ``threshold``. In ``ranked`` order.

    Example:
        >>> vectors = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]])
        >>> semantic_dedup_indices(vectors, [1, 0, 2], threshold=0.9)
        [1, 2]
    """
    check_threshold(threshold)
    if isinstance(clusters, bool) or not isinstance(clusters, (int, np.integer)) or clusters < 1:
        raise ValueError(f"`clusters` must be a positive integer, got {clusters!r}.")
    ranked = np.asarray(ranked, dtype=np.int64)
    if not len(ranked):
        return []
    units = unit_rows(embeddings[ranked], rows=ranked)
    labels = spherical_kmeans(units, clusters, seed=seed) if clusters > 1 else np.zeros(len(ranked), dtype=np.int64)
    duplicate = np.zeros(len(ranked), dtype=bool)
    for cluster in np.unique(labels):
        members = np.flatnonzero(labels == cluster)  # positions in rank order
        step = max(1, BLOCK_VALUES // len(members))
        for first in range(0, len(members), step):
            rows = members[first:first + step]
            similarities = units[rows] @ units[members[:first + len(rows)]].T
            similarities[np.arange(len(rows))[:, None] + first <= np.arange(first + len(rows))[None, :]] = -np.inf
            nearest = similarities.max(axis=1)
            duplicate[rows] = nearest > threshold + RECHECK_MARGIN
            for position in np.flatnonzero(np.abs(nearest - threshold) <= RECHECK_MARGIN):
                duplicate[rows[position]] = _above(embeddings, ranked, rows[position], members[:first + position],
                                                   threshold)
    return ranked[~duplicate].tolist()


def _above(embeddings: np.ndarray, ranked: np.ndarray, position: int, earlier: np.ndarray, threshold: float) -> bool:
    """Whether the float64 cosine of row ``ranked[position]`` to any ``ranked[earlier]`` is above ``threshold``."""
    vector = embeddings[ranked[position]].astype(np.float64)
    others = embeddings[ranked[earlier]].astype(np.float64)
    return bool((others @ vector / (np.linalg.norm(others, axis=1) * np.linalg.norm(vector)) > threshold).any())
