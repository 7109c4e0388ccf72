"""The plots of ``hf-adapters summary`` and ``compare``: a histogram of one score column (or one for each
of several), a scatter plot of two, as matplotlib figures drawn without pyplot (Agg) and saved as image files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from hf_adapters.curation.score_stats import Comparison, Histogram, ScoreColumn, Summary, check_positive

BAR_COLOUR = "#4C72B0"
MEAN_COLOUR = "#DD8452"
MEDIAN_COLOUR = "#55A868"
#: Scores beyond this size are drawn divided by a power of ten: matplotlib's axes overflow on a range near
#: the largest float.
LARGEST_DRAWN = 1e300


def plot_scale(values: np.ndarray, log: bool = False) -> float:
    """What to divide the finite ``values`` by to draw them on a linear axis: 1, or for scores near the
    largest float the power of ten of the largest (a log axis draws them as they are)."""
    largest = float(np.abs(values[np.isfinite(values)]).max(initial=0.0))
    return 1.0 if log or largest < LARGEST_DRAWN else 10.0 ** math.floor(math.log10(largest))


def scaled_label(label: str, scale: float, log: bool) -> str:
    """An axis label that says the scale: ``(log scale)``, or ``(in units of 1e+308)``."""
    return label + (" (log scale)" if log else f" (in units of {scale:.0e})" if scale != 1 else "")


def histogram_figure(scores: ScoreColumn, summary: Summary, bins: Histogram, log: bool = False) -> Figure:
    """The histogram ``bins`` of ``scores`` with their mean and median marked; whole numbers of rows on the y axis."""
    figure = Figure(figsize=(7, 4), layout="constrained")
    _draw_histogram(figure.subplots(), scores, summary, bins, log)
    return figure


#: Histograms side by side in a figure of several columns' histograms.
HISTOGRAMS_PER_ROW = 3


def histograms_figure(summaries: list[tuple[ScoreColumn, Summary, Histogram]], log: bool = False) -> Figure:
    """One histogram per column, as :func:`histogram_figure` draws it, :data:`HISTOGRAMS_PER_ROW` to a row."""
    across = min(len(summaries), HISTOGRAMS_PER_ROW)
    down = math.ceil(len(summaries) / across)
    figure = Figure(figsize=(5.5 * across, 4 * down), layout="constrained")
    grid = np.atleast_1d(figure.subplots(down, across)).ravel()
    for axes, summary in zip(grid, summaries, strict=False):
        _draw_histogram(axes, *summary, log)
    for axes in grid[len(summaries):]:
        axes.set_axis_off()
    return figure


def _draw_histogram(axes, scores: ScoreColumn, summary: Summary, bins: Histogram, log: bool) -> None:
    """Draw the histogram of :func:`histogram_figure` on ``axes``."""
    scale = plot_scale(np.asarray(bins.edges), log)
    if bins.counts:
        edges = np.asarray(bins.edges) / scale
        axes.bar(edges[:-1], bins.counts, width=np.diff(edges), align="edge", color=BAR_COLOUR, edgecolor="white",
                 linewidth=0.8)
        axes.axvline(summary.mean / scale, color=MEAN_COLOUR, linestyle="--", label=f"mean {summary.mean:.4g}")
        axes.axvline(summary.quantiles["median"] / scale, color=MEDIAN_COLOUR, linestyle=":",
                     label=f"median {summary.quantiles['median']:.4g}")
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no finite scores", ha="center", va="center", transform=axes.transAxes)
    if log:
        axes.set_xscale("log")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    left_out = summary.count - summary.valid
    axes.set(xlabel=scaled_label(scores.column, scale, log), ylabel="rows",
             title=f"{scores.column} in {scores.source}\n{summary.valid} finite scores of {summary.count} rows"
             + (f" ({left_out} without a finite score not shown)" if left_out else ""))


def scatter_figure(a: ScoreColumn, b: ScoreColumn, comparison: Comparison, log: bool = False) -> Figure:
    """Each row's score in A against its score in B, for the rows with a finite score in both."""
    both = np.isfinite(a.values) & np.isfinite(b.values)
    x, y = a.values[both], b.values[both]
    if log:
        check_positive(x, f"compared scores of {a.source}")
        check_positive(y, f"compared scores of {b.source}")
    figure = Figure(figsize=(6.5, 6), layout="constrained")
    axes = figure.subplots()
    scales = plot_scale(x, log), plot_scale(y, log)
    axes.scatter(x / scales[0], y / scales[1], s=14 if x.size <= 2000 else 3, alpha=0.7 if x.size <= 2000 else 0.25,
                 color=BAR_COLOUR, edgecolors="none")
    _mark_moves(axes, comparison, scales)
    if log:
        axes.set(xscale="log", yscale="log")
    left_out = comparison.rows - comparison.compared
    axes.set(xlabel=scaled_label(f"A: {a.column} in {a.source}", scales[0], log),
             ylabel=scaled_label(f"B: {b.column} in {b.source}", scales[1], log),
             title=f"Spearman {comparison.spearman:.3f}, Pearson {comparison.pearson:.3f}\n{comparison.compared} rows"
             + (f" ({left_out} left out: no finite score in A or in B)" if left_out else ""))
    axes.margins(0.1)  # room for the names of the rows at the edges
    axes.grid(True, which="major", alpha=0.3)
    return figure


def _mark_moves(axes, comparison: Comparison, scales: tuple[float, float]) -> None:
    """Ring the rows whose rank moved most, each named by its id (or row); ``scales``: what the scores
    of A and of B are divided by on the axes."""
    if not comparison.moved:
        return
    x = [move.score_a / scales[0] for move in comparison.moved]
    y = [move.score_b / scales[1] for move in comparison.moved]
    axes.scatter(x, y, s=60, facecolors="none", edgecolors=MEAN_COLOUR, linewidths=1.2,
                 label=f"the {len(comparison.moved)} rows whose rank moved most")
    for move, point in zip(comparison.moved, zip(x, y, strict=True), strict=True):
        name = f"row {move.row}" if move.id is None else str(move.id)
        axes.annotate(name, point, xytext=(5, 4), textcoords="offset points", fontsize=7, color="#555555")
    axes.legend(loc="best", fontsize=8)


def save(figure: Figure, path: str | Path) -> None:
    """Write ``figure`` to ``path`` (PNG, or the format its suffix names), making its folder if need be."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=120)
