"""Facility location, maximised greedily: the rows that best represent a pool (Superfiltering-D's
second step; apricot's ``FacilityLocationSelection``, submodlib's ``FacilityLocationFunction``).

The value of a set S of rows is ``sum over every pool row i of max(0, max over j in S of sim(i, j))``;
each step adds the row of largest gain, ties to the earliest row (plain greedy's rows).

Dense: every row's gain is kept up to date. A pick raises the cover of the rows more similar to it
than to any earlier pick, and only those rows' similarities to the pool are computed again, to take
what their new cover takes from each gain: on high-dimensional embeddings, where a pick covers few
rows better than the picks before it, this is far cheaper than lazy greedy (Minoux), whose stale
bounds there fall after every pick. No rows x rows matrix is held, only blocks of it. Sparse
(``neighbors=k``): each row is represented only by its ``k`` most similar rows (itself included),
as apricot's and submodlib's sparse modes do; the neighbours are found exactly, a block at a time,
and lazy greedy picks, each gain costing k similarities on average.
"""

from __future__ import annotations

import heapq

import numpy as np

from hf_adapters.formulas.similarity import Similarity

#: Gains within this share of the largest count as equal (the first row wins): a kept-up-to-date
#: gain carries the rounding of every update, about 1e-13 of it, which must not decide a true tie.
TIE_TOLERANCE = 1e-9


def check_budget(budget: object) -> None:
    """Raise a ValueError for a budget that is not a non-negative integer."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ValueError(f"`budget` must be a non-negative integer, got {budget!r}.")


def facility_location_order(embeddings: np.ndarray, budget: int, *, similarity: str = "cosine",
                            neighbors: int | None = None) -> list[int]:
    """The rows (indices into ``embeddings``) that greedy facility location picks, ``budget`` of
    them (all rows if fewer), in the order picked. ``similarity``: ``"cosine"`` or submodlib's
    ``"euclidean"`` kernel; ``neighbors``: the sparse k-nearest-neighbour version.

    Example:
        >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> facility_location_order(vectors, 2)  # the middle of the first pair, then a tie: the earlier row
        [1, 2]
    """
    check_budget(budget)
    pool = Similarity(embeddings, similarity)
    budget = min(int(budget), len(pool))
    if neighbors is None:
        return _dense_greedy(pool, budget)
    if isinstance(neighbors, bool) or not isinstance(neighbors, (int, np.integer)) or neighbors < 1:
        raise ValueError(f"`neighbors` must be a positive integer, got {neighbors!r}.")
    return _sparse_lazy_greedy(*nearest_neighbors(pool, int(neighbors)), budget)


def _dense_greedy(pool: Similarity, budget: int) -> list[int]:
    size = len(pool)
    gains = np.zeros(size, dtype=np.float64)
    step_rows = pool.block_rows(size)
    for start in range(0, size, step_rows):  # every row's first gain: the sum of its positive similarities
        gains += np.maximum(pool.block(slice(start, start + step_rows), slice(None)), 0).sum(axis=0)
    covered = np.zeros(size, dtype=np.float64)  # each row's best similarity to a picked row (at least 0)
    available = np.ones(size, dtype=bool)
    picked: list[int] = []
    while len(picked) < budget:
        candidates = np.where(available, gains, -np.inf)
        best = candidates.max()
        row = int(np.argmax(candidates >= best - TIE_TOLERANCE * max(abs(best), 1.0)))  # the first of the largest
        picked.append(row)
        available[row] = False
        similarities = pool.block(slice(None), np.array([row]))[:, 0]
        changed = np.flatnonzero(similarities > covered)
        for start in range(0, len(changed), step_rows):  # the gains these rows' new cover takes away
            rows = changed[start:start + step_rows]
            block = pool.block(rows, slice(None))
            old, new = covered[rows, None], similarities[rows, None]
            gains -= (np.maximum(block - old, 0) - np.maximum(block - new, 0)).sum(axis=0)
        covered[changed] = similarities[changed]
    return picked


def nearest_neighbors(pool: Similarity, neighbors: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``neighbors`` most similar rows (ties to the earlier row) and those similarities,
    as two (rows, k) arrays; k is at most the number of rows."""
    size = len(pool)
    k = min(neighbors, size)
    indices = np.empty((size, k), dtype=np.int64)
    values = np.empty((size, k), dtype=np.float64)
    step_rows = pool.block_rows(size)
    for start in range(0, size, step_rows):
        block = pool.block(slice(start, start + step_rows), slice(None))
        top = _top_columns(block, k)
        top_values = np.take_along_axis(block, top, axis=1)
        order = np.lexsort((top, -top_values), axis=1)
        indices[start:start + len(block)] = np.take_along_axis(top, order, axis=1)
        values[start:start + len(block)] = np.take_along_axis(top_values, order, axis=1)
    return indices, values


def _top_columns(block: np.ndarray, k: int) -> np.ndarray:
    """The columns of each row's ``k`` largest values, in column order; of columns tied at the k-th
    largest value, the earliest (exact duplicates tie: which are kept must not be left to chance)."""
    if k == block.shape[1]:
        return np.tile(np.arange(k), (len(block), 1))
    kth = -np.partition(-block, k - 1, axis=1)[:, k - 1:k]
    above = block > kth
    tied = block == kth
    room = k - above.sum(axis=1, keepdims=True)
    kept = above | (tied & (np.cumsum(tied, axis=1) <= room))
    return np.nonzero(kept)[1].reshape(len(block), k)


def _sparse_lazy_greedy(indices: np.ndarray, values: np.ndarray, budget: int) -> list[int]:
    size, k = indices.shape
    # For each candidate j, the rows i that count j among their neighbours, and sim(i, j).
    by_candidate = np.argsort(indices.ravel(), kind="stable")
    represented = (by_candidate // k).astype(np.int64)
    similarity = values.ravel()[by_candidate]
    candidates = indices.ravel()[by_candidate]
    bounds = np.searchsorted(candidates, np.arange(size + 1))
    # A row no row counts among its neighbours (an exact duplicate of an earlier row) has no range: gain 0.
    gains = np.bincount(candidates, weights=np.maximum(similarity, 0), minlength=size)
    heap = [(-gain, row) for row, gain in enumerate(gains.tolist())]
    heapq.heapify(heap)
    computed_at = np.zeros(size, dtype=np.int64)
    covered = np.zeros(size, dtype=np.float64)
    picked: list[int] = []

    def gain(row: int) -> float:
        span = slice(bounds[row], bounds[row + 1])
        return float(np.maximum(similarity[span] - covered[represented[span]], 0).sum())

    while len(picked) < budget:
        top = heap[0][1]
        if computed_at[top] != len(picked):
            heapq.heapreplace(heap, (-gain(top), top))
            computed_at[top] = len(picked)
            continue
        # The top's gain is the largest; every row whose gain may lie within the tie tolerance of
        # it has a bound at least that high: compute those gains, and pick the first row of the tie.
        floor = -heap[0][0] - TIE_TOLERANCE * max(abs(heap[0][0]), 1.0)
        contenders = []
        while heap and -heap[0][0] >= floor:
            bound, row = heapq.heappop(heap)
            contenders.append((bound if computed_at[row] == len(picked) else -gain(row), row))
        row = min(row for bound, row in contenders if -bound >= floor)
        for bound, other in contenders:
            if other != row:
                computed_at[other] = len(picked)
                heapq.heappush(heap, (bound, other))
        picked.append(row)
        span = slice(bounds[row], bounds[row + 1])
        np.maximum.at(covered, represented[span], similarity[span])
    return picked
