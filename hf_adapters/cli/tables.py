"""Plain-text tables for the command line."""

from __future__ import annotations

import math
from collections.abc import Sequence


def format_number(value: float) -> str:
    """Three decimals, or ``NaN``."""
    return "NaN" if math.isnan(value) else f"{value:.3f}"


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned text table; floats get three decimals (NaN shown as ``NaN``), numbers align right."""

    def cell(value: object) -> str:
        return format_number(value) if isinstance(value, float) else str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    numeric = [bool(rows) and all(isinstance(row[i], int | float) for row in rows) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in cells)])
