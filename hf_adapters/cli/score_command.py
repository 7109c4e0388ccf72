"""``hf-adapters score CONFIG.yaml --data FILE --output FILE``: score a data set with a scorer config.

Runs unchanged under ``accelerate launch`` (one shard per process) and resumes where a killed run
stopped; see ``hf_adapters.jobs``.
"""

from __future__ import annotations

import argparse
import sys

from ..data_io import LOADERS
from .arguments import add_model_arguments, add_progress_argument, hide_library_progress


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "score",
        help="Score every row of a data set with a scorer config (resumable; runs under accelerate launch).",
        description="Score every row of a data set and write one {\"id\", \"score\"} JSON line per row, in input "
        "order. Rerun the same command to resume a killed job. For several GPUs or nodes: "
        "accelerate launch [--num_processes N] -m hf_adapters score ...",
    )
    parser.add_argument("config", help="YAML scorer config, e.g. `name: PPLScorer` plus that scorer's keys")
    parser.add_argument("--data", required=True,
                        help=f"the rows, with the columns the config's scorer reads (instruction/input/output, text, "
                        f"messages, prediction/reference, response...; `id` optional): {', '.join(sorted(LOADERS))} "
                        "or a save_to_disk directory")
    parser.add_argument("--output", required=True, help="JSONL file to write; appears only when complete")
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
        check_output_path(args.output, {"data": args.data, "config": args.config})
        scorer = build_scorer(load_config(args.config), model=args.model, batch_size=args.batch_size,
                              dtype=args.dtype)
        with state.local_main_process_first():  # one process per node fills datasets' cache
            dataset = read_rows(args.data)
        fingerprint = data_fingerprint(args.data) if state.is_main_process else None
        summary = run_scoring_job(dataset, scorer, args.output, overwrite=args.overwrite, progress=args.progress,
                                  data_fingerprint=fingerprint)
    except (ValueError, ModelLoadError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if state.is_main_process:
        print(summary)
    return 0
