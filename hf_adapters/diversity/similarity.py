"""Pairwise similarities of embedding rows, computed a block at a time so that no rows x rows matrix is held."""

from __future__ import annotations

import numpy as np

#: ``cosine``: the cosine of two vectors. ``euclidean``: ``exp(-|a - b| / dimensions)``, the kernel
#: submodlib builds from Euclidean distances (Superfiltering-D's facility location).
SIMILARITIES = ("cosine", "euclidean")
#: The most similarities one block holds (float64: 128 MiB).
BLOCK_VALUES = 2**24
#: Two points whose squared distance is below this share of their squared norms count as one point:
#: float64's rounding of ``|a|^2 + |b|^2 - 2 a.b`` is larger than such a distance.
SAME_POINT = 1e-13


def check_similarity(similarity: str) -> None:
    """Raise a ValueError for a similarity other than :data:`SIMILARITIES`."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"`similarity` must be one of {list(SIMILARITIES)}, got {similarity!r}.")


def unit_rows(embeddings: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """The rows scaled to length 1 (in ``dtype``; norms in float64); a ValueError names a row of
    length 0, which has no direction.

    Example:
        >>> unit_rows(np.array([[3.0, 4.0]])).tolist()
        [[0.6000000238418579, 0.800000011920929]]
    """
    rows = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1)
    if (norms == 0).any():
        raise ValueError(f"Row {int(np.argmin(norms))} has an all-zero embedding, which has no cosine similarity.")
    return (rows / norms[:, None]).astype(dtype)


class Similarity:
    """Similarities between rows of one embedding matrix, in blocks of float64 (float32 inputs hold
    about 7 digits; float64 products keep gains that differ in the 8th digit in their true order).

    Example:
        >>> vectors = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
        >>> Similarity(vectors, "cosine").block(np.arange(3), np.array([0])).round(3).ravel().tolist()
        [1.0, 0.707, 0.0]
    """

    def __init__(self, embeddings: np.ndarray, similarity: str = "cosine"):
        check_similarity(similarity)
        self.kind = similarity
        rows = np.asarray(embeddings, dtype=np.float64)
        self.rows = np.ascontiguousarray(unit_rows(rows, np.float64) if similarity == "cosine" else rows)
        self.squares = np.einsum("ij,ij->i", self.rows, self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def block(self, left: np.ndarray | slice, right: np.ndarray | slice) -> np.ndarray:
        """The similarities of rows ``left`` (block rows) to rows ``right`` (block columns)."""
        products = self.rows[left] @ self.rows[right].T
        if self.kind == "cosine":
            return products
        scale = self.squares[left][:, None] + self.squares[right][None, :]
        squared = scale - 2 * products
        squared[squared <= SAME_POINT * scale] = 0.0  # float64 cannot tell these points apart: identical
        return np.exp(-np.sqrt(squared) / self.rows.shape[1])

    def block_rows(self, columns: int) -> int:
        """How many rows a block against ``columns`` columns holds."""
        return max(1, BLOCK_VALUES // max(columns, 1))
