"""``hf-adapters compare A B [--column score] [--top-k 10,100,1000] [--lowest] [--moved N] [--plot FILE.png]
[--log] [--json]``: how two score files of the same rows agree; ``compare A --columns ifd perplexity``: how two
columns of one file agree."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING

from hf_adapters.cli.arguments import positive_int
from hf_adapters.cli.summary_command import SCORES_HELP, failed
from hf_adapters.cli.tables import format_significant, format_table
from hf_adapters.files.json_values import json_safe, to_json_value

if TYPE_CHECKING:  # numpy and matplotlib are imported when the command runs: --help does without them
    from hf_adapters.curation.score_stats import Comparison, ScoreColumn


def positive_ints(text: str) -> list[int]:
    """``10,100,1000``: whole numbers of at least 1, in the order given."""
    return [positive_int(part.strip()) for part in text.split(",")]


def direction(highest: bool) -> str:
    return "highest scores first; --lowest for the lowest" if highest else "lowest scores first (--lowest)"


def print_counts(a: ScoreColumn, b: ScoreColumn, comparison: Comparison) -> None:
    print(f"A  {a.source}, column {a.column!r}\nB  {b.source}, column {b.column!r}")
    print(f"{comparison.rows} rows: {comparison.compared} compared, {comparison.rows - comparison.compared} left out "
          f"(no finite score in A: {comparison.left_out_a}, in B: {comparison.left_out_b})")
    print(f"\nSpearman  {comparison.spearman:.4f}\nPearson   {comparison.pearson:.4f}")


def print_overlaps(comparison: Comparison, ks: list[int]) -> None:
    print(f"\nOverlap of each file's top k, as `select --top-n k` keeps them ({direction(comparison.highest)}):")
    rows = [[overlap.k, overlap.overlap, overlap.share, overlap.by_chance] for overlap in comparison.top_k]
    if rows:
        print(format_table(["k", "overlap", "share", "by chance"], rows))
    if skipped := [str(k) for k in ks if k > comparison.rows]:
        print(f"k above the {comparison.rows} rows: {', '.join(skipped)} (left out)")


def print_moves(comparison: Comparison) -> None:
    best = "highest" if comparison.highest else "lowest"
    print(f"\nRanks among the {comparison.compared} compared rows (1: the {best} score); "
          f"the {len(comparison.moved)} rows whose rank moved most:")
    rows = [[f"row {move.row}" if move.id is None else str(move.id), move.score_a, move.score_b, move.rank_a,
             move.rank_b, abs(move.rank_a - move.rank_b)] for move in comparison.moved]
    print(format_table(["id", "score A", "score B", "rank A", "rank B", "moved"], rows, number=format_significant))


def nothing_compared(a: ScoreColumn, b: ScoreColumn, comparison: Comparison) -> str:
    """Why two files of the same rows cannot be compared: no row has a finite score in both."""
    both = "files" if a.source != b.source else "columns"
    return (f"no row has a finite score in both {both}, so there is nothing to compare: of the {comparison.rows} "
            f"rows, {comparison.left_out_a} have none in A ({a.source}, column {a.column!r}) and "
            f"{comparison.left_out_b} none in B ({b.source}, column {b.column!r}); see their scores with "
            "`hf-adapters summary`.")


def as_json(a: ScoreColumn, b: ScoreColumn, comparison: Comparison) -> str:
    """The comparison as one JSON object (NaN as null)."""
    result = {"a": a.source, "b": b.source, "column": a.column, "column_b": b.column, **dataclasses.asdict(comparison)}
    return json.dumps(json_safe(result), default=to_json_value)


def compared_columns(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The file and column of A and of B: ``--column`` of both files, or ``--columns`` (of A alone, or of A and B)."""
    if args.columns is None:
        if args.b is None:
            raise ValueError("give two score files (A B), or two columns of A with --columns, e.g. "
                             f"`hf-adapters compare {args.a} --columns ifd perplexity`.")
        return [(args.a, args.column or "score"), (args.b, args.column or "score")]
    if args.column is not None:
        raise ValueError("give --column (the same column of A and B) or --columns (a column for each), not both.")
    return [(args.a, args.columns[0]), (args.b or args.a, args.columns[1])]


def run(args: argparse.Namespace) -> int:
    from hf_adapters.curation.score_stats import compare_scores, read_score_column

    try:
        a, b = (read_score_column(source, column) for source, column in compared_columns(args))
        comparison = compare_scores(a, b, top_k=args.top_k, moved=args.moved, highest=not args.lowest)
        if not comparison.compared:
            raise ValueError(nothing_compared(a, b, comparison))
        if args.plot:
            from hf_adapters.curation.score_plots import save, scatter_figure

            save(scatter_figure(a, b, comparison, args.log), args.plot)
    except (ValueError, OSError) as error:
        return failed(error)
    if args.json:
        print(as_json(a, b, comparison))
        return 0
    print_counts(a, b, comparison)
    print_overlaps(comparison, args.top_k)
    print_moves(comparison)
    if args.plot:
        print(f"\nScatter plot written to {args.plot}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare", help="How two score files of the same rows agree: correlations, top-k overlap, rank moves.",
        description="Compare two scorings of the same rows (two files with the same ids in the same order, or "
        "two columns of one file, --columns): Spearman and Pearson "
        "correlations over the rows with a finite score in both (the others are counted), the overlap of each "
        "file's top k rows (as `select --top-n k` keeps them), the rows whose rank moved most, and with --plot a "
        "scatter plot. Files with no row scored in both are refused (exit 2): there is nothing to compare.",
    )
    parser.add_argument("a", metavar="A", help=SCORES_HELP)
    parser.add_argument("b", metavar="B", nargs="?",
                        help="the other score file, of the same rows in the same order (default with --columns: A)")
    parser.add_argument("--column", help="the column of scores in both (default: score)")
    parser.add_argument("--columns", nargs=2, metavar=("COLUMN_A", "COLUMN_B"),
                        help="compare COLUMN_A of A with COLUMN_B of B, or of A itself when no B is given "
                        "(e.g. A --columns ifd perplexity)")
    parser.add_argument("--top-k", type=positive_ints, default=[10, 100, 1000], metavar="K,K,...",
                        help="sizes of the top selections to compare (default: 10,100,1000)")
    parser.add_argument("--lowest", action="store_true", help="the lowest scores are the best (perplexity)")
    parser.add_argument("--moved", type=positive_int, default=10, metavar="N",
                        help="show the N rows whose rank moved most (default: 10)")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw a scatter plot of A against B into this file")
    parser.add_argument("--log", action="store_true", help="log axes for the plot (scores must be > 0)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object instead")
    parser.set_defaults(run=run)
