"""The plots of ``hf-adapters summary`` and ``compare``: a histogram of one score column, a scatter
plot of two, as matplotlib figures drawn without pyplot (Agg) and saved as image files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .score_stats import Comparison, Histogram, ScoreColumn, Summary, check_positive

BAR_COLOUR = "#4C72B0"
MEAN_COLOUR = "#DD8452"
MEDIAN_COLOUR = "#55A868"


def histogram_figure(scores: ScoreColumn, summary: Summary, bins: Histogram, log: bool = False) -> Figure:
    """The histogram ``bins`` of ``scores`` with their mean and median marked; whole numbers of rows on the y axis."""
    figure = Figure(figsize=(7, 4), layout="constrained")
    axes = figure.subplots()
    if bins.counts:
        axes.bar(bins.edges[:-1], bins.counts, width=np.diff(bins.edges), align="edge", color=BAR_COLOUR,
                 edgecolor="white", linewidth=0.8)
        axes.axvline(summary.mean, color=MEAN_COLOUR, linestyle="--", label=f"mean {summary.mean:.4g}")
        axes.axvline(summary.quantiles["median"], color=MEDIAN_COLOUR, linestyle=":",
                     label=f"median {summary.quantiles['median']:.4g}")
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no finite scores", ha="center", va="center", transform=axes.transAxes)
    if log:
        axes.set_xscale("log")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    left_out = summary.count - summary.valid
    axes.set(xlabel=scores.column + (" (log scale)" if log else ""), ylabel="rows",
             title=f"{scores.column} in {scores.source}\n{summary.valid} finite scores of {summary.count} rows"
             + (f" ({left_out} without a finite score not shown)" if left_out else ""))
    return figure


def scatter_figure(a: ScoreColumn, b: ScoreColumn, comparison: Comparison, log: bool = False) -> Figure:
    """Each row's score in A against its score in B, for the rows with a finite score in both."""
    both = np.isfinite(a.values) & np.isfinite(b.values)
    x, y = a.values[both], b.values[both]
    if log:
        check_positive(x, f"compared scores of {a.source}")
        check_positive(y, f"compared scores of {b.source}")
    figure = Figure(figsize=(6.5, 6), layout="constrained")
    axes = figure.subplots()
    axes.scatter(x, y, s=14 if x.size <= 2000 else 3, alpha=0.7 if x.size <= 2000 else 0.25, color=BAR_COLOUR,
                 edgecolors="none")
    _mark_moves(axes, comparison)
    if log:
        axes.set(xscale="log", yscale="log")
    scale = " (log scale)" if log else ""
    left_out = comparison.rows - comparison.compared
    axes.set(xlabel=f"A: {a.column} in {a.source}{scale}", ylabel=f"B: {b.column} in {b.source}{scale}",
             title=f"Spearman {comparison.spearman:.3f}, Pearson {comparison.pearson:.3f}\n{comparison.compared} rows"
             + (f" ({left_out} left out: no finite score in A or in B)" if left_out else ""))
    axes.margins(0.1)  # room for the names of the rows at the edges
    axes.grid(True, which="major", alpha=0.3)
    return figure


def _mark_moves(axes, comparison: Comparison) -> None:
    """Ring the rows whose rank moved most, each named by its id (or row)."""
    if not comparison.moved:
        return
    x, y = [move.score_a for move in comparison.moved], [move.score_b for move in comparison.moved]
    axes.scatter(x, y, s=60, facecolors="none", edgecolors=MEAN_COLOUR, linewidths=1.2,
                 label=f"the {len(comparison.moved)} rows whose rank moved most")
    for move in comparison.moved:
        name = f"row {move.row}" if move.id is None else str(move.id)
        axes.annotate(name, (move.score_a, move.score_b), xytext=(5, 4), textcoords="offset points", fontsize=7,
                      color="#555555")
    axes.legend(loc="best", fontsize=8)


def save(figure: Figure, path: str | Path) -> None:
    """Write ``figure`` to ``path`` (PNG, or the format its suffix names), making its folder if need be."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=120)
