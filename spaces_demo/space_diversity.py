"""The IFD tab's diverse selection: DEITA's rule on the model's embeddings of the scored rows, and a
2-D picture of those embeddings (their first two principal components) with the kept rows marked."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from space_inputs import InputError
from space_outputs import write_scored

from hf_adapters.backends import TransformersBackend
from hf_adapters.core.conventions import SELECTION_CONVENTIONS
from hf_adapters.core.texts import ppl_text
from hf_adapters.curation.diversity import diverse_selection
from hf_adapters.files.data_io import read_records
from hf_adapters.formulas.embeddings import conversation_text, embed_texts


def projection(vectors: np.ndarray) -> np.ndarray:
    """The rows on their first two principal components (each axis's sign fixed so that its largest
    coordinate is positive): two columns, zeros where there is no second direction.

    Example:
        >>> projection(np.array([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0]])).round(3).tolist()
        [[-2.0, 0.0], [0.0, 0.0], [2.0, 0.0]]
    """
    centred = vectors.astype(np.float64) - vectors.astype(np.float64).mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    points = np.zeros((len(vectors), 2))
    shown = centred @ axes[:2].T
    points[:, :shown.shape[1]] = shown
    for column in range(2):
        if -points[:, column].min() > points[:, column].max():
            points[:, column] = -points[:, column]
    return points


def projection_figure(vectors: np.ndarray, kept: list[int], labels: list[str]):
    """A scatter of the rows' projection, kept rows filled and numbered as in the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = projection(vectors)
    figure, axes = plt.subplots(figsize=(6, 4))
    chosen = np.zeros(len(points), dtype=bool)
    chosen[kept] = True
    axes.scatter(*points[~chosen].T, facecolors="none", edgecolors="grey", label="not kept")
    axes.scatter(*points[chosen].T, color="tab:blue", label="kept")
    for (x, y), label in zip(points, labels, strict=True):
        axes.annotate(label, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    axes.set_xlabel("first principal component")
    axes.set_ylabel("second principal component")
    axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    return figure


def row_text(row: dict, tokenizer) -> str:
    """What is embedded for a scored row: its conversation in the chat template, or its non-empty
    instruction, input and output joined with newlines."""
    conversation = row.get("messages") or row.get("conversations")
    if conversation:
        return conversation_text(tokenizer, conversation)
    return ppl_text(row.get("instruction") or "", row.get("input") or "", row.get("output") or "")


def diverse_select_scored(scored_file: str | None, top_percent: float, below_one: bool, threshold: float,
                          backend: TransformersBackend, column: str = "ifd", convention: str = "exact"):
    """DEITA's selection from a scored file: best first, a row kept unless its cosine similarity
    (last-token embeddings, DEITA's) to a kept row is above ``threshold``, until as many rows as
    the top ``top_percent`` % are kept. Returns the file of kept rows and the projection figure."""
    if not scored_file:
        raise InputError("Score some rows first: the selection is taken from the scored file.")
    rows = read_records(scored_file)
    scores = [_number(row.get(column)) for row in rows]
    vectors = embed_texts([row_text(row, backend.tokenizer) for row in rows], pooling="last", backend=backend)
    indices, _ = diverse_selection(scores, vectors, "deita", top=top_percent / 100,
                                   similarity_threshold=threshold, max_score=1.0 if below_one else None,
                                   convention=convention if convention in SELECTION_CONVENTIONS else "exact",
                                   order="input")
    fmt = "csv" if Path(scored_file).suffix == ".csv" else "jsonl"
    figure = projection_figure(vectors, indices, [str(number) for number in range(1, len(rows) + 1)])
    return write_scored([rows[index] for index in indices], fmt, f"{column}_diverse"), figure


def _number(value) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except (TypeError, ValueError):
        return math.nan
