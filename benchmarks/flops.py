"""The machine's matmul ceiling and the useful work of a scoring job, in floating-point operations.

Useful FLOPs of one scored token at position ``j`` of its sequence (``j`` tokens before it):
``2 * parameters`` (every weight once, a tied embedding counted once, as the output layer) plus
causal attention ``4 * layers * attention_width * j`` (scores and weighted values over ``j``
keys). Context tokens that are not scored, padding and output-layer rows of unscored positions
count nothing, so every implementation of the same job is credited the same work.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from hf_adapters.cpu_kernels import LINEAR_KERNELS

from .references import ScoredSequence

FORMULA = (
    "useful FLOPs = sum over scored tokens of 2 x parameters + 4 x layers x attention width x position "
    "(causal attention); context-only tokens, padding and unscored output rows count nothing"
)


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count needs to know about a model."""

    parameters: int
    layers: int
    attention_width: int

    @classmethod
    def of(cls, model: PreTrainedModel) -> ModelShape:
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # named_parameters() yields a tied weight once.
        parameters = sum(parameter.numel() for _, parameter in model.named_parameters())
        return cls(parameters, config.num_hidden_layers, config.num_attention_heads * head_dim)


def useful_flops(shape: ModelShape, sequences: Iterable[ScoredSequence]) -> float:
    """Useful FLOPs of scoring ``sequences`` (each scores its last ``scored`` tokens)."""
    total = 0.0
    for sequence in sequences:
        first = sequence.length - sequence.scored
        # The token at index j is predicted from position j - 1, which attends to j keys.
        keys = (first + sequence.length - 1) * sequence.scored / 2
        total += 2.0 * shape.parameters * sequence.scored + 4.0 * shape.layers * shape.attention_width * keys
    return total


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a timer measures it (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(dtype: torch.dtype, size: int = 2048, repeats: int = 10, device: str = "cpu",
                kernel: str = "default") -> float:
    """Best FLOP/s of a ``size`` x ``size`` matrix product in ``dtype`` over ``repeats`` timed runs,
    through one of the candidate linear kernels (``"default"`` or, float32 on x86 CPUs, ``"onednn"``)."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    linear = LINEAR_KERNELS[kernel]
    with torch.inference_mode():
        linear(a, b)  # warm-up: kernel selection and first-touch allocation
        best = float("inf")
        for _ in range(repeats):
            synchronize(a.device)
            start = time.perf_counter()
            linear(a, b)
            synchronize(a.device)
            best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best
