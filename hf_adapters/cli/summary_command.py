"""``hf-adapters summary SCORES [--column score] [--bins N] [--log] [--plot FILE.png] [--json]``: the
distribution of a score file's scores, as numbers and a histogram."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from hf_adapters.cli.arguments import positive_int
from hf_adapters.cli.tables import format_histogram, format_significant
from hf_adapters.files.json_values import json_safe, to_json_value

if TYPE_CHECKING:  # numpy and matplotlib are imported when the command runs: --help does without them
    from hf_adapters.curation.score_stats import Histogram, ScoreColumn, Summary

#: What SCORES may be, in every command that reads score files.
SCORES_HELP = ("a score file of `hf-adapters score` (JSONL, or a folder of Parquet shards), or any JSONL, JSON, "
               "CSV or Parquet file, folder or glob of them with the column")


def failed(error: Exception) -> int:
    """Report a command's error in one line, and the exit status for it."""
    print(f"error: {error}", file=sys.stderr)
    return 2


def summary_lines(summary: Summary) -> list[str]:
    """``name  value`` lines of the counts and numbers, the values aligned right."""
    counts = {"count": summary.count, "valid": summary.valid, "NaN/null": summary.missing, "inf": summary.infinite}
    numbers = {"mean": summary.mean, "std": summary.std, "min": summary.minimum, **summary.quantiles,
               "max": summary.maximum}
    values = {**{name: str(count) for name, count in counts.items()},
              **{name: format_significant(number) for name, number in numbers.items()}}
    width = max(map(len, values.values()))
    return [f"{name:<8}  {value:>{width}}" for name, value in values.items()]


def print_summary(scores: ScoreColumn, summary: Summary, bins: Histogram, log: bool) -> None:
    print(f"{scores.source}, column {scores.column!r}")
    print("\n".join(summary_lines(summary)))
    scale = "of equal width in log10" if log else "of equal width"
    print(f"\nHistogram of the finite scores, {len(bins.counts)} bins {scale}:" if bins.counts else
          "\nNo finite scores: no histogram.")
    if bins.counts:
        print(format_histogram(bins.edges, bins.counts))


def as_json(scores: ScoreColumn, summary: Summary, bins: Histogram) -> str:
    """The summary as one JSON object (NaN as null)."""
    result = {"source": scores.source, "column": scores.column, **dataclasses.asdict(summary),
              "histogram": dataclasses.asdict(bins)}
    return json.dumps(json_safe(result), default=to_json_value)


def run(args: argparse.Namespace) -> int:
    from hf_adapters.curation.score_stats import histogram, read_score_column, summarize

    try:
        scores = read_score_column(args.scores, args.column)
        summary = summarize(scores.values)
        bins = histogram(scores.values, args.bins, args.log)
        if args.plot:
            from hf_adapters.curation.score_plots import histogram_figure, save

            save(histogram_figure(scores, summary, bins, args.log), args.plot)
    except (ValueError, OSError) as error:
        return failed(error)
    if args.json:
        print(as_json(scores, summary, bins))
        return 0
    print_summary(scores, summary, bins, args.log)
    if args.plot:
        print(f"\nHistogram plot written to {args.plot}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "summary", help="The distribution of a score file's scores: counts, mean, quantiles and a histogram.",
        description="Count the rows of a score file and those without a finite score (null or NaN, infinite), "
        "give the mean, sample standard deviation, minimum, 5/25/50/75/95% quantiles and maximum of the finite "
        "scores, and draw their histogram in the terminal (and with --plot as an image).",
    )
    parser.add_argument("scores", metavar="SCORES", help=SCORES_HELP)
    parser.add_argument("--column", default="score", help="the column of scores (default: score)")
    parser.add_argument("--bins", type=positive_int, default=10, help="bins of the histogram (default: 10)")
    parser.add_argument("--log", action="store_true",
                        help="bins of equal width in log10 and a log x axis (perplexity-like scores; all must be > 0)")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the histogram into this PNG file")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object instead")
    parser.set_defaults(run=run)
