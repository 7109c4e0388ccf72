"""The GPU benchmark's Markdown report: rewritten to its file after each section, and its head naming
the machine, the model and the float32 matmul settings."""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import PreTrainedModel

from benchmarks.common import machine_description
from benchmarks.gpu.random_model import VOCAB_SIZE, scored_tokens, whole_sequence
from hf_adapters.core.likelihood import Item


class Report:
    """Markdown lines, rewritten to ``output`` as sections are added."""

    def __init__(self, output: str | None):
        self.output, self.lines = output, []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)
        if self.output:
            Path(self.output).parent.mkdir(parents=True, exist_ok=True)
            Path(self.output).write_text("\n".join(self.lines) + "\n", encoding="utf-8")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def tf32_settings() -> str:
    """The float32 matmul settings in force (TF32 off is what makes float32 exact on a GPU)."""
    matmul = torch.backends.cuda.matmul
    settings = {"torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
                "torch.backends.cuda.matmul.allow_tf32": lambda: matmul.allow_tf32,
                "torch.backends.cuda.matmul.fp32_precision": lambda: matmul.fp32_precision,
                "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
                    lambda: matmul.allow_bf16_reduced_precision_reduction}
    parts = []
    for name, read in settings.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                parts.append(f"`{name}` = {read()!r}")
            except (AttributeError, RuntimeError) as error:
                parts.append(f"`{name}` unreadable ({error})")
    override = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
    return ", ".join(parts) + (f"; TORCH_ALLOW_TF32_CUBLAS_OVERRIDE={override}" if override else "")


def length_summary(items: Sequence[Item], start_id: int) -> str:
    lengths = np.array([len(whole_sequence(item, start_id)[0]) for item in items])
    return (f"{len(items)} items, {lengths.sum()} tokens (median length {np.median(lengths):.0f}, "
            f"{lengths.min()}..{lengths.max()}), {scored_tokens(items)} scored")


def header(args: argparse.Namespace, argv: Sequence[str], model: PreTrainedModel, device: torch.device) -> list[str]:
    parameters = sum(parameter.numel() for parameter in model.parameters())
    return [
        "# The likelihood core and greedy generation on a GPU",
        "",
        f"Command: `{shlex.join(['python', '-m', 'benchmarks.gpu.run', *argv])}`",
        "",
        f"{datetime.date.today().isoformat()}; {machine_description(device)}, transformers {transformers.__version__}.",
        "",
        f"Model: a randomly initialised Llama with SmolLM2-135M's architecture ({args.layers} layers, 576 wide, "
        f"9/3 heads, {VOCAB_SIZE} tokens, tied embeddings; {parameters / 1e6:.1f}M parameters), weights from "
        f"N(0, {args.init_std}) (seed {args.seed}), the final norm's gain set to {args.final_norm_gain}; attention "
        f"`{model.config._attn_implementation}`, RoPE `{getattr(model.config, 'rope_parameters', None)}`. "
        f"Items: random token ids, sequence lengths log-uniform in {args.min_len}..{args.max_len}.",
        "",
        f"Float32 matmuls: {tf32_settings()}.",
        "",
    ]
