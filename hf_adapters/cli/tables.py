"""Plain-text tables for the command line."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

#: Characters of the longest bar of a text histogram.
BAR_WIDTH = 40


def format_number(value: float) -> str:
    """Three decimals, or ``NaN``."""
    return "NaN" if math.isnan(value) else f"{value:.3f}"


def format_significant(value: float, digits: int = 4) -> str:
    """``digits`` significant digits (scores span 1e-5 to 1e3), or ``NaN``, ``inf``, ``-inf``.

    Example:
        >>> format_significant(0.000016197), format_significant(734.3513), format_significant(float("nan"))
        ('1.62e-05', '734.4', 'NaN')
    """
    return "NaN" if math.isnan(value) else f"{value:.{digits}g}"


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]],
                 number: Callable[[float], str] = format_number) -> str:
    """A left-aligned text table; floats are written by ``number`` (three decimals, NaN shown as
    ``NaN``), numbers align right. No rows: the header alone."""

    def cell(value: object) -> str:
        return number(value) if isinstance(value, float) else str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    numeric = [bool(rows) and all(isinstance(row[i], int | float) for row in rows) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def format_histogram(edges: Sequence[float], counts: Sequence[int], width: int = BAR_WIDTH) -> str:
    """One line per bin: its edges (``[low, high)``, the last one closed), a bar of █ as long as its
    count (the largest ``width`` long, any other count at least one), and the count.

    Example:
        >>> print(format_histogram([0.0, 0.5, 1.0], [3, 1], width=6))
        [  0, 0.5)  ██████  3
        [0.5,   1]  ██      1
    """
    lows, highs = [format_significant(edge) for edge in edges[:-1]], [format_significant(edge) for edge in edges[1:]]
    low_width, high_width = max(map(len, lows), default=0), max(map(len, highs), default=0)
    top = max(counts, default=0)
    count_width = len(str(top))
    lines = []
    for index, (low, high, count) in enumerate(zip(lows, highs, counts, strict=True)):
        close = "]" if index == len(counts) - 1 else ")"
        bar = "█" * math.ceil(count * width / top) if count else ""
        lines.append(f"[{low:>{low_width}}, {high:>{high_width}}{close}  {bar:<{width}}  {count:>{count_width}}")
    return "\n".join(lines)
