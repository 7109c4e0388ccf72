"""Pairwise similarities of embedding rows, computed a block at a time so that no rows x rows matrix is held."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: ``cosine``: the cosine of two vectors. ``euclidean``: ``exp(-|a - b| / dimensions)``, the kernel
#: submodlib builds from Euclidean distances (Superfiltering-D's facility location).
SIMILARITIES = ("cosine", "euclidean")
#: The most similarities one block holds (float64: 128 MiB).
BLOCK_VALUES = 2**24
#: The most values :func:`check_embeddings` reads at a time (float64: 8 MiB).
CHECK_VALUES = 2**20
#: Two points whose squared distance is below this share of their squared norms count as one point:
#: float64's rounding of ``|a|^2 + |b|^2 - 2 a.b`` is larger than such a distance.
SAME_POINT = 1e-13


def check_similarity(similarity: str) -> None:
    """Raise a ValueError for a similarity other than :data:`SIMILARITIES`."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"`similarity` must be one of {list(SIMILARITIES)}, got {similarity!r}.")


def check_embeddings(embeddings: np.ndarray, rows: Sequence[int] | None = None, *, directions: bool = True) -> None:
    """Raise a ValueError for an array that is not one vector per row, or naming the first of ``rows``
    (indices into ``embeddings``; default: all) whose vector holds NaN or infinity, or is too large
    to compare, or (with ``directions``, as cosines need) is all zero. Read in bounded blocks.

    Example:
        >>> check_embeddings(np.array([[1.0, 0.0], [np.nan, 1.0]]))
        Traceback (most recent call last):
        ...
        ValueError: Row 1 has a non-finite embedding (it holds NaN): embed that row again, or leave it out of the data.
    """
    check_shape(embeddings)
    rows = np.arange(len(embeddings)) if rows is None else np.asarray(rows, dtype=np.int64)
    step = max(1, CHECK_VALUES // max(embeddings.shape[1], 1))
    for start in range(0, len(rows), step):
        labels = rows[start:start + step]
        _norms(np.asarray(embeddings[labels], dtype=np.float64), labels, directions)


def check_shape(embeddings: np.ndarray) -> None:
    """Raise a ValueError for an array that is not 2-D (one vector per row)."""
    if np.ndim(embeddings) != 2:
        raise ValueError(f"Embeddings must be one vector per row, a 2-D array of shape (rows, dimensions); got shape "
                         f"{np.shape(embeddings)}.")


def _norms(rows: np.ndarray, labels: np.ndarray, directions: bool) -> np.ndarray:
    """The float64 length of each row; a ValueError names (by ``labels``) the first row that has no
    usable length (:func:`check_embeddings`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(rows, axis=1)
    bad = ~np.isfinite(norms) | (norms == 0) if directions else ~np.isfinite(norms)
    if bad.any():
        position = int(np.argmax(bad))
        raise unusable_row(rows[position], int(labels[position]))
    return norms


def unusable_row(vector: np.ndarray, row: int) -> ValueError:
    """The error that refuses row ``row``, whose ``vector`` holds NaN or infinity, is too large to
    compare, or is all zero."""
    vector = np.asarray(vector, dtype=np.float64)
    held = [name for name, found in (("NaN", np.isnan(vector).any()), ("infinity", np.isinf(vector).any())) if found]
    if held:
        return ValueError(f"Row {row} has a non-finite embedding (it holds {' and '.join(held)}): embed that row "
                          "again, or leave it out of the data.")
    if not vector.any():
        return ValueError(f"Row {row} has an all-zero embedding, which has no cosine similarity.")
    with np.errstate(over="ignore", under="ignore"):
        small = np.linalg.norm(vector) == 0
    return ValueError(f"Row {row} has an embedding too {'small' if small else 'large'} to compare (its length "
                      f"{'underflows' if small else 'overflows'} float64): scale the embeddings.")


def unit_rows(embeddings: np.ndarray, dtype: type = np.float32, rows: Sequence[int] | None = None) -> np.ndarray:
    """The rows scaled to length 1 (in ``dtype``; norms in float64); a ValueError names a row of
    length 0, which has no direction, or one holding NaN or infinity (by its entry of ``rows``, the
    rows' indices in the data; default: their positions).

    Example:
        >>> unit_rows(np.array([[3.0, 4.0]])).tolist()
        [[0.6000000238418579, 0.800000011920929]]
    """
    values = np.asarray(embeddings, dtype=np.float64)
    labels = np.arange(len(values)) if rows is None else np.asarray(rows, dtype=np.int64)
    norms = _norms(values, labels, directions=True)
    return (values / norms[:, None]).astype(dtype)


def usable_unit_rows(embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows scaled to length 1 (float32; norms in float64) and which rows have a direction: a
    row of NaN, infinity or zeros is all zeros here, for a walk that refuses it only if it gets to it
    (:func:`unusable_row`)."""
    values = np.asarray(embeddings, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(values, axis=1)
        usable = np.isfinite(norms) & (norms > 0)
        units = np.where(usable[:, None], values / np.where(usable, norms, 1.0)[:, None], 0.0)
    return units.astype(np.float32), usable


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
        check_shape(rows)
        if similarity == "cosine":
            rows = unit_rows(rows, np.float64)
        else:
            _norms(rows, np.arange(len(rows)), directions=False)
        self.rows = np.ascontiguousarray(rows)
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
