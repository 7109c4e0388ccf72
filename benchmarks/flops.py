"""The machine's matmul and attention ceilings and the useful work of a scoring job, in floating-point operations.

Useful FLOPs of one scored token at position ``j`` of its sequence (``j`` tokens before it):
``2 * parameters`` (every weight once, a tied embedding counted once, as the output layer) plus
causal attention ``4 * layers * attention_width * j`` (scores and weighted values over ``j``
keys). Context tokens that are not scored, padding and output-layer rows of unscored positions
count nothing, so every implementation of the same job is credited the same work. The work done
(:class:`WorkMeter`) instead charges each run for every position it fed the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from hf_adapters.backends.transformers.cpu_kernels import LINEAR_KERNELS

from .references import ScoredSequence

FORMULA = (
    "useful FLOPs = sum over scored tokens of 2 x parameters + 4 x layers x attention width x position "
    "(causal attention); context-only tokens, padding and unscored output rows count nothing"
)

WORK_FORMULA = (
    "work done = FLOPs a run made the model do, counted by hooks on its body and output layer: each position fed "
    "(padding included) 2 x body parameters + causal attention, each output-layer row 2 x its parameters"
)


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count needs to know about a model."""

    parameters: int
    layers: int
    attention_width: int  # heads x head dimension
    head_dim: int

    @classmethod
    def of(cls, model: PreTrainedModel) -> ModelShape:
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # named_parameters() yields a tied weight once.
        parameters = sum(parameter.numel() for _, parameter in model.named_parameters())
        return cls(parameters, config.num_hidden_layers, config.num_attention_heads * head_dim, head_dim)


def useful_flops(shape: ModelShape, sequences: Iterable[ScoredSequence]) -> float:
    """Useful FLOPs of scoring ``sequences`` (each scores its last ``scored`` tokens)."""
    total = 0.0
    for sequence in sequences:
        first = sequence.length - sequence.scored
        # The token at index j is predicted from position j - 1, which attends to j keys.
        keys = (first + sequence.length - 1) * sequence.scored / 2
        total += 2.0 * shape.parameters * sequence.scored + 4.0 * shape.layers * shape.attention_width * keys
    return total


class WorkMeter:
    """The FLOPs a model is made to do, whoever calls it, counted by hooks on its transformer body
    and its output layer while the meter lives: each position fed to the body, padding included,
    costs 2 x the body's parameters plus causal attention over the positions up to it (a row of
    packed sequences counts as one sequence); each row through the output layer costs 2 x its
    parameters. Unlike useful FLOPs this charges each implementation for the work it chose to do,
    so the ratio of two implementations' work is the speed-up they would show at equal FLOP/s.
    ``attention`` is the part of ``total`` spent in attention (the rest is matrix products with weights).
    """

    def __init__(self, model: PreTrainedModel):
        self.total = 0.0
        self.attention = 0.0
        self.shape = ModelShape.of(model)
        embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        tied = embedding.data_ptr() == head.data_ptr()
        self.head_parameters = head.numel()
        self.body_parameters = self.shape.parameters - embedding.numel() - (0 if tied else head.numel())
        self._hooks = [
            model.base_model.register_forward_pre_hook(self._count_body, with_kwargs=True),
            model.get_output_embeddings().register_forward_pre_hook(self._count_head),
        ]

    def _count_body(self, module, args, kwargs) -> None:
        inputs = kwargs.get("input_ids", args[0] if args else None)
        if inputs is None:
            inputs = kwargs["inputs_embeds"][..., 0]
        rows, width = inputs.reshape(-1, inputs.shape[-1]).shape
        attention = 4.0 * self.shape.layers * self.shape.attention_width * width * (width + 1) / 2
        self.total += rows * (2.0 * self.body_parameters * width + attention)
        self.attention += rows * attention

    def _count_head(self, module, args) -> None:
        hidden = args[0]
        self.total += 2.0 * self.head_parameters * hidden.numel() / hidden.shape[-1]

    def close(self) -> None:
        """Remove the hooks."""
        for hook in self._hooks:
            hook.remove()


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a timer measures it (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fastest_seconds(call: Callable[[], object], device: torch.device, repeats: int) -> float:
    """The fastest of ``repeats`` timed runs of ``call`` (in inference mode), after one untimed run
    (kernel selection, first-touch allocation)."""
    with torch.inference_mode():
        call()
        best = float("inf")
        for _ in range(repeats):
            synchronize(device)
            start = time.perf_counter()
            call()
            synchronize(device)
            best = min(best, time.perf_counter() - start)
    return best


def matmul_peak(dtype: torch.dtype, size: int = 2048, repeats: int = 10, device: str = "cpu",
                kernel: str = "default") -> float:
    """Best FLOP/s of a ``size`` x ``size`` matrix product in ``dtype`` over ``repeats`` timed runs,
    through one of the candidate linear kernels (``"default"`` or, float32 on x86 CPUs, ``"onednn"``)."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    linear = LINEAR_KERNELS[kernel]
    return 2.0 * size**3 / fastest_seconds(lambda: linear(a, b), a.device, repeats)


def attention_peak(shape: ModelShape, size: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """Best FLOP/s of PyTorch's attention kernel (``scaled_dot_product_attention``, float32) on the
    model's heads, ``size`` queries and keys with no mask, over ``repeats`` timed runs: the fastest
    the kernel runs, as a causal mask only adds work at the diagonal's blocks."""
    heads = shape.attention_width // shape.head_dim
    query, key, value = (torch.randn(1, heads, size, shape.head_dim, device=device) for _ in range(3))
    attention = torch.nn.functional.scaled_dot_product_attention
    return 4.0 * shape.attention_width * size**2 / fastest_seconds(lambda: attention(query, key, value),
                                                                   query.device, repeats)
