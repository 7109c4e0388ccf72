"""Values as JSON can hold them: JSON has no NaN or infinity, so a missing score is written as null."""

from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float in it (through dicts, lists and tuples) as None.

    Example:
        >>> json_safe({"scores": [1.5, float("nan")], "mean": float("inf")})
        {'scores': [1.5, None], 'mean': None}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value
