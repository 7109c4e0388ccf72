"""``hf-adapters summary SCORES [--column NAME] [--bins N] [--log] [--plot FILE.png] [--json]``: the
distribution of a score file's scores, as numbers and a histogram; without ``--column``, of every column."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from hf_adapters.cli.arguments import positive_int
from hf_adapters.cli.tables import format_histogram, format_significant, format_table
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


def summary_values(summary: Summary) -> dict[str, int | float]:
    """The counts and numbers of a summary, by the name the command prints."""
    return {"count": summary.count, "valid": summary.valid, "NaN/null": summary.missing, "inf": summary.infinite,
            "mean": summary.mean, "std": summary.std, "min": summary.minimum, **summary.quantiles,
            "max": summary.maximum}


def summary_lines(summary: Summary) -> list[str]:
    """``name  value`` lines of the counts and numbers, the values aligned right."""
    values = {name: str(value) if isinstance(value, int) else format_significant(value)
              for name, value in summary_values(summary).items()}
    width = max(map(len, values.values()))
    return [f"{name:<8}  {value:>{width}}" for name, value in values.items()]


def print_summaries(summaries: list[tuple[ScoreColumn, Summary, Histogram]], left_out: list[str]) -> None:
    """Every column's counts and numbers side by side, one column of the table per score column."""
    first = summaries[0][0]
    print(f"{first.source}: {len(summaries)} columns of {len(first.ids)} rows")
    table = {name: [name] for name in summary_values(summaries[0][1])}
    for _, summary, _ in summaries:
        for name, value in summary_values(summary).items():
            table[name].append(value)
    print(format_table(["", *(scores.column for scores, _, _ in summaries)], list(table.values()),
                       number=format_significant))
    if left_out:
        print(f"\nLeft out (not one number or null per row): {', '.join(left_out)}")
    print("\nOne column's histogram: --column NAME; every column's: --plot FILE.png")


def print_summary(scores: ScoreColumn, summary: Summary, bins: Histogram, log: bool) -> None:
    print(f"{scores.source}, column {scores.column!r}")
    print("\n".join(summary_lines(summary)))
    scale = "of equal width in log10" if log else "of equal width"
    print(f"\nHistogram of the finite scores, {len(bins.counts)} bins {scale}:" if bins.counts else
          "\nNo finite scores: no histogram.")
    if bins.counts:
        print(format_histogram(bins.edges, bins.counts))


def column_json(scores: ScoreColumn, summary: Summary, bins: Histogram) -> dict:
    return {"column": scores.column, **dataclasses.asdict(summary), "histogram": dataclasses.asdict(bins)}


def as_json(summaries: list[tuple[ScoreColumn, Summary, Histogram]], left_out: list[str]) -> str:
    """The summary as one JSON object (NaN as null): of one column, or ``columns``, a list of them."""
    source = summaries[0][0].source
    result = ({"source": source, **column_json(*summaries[0])} if len(summaries) == 1 else
              {"source": source, "columns": [column_json(*summary) for summary in summaries], "left_out": left_out})
    return json.dumps(json_safe(result), default=to_json_value)


def summarized(args: argparse.Namespace) -> tuple[list[tuple[ScoreColumn, Summary, Histogram]], list[str]]:
    """Each column's scores, summary and histogram (--column's, or every column's), and the columns left out."""
    from hf_adapters.curation.score_stats import histogram, read_score_columns, summarize

    columns, left_out = read_score_columns(args.scores, None if args.column is None else [args.column])
    summaries = []
    for scores in columns:
        try:
            summaries.append((scores, summarize(scores.values), histogram(scores.values, args.bins, args.log)))
        except ValueError as error:
            raise ValueError(f"column {scores.column!r}: {error}" if len(columns) > 1 else error) from None
    return summaries, left_out


def run(args: argparse.Namespace) -> int:
    try:
        summaries, left_out = summarized(args)
        if args.plot:
            from hf_adapters.curation.score_plots import histogram_figure, histograms_figure, save

            save(histogram_figure(*summaries[0], args.log) if len(summaries) == 1 else
                 histograms_figure(summaries, args.log), args.plot)
    except (ValueError, OSError) as error:
        return failed(error)
    if args.json:
        print(as_json(summaries, left_out))
        return 0
    if len(summaries) == 1:
        print_summary(*summaries[0], args.log)
    else:
        print_summaries(summaries, left_out)
    if args.plot:
        print(f"\n{'Histogram plot' if len(summaries) == 1 else 'Histograms'} written to {args.plot}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "summary", help="The distribution of a score file's scores: counts, mean, quantiles and a histogram.",
        description="Count the rows of a score file and those without a finite score (null or NaN, infinite), "
        "give the mean, sample standard deviation, minimum, 5/25/50/75/95% quantiles and maximum of the finite "
        "scores, and draw their histogram in the terminal (and with --plot as an image). Without --column, every "
        "column of scores (all but `id`, less any that does not hold numbers), side by side in one table; a file "
        "with one such column is summarized as with --column.",
    )
    parser.add_argument("scores", metavar="SCORES", help=SCORES_HELP)
    parser.add_argument("--column", help="the column of scores (default: every column but id)")
    parser.add_argument("--bins", type=positive_int, default=10, help="bins of the histogram (default: 10)")
    parser.add_argument("--log", action="store_true",
                        help="bins of equal width in log10 and a log x axis (perplexity-like scores; all must be > 0)")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the histogram into this PNG file")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object instead")
    parser.set_defaults(run=run)
