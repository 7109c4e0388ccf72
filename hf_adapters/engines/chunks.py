"""Scoring a chunk of rows, what every engine does: :func:`score_chunk` (halving the rows on an
out-of-memory error). How many rows a chunk holds where the job does not say
(:func:`~hf_adapters.core.scored_rows.default_save_every`), what a scorer sees of a row and a chunk's
cells are :mod:`hf_adapters.core.scored_rows`', shared with the pipelines' steps. The local engine
scores and saves a chunk at a time; the Ray engine's workers score each block a chunk at a time.

Whatever the engine, a scorer sees of each row the columns it declares (its roles' columns,
``source_columns``, and its ``required_fields``) and the row's ``id``, nothing else
(:class:`~hf_adapters.core.scored_rows.DeclaredRow`): one that reads another field (``row[field]``)
fails on the first row, in the same line on every engine
(:class:`~hf_adapters.core.scored_rows.UndeclaredFieldError`); ``row.get(field)`` finds it absent.

Importing this module imports neither torch nor ``datasets``: the functions import what they run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hf_adapters.core.scored_rows import DeclaredRow, chunk_cells, declared_rows, undeclared_read
from hf_adapters.files.score_files import SCORE

if TYPE_CHECKING:
    from hf_adapters.scorers import RowScorer

logger = logging.getLogger(__name__)


def score_chunk(scorer: RowScorer, rows: Sequence[Mapping[str, Any]], offset: int = 0,
                columns: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each row's ``{column: value}`` of the outputs ``columns`` maps (output -> column; default: the
    first output, as ``score``), told that the rows begin at row ``offset`` of the data (so that
    messages name a row by its index in the data and its id); on an out-of-memory error, score each
    half separately instead. The first output is a float, as ``scorer.score_rows`` gives it.

    Halving the rows halves the batch's token budget; it recurses down to a single row, and a row
    that does not fit alone raises a RuntimeError naming it. No row is ever dropped. The scorer sees
    of each row only its declared fields (:class:`DeclaredRow`); reading another is an
    :class:`UndeclaredFieldError`.
    """
    return _scored(scorer, declared_rows(scorer, rows), offset, columns or {scorer.outputs[0]: SCORE})


def _scored(scorer: RowScorer, rows: Sequence[DeclaredRow], offset: int,
            columns: Mapping[str, str]) -> list[dict[str, Any]]:
    """:func:`score_chunk` of rows as the scorer sees them."""
    from hf_adapters.backends.base import is_out_of_memory
    from hf_adapters.scorers.base import row_name

    try:
        values = _output_values(scorer, rows, offset, list(columns))
    except KeyError as error:  # a batch of columns read for a column the scorer does not declare
        if (undeclared := undeclared_read(error, rows)) is None:
            raise
        raise undeclared from None
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        if len(rows) == 1:
            raise RuntimeError(
                f"{row_name(rows[0], offset)} runs out of memory even alone; "
                "lower the scorer's max_length or use a device with more memory."
            ) from error
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
    else:
        return chunk_cells(scorer, values, columns, len(rows))
    # Outside the except block, so the failed batch's tensors can be freed before the retry.
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = len(rows) // 2
    logger.warning(
        "Out of memory on rows %d-%d (%s); halving the batch and retrying as %d + %d rows.",
        offset, offset + len(rows) - 1, message, half, len(rows) - half,
    )
    return (_scored(scorer, rows[:half], offset, columns)
            + _scored(scorer, rows[half:], offset + half, columns))


def _output_values(scorer: RowScorer, rows: Sequence[Mapping[str, Any]], offset: int,
                   outputs: Sequence[str]) -> Mapping[str, Sequence[Any]]:
    """``{output: one value per row}``: the first output alone through ``score_rows``, several through
    ``score_batch`` (which computes every output at once)."""
    if len(outputs) == 1:
        return {outputs[0]: scorer.score_rows_from(rows, offset)}
    return scorer.score_batch(scorer.rows_to_batch(rows, offset), offset)

