"""``hf-adapters ifeval --output DIR``: generate a response to each IFEval prompt with a model, score
them, and write ``DIR/samples.jsonl`` and ``DIR/results.json``; print lm-eval's table.
``--log-format lm-eval`` (or ``both``) writes lm-eval's ``DIR/<model>/results_<time>.json`` and
``samples_ifeval_<time>.jsonl`` (:mod:`hf_adapters.ifeval.lm_eval_logs`).

Resumable: rerun the same command after a kill and it continues with the prompts not yet generated;
a Ctrl-C says how many responses are saved (:func:`interrupted_message`), and so does a full disk
(:func:`stopped_message`, exit status 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hf_adapters.cli.arguments import add_progress_argument, hide_library_progress, one_line, positive_int
from hf_adapters.core.options import DEFAULT_GENERATION_BATCH_SIZE, DEFAULT_MODEL_ID, DTYPES
from hf_adapters.core.wording import full_disk, plural
from hf_adapters.ifeval.end_to_end import DEFAULT_MAX_NEW_TOKENS
from hf_adapters.ifeval.lm_eval_logs import LOG_FORMATS


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ifeval", help="IFEval end to end: generate with a model, then score (resumable).",
        description="Generate a greedy response to each IFEval prompt (one user turn of the model's chat template, "
        "at most --max-new-tokens tokens, stopping at the end of turn), score it with the 25 instruction checks, "
        "and write DIR/samples.jsonl (one line per prompt) and DIR/results.json (lm-eval's four accuracies, the "
        "model's identity, the settings and the date), or lm-eval's own results and samples files "
        "(--log-format). Rerun the same command to resume a killed run.",
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="folder for samples.jsonl and results.json")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID,
                        help=f"model id, local folder or .gguf file (default: {DEFAULT_MODEL_ID}, embedded offline)")
    parser.add_argument("--data", help="an IFEval-format JSONL file (key, prompt, instruction_id_list, kwargs); "
                        "default: the 541 prompts shipped with the package")
    parser.add_argument("--limit", type=positive_int, help="only the first N prompts")
    parser.add_argument("--max-new-tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS,
                        help=f"most tokens generated per response (default: {DEFAULT_MAX_NEW_TOKENS}, lm-eval's)")
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULT_GENERATION_BATCH_SIZE,
                        help="prompts decoding together; responses do not depend on it "
                        f"(default: {DEFAULT_GENERATION_BATCH_SIZE})")
    parser.add_argument("--strip-thinking", action="store_true",
                        help="remove a leading <think>...</think> block before scoring (reasoning models)")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="float32 (exact; the CPU default), bfloat16 (approximate; the GPU default) or float16")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: accelerate's device)")
    parser.add_argument("--backend", default=None, metavar="NAME",
                        help="what generates: transformers (the default) or vllm (where vLLM is installed; its "
                        "greedy responses are vLLM's, not checked against decoding each prompt alone)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="hf-adapters",
                        help="which results a finished run writes: DIR/results.json (hf-adapters, the default); "
                        "lm-eval's DIR/<model>/results_<time>.json and samples_ifeval_<time>.jsonl, as "
                        "`lm_eval --log_samples --apply_chat_template` writes them (lm-eval); or both. "
                        "samples.jsonl and run.json are always kept (they resume the run); rerunning a finished "
                        "run with another format rewrites its results without generating, and removes the "
                        "other format's")
    parser.add_argument("--overwrite", action="store_true", help="discard another run's samples in DIR")
    add_progress_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hf_adapters.backends import backend_class
    from hf_adapters.backends.loading import ModelLoadError
    from hf_adapters.files.output_paths import output_location
    from hf_adapters.ifeval.end_to_end import results_table, run_ifeval, run_manifest, run_settings
    from hf_adapters.ifeval.lm_eval_logs import LmEvalRun
    from hf_adapters.ifeval.prompts import prompts_source, read_prompts
    from hf_adapters.ifeval.registry import IFEvalInputError
    from hf_adapters.ifeval.run_folder import check_folder

    if not args.progress:
        hide_library_progress()
    try:
        args.output = str(output_location(args.output))
        all_rows = read_prompts(args.data)
        rows = all_rows[: args.limit]
        data = prompts_source(args.data)
        settings = run_settings(args.max_new_tokens, args.strip_thinking)
        backend_type = backend_class(args.backend or "transformers")
        identity = backend_type.identify(args.model, dtype=args.dtype, device=args.device)
        # Refuse another run's folder before spending time on loading the model.
        check_folder(args.output, run_manifest(identity, settings, data), args.overwrite)
        backend = backend_type.from_pretrained(args.model, dtype=args.dtype, device=args.device)
        results = run_ifeval(backend, rows, args.output, max_new_tokens=args.max_new_tokens,
                             batch_size=args.batch_size, strip=args.strip_thinking, data=data,
                             overwrite=args.overwrite, progress=args.progress, log_format=args.log_format,
                             lm_eval_run=LmEvalRun(limit=args.limit, prompts_in_file=len(all_rows),
                                                   device=args.device))
    except (ValueError, IFEvalInputError, ModelLoadError, FileNotFoundError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    except OSError as error:
        if (full := full_disk(error, args.output)) is None:
            raise
        print(stopped_message(args, full), file=sys.stderr)
        return 1
    run_stats = results["this_run"]
    rate = run_stats["tokens_generated"] / run_stats["seconds"] if run_stats["seconds"] else 0.0
    print(f"ifeval: {plural(results['prompts'], 'prompt')}, {plural(results['instructions'], 'instruction')}; "
          f"model {args.model}, max_new_tokens {args.max_new_tokens}; this run generated "
          f"{plural(run_stats['prompts_generated'], 'response')}, {plural(run_stats['tokens_generated'], 'token')} "
          f"in {run_stats['seconds']:.1f} s ({rate:.1f} tokens/s)")
    print(results_table(results))
    written = [] if args.log_format == "lm-eval" else ["results.json"]
    written += results.get("lm_eval_files", [])
    print(f"\nSamples and results written to {args.output}: samples.jsonl, {', '.join(written)}")
    return 0


def interrupted_message(args: argparse.Namespace) -> str:
    """What a Ctrl-C leaves in the run folder, in one line (the command line prints it, and exits 130)."""
    saved, total = saved_responses(args)
    if not saved:
        return f"Interrupted before any response was saved in {args.output}; the same command starts again."
    return (f"Interrupted with {saved:,} of {plural(total, 'response')} saved in {samples_path(args)}; "
            "run the same command again to resume.")


def stopped_message(args: argparse.Namespace, stopped: str) -> str:
    """What a run that something other than a Ctrl-C ``stopped`` (a full disk: ``error: no space left
    on ...``) leaves in the run folder, in one line beginning with ``stopped``."""
    saved, total = saved_responses(args)
    if not saved:
        return f"{stopped} before any response was saved in {args.output}; the same command starts again."
    return (f"{stopped}: {saved:,} of {plural(total, 'response')} are saved in {samples_path(args)}; run the same "
            "command again to resume.")


def saved_responses(args: argparse.Namespace) -> tuple[int, int]:
    """The responses to the run's prompts its folder keeps, and the run's prompts."""
    from hf_adapters.ifeval.prompts import read_prompts
    from hf_adapters.ifeval.run_folder import saved_keys

    keys = {row["key"] for row in read_prompts(args.data)[: args.limit]}
    return len(saved_keys(args.output) & keys), len(keys)


def samples_path(args: argparse.Namespace) -> Path:
    """The run folder's file of responses."""
    from hf_adapters.ifeval.run_folder import SAMPLES

    return Path(args.output) / SAMPLES
