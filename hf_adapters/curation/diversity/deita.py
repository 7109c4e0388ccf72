"""DEITA's score-first, diversity-aware selection (Liu et al., ICLR 2024; hkust-nlp/deita's ``IterativeFilter``).

Rows are visited best first; a row is kept if the cosine similarity of its embedding to every row
kept so far is at most ``threshold`` (DEITA: 0.9), until ``budget`` rows are kept. DEITA's filter
with its default one row per step keeps exactly these rows (``benchmarks/peers/diversity_peers.py``).

Candidates are compared a block at a time: one float32 product against the rows kept before the
block, then each candidate against the rows kept earlier in its block. A similarity within
:data:`RECHECK_MARGIN` of the threshold is computed again in float64, so the rows kept do not
depend on the block size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hf_adapters.formulas.similarity import BLOCK_VALUES, unusable_row, usable_unit_rows

#: DEITA's default similarity threshold.
DEFAULT_THRESHOLD = 0.9
#: Float32 cosines this close to the threshold are decided in float64 (float32's error on a cosine
#: of 4,096 dimensions stays below 1e-5).
RECHECK_MARGIN = 1e-4
#: Candidates compared in one block.
BLOCK = 512


def check_threshold(threshold: float) -> None:
    """Raise a ValueError for a threshold that is not a number in [-1, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not -1 <= threshold <= 1:
        raise ValueError(f"`similarity_threshold` must be a cosine in [-1, 1], got {threshold!r}.")


def deita_indices(embeddings: np.ndarray, ranked: Sequence[int], *, threshold: float = DEFAULT_THRESHOLD,
                  budget: int | None = None, block: int = BLOCK) -> list[int]:
    """The rows of ``ranked`` (indices into ``embeddings``, best first) that DEITA's rule keeps, in
    that order: each whose cosine similarity to every row kept before it is at most ``threshold``,
    until ``budget`` rows are kept (None: no limit). A ValueError names the first row the walk gets
    to whose vector holds NaN or infinity or is all zero: it has no cosine to compare.

    Example:
        >>> vectors = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]])
        >>> deita_indices(vectors, [0, 1, 2], threshold=0.9)
        [0, 2]
    """
    check_threshold(threshold)
    ranked = np.asarray(ranked, dtype=np.int64)
    limit = len(ranked) if budget is None else min(budget, len(ranked))
    if limit <= 0:
        return []
    kept_rows = np.empty((limit, embeddings.shape[1]), dtype=np.float32)
    kept: list[int] = []
    for start in range(0, len(ranked), block):
        candidates = ranked[start:start + block]
        units, usable = usable_unit_rows(embeddings[candidates])
        previous = _max_similarity(units, kept_rows[:len(kept)])
        within = units @ units.T
        chosen: list[int] = []  # positions in the block
        for position, row in enumerate(candidates):
            if not usable[position]:  # refused when the walk gets to it, as the rows kept do not depend on blocks
                raise unusable_row(embeddings[row], int(row))
            nearest = max(previous[position], within[position, chosen].max()) if chosen else previous[position]
            if nearest > threshold + RECHECK_MARGIN or (
                    nearest > threshold - RECHECK_MARGIN and _too_similar(embeddings, row, kept, threshold)):
                continue
            chosen.append(position)
            kept_rows[len(kept)] = units[position]
            kept.append(int(row))
            if len(kept) == limit:
                return kept
    return kept


def _max_similarity(units: np.ndarray, kept_rows: np.ndarray) -> np.ndarray:
    """Each unit row's largest cosine to the kept rows (-inf where none is kept), in bounded blocks."""
    best = np.full(len(units), -np.inf, dtype=np.float32)
    step = max(1, BLOCK_VALUES // max(len(units), 1))
    for start in range(0, len(kept_rows), step):
        np.maximum(best, (units @ kept_rows[start:start + step].T).max(axis=1), out=best)
    return best


def _too_similar(embeddings: np.ndarray, row: int, kept: list[int], threshold: float) -> bool:
    """Whether ``row``'s float64 cosine to any of the ``kept`` rows is above ``threshold``."""
    vector = embeddings[row].astype(np.float64)
    others = embeddings[kept].astype(np.float64)
    cosines = others @ vector / (np.linalg.norm(others, axis=1) * np.linalg.norm(vector))
    return bool((cosines > threshold).any())
