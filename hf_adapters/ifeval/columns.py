"""Per-row IFEval results as new columns of a ``datasets.Dataset``."""

from __future__ import annotations

from typing import Any

from .evaluation import score_row


def add_ifeval_columns(
    ds: Any,
    response_column: str = "response",
    instruction_ids_column: str = "instruction_id_list",
    kwargs_column: str = "kwargs",
    prefix: str = "ifeval_",
) -> Any:
    """Return ``ds`` (a Dataset or DatasetDict) with four IFEval columns added.

    ``{prefix}strict`` and ``{prefix}loose`` hold one bool per instruction; ``{prefix}prompt_strict``
    and ``{prefix}prompt_loose`` say whether all instructions of the row were followed. Arrow turns
    each kwargs dict into a struct with every key present, absent ones ``None``; those are ignored.
    Errors name the row index and, when there is a ``key`` column, the key. Raises ValueError for a missing column.
    """
    names = ds.column_names
    available = set(names) if isinstance(names, list) else set.intersection(*(set(c) for c in names.values()))
    for column in (response_column, instruction_ids_column, kwargs_column):
        if column not in available:
            raise ValueError(f"column {column!r} not found; available: {sorted(available)}")

    def score_batch(batch: dict[str, list[Any]], indices: list[int]) -> dict[str, list[Any]]:
        keys = batch.get("key") or [None] * len(indices)
        results = [
            score_row(response, {"instruction_id_list": ids, "kwargs": kwargs, "key": key}, index=index)
            for response, ids, kwargs, key, index in zip(
                batch[response_column], batch[instruction_ids_column], batch[kwargs_column], keys, indices, strict=True
            )
        ]
        return {
            f"{prefix}strict": [list(r.strict) for r in results],
            f"{prefix}loose": [list(r.loose) for r in results],
            f"{prefix}prompt_strict": [all(r.strict) for r in results],
            f"{prefix}prompt_loose": [all(r.loose) for r in results],
        }

    return ds.map(score_batch, batched=True, with_indices=True, desc="IFEval")
