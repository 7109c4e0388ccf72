"""What every caller of a scorer shares, the engines (:mod:`hf_adapters.engines.chunks`) and the pipelines'
steps (:mod:`hf_adapters.integrations.pipeline_scores`) alike: how many rows are scored together where the
caller does not say (:func:`default_save_every` of :func:`device_type_of` the scorer), what a scorer sees of
a row (:class:`DeclaredRow`) and the cells of a scored chunk (:func:`chunk_cells`).

A scorer sees of each row the columns it declares (its roles' columns, ``source_columns``, and its
``required_fields``) and the row's ``id``, nothing else: one that reads another field (``row[field]``)
fails on the first row, in the same line wherever it runs (:class:`UndeclaredFieldError`);
``row.get(field)`` finds it absent.

It lives in ``core/``, below both the engines and the pipelines' steps (whose modules must import without
torch: the command's help, and OpenMP's wait policy set before torch loads); importing it imports neither
torch nor ``datasets``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hf_adapters.core.options import DEFAULT_BATCH_SIZE

#: A scorer (:class:`~hf_adapters.scorers.RowScorer`), which this layer, below the scorers', knows by its attributes.
RowScorer = Any

#: Rows scored together (an engine's chunk, saved at once; a pipeline's call) on the CPU when the caller
#: does not say: 16, the default batch size, as chunks were before they had a setting of their own.
CPU_SAVE_EVERY = DEFAULT_BATCH_SIZE
#: Rows scored together on an accelerator when the caller does not say: a chunk's rows are batched by the
#: token budget among themselves, so a chunk holds several budgets' worth of Alpaca-length rows.
ACCELERATOR_SAVE_EVERY = 4096


def default_save_every(device_type: str) -> int:
    """Rows scored together on a device of this type when the caller does not say.

    Example:
        >>> default_save_every("cpu"), default_save_every("cuda")
        (16, 4096)
    """
    return CPU_SAVE_EVERY if device_type == "cpu" else ACCELERATOR_SAVE_EVERY


def device_type_of(scorer: RowScorer, device: str | None = None, default: str | None = None) -> str:
    """The type of the device ``scorer``'s model runs on, as far as it is known before it loads: the
    ``device`` given, else its model identity's (a score set's first member's), else its loaded model's,
    else ``default``, else ``cuda`` where one is visible, else ``cpu``."""
    if device is not None:
        return str(device).split(":")[0]
    identity = scorer.model_identity() or {}
    members = identity.get("members") or [identity]
    if found := next((member.get("device_type") for member in members if member and member.get("device_type")), None):
        return found
    if found := getattr(getattr(getattr(scorer, "model_object", None), "device", None), "type", None):
        return found
    if default is not None:
        return default
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


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


def declared_rows(scorer: RowScorer, rows: Sequence[Mapping[str, Any]]) -> list[DeclaredRow]:
    """``rows`` as ``scorer`` sees them: each its :class:`DeclaredRow`."""
    declared, name = declared_fields(scorer), getattr(scorer, "name", "") or type(scorer).__name__
    return [DeclaredRow(row, declared, name) for row in rows]


def undeclared_read(error: KeyError, rows: Sequence[DeclaredRow]) -> UndeclaredFieldError | None:
    """The :class:`UndeclaredFieldError` a ``KeyError`` raised while scoring ``rows`` stands for (a batch of
    columns read for a column the scorer does not declare), or None where it is another error."""
    field = error.args[0] if len(error.args) == 1 else None
    if not isinstance(field, str) or not rows or field in rows[0].declared:
        return None
    return undeclared_field(rows[0].scorer, field, rows[0].declared)


def chunk_cells(scorer: RowScorer, values: Mapping[str, Sequence[Any]], columns: Mapping[str, str],
                count: int) -> list[dict[str, Any]]:
    """Each of ``count`` scored rows' ``{column: value}`` of the outputs ``columns`` maps (output -> column),
    from the scorer's ``values`` (output -> one value per row): the first output as a float, the others as
    Python holds them (numbers and lists). A RuntimeError where the scorer gave another number of values.

    Example:
        >>> chunk_cells(None, {"ifd": [0.5], "ppl": [[1, 2]]}, {"ifd": "score", "ppl": "ppl"}, 1)
        [{'score': 0.5, 'ppl': [1, 2]}]
    """
    if wrong := [len(values[output]) for output in columns if len(values[output]) != count]:
        raise RuntimeError(f"{type(scorer).__name__} returned {wrong[0]} scores for {count} rows.")
    first = next(iter(columns))
    return [{column: float(values[output][i]) if output == first else _plain(values[output][i])
             for output, column in columns.items()} for i in range(count)]


def _plain(value: Any) -> Any:
    """An output value as Python holds it (a numpy or torch value or array as numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return [_plain(item) for item in value] if isinstance(value, (list, tuple)) else value
