"""Scoring a chunk of rows, what every engine does: :func:`score_chunk` (halving the rows on an
out-of-memory error) and how many rows a chunk holds where the job does not say
(:func:`default_save_every`). The local engine scores and saves a chunk at a time; the Ray engine's
workers score each block a chunk at a time.

Whatever the engine, a scorer sees of each row the columns it declares (its roles' columns,
``source_columns``, and its ``required_fields``) and the row's ``id``, nothing else
(:class:`DeclaredRow`): one that reads another field (``row[field]``) fails on the first row, in the
same line on every engine (:class:`UndeclaredFieldError`); ``row.get(field)`` finds it absent.

Importing this module imports neither torch nor ``datasets``: the functions import what they run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hf_adapters.core.options import DEFAULT_BATCH_SIZE
from hf_adapters.files.score_files import SCORE

if TYPE_CHECKING:
    from hf_adapters.scorers import RowScorer

logger = logging.getLogger(__name__)

#: Rows per chunk (scored together, then saved) on the CPU when the job does not say: 16, the
#: default batch size, as chunks were before they had a setting of their own.
CPU_SAVE_EVERY = DEFAULT_BATCH_SIZE
#: Rows per chunk on an accelerator when the job does not say: a chunk's rows are batched by the
#: token budget among themselves, so a chunk holds several budgets' worth of Alpaca-length rows.
ACCELERATOR_SAVE_EVERY = 4096


class UndeclaredFieldError(ValueError):
    """A scorer read a field of a row that is not among the columns it declares."""


class DeclaredRow(dict):
    """A row as a scorer sees it: only the fields ``declared`` (its columns and the id); reading another
    (``row[key]``) is an :class:`UndeclaredFieldError` naming the ``scorer``, and ``row.get(key)`` finds
    it absent.

    Example:
        >>> row = DeclaredRow({"id": 3, "output": "Hi.", "weight": 2}, ("id", "output"), "LengthScorer")
        >>> dict(row), row.get("weight")
        ({'id': 3, 'output': 'Hi.'}, None)
    """

    def __init__(self, row: Mapping[str, Any], declared: Sequence[str], scorer: str):
        super().__init__((field, value) for field, value in row.items() if field in declared)
        self.declared, self.scorer = tuple(declared), scorer

    def __getitem__(self, key: str) -> Any:
        if key not in self.declared:
            raise undeclared_field(self.scorer, key, self.declared)
        return super().__getitem__(key)


def undeclared_field(scorer: str, field: Any, declared: Sequence[str]) -> UndeclaredFieldError:
    """The error of a ``scorer`` reading ``field``, which is not among the fields ``declared``."""
    columns = ", ".join(repr(name) for name in declared if name != "id")
    return UndeclaredFieldError(
        f"{scorer} reads the field {field!r} of a row, which is not among the columns it declares ({columns}): "
        "every engine gives a scorer only those and the row's id. Give the field a role of the scorer, or read "
        "only its columns.")


def declared_fields(scorer: RowScorer) -> tuple[str, ...]:
    """What a scorer sees of a row: the columns it declares (its roles' and its required fields), and the id."""
    return tuple(dict.fromkeys([*scorer.source_columns, *scorer.required_fields, "id"]))


def default_save_every(device_type: str) -> int:
    """Rows per chunk of a job on a device of this type when the job does not say.

    Example:
        >>> default_save_every("cpu"), default_save_every("cuda")
        (16, 4096)
    """
    return CPU_SAVE_EVERY if device_type == "cpu" else ACCELERATOR_SAVE_EVERY


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
    declared, name = declared_fields(scorer), getattr(scorer, "name", "") or type(scorer).__name__
    seen = [DeclaredRow(row, declared, name) for row in rows]
    return _scored(scorer, seen, offset, columns or {scorer.outputs[0]: SCORE})


def _scored(scorer: RowScorer, rows: Sequence[DeclaredRow], offset: int,
            columns: Mapping[str, str]) -> list[dict[str, Any]]:
    """:func:`score_chunk` of rows as the scorer sees them."""
    from hf_adapters.backends.base import is_out_of_memory
    from hf_adapters.scorers.base import row_name

    try:
        values = _output_values(scorer, rows, offset, list(columns))
    except KeyError as error:  # a batch of columns read for a column the scorer does not declare
        field = error.args[0] if len(error.args) == 1 else None
        if not isinstance(field, str) or not rows or field in rows[0].declared:
            raise
        raise undeclared_field(rows[0].scorer, field, rows[0].declared) from None
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
        if wrong := [len(values[output]) for output in columns if len(values[output]) != len(rows)]:
            raise RuntimeError(f"{type(scorer).__name__} returned {wrong[0]} scores for {len(rows)} rows.")
        first = next(iter(columns))
        return [{column: float(values[output][i]) if output == first else _plain(values[output][i])
                 for output, column in columns.items()} for i in range(len(rows))]
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


def _plain(value: Any) -> Any:
    """An output value as Python holds it (a numpy or torch value or array as numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return [_plain(item) for item in value] if isinstance(value, (list, tuple)) else value
