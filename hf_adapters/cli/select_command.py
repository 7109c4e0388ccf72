"""``hf-adapters select --data ROWS --scores SCORES --top 5% --max-score 1 --output SELECTED``: keep the best rows."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from hf_adapters.cli.arguments import hide_library_progress, positive_int
from hf_adapters.core.conventions import SELECTION_CONVENTIONS, describe
from hf_adapters.core.wording import noun_for, plural
from hf_adapters.curation.ranking import check_scores, selection_indices
from hf_adapters.curation.score_bounds import RANK_PRODUCT, SCORE_PRODUCT, parse_bound
from hf_adapters.files.data_io import LOADERS, read_records, read_rows, row_ids, written_id
from hf_adapters.files.json_values import json_safe, to_json_value
from hf_adapters.files.output_paths import check_output_path


def fraction(text: str) -> float:
    """``5%`` or ``0.05``."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.05 or 5%, got {text!r}") from None


def bound(text: str) -> Any:
    """A --where bound: ``perplexity<50``."""
    try:
        return parse_bound(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def joined_scores(ids: list, lines: list[dict], column: str = "score", option: str = "--score-column") -> list[float]:
    """The score of each row, from the ``column`` of a score file written for those rows in order; the
    ids must agree, and each score must be one number or null. A missing column's error names the
    ``option`` that asked for it."""
    if len(lines) != len(ids):
        raise ValueError(f"The score file has {len(lines)} lines for {len(ids)} rows: it was written for other data.")
    for number, (value, line) in enumerate(zip(ids, lines, strict=True)):
        if column not in line:
            others = [key for key in line if key != "id"]
            raise ValueError(f"Line {number + 1} of the score file has no `{column}`: {line!r:.80}"
                             + (f"; {option} takes one of {others}" if others and number == 0 else ""))
        if line.get("id") != written_id(value):
            raise ValueError(f"Row {number}: the data's id {written_id(value)!r} differs from the score file's "
                             f"{line.get('id')!r}; the score file was written for other data or another order.")
    return check_scores([line[column] for line in lines], f"the score file's `{column}`")


#: The column that says which row of id-less data a selected row is: its 0-based position in the data.
ROW_NUMBER = "row_number"


def write_selected(dataset, indices: list[int], column: str, scores: list[float], path: str,
                   score_lines: list[dict] | None = None, score_columns: list[str] = ()) -> None:
    """Write the selected rows as JSONL, each as it was read (every digit of its numbers; a NaN or
    infinity as JSON's ``NaN``/``Infinity`` tokens, as ``score --keep-columns`` writes them; no ``id`` it
    never had), then, for data without an ``id``, its :data:`ROW_NUMBER` (the id its score file holds),
    its ``score_columns`` from ``score_lines`` as the score file holds them, and its ranked score under
    ``column``."""
    numbered = "id" not in dataset.column_names
    with open(path, "w", encoding="utf-8") as handle:
        for index, row in zip(indices, dataset.select(indices), strict=True):
            if numbered:
                row.setdefault(ROW_NUMBER, index)  # a data column of that name keeps its value
            elif row["id"] is not None:
                row["id"] = written_id(row["id"])  # a whole float id as the integer it was
            row.update({name: json_safe(score_lines[index].get(name)) for name in score_columns})
            row[column] = json_safe(scores[index])
            handle.write(json.dumps(row, ensure_ascii=False, default=to_json_value) + "\n")


def score_file_columns(lines: list[dict], ranked: str | None) -> list[str]:
    """The score file's columns that ``select`` writes beside the ranked score: all but ``id`` and the
    ``ranked`` one (written under ``--column``)."""
    return [name for name in dict.fromkeys(name for line in lines[:1] for name in line) if name not in ("id", ranked)]


def note_data_values_kept(dataset: Any, lines: list[dict], indices: list[int], shared: list[str]) -> None:
    """Say which of the ``shared`` columns (the score file's that the data also has, whose values are
    written) differ in a selected row; a copy that ``score --keep-columns`` made goes unsaid."""
    if not shared or not indices:
        return
    rows = dataset.select(indices)
    differing = [name for name in shared if any(json_safe(lines[index].get(name)) != json_safe(value)
                                                for index, value in zip(indices, rows[name], strict=True))]
    if differing:
        print(f"note: not written from the score file: {', '.join(map(repr, differing))} (the data has a column "
              "of that name, whose values are written)", file=sys.stderr)


def ranked_scores(args: argparse.Namespace, ids: list, lines: list[dict]) -> tuple[list[float], dict[str, list[bool]]]:
    """The score each row is ranked by (--score-column's, the product of --score-product's columns, or the
    rank product of --rank-product's columns) and the rows the --where bounds remove, by rule."""
    from hf_adapters.curation.score_bounds import bound_exclusions, parse_ranked_column, rank_product

    bounded = {bound.column: joined_scores(ids, lines, bound.column, "--where") for bound in args.where}
    exclusions = bound_exclusions(bounded, args.where)
    if args.score_product:
        columns = [joined_scores(ids, lines, name, "--score-product") for name in args.score_product]
        return [math.prod(values) for values in zip(*columns, strict=True)], exclusions
    if not args.rank_product:
        return joined_scores(ids, lines, args.score_column), exclusions
    ranked = [parse_ranked_column(text) for text in args.rank_product]
    columns = [joined_scores(ids, lines, name, "--rank-product") for name, _ in ranked]
    candidates = [not any(removes) for removes in zip(*exclusions.values(), strict=True)] if exclusions else None
    return rank_product(columns, [highest for _, highest in ranked], candidates), exclusions


def check_ranking_options(args: argparse.Namespace) -> None:
    """Refuse --rank-product with the options of a one-column ranking, --score-product with --score-column or
    --rank-product, and a single column to multiply."""
    if args.score_product:
        if len(args.score_product) < 2:
            raise ValueError("--score-product multiplies two or more columns; rank by one with --score-column.")
        if args.score_column or args.rank_product:
            raise ValueError("--score-product ranks by the product of its columns: it takes no "
                             f"{'--score-column' if args.score_column else '--rank-product'}.")
        return
    if not args.rank_product:
        args.score_column = args.score_column or "score"
        return
    if len(args.rank_product) < 2:
        raise ValueError("--rank-product multiplies the ranks of two or more columns; rank by one with --score-column.")
    given = [option for option, value in (("--score-column", args.score_column), ("--lowest", args.lowest),
                                          ("--max-score", args.max_score), ("--min-score", args.min_score))
             if value not in (None, False)]
    if args.convention != "exact":
        given.append("--convention")
    if given:
        raise ValueError(f"--rank-product ranks by the rank product (the lower, the better): it takes no "
                         f"{', '.join(given)}; bound any column with --where, e.g. --where 'ifd<1'.")


def diverse_rows(args: argparse.Namespace, dataset: Any, scores: list[float],
                 options: dict) -> tuple[list[int], dict[str, int]]:
    """The rows ``--diversity`` keeps, on the embeddings of ``--embeddings`` (memory-mapped, and
    checked against its record of the rows it was embedded for)."""
    from hf_adapters.curation.diversity import diverse_selection
    from hf_adapters.files.embedding_files import load_embeddings

    if not args.embeddings:
        raise ValueError("--diversity needs --embeddings: the .npy file `hf-adapters embed` wrote for the data.")
    embeddings, note = load_embeddings(args.embeddings, dataset)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return diverse_selection(scores, embeddings, args.diversity, budget=args.budget,
                             similarity_threshold=args.similarity_threshold,
                             similarity_quantile=args.similarity_quantile, similarity=args.similarity,
                             neighbors=args.neighbors, clusters=args.clusters, **options)


def run(args: argparse.Namespace) -> int:
    hide_library_progress()  # reading the rows is quick: its bars would only come before the answer
    try:
        check_output_path(args.output, {"data": args.data, "scores": args.scores})
        check_ranking_options(args)
        dataset = read_rows(args.data)
        args.column = args.column or (SCORE_PRODUCT if args.score_product else RANK_PRODUCT if args.rank_product
                                      else args.score_column)
        if args.column in dataset.column_names:
            raise ValueError(f"--column {args.column!r} is a column of the data; give the score another name.")
        lines = read_records(args.scores)
        scores, exclusions = ranked_scores(args, row_ids(dataset), lines)
        options = {"top": args.top, "top_n": args.top_n, "max_score": args.max_score, "min_score": args.min_score,
                   "highest": not (args.lowest or args.rank_product), "order": args.order,
                   "convention": args.convention, "exclusions": exclusions}
        ranked = None if args.rank_product else args.score_column
        names = [name for name in score_file_columns(lines, ranked) if name != args.column]
        score_columns = [name for name in names if name not in dataset.column_names]
        if args.diversity:
            indices, removed = diverse_rows(args, dataset, scores, options)
        else:
            indices, removed = selection_indices(scores, **options)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    note_data_values_kept(dataset, lines, indices, [name for name in names if name in dataset.column_names])
    write_selected(dataset, indices, args.column, scores, args.output, lines, score_columns)
    for rule, count in removed.items():
        print(f"{count:>9} {noun_for(count, 'row')} removed: {rule}")
    print(f"{len(indices):>9} of {plural(len(scores), 'row')} selected, written to {args.output}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "select", help="Keep the rows whose scores (from `hf-adapters score`) rank best, with cut-offs.",
        description="Join a score file written by `hf-adapters score` to its data by position (the ids must "
        "agree), drop rows outside the --where bounds of any score column, without a score or outside "
        "--min-score/--max-score, keep the --top fraction of all rows (rounded down) or the --top-n best (by "
        "--score-column, or by the rank product of several columns), and write them as JSONL with every score "
        "column of the score file (and, for data without an `id`, its row number as `row_number`).",
    )
    parser.add_argument("--data", required=True, help=f"the scored rows: {', '.join(sorted(LOADERS))} or a "
                        "save_to_disk directory")
    parser.add_argument("--scores", required=True, help="the JSONL score file `hf-adapters score` wrote for them")
    parser.add_argument("--output", required=True, help="JSONL file for the selected rows")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--top", type=fraction, help="fraction of all rows to keep, e.g. 5%% or 0.05")
    size.add_argument("--top-n", type=int, help="number of rows to keep")
    parser.add_argument("--max-score", type=float,
                        help="drop rows scoring above this (IFD: 1); under --convention superfiltering, at or above it")
    parser.add_argument("--min-score", type=float, help="drop rows scoring below this")
    parser.add_argument("--lowest", action="store_true", help="keep the lowest scores instead of the highest")
    parser.add_argument("--order", choices=["input", "score"],
                        help="write the rows in input order (default) or best first (default for superfiltering)")
    parser.add_argument("--convention", choices=list(SELECTION_CONVENTIONS), default="exact",
                        help=f"{describe(SELECTION_CONVENTIONS)} (default: exact)".replace("%", "%%"))
    parser.add_argument("--score-column",
                        help="the score file's column to rank by, e.g. ifd in a score set's file (default: score)")
    parser.add_argument("--where", type=bound, action="append", default=[], metavar="COLUMN<VALUE",
                        help="keep only rows whose score in a column of the score file passes this bound "
                        "(<, <=, > or >=; quote it for the shell), e.g. 'perplexity<50'; repeat for more")
    parser.add_argument("--score-product", nargs="+", metavar="COLUMN",
                        help="rank by the product of two or more columns' scores, the highest first (NaN where "
                        "one is NaN); written as score_product, e.g. DEITA's evol score: deita_complexity "
                        "deita_quality")
    parser.add_argument("--rank-product", nargs="+", metavar="COLUMN[:lowest]",
                        help="rank by two or more columns at once: by the geometric mean of each row's ranks in "
                        "them (1: the best score of a column, the highest, or with :lowest the lowest) over the "
                        "rows ranked, lowest first; written as rank_product, e.g. ifd perplexity:lowest")
    parser.add_argument("--column", default=None,
                        help="name of the ranked score in the output (default: --score-column's, score_product or "
                        "rank_product)")
    diversity = parser.add_argument_group("diversity", "keep rows unlike each other, by their embeddings")
    diversity.add_argument("--diversity", choices=["deita", "facility_location", "semantic_dedup"],
                           help="deita: best first, skipping rows too similar to a kept one, until --top-n (or "
                           "--budget) rows; facility_location: the --budget most representative of the top rows; "
                           "semantic_dedup: the top rows less the near-duplicates of better ones (SemDeDup)")
    diversity.add_argument("--embeddings", help="the .npy file `hf-adapters embed` wrote for --data (checked "
                           "against the record embed writes beside it; a .npy of your own without one is used as "
                           "given, row i for row i)")
    diversity.add_argument("--budget", type=int, help="rows the diversity rule keeps")
    diversity.add_argument("--similarity-threshold", type=float,
                           help="deita, semantic_dedup: the largest cosine similarity to a better row (default: 0.9, "
                           "DEITA's, for its embedder; see --similarity-quantile)")
    diversity.add_argument("--similarity-quantile", type=float, metavar="Q",
                           help="deita, semantic_dedup: instead of a threshold, the Q quantile of the cosine "
                           "similarities between the data's rows (e.g. 0.99: a row goes only if it is more similar "
                           "to a better row than 99%% of the pairs of rows are), for any embedder")
    diversity.add_argument("--similarity", choices=["cosine", "euclidean"],
                           help="facility_location: cosine, or submodlib's Euclidean kernel (default: cosine; "
                           "euclidean under --convention superfiltering)")
    diversity.add_argument("--neighbors", type=int,
                           help="facility_location: each row is represented by its k most similar rows only (sparse)")
    diversity.add_argument("--clusters", type=positive_int,
                           help="semantic_dedup: k-means clusters, each deduplicated on its own (default: 1)")
    parser.set_defaults(run=run)
