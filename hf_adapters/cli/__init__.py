"""The ``hf-adapters`` command line (also ``python -m hf_adapters``): one module per subcommand.

Nothing outside this package imports from it."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ..openmp import wait_passively
from ..plugins import PluginError
from . import (
    compare_command,
    demo_command,
    embed_command,
    ifeval_command,
    lm_eval_command,
    parity_command,
    perplexity_command,
    score_command,
    select_command,
    summary_command,
)
from .arguments import import_plugins, progress_settings_kept

SUBCOMMANDS = [compare_command, demo_command, embed_command, ifeval_command, lm_eval_command, parity_command,
               perplexity_command, score_command, select_command, summary_command]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-adapters", description="Exact, batched language-model scores for language data."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    wait_passively()  # before any command imports torch
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "passes_arguments_on", False):
        args.arguments = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        import_plugins(args)
    except PluginError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    with progress_settings_kept():
        return args.run(args) or 0
