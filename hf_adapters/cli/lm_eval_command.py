"""``hf-adapters lm-eval ARGS...``: lm-evaluation-harness's own command line, with our model
``hf-adapters`` registered (lm-eval 0.4.13 finds no model outside its source tree) and our tasks
(``information_parity``) on its task path unless ``--include_path`` names another, e.g.
``hf-adapters lm-eval --model hf-adapters --model_args backend=vllm --tasks ifeval``.

For the model ``hf-adapters``, ``batch_size``, ``max_batch_size`` and ``device`` in ``--model_args`` are
lm-eval's own ``--batch_size``, ``--max_batch_size`` and ``--device`` (which lm-eval passes to every
model, its defaults when not given): each is given to lm-eval once, from where it was named, and a
value named in both places with two values is refused. Refused model arguments, a missing model, a
task's missing data and what lm-eval's own checks of its arguments refuse (an unknown task) are one
``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

#: The module of lm-eval that checks its command line's arguments (lm-eval 0.4.13).
LM_EVAL_CONFIG_MODULE = "lm_eval.config.evaluate_config"


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
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    from hf_adapters.backends.loading import ModelLoadError
    from hf_adapters.integrations import lm_eval_harness  # noqa: F401  (registers the model `hf-adapters`)
    from hf_adapters.integrations.lm_eval_harness.errors import LMEvalUsageError
    from hf_adapters.integrations.lm_eval_harness.tasks import TASKS_DIR

    arguments = list(args.arguments)
    named = {argument.split("=")[0] for argument in arguments}
    if arguments and not named & {"-h", "--help", "--include_path"}:
        arguments += ["--include_path", str(TASKS_DIR)]
    setup_logging()
    with _argv(["lm-eval", *arguments]):
        parser = HarnessCLI()
        namespace = parser.parse_args()
    try:
        _one_value_each(namespace)
        with _package_debug(_lm_eval_debug(namespace)):
            parser.execute(namespace)
    except (LMEvalUsageError, ModelLoadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        if not _refused_by_lm_evals_config(error):
            raise
        print(f"error: {_with_a_hint(error)}", file=sys.stderr)
        return 2
    return 0


def _refused_by_lm_evals_config(error: ValueError) -> bool:
    """Whether lm-eval's own checks of its arguments raised ``error`` (an unknown task, a config file that
    cannot be read, options that do not go together), not a failure while it evaluates."""
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    return traceback is not None and traceback.tb_frame.f_globals.get("__name__") == LM_EVAL_CONFIG_MODULE


def _with_a_hint(error: ValueError) -> str:
    """lm-eval's message in one line, with what to do where it names tasks not found."""
    message = " ".join(str(error).split())
    if message.startswith("Tasks not found"):
        message += (". `hf-adapters lm-eval ls tasks` lists lm-eval's tasks (ours: information_parity); "
                    "--include_path adds a folder of task configs")
    return message


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    """``sys.argv`` as lm-eval's parser reads it, while the body runs."""
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def _one_value_each(namespace: argparse.Namespace) -> None:
    """For ``--model hf-adapters``: its model arguments that are lm-eval's own settings (``batch_size``,
    ``max_batch_size``, ``device``) moved to lm-eval's options, where lm-eval passes them from (and
    records them in its results), unless the same setting is named there (on the command line or in
    ``--config``) with another value: a :class:`ModelArgumentError` then."""
    from lm_eval.config.evaluate_config import EvaluatorConfig
    from lm_eval.utils import simple_parse_args_string

    from hf_adapters.integrations.lm_eval_harness.model import LM_EVAL_SETTINGS, one_value_each

    if getattr(namespace, "command", None) != "run":
        return
    config: dict[str, Any] = {}
    if getattr(namespace, "config", None):
        with contextlib.suppress(OSError, ValueError, TypeError):  # lm-eval itself says what is wrong with it
            config = EvaluatorConfig.load_yaml_config(namespace.config)
    if (namespace.model or config.get("model")) != "hf-adapters":
        return
    model_args = namespace.model_args or config.get("model_args") or {}
    if isinstance(model_args, str):
        model_args = simple_parse_args_string(model_args)
    given = {}
    for name in LM_EVAL_SETTINGS:
        typed = getattr(namespace, name, None)  # None (or absent): not on the command line
        given[name] = typed if typed is not None else config.get(name)
    named = one_value_each({name: model_args[name] for name in LM_EVAL_SETTINGS if name in model_args}, given)
    for name, value in named.items():
        setattr(namespace, name, value)
    namespace.model_args = {name: value for name, value in model_args.items() if name not in LM_EVAL_SETTINGS}


def _lm_eval_debug(namespace: argparse.Namespace) -> bool:
    """Whether lm-eval's log level is DEBUG (``--verbosity DEBUG`` or ``LMEVAL_LOG_LEVEL=DEBUG``)."""
    level = getattr(namespace, "verbosity", None) or os.environ.get("LMEVAL_LOG_LEVEL", "")
    return str(level).upper() == "DEBUG"


@contextlib.contextmanager
def _package_debug(debug: bool) -> Iterator[None]:
    """This package's debug messages shown while the body runs, where lm-eval's are asked for."""
    package = logging.getLogger("hf_adapters")
    level = package.level
    if debug:
        package.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        package.setLevel(level)
