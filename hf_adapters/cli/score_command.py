"""``hf-adapters score CONFIG.yaml --data DATA --output FILE``: score a data set with a scorer config.

The default engine, ``local``, is our own chunk runner: it runs in this process, or in each process
of ``accelerate launch`` (one shard per process), and resumes where a killed run stopped; see
``hf_adapters.engines.local``. With ``--engine ray`` a pool of Ray actors scores the rows instead, on a
cluster or on this machine (not resumable); see ``hf_adapters.engines.ray``. Ctrl-C stops either with
one line saying what is saved, and exit status 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from hf_adapters.cli.arguments import (
    add_model_arguments,
    add_progress_argument,
    hide_library_progress,
    non_negative_float,
    positive_int,
)
from hf_adapters.files.data_io import LOADERS
from hf_adapters.files.score_files import OUTPUT_FORMATS, OutputFormat

#: The engines that run a scoring job: our own chunk runner (one process, or one per process of
#: ``accelerate launch``), or a pool of Ray actors.
ENGINES = ("local", "ray")
#: Earlier names of the engines, still accepted.
ENGINE_ALIASES = {"accelerate": "local"}
#: The config key (and ``--score-columns``) asking for more of the scorer's outputs: a job setting,
#: not the scorer's.
SCORE_COLUMNS_KEY = "score_columns"
#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell gives it.
INTERRUPTED = 130


def engine_name(text: str) -> str:
    """An engine's name, its earlier name (``accelerate``) read as today's."""
    return ENGINE_ALIASES.get(text, text)


def score_columns_argument(text: str) -> str | tuple[str, ...]:
    """``all``, or output names separated by commas."""
    if text.strip() == "all":
        return "all"
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected all or output names separated by commas, got {text!r}")
    return names


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
    ray = parser.add_argument_group("Ray engine", "score on a Ray cluster (pip install 'hf_adapters[ray]'): same rows, "
                                    "order and scores as the default engine, but not resumable (a killed job starts "
                                    "again; Ray retries failed tasks itself)")
    ray.add_argument("--engine", type=engine_name, choices=ENGINES, default="local",
                     help="local (default; formerly `accelerate`): this process, or each process accelerate launch "
                     "starts, on one node or several, resumable; ray: a pool of Ray actors, each loading the model "
                     "once")
    ray.add_argument("--num-workers", type=positive_int, default=None, metavar="N",
                     help="Ray actors scoring at once, each with its own copy of the model (default: 1)")
    ray.add_argument("--gpus-per-worker", type=non_negative_float, default=None, metavar="G",
                     help="GPUs each Ray actor takes (default: 0, scoring on CPU); fractions share a GPU")
    ray.add_argument("--ray-address", default=None, metavar="ADDRESS",
                     help="the cluster: its head's HOST:PORT (e.g. 10.0.0.1:6379) or auto (default: $RAY_ADDRESS, "
                     "else the cluster `ray start` runs on this machine, else a new local one)")
    parser.set_defaults(run=run)


def check_engine_options(args: argparse.Namespace, num_processes: int) -> None:
    """Refuse options that make no sense together, before anything is read."""
    given = {"--num-workers": args.num_workers, "--gpus-per-worker": args.gpus_per_worker,
             "--ray-address": args.ray_address}
    ray_only = [flag for flag, value in given.items() if value is not None]
    if args.engine != "ray":
        if ray_only:
            raise ValueError(f"{', '.join(ray_only)}: only with --engine ray.")
        return
    if args.streaming:
        raise ValueError("--streaming does not apply to --engine ray: the rows are read and checked first, then "
                         "handed to Ray. Leave out --streaming (or use the default engine to stream).")
    if args.device is not None:
        raise ValueError("--device does not apply to --engine ray: its workers score on the GPUs --gpus-per-worker "
                         "gives them, else on CPU.")
    if num_processes > 1:
        raise ValueError(f"--engine ray runs from one process, not under accelerate launch ({num_processes} "
                         "processes): start the command directly; Ray spreads the work over its workers.")


def run(args: argparse.Namespace) -> int:
    from accelerate import PartialState

    from hf_adapters.backends.loading import ModelLoadError

    if not args.progress:
        hide_library_progress()
    state = PartialState()
    try:
        return run_job(args, state)
    except (ValueError, ModelLoadError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if state.is_main_process:
            print(interrupted_message(args), file=sys.stderr)
        return INTERRUPTED


def run_job(args: argparse.Namespace, state: Any) -> int:
    """Check the options, config and output, then score with the engine ``args`` names; prints the summary."""
    from hf_adapters.engines.local import run_scoring_job, work_files
    from hf_adapters.files.data_io import data_fingerprint, read_rows
    from hf_adapters.files.output_paths import check_output_path
    from hf_adapters.scorers import load_config

    check_engine_options(args, state.num_processes)
    config, score_columns = job_settings(load_config(args.config), args, args.config)
    output = OutputFormat(args.output_format, args.keep_columns, args.rows_per_shard, score_columns=score_columns)
    check_output_path(args.output, {"data": args.data, "config": args.config}, folder=output.kind == "parquet",
                      work_files=work_files(args.output, output))
    scorer = job_scorer(config, args.device)
    output.columns_of(scorer.outputs)  # an output the scorer does not have is refused before the data is read
    if args.engine == "ray":
        return run_on_ray(args, config, output)
    with state.local_main_process_first():  # one process per node fills datasets' cache
        dataset = read_rows(args.data, split=args.split, streaming=args.streaming)
    fingerprint = data_fingerprint(args.data, args.split) if state.is_main_process else None
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        [fingerprint] = broadcast_object_list([fingerprint])
    expected = expected_rows(args.data, args.split) if args.streaming and state.is_main_process else None
    summary = run_scoring_job(dataset, scorer, args.output, overwrite=args.overwrite, progress=args.progress,
                              data_fingerprint=fingerprint, output=with_stored_types(output, args.data),
                              expected_rows=expected)
    if state.is_main_process:
        print(summary_line(summary, args.output))
    return 0


def summary_line(summary: Any, output: str) -> str:
    """What a job did, in one line: its summary, or, for a finished job run again, that it did nothing."""
    if summary.skipped:
        return (f"{output} is already this job's complete output ({summary.rows:,} rows, {summary.valid:,} valid "
                "scores): nothing to do. Pass --overwrite to score it again.")
    return str(summary)


def job_settings(config: dict[str, Any], args: argparse.Namespace,
                 source: str = "the config") -> tuple[dict[str, Any], Any]:
    """The scorer's config (the command's --model, --batch-size and --dtype over the file's) and the
    score columns asked for (``--score-columns`` over the config's ``score_columns``: ``all``, output
    names separated by commas, or a list of them; anything else is a ValueError naming ``source``)."""
    config = dict(config)
    score_columns = config.pop(SCORE_COLUMNS_KEY, None)
    if isinstance(score_columns, str):
        try:
            score_columns = score_columns_argument(score_columns)
        except argparse.ArgumentTypeError:
            pass  # an empty name: refused below
    if score_columns is not None and score_columns != "all" and not (
            isinstance(score_columns, (list, tuple)) and all(isinstance(name, str) and name for name in score_columns)):
        raise ValueError(f"{source}: `{SCORE_COLUMNS_KEY}` takes all, an output name or a list of the scorer's output "
                         f"names (IFD: [ppl_conditional, ppl_direct]), got {score_columns!r}.")
    if args.score_columns is not None:
        score_columns = args.score_columns
    overrides = {"model": args.model, "batch_size": args.batch_size, "dtype": args.dtype, "backend": args.backend}
    return {**config, **{key: value for key, value in overrides.items() if value is not None}}, score_columns


def job_scorer(config: dict[str, Any], device: str | None) -> Any:
    """The scorer of ``config``, on ``device`` (only a scorer that runs a model takes one)."""
    from hf_adapters.scorers import ModelRowScorer, build_scorer
    from hf_adapters.scorers.base import scorer_class

    if device is not None and not issubclass(scorer_class(config), ModelRowScorer):
        raise ValueError(f"--device: {config['name']} runs no model.")
    return build_scorer(config, device=device)


def expected_rows(data: str, split: str | None) -> int | None:
    """How many rows a stream of ``data`` has, where that is cheap to know: the sum of a Parquet
    source's row counts (its shards' metadata), the length of a ``save_to_disk`` folder's data set;
    None for others (JSON and CSV would be read a second time to count them, a hub data set has no
    count offline)."""
    from hf_adapters.files.data_io import data_files, is_saved_dataset

    if is_saved_dataset(data):
        from datasets import DatasetDict, load_from_disk

        saved = load_from_disk(data)
        if isinstance(saved, DatasetDict):
            saved = saved[split] if split is not None else next(iter(saved.values()))
        return len(saved)
    shards = data_files(data)
    if shards is None or shards[0] != "parquet":
        return None
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(file).num_rows for file in shards[1])


def interrupted_message(args: argparse.Namespace) -> str:
    """What a Ctrl-C leaves behind, in one line: the rows saved and how to go on."""
    from hf_adapters.engines.local import saved_rows, work_dir_for

    if args.engine == "ray":
        return "Interrupted: nothing was saved (the Ray engine does not resume); the same command starts again."
    saved, total = saved_rows(args.output)
    if not saved:
        return "Interrupted before any row was saved; the same command starts again."
    of = "" if total is None else f" of {total:,}"
    return (f"Interrupted: {saved:,}{of} rows are saved in {work_dir_for(args.output)}; "
            "run the same command again to resume.")


def with_stored_types(output: OutputFormat, data: str) -> OutputFormat:
    """``output``, told the types a Parquet source stores where it writes the rows' columns in Parquet."""
    from hf_adapters.files.data_io import stored_types

    if not (output.keep_columns and output.kind == "parquet"):
        return output
    return dataclasses.replace(output, column_types=stored_types(data))


def run_on_ray(args: argparse.Namespace, config: dict, output: OutputFormat) -> int:
    """The job on Ray (the config and output already checked); prints the summary."""
    from hf_adapters.engines.ray import RayJobError, run_ray_scoring_job
    from hf_adapters.files.data_io import data_fingerprint, read_rows

    dataset = read_rows(args.data, split=args.split)
    try:
        summary = run_ray_scoring_job(dataset, config, args.output, num_workers=args.num_workers or 1,
                                      gpus_per_worker=args.gpus_per_worker or 0, address=args.ray_address,
                                      progress=args.progress, output=with_stored_types(output, args.data),
                                      data_fingerprint=data_fingerprint(args.data, args.split),
                                      overwrite=args.overwrite)
    except RayJobError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(summary_line(summary, args.output))
    return 0
