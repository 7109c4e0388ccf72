"""``hf-adapters parity``: Information Parity of every language of a parallel (FLORES-style) corpus,
printed as a table sorted by parity, written as JSON and drawn as a bar chart."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hf_adapters.cli.arguments import (
    add_model_arguments,
    add_progress_argument,
    hide_library_progress,
    one_line,
    positive_int,
)
from hf_adapters.cli.tables import format_table as text_table
from hf_adapters.files.json_values import json_safe

#: Per-language statistics, in table order, with the table's column headers.
STAT_COLUMNS = {
    "information_parity": "parity",
    "information_parity_std": "std",
    "information_parity_median": "median",
    "corpus_information_parity": "corpus",
    "tokenization_parity": "tok_parity",
    "bits_per_byte": "bits/byte",
}


def format_table(result: Mapping[str, Any]) -> str:
    """The per-language table, one row per language in the result's order (highest parity first)."""
    rows = [
        [lang, *(float(stats[key]) for key in STAT_COLUMNS), stats["num_pairs"]]
        for lang, stats in result["languages"].items()
    ]
    return text_table(["lang", *STAT_COLUMNS.values(), "pairs"], rows)


def write_json(result: Mapping[str, Any], path: str | Path) -> None:
    """Write the result as JSON, NaN as null."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_safe(result), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def plot_parity(result: Mapping[str, Any], path: str | Path) -> None:
    """A bar chart of mean parity per language, std as error bars, with the parity-1 line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    languages = list(result["languages"])
    means = [result["languages"][lang]["information_parity"] for lang in languages]
    stds = [result["languages"][lang]["information_parity_std"] for lang in languages]
    figure, axes = plt.subplots(figsize=(max(6.0, 0.6 * len(languages) + 2), 4.5))
    axes.bar(languages, means, yerr=stds, capsize=3, color="tab:blue", alpha=0.85)
    axes.axhline(1.0, color="tab:red", linestyle="--", linewidth=1, label=f"parity with {result['reference']}")
    axes.set_xlabel("language")
    axes.set_ylabel(f"information parity (NLL {result['reference']} / NLL language)")
    axes.set_title(f"Information parity, {result['model']}")
    plt.setp(axes.get_xticklabels(), rotation=45, ha="right", rotation_mode="anchor")
    axes.legend()
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run(args: argparse.Namespace) -> int:
    from hf_adapters.backends.loading import ModelLoadError
    from hf_adapters.files.data_io import read_records
    from hf_adapters.files.output_paths import output_location
    from hf_adapters.formulas.parallel_corpus import evaluate_parallel, hub_rows

    if not args.progress:
        hide_library_progress()
    try:
        if (args.data is None) == (args.hub is None):
            raise ValueError("parity: give exactly one of --data FILE or --hub DATASET")
        if args.output:
            args.output = str(output_location(args.output))
        rows = read_records(args.data) if args.data else hub_rows(args.hub, args.hub_config, args.split)
        result = evaluate_parallel(
            rows, args.reference, languages=args.languages, model_id=args.model, batch_size=args.batch_size,
            max_batch_tokens=args.max_batch_tokens, max_length=args.max_length, dtype=args.dtype, device=args.device,
            backend=args.backend, progress=None if args.progress else False,
        )
    except (OSError, ValueError, ModelLoadError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    print(f"Information parity against {args.reference}, model {args.model}")
    print(format_table(result))
    if args.output:
        write_json(result, args.output)
        print(f"\nResults written to {args.output}")
    if args.plot:
        plot_parity(result, args.plot)
        print(f"Chart written to {args.plot}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "parity", help="Information Parity of each language of a parallel corpus against a reference language.",
        description="Information Parity of every language of a parallel (FLORES-style) corpus against a reference "
        "language: a table sorted by parity, and optionally JSON and a bar chart.",
    )
    source = parser.add_argument_group("data (one of)")
    source.add_argument("--data", help="JSONL of {lang, id, text} rows, e.g. FLORES-200 sentences")
    source.add_argument("--hub", metavar="DATASET", help="a FLORES-style data set on the hub, loaded with datasets")
    source.add_argument("--hub-config", help="the hub data set's configuration name")
    source.add_argument("--split", default="dev", help="the hub data set's split (default: dev)")
    parser.add_argument("--reference", default="eng_Latn", help="the reference language (default: eng_Latn)")
    parser.add_argument("--languages", nargs="+", help="only these languages under test (default: all)")
    parser.add_argument("--max-length", type=positive_int, default=None,
                        help="cut each text to this many tokens (default: the model's position limit)")
    add_model_arguments(parser)
    add_progress_argument(parser)
    parser.add_argument("--output", help="write per-language statistics and per-pair scores as JSON here")
    parser.add_argument("--plot", help="draw a bar chart of parity per language here (PNG, SVG, PDF)")
    parser.set_defaults(run=run)
