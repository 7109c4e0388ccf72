"""IFEval rows as JSON strings, so that ``evaluate`` can store rows of any shape in one string column."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hf_adapters.ifeval.registry import IFEvalInputError, row_checks, where


def _plain(value: Any) -> Any:
    """JSON fallback for numpy scalars and arrays (rows that went through pandas or Arrow)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def rows_to_json(rows: Sequence[Any]) -> list[str]:
    """Validate IFEval row dicts and encode each as JSON; strings are taken as already encoded."""
    encoded = []
    for index, row in enumerate(rows):
        if not isinstance(row, str):
            row_checks(row, index=index)
            row = json.dumps(dict(row), default=_plain)
        encoded.append(row)
    return encoded


def rows_from_json(texts: Sequence[str]) -> list[Mapping[str, Any]]:
    """Decode rows encoded by ``rows_to_json``."""
    rows = []
    for index, text in enumerate(texts):
        try:
            rows.append(json.loads(text))
        except (TypeError, ValueError) as error:
            raise IFEvalInputError(f"IFEval reference{where(index, None)} is not a row dict: {error}") from None
    return rows
