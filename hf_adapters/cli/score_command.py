"""``hf-adapters score CONFIG.yaml --data DATA --output FILE``: score a data set with a scorer config.

This module only reads the command line: it plans the :class:`~hf_adapters.engines.ScoringJob` the
arguments describe and runs it on the engine ``--engine`` names (:mod:`hf_adapters.engines`). The
default engine, ``local``, is our own chunk runner: it runs in this process, or in each process
of ``accelerate launch`` (one shard per process), and resumes where a killed run stopped; see
``hf_adapters.engines.local``. With ``--engine ray`` a pool of Ray actors scores the rows instead, on a
cluster or on this machine, and resumes too (a rerun skips the blocks already saved); see
``hf_adapters.engines.ray``. Each engine declares its own options. Ctrl-C stops any of them with one
line saying what is saved, and exit status 130 (a SIGTERM: the same line, and 143); so does a full
disk, with exit status 1: the rows saved are kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from hf_adapters.cli.arguments import (
    NO_ROW_CAP,
    add_model_arguments,
    add_progress_argument,
    hide_library_progress,
    positive_int,
)
from hf_adapters.cli.exit_status import INTERRUPTED
from hf_adapters.core.wording import full_disk
from hf_adapters.engines import (
    DEFAULT_ENGINE,
    ENGINE_ALIASES,
    ENGINES,
    Engine,
    ScoringJob,
    engine_class,
    engine_name,
    engine_names,
)
from hf_adapters.engines.base import SCORE_COLUMNS_KEY, EngineError, score_columns_of
from hf_adapters.engines.job_files import JobSummary
from hf_adapters.files.data_io import LOADERS
from hf_adapters.files.score_files import OUTPUT_FORMATS, OutputFormat


def score_columns_argument(text: str) -> str | tuple[str, ...]:
    """``all``, or output names separated by commas."""
    try:
        return score_columns_of(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "score",
        help="Score every row of a data set with a scorer config (resumable; runs under accelerate launch).",
        description="Score every row of a data set and write one {\"id\", \"score\"} JSON line per row (with "
        "--score-columns, the scorer's other outputs too), in input order (or Parquet shards). Rerun the same command "
        "to resume a killed or interrupted job. For several GPUs or nodes: accelerate launch [--num_processes N] -m "
        "hf_adapters score ..., or --engine ray.",
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
    parser.add_argument("--score-columns", type=score_columns_argument, default=None, metavar="all|NAME,...",
                        help="write more of the scorer's outputs beside `score` (its first output), each under its "
                        "own name: all of them (IFD: ppl_conditional, ppl_direct), or those named (overrides the "
                        f"config's `{SCORE_COLUMNS_KEY}`)")
    add_model_arguments(parser, overrides=True, device=True)
    parser.add_argument("--overwrite", action="store_true",
                        help="discard partial results of a different job instead of refusing to mix with them, and "
                        "score a finished job again (by default the same command on its finished, unchanged output "
                        "does nothing)")
    add_progress_argument(parser)
    parser.add_argument("--engine", type=engine_name, default=DEFAULT_ENGINE, metavar=f"{{{','.join(ENGINES)}}}",
                        help=engines_help())
    add_engine_options(parser)
    parser.set_defaults(run=run)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Add each registered engine's options to ``parser``, under the engine's heading. An engine that
    inherits its options from another (a subclass of LocalEngine that keeps ``add_arguments``) shares
    them; an option of another engine's, or of the command's own, is a ValueError naming both."""
    owners: dict[str, str] = {}  # an engine's flag -> the engine that added it
    added: set[Any] = set()  # the add_arguments that have added their options
    for name, cls in ENGINES.items():
        adds = getattr(cls.add_arguments, "__func__", cls.add_arguments)
        if adds in added:
            continue
        added.add(adds)
        label = f"the engine {name!r} ({cls.__module__}.{cls.__qualname__})"
        try:
            flags = [flag for action in cls.options() for flag in action.option_strings]
            if taken := [flag for flag in flags if flag in parser._option_string_actions]:
                owner = f"the engine {owners[taken[0]]!r}" if taken[0] in owners else "`hf-adapters score` itself"
                raise ValueError(f"{label} adds the option {taken[0]}, which {owner} has already: give its options "
                                 "names of their own in its add_arguments (a subclass that keeps its parent's options "
                                 "inherits add_arguments unchanged).")
            cls.add_arguments(parser.add_argument_group(cls.title, cls.description))
        except argparse.ArgumentError as error:
            raise ValueError(f"{label} cannot add its options: {error}.") from None
        owners.update(dict.fromkeys(flags, name))


def engines_help() -> str:
    """``--engine``'s help: each registered engine's name, whether it is the default and its earlier
    names, and its summary."""
    said = []
    for name, cls in ENGINES.items():
        notes = ["default"] if name == DEFAULT_ENGINE else []
        notes += [f"formerly `{alias}`" for alias, target in ENGINE_ALIASES.items() if target == name]
        label = f"{name} ({'; '.join(notes)})" if notes else name
        said.append(f"{label}: {cls.summary}")
    if installed := [name for name in engine_names() if name not in ENGINES]:
        said.append(f"installed by packages (entry points): {', '.join(installed)}")
    return "; ".join(said) + "; a --plugin module may register another"


def run(args: argparse.Namespace) -> int:
    from hf_adapters.backends.loading import ModelLoadError
    from hf_adapters.core.processes import process_state

    if not args.progress:
        hide_library_progress()
    state = process_state()
    try:
        engine, job = planned(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        summary = engine.run(job)
    except EngineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (ValueError, ModelLoadError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if state.is_main_process:
            print(engine.interrupted_message(job), file=sys.stderr)
        return INTERRUPTED
    except OSError as error:
        if (full := full_disk(error, job.output_path.parent)) is None:
            raise
        if state.is_main_process:
            print(engine.stopped_message(job, full), file=sys.stderr)
        return 1
    if state.is_main_process:
        print(summary_line(summary, args.output))
    return 0


def planned(args: argparse.Namespace) -> tuple[Engine, ScoringJob]:
    """The engine ``args`` names, built from its options (another engine's options are refused by
    flag, unless it takes the same one), and the job they describe."""
    chosen = engine_class(args.engine)
    takes = {flag for action in chosen.options() for flag in action.option_strings}
    for name, cls in ENGINES.items():
        if name != args.engine and (given := [flag for flag in cls.options_given(args) if flag not in takes]):
            raise ValueError(f"{', '.join(given)}: only with --engine {name}.")
    engine = chosen.from_arguments(args)
    job = ScoringJob.plan(args.config, data=args.data, output=args.output, split=args.split, streaming=args.streaming,
                          output_format=args.output_format, keep_columns=args.keep_columns,
                          rows_per_shard=args.rows_per_shard, score_columns=args.score_columns, model=args.model,
                          batch_size=None if args.batch_size == NO_ROW_CAP else args.batch_size,
                          max_batch_tokens=args.max_batch_tokens, dtype=args.dtype, backend=args.backend,
                          device=args.device, overwrite=args.overwrite, progress=args.progress)
    if args.batch_size == NO_ROW_CAP:  # the config's row cap removed: the backend's default
        job = dataclasses.replace(job, config={key: value for key, value in job.config.items() if key != "batch_size"})
    return engine, job


def summary_line(summary: JobSummary, output: str) -> str:
    """What a job did, in one line: its summary, or, for a finished job run again, that it did nothing."""
    if summary.skipped:
        return (f"{output} is already this job's complete output ({summary.rows:,} rows, {summary.valid:,} valid "
                "scores): nothing to do. Pass --overwrite to score it again.")
    return str(summary)


def interrupted_message(args: argparse.Namespace) -> str:
    """What a Ctrl-C leaves behind, in one line, as the engine ``args`` names tells it: the rows saved
    and how to go on."""
    engine, job = planned(args)
    return engine.interrupted_message(job)
