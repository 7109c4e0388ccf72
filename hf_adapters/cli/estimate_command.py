"""``hf-adapters estimate CONFIG --data DATA``: what ``hf-adapters score`` with the same config and data
will cost on this machine, before anything is written (:func:`~hf_adapters.engines.job_estimate.estimate_job`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
from pathlib import Path

from hf_adapters.cli.arguments import NO_ROW_CAP, add_model_arguments, hide_library_progress, positive_int
from hf_adapters.files.data_io import LOADERS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "estimate", help="Say what `score` with this config and data will cost here: rows, tokens, forward passes "
        "and time, measured on a sample.",
        description="Count the rows of the data, the tokens and forward passes the config's scorer sends through "
        "the model (after a score set's sharing), score an evenly spread sample of the rows to measure this "
        "machine's rate, and print the job's estimated time, per 1,000 rows and for the whole data. Nothing is "
        "written. Give the options you will give `score`.",
    )
    parser.add_argument("config", help="YAML scorer config, as `hf-adapters score` takes it")
    parser.add_argument("--data", required=True, help=f"the rows: a {', '.join(sorted(LOADERS))} file, a folder or "
                        "glob of such shards, a save_to_disk folder, or a data set id on the hub (with --split)")
    parser.add_argument("--split", default=None, help="the split of a hub data set (default: train)")
    parser.add_argument("--sample-rows", type=positive_int, default=64,
                        help="rows scored to measure the rate (default: 64)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: rows, tokens, forward_passes, seconds, seconds_per_1000_rows, "
                        "sample_rows, sample_seconds")
    add_model_arguments(parser, overrides=True, device=True)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hf_adapters.backends.loading import ModelLoadError
    from hf_adapters.engines.base import ScoringJob
    from hf_adapters.engines.job_estimate import estimate_job

    hide_library_progress()
    try:
        job = ScoringJob.plan(args.config, data=args.data, output=os.devnull, split=args.split, model=args.model,
                              batch_size=None if args.batch_size == NO_ROW_CAP else args.batch_size,
                              max_batch_tokens=args.max_batch_tokens, dtype=args.dtype, backend=args.backend,
                              device=args.device, progress=False)
        if args.batch_size == NO_ROW_CAP:
            job = dataclasses.replace(job, config={key: value for key, value in job.config.items()
                                                   if key != "batch_size"})
        estimate = estimate_job(job, sample_rows=args.sample_rows)
    except (ValueError, ModelLoadError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(estimate.as_dict()))
        return 0
    print(f"rows            {estimate.rows:,}")
    print(f"through model   {estimate.tokens:,} tokens in {estimate.forward_passes:,} forward passes")
    print(f"sample          {estimate.sample_rows:,} rows scored in {estimate.sample_seconds:.1f} s")
    print(f"estimate        {estimate.seconds_per_1000_rows / 60:.2f} minutes per 1,000 rows; "
          f"{estimate.seconds / 60:.1f} minutes for the whole data, loading the model aside ({machine()})")
    return 0


def machine() -> str:
    """This machine's processor and CPU count, as the estimate names them."""
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.is_file() else []
    return f"{names[0] if names else platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
