"""The Space's follow-ups to a score: the selected rows of a scored file, and one text's tokens
coloured by their loss."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from space_inputs import PERPLEXITY, InputError, load_rows
from space_outputs import write_scored

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.core.conventions import SELECTION_CONVENTIONS
from hf_adapters.curation.ranking import selection_indices
from hf_adapters.files.data_io import read_records


def select_scored(scored_file: str | None, top_percent: float, below_one: bool, column: str = "ifd",
                  convention: str = "exact") -> str:
    """The rows of a scored file (as the tab wrote it) with the best ``top_percent`` % of ``column``,
    rows above 1 dropped first with ``below_one`` (Cherry_LLM's rule for IFD); a new file of the same format.

    An IFD ``convention`` with a selection script (cherry, superfiltering) selects as that script
    does, always with the cut-off at 1 (see :func:`hf_adapters.curation.ranking.selection_indices`).
    """
    if not scored_file:
        raise InputError("Score some rows first: the selection is taken from the scored file.")
    rows = read_records(scored_file)
    scores = [_number(row.get(column)) for row in rows]
    indices, _ = selection_indices(scores, top=top_percent / 100, max_score=1.0 if below_one else None,
                                   convention=convention if convention in SELECTION_CONVENTIONS else "exact")
    fmt = "csv" if Path(scored_file).suffix == ".csv" else "jsonl"
    return write_scored([rows[index] for index in indices], fmt, f"{column}_selected")


def _number(value: Any) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except (TypeError, ValueError):
        return math.nan


def token_losses(text: str | None, upload: str | None, row: float,
                 backend: LikelihoodBackend) -> list[tuple[str, float]]:
    """The tokens of one row of the perplexity tab (counting from 1) with their losses scaled to 0-1,
    for a ``gr.HighlightedText`` (darker: the model found the token harder)."""
    from hf_adapters.scorers import PerplexityScorer

    rows, _ = load_rows(PERPLEXITY, text, upload)
    number = int(row or 1)
    if not 1 <= number <= len(rows):
        raise InputError(f"There are {len(rows)} rows; pick a row from 1 to {len(rows)}.")
    scorer = PerplexityScorer(backend=backend, return_token_losses=True)
    result = scorer.result({"text": [rows[number - 1]["text"]]})
    tokens, losses = result["tokens"][0], result["token_losses"][0]
    top = max(losses, default=0.0) or 1.0
    return [(token, round(loss / top, 3)) for token, loss in zip(tokens, losses, strict=True)]
