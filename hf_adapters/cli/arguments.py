"""The arguments several subcommands share, declared once: the same names, choices and help everywhere.

Importing this module (and building the parser) imports neither torch nor transformers, so that
``--help`` and argument errors answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from hf_adapters.core import plugins
from hf_adapters.core.options import (
    COMPILE_ENV,
    COMPILE_SETTINGS,
    DEFAULT_BATCH_SIZE,
    DEFAULT_MODEL_ID,
    DTYPES,
    positive_int,
)
from hf_adapters.core.plugins import BACKEND_GROUP, PLUGINS_VARIABLE, SCORER_GROUP

#: ``--batch-size none``: no row cap, over the config's; the token budget alone bounds a batch.
NO_ROW_CAP = "none"


def batch_size_override(text: str) -> int | str:
    """``--batch-size`` where it overrides a config (an argparse type): a whole number of at least 1, or
    ``none`` (:data:`NO_ROW_CAP`)."""
    if text.strip().lower() == NO_ROW_CAP:
        return NO_ROW_CAP
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{error}, or none (no row cap: the token budget bounds each batch)") from None


class SetsEnvironment(argparse.Action):
    """An option whose value also becomes the environment variable ``env`` of this process (and so of
    the processes it starts, Ray's workers included), as the backend reads its setting from it."""

    def __init__(self, *args: Any, env: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.env = env

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        os.environ[self.env] = values


def add_model_arguments(parser: argparse.ArgumentParser, *, overrides: bool = False, device: bool = True,
                        backend: bool = True, token_budget: bool = True) -> None:
    """``--model``, ``--dtype``, ``--batch-size`` (and ``--max-batch-tokens``, ``--device``, ``--backend``),
    and ``--plugin``; with ``overrides`` they default to the config's values and say so, and ``--batch-size
    none`` unsets the config's."""
    of_config = " (overrides the config)" if overrides else ""
    parser.add_argument("--model", default=None if overrides else DEFAULT_MODEL_ID,
                        help=f"model id, local folder or .gguf file{of_config}"
                        + ("" if overrides else f" (default: {DEFAULT_MODEL_ID}, a Q4_1 GGUF embedded offline)"))
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="float32 (exact; the CPU default), bfloat16 (approximate; the GPU default) or float16"
                        + of_config)
    parser.add_argument("--batch-size", type=batch_size_override if overrides else positive_int, default=None,
                        help="most rows per forward pass; scores do not depend on it"
                        + (f" (overrides the config; none removes its cap, as a GPU wants: then {DEFAULT_BATCH_SIZE} "
                           "rows on the CPU, and on a GPU the token budget alone bounds each batch)" if overrides else
                           f" (default: {DEFAULT_BATCH_SIZE} on the CPU; on a GPU none, a token budget chosen by "
                           "timing, within what its free memory allows, bounds each batch)"))
    if token_budget:
        parser.add_argument("--max-batch-tokens", type=positive_int, default=None, metavar="N",
                            help="most padded tokens (rows x longest row) per forward pass of the transformers "
                            f"backend; scores do not depend on it{of_config} (default: 2,048 on the CPU; on a GPU "
                            "the fastest of a few budgets timed on the first batches, within what its free memory "
                            "allows, at most 65,536)")
        parser.add_argument("--compile", choices=COMPILE_SETTINGS, default=None, action=SetsEnvironment,
                            env=COMPILE_ENV, help="run the model's body under torch.compile: auto (on a GPU, where "
                            "the job's tokens repay the compile time), on or off; scores stay within the exactness "
                            f"bound (default: ${COMPILE_ENV}, else auto)")
    if device:
        parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: accelerate's device)")
    if backend:
        parser.add_argument("--backend", default=None, metavar="NAME",
                            help="what runs the model: transformers (the default), vllm (where vLLM is installed) "
                            f"or a plugin's backend{of_config}")
    add_plugin_argument(parser)


def add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    """``--plugin MODULE`` (repeatable), imported before anything else is read (:func:`import_plugins`)."""
    parser.add_argument("--plugin", action="append", metavar="MODULE",
                        help=f"import MODULE first, e.g. one that registers a backend or scorer (register_backend, "
                        f"register_scorer); repeatable; also ${PLUGINS_VARIABLE}=MOD1,MOD2. Installed packages' "
                        f"entry points in the groups {BACKEND_GROUP} and {SCORER_GROUP} need no option")


def import_plugins(args: argparse.Namespace) -> None:
    """Import the plugin modules of ``$HF_ADAPTERS_PLUGINS`` and ``--plugin``, for a command that takes them."""
    if hasattr(args, "plugin"):
        plugins.import_plugins(plugins.plugin_modules(args.plugin))


def one_line(error: BaseException) -> str:
    """The error's message on one line (the model loader lists what it tried on several)."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="hide the progress bars, the model's loading bars included")


#: How to turn back on what :func:`hide_library_progress` turned off.
_turn_back_on: list[Callable[[], None]] = []


def hide_library_progress() -> None:
    """Turn off the progress bars of transformers (loading a model) and datasets (reading data), until
    the command returns (:func:`progress_settings_kept`)."""
    import datasets
    import transformers

    if transformers.utils.logging.is_progress_bar_enabled():
        transformers.utils.logging.disable_progress_bar()
        _turn_back_on.append(transformers.utils.logging.enable_progress_bar)
    if not datasets.utils.are_progress_bars_disabled():
        datasets.disable_progress_bars()
        _turn_back_on.append(datasets.enable_progress_bars)


@contextlib.contextmanager
def progress_settings_kept() -> Iterator[None]:
    """Leave the libraries' progress bars as they were before the command, in a process that goes on."""
    try:
        yield
    finally:
        while _turn_back_on:
            _turn_back_on.pop()()
