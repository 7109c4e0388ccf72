"""``hf-adapters score CONFIG.yaml --data DATA --output FILE``: score a data set with a scorer config.

Runs unchanged under ``accelerate launch`` (one shard per process) and resumes where a killed run
stopped; see ``hf_adapters.jobs``.
"""

from __future__ import annotations

import argparse
import sys

from ..data_io import LOADERS
from ..score_files import OUTPUT_FORMATS, OutputFormat
from .arguments import add_model_arguments, add_progress_argument, hide_library_progress, positive_int


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "score",
        help="Score every row of a data set with a scorer config (resumable; runs under accelerate launch).",
        description="Score every row of a data set and write one {\"id\", \"score\"} JSON line per row, in input "
        "order (or Parquet shards). Rerun the same command to resume a killed job. For several GPUs or nodes: "
        "accelerate launch [--num_processes N] -m hf_adapters score ...",
    )
    parser.add_argument("config", help="YAML scorer config, e.g. `name: PPLScorer` plus that scorer's keys")
    parser.add_argument("--data", required=True,
                        help=f"the rows, with the columns the config's scorer reads (instruction/input/output, text, "
                        f"messages, prediction/reference, response...; `id` optional): a {', '.join(sorted(LOADERS))} "
                        "file, a folder or glob of such shards ('shards/*.parquet'), a save_to_disk folder, or a data "
                        "set id on the hub (with --split)")
    parser.add_argument("--split", default=None, help="the split of a hub data set (default: train)")
    parser.add_argument("--streaming", action="store_true",
                        help="read the rows as they are scored, without loading the data set first (resumable too; "
                        "each chunk's rows are checked just before it is scored)")
    parser.add_argument("--output", required=True,
                        help="JSONL file to write (a folder of Parquet shards with --output-format parquet); it "
                        "appears only when complete")
    parser.add_argument("--output-format", choices=OUTPUT_FORMATS, default="jsonl",
                        help="jsonl (default): one line per row; parquet: a folder of part-NNNNN.parquet shards")
    parser.add_argument("--keep-columns", action="store_true",
                        help="write each row's own columns beside its score, not only its id")
    parser.add_argument("--rows-per-shard", type=positive_int, default=OutputFormat.rows_per_shard,
                        help=f"most rows in one Parquet shard (default: {OutputFormat.rows_per_shard:,})")
    add_model_arguments(parser, overrides=True, device=False)
    parser.add_argument("--overwrite", action="store_true",
                        help="discard partial results of a different job instead of refusing to mix with them")
    add_progress_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from accelerate import PartialState

    from ..data_io import data_fingerprint, read_rows
    from ..jobs import run_scoring_job
    from ..models import ModelLoadError
    from ..output_paths import check_output_path
    from ..scorers import build_scorer, load_config

    if not args.progress:
        hide_library_progress()
    state = PartialState()
    try:
        output = OutputFormat(args.output_format, args.keep_columns, args.rows_per_shard)
        inputs = {"data": args.data, "config": args.config}
        check_output_path(args.output, inputs, folder=output.kind == "parquet")
        scorer = build_scorer(load_config(args.config), model=args.model, batch_size=args.batch_size,
                              dtype=args.dtype)
        with state.local_main_process_first():  # one process per node fills datasets' cache
            dataset = read_rows(args.data, split=args.split, streaming=args.streaming)
        fingerprint = data_fingerprint(args.data, args.split) if state.is_main_process else None
        if state.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            [fingerprint] = broadcast_object_list([fingerprint])
        summary = run_scoring_job(dataset, scorer, args.output, overwrite=args.overwrite, progress=args.progress,
                                  data_fingerprint=fingerprint, output=output)
    except (ValueError, ModelLoadError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if state.is_main_process:
        print(summary)
    return 0
