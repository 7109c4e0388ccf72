"""``hf-adapters score CONFIG.yaml --data FILE --output FILE``: score a data set with a scorer config.

Runs unchanged under ``accelerate launch`` (one shard per process) and resumes where a killed run
stopped; see ``hf_adapters.jobs``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from accelerate import PartialState

from ..data_io import LOADERS, data_fingerprint, read_rows
from ..jobs import check_output_path, run_scoring_job
from ..models import ModelLoadError
from ..scorers import build_scorer, load_config


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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
                        help=f"rows with id/instruction/input/output: {', '.join(sorted(LOADERS))} "
                        "or a save_to_disk directory")
    parser.add_argument("--output", required=True, help="JSONL file to write; appears only when complete")
    parser.add_argument("--batch-size", type=_positive_int, help="rows per batch (overrides the config)")
    parser.add_argument("--model", help="model id, local directory or .gguf file (overrides the config)")
    parser.add_argument("--dtype", help="float32 (exact; CPU default) or bfloat16 (approximate; GPU default; "
                                        "fast only on GPUs and on CPUs with native bfloat16)")
    parser.add_argument("--overwrite", action="store_true",
                        help="discard partial results of a different job instead of refusing to mix with them")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    state = PartialState()
    try:
        check_output_path(args.output, args.data if Path(args.data).exists() else None)
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
