"""The Space's outputs: table cells, JSON-safe numbers, charts and the scored file."""

from __future__ import annotations

import csv
import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from hf_adapters.files.json_values import json_safe

#: Widest text shown in a table cell; the download keeps full texts.
CELL_CHARS = 120


def clip(text: Any, width: int = CELL_CHARS) -> str:
    """``text`` as one table cell: at most ``width`` characters, line breaks shown as ⏎."""
    text = str(text).replace("\n", " ⏎ ")
    return text if len(text) <= width else text[: width - 1] + "…"


def histogram(values: Sequence[float], title: str, xlabel: str) -> Figure:
    """A histogram of the finite ``values`` with their mean marked; whole numbers of rows on the y axis."""
    # A bare Figure, not pyplot: tabs may draw at the same time in different threads.
    figure = Figure(figsize=(6, 3.2), layout="constrained")
    axes = figure.subplots()
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if finite:
        axes.hist(finite, bins=min(30, max(5, len(finite))), color="#4C72B0", edgecolor="white")
        mean = sum(finite) / len(finite)
        axes.axvline(mean, color="#DD8452", linestyle="--", label=f"mean {mean:.4g}")
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no finite scores", ha="center", va="center", transform=axes.transAxes)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # rows come in whole numbers
    axes.set(title=title, xlabel=xlabel, ylabel="rows")
    return figure


def pass_rate_chart(per_instruction: Mapping[str, Mapping[str, float]]) -> Figure:
    """Horizontal bars of each instruction id's strict and loose pass rate."""
    ids = list(per_instruction)
    figure = Figure(figsize=(7, 1.2 + 0.45 * max(1, len(ids))), layout="constrained")
    axes = figure.subplots()
    positions = range(len(ids))
    axes.barh([p - 0.2 for p in positions], [per_instruction[i]["strict_acc"] for i in ids], height=0.4,
              label="strict", color="#4C72B0")
    axes.barh([p + 0.2 for p in positions], [per_instruction[i]["loose_acc"] for i in ids], height=0.4,
              label="loose", color="#55A868")
    axes.set_yticks(list(positions), [f"{i} (n={per_instruction[i]['count']})" for i in ids])
    axes.invert_yaxis()
    axes.set(xlim=(0, 1), xlabel="pass rate", title="IFEval pass rate per instruction")
    axes.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0))
    return figure


def write_scored(rows: Sequence[Mapping[str, Any]], fmt: str, name: str) -> str:
    """Write the scored rows (input fields plus scores) to a new file in the upload's format; return its path."""
    folder = Path(tempfile.mkdtemp(prefix="hf_adapters_"))
    if fmt == "csv":
        path = folder / f"{name}_scores.csv"
        fields = list(dict.fromkeys(key for row in rows for key in row))
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
    else:
        path = folder / f"{name}_scores.jsonl"
        lines = [json.dumps(json_safe(dict(row)), ensure_ascii=False) for row in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)
