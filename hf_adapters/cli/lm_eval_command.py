"""``hf-adapters lm-eval ARGS...``: lm-evaluation-harness's own command line, with our model
``hf-adapters`` registered (lm-eval 0.4.13 finds no model outside its source tree) and our tasks
(``information_parity``) on its task path unless ``--include_path`` names another, e.g.
``hf-adapters lm-eval --model hf-adapters --model_args backend=vllm --tasks ifeval``."""

from __future__ import annotations

import argparse
import importlib.util
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lm-eval", help="run lm-evaluation-harness with our backends as its model `hf-adapters`",
        description="lm-evaluation-harness's command line (`lm-eval run ...`, `lm-eval ls tasks`...), every "
                    "argument passed on, with the model `hf-adapters` available (--model hf-adapters --model_args "
                    "backend=transformers|vllm,model_id=...) and our tasks (information_parity) unless "
                    "--include_path names other ones.", add_help=False)
    parser.set_defaults(run=run, passes_arguments_on=True)


def run(args: argparse.Namespace) -> int:
    """``args.arguments`` (every argument after ``lm-eval``) to lm-eval's command line."""
    if importlib.util.find_spec("lm_eval") is None:
        print("error: lm-evaluation-harness is not installed: pip install 'hf_adapters[lm-eval]'", file=sys.stderr)
        return 2
    from lm_eval.__main__ import cli_evaluate

    from ..integrations import lm_eval_harness  # noqa: F401  (registers the model `hf-adapters`)
    from ..integrations.lm_eval_harness.tasks import TASKS_DIR

    arguments = list(args.arguments)
    named = {argument.split("=")[0] for argument in arguments}
    if arguments and not named & {"-h", "--help", "--include_path"}:
        arguments += ["--include_path", str(TASKS_DIR)]
    sys.argv = ["lm-eval", *arguments]
    cli_evaluate()
    return 0
