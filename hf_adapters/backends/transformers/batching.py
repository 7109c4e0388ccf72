"""How the transformers backend bounds its batches, shared by scoring
(:mod:`~hf_adapters.backends.transformers.model`) and embedding
(:mod:`~hf_adapters.backends.transformers.embedding`).

On the CPU a batch holds at most ``DEFAULT_BATCH_SIZE`` rows and ``CPU_MAX_BATCH_TOKENS`` padded
tokens, and a row joins it only if it adds at most ``CPU_MAX_PADDING`` padding. On an accelerator
a batch is bounded by tokens alone (no row count, unless the caller gives one): the budget is
:func:`device_token_budget`, from the device's free memory and the model's shape, at most
``ACCELERATOR_MAX_BATCH_TOKENS``. Nothing here touches a device: :func:`batch_limits` is a pure
function of the device type, the free memory and the model's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hf_adapters.core.options import DEFAULT_BATCH_SIZE

#: Token budget on an accelerator whose free memory is not known (the budget before issue 51).
DEFAULT_MAX_BATCH_TOKENS = 16384
#: Default token budget of one batch (rows x padded length) on the CPU.
CPU_MAX_BATCH_TOKENS = 2048
#: On the CPU an item joins a batch only if padding adds at most this fraction of the batch's length:
#: one unpadded sequence of a few hundred tokens already keeps the cores busy, and padding is wasted work.
CPU_MAX_PADDING = 0.1
#: The largest budget chosen on an accelerator: of 16k, 32k, 64k and 128k tokens, 64k ran a 1B
#: Llama fastest on Alpaca-length rows on an H200 (issue 51); larger batches gain nothing more.
ACCELERATOR_MAX_BATCH_TOKENS = 65536
#: The smallest budget chosen on an accelerator, however little memory is free (a batch always
#: holds at least one row whatever its budget).
ACCELERATOR_MIN_BATCH_TOKENS = 1024
#: The share of the free memory a batch's activations may take: the estimate of
#: :func:`activation_bytes_per_token` is rough, and the allocator fragments.
ACTIVATION_MEMORY_SHARE = 0.5
#: Scored positions sent through the output layer at once on an accelerator (bounds vocab memory).
OUTPUT_CHUNK_POSITIONS = 2048
#: Vocabulary columns of a chunk's logits converted to float32 (float64 for entropies) at once
#: (:mod:`~hf_adapters.backends.transformers.output_layer`): no wider copy of the chunk is made.
OUTPUT_VOCAB_SLICE = 16384


@dataclass(frozen=True)
class ModelShape:
    """What the token budget needs to know about a model: its width, its MLP's width, its vocabulary
    and the bytes of one value of its dtype."""

    hidden_size: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int

    @classmethod
    def of(cls, model: Any) -> ModelShape:
        """The shape of a ``transformers`` causal LM (its text model's, for a multimodal one)."""
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        head = model.get_output_embeddings().weight
        hidden = int(config.hidden_size)
        intermediate = getattr(config, "intermediate_size", None) or 4 * hidden
        return cls(hidden, int(intermediate), int(head.shape[0]), head.element_size())


def activation_bytes_per_token(shape: ModelShape) -> int:
    """A generous estimate of the memory one token of a batch holds at the peak of an inference
    forward pass (one layer's activations live at a time): the MLP's gate, up and product
    (``4 x intermediate``), attention's queries, keys, values, rotated copies and output and the
    residual stream (``12 x hidden``) in the model's dtype, and the norms' float32 copies."""
    return shape.dtype_bytes * (4 * shape.intermediate_size + 12 * shape.hidden_size) + 16 * shape.hidden_size


def output_layer_bytes(shape: ModelShape) -> int:
    """The memory of one chunk of the output layer, whatever the batch: ``OUTPUT_CHUNK_POSITIONS``
    logits in the model's dtype and one more tensor of their size (a float32 model's log-softmax, a
    soft-capping's temporary), and the float64 temporaries of ``OUTPUT_VOCAB_SLICE`` columns
    (entropies); no float32 or float64 copy of the whole chunk is made."""
    return OUTPUT_CHUNK_POSITIONS * (shape.vocab_size * (shape.dtype_bytes + 4) + OUTPUT_VOCAB_SLICE * 32)


def device_token_budget(device_type: str, free_bytes: int | None, shape: ModelShape | None) -> int:
    """The padded tokens (rows x longest row) one batch may hold on a device.

    The CPU: ``CPU_MAX_BATCH_TOKENS``. An accelerator whose free memory (or the model's shape) is
    unknown: ``DEFAULT_MAX_BATCH_TOKENS``. Else as many tokens as
    ``ACTIVATION_MEMORY_SHARE`` of the free memory left beside one output-layer chunk holds, at
    :func:`activation_bytes_per_token`, rounded down to a multiple of 1024, within
    ``ACCELERATOR_MIN_BATCH_TOKENS``..``ACCELERATOR_MAX_BATCH_TOKENS``.

    Example:
        >>> llama_1b = ModelShape(hidden_size=2048, intermediate_size=8192, vocab_size=128256, dtype_bytes=2)
        >>> device_token_budget("cuda", 70 * 2**30, llama_1b), device_token_budget("cuda", 16 * 2**30, llama_1b)
        (65536, 49152)
        >>> device_token_budget("cpu", None, llama_1b)
        2048
    """
    if device_type == "cpu":
        return CPU_MAX_BATCH_TOKENS
    if free_bytes is None or shape is None:
        return DEFAULT_MAX_BATCH_TOKENS
    usable = ACTIVATION_MEMORY_SHARE * max(free_bytes - output_layer_bytes(shape), 0)
    tokens = int(usable // activation_bytes_per_token(shape)) // 1024 * 1024
    return max(ACCELERATOR_MIN_BATCH_TOKENS, min(ACCELERATOR_MAX_BATCH_TOKENS, tokens))


@dataclass(frozen=True)
class BatchLimits:
    """What bounds one batch: at most ``rows`` rows (None: no row count) and ``tokens`` padded
    tokens, and a row joins only if padding it adds at most ``padding`` of the batch's length."""

    rows: int | None
    tokens: int
    padding: float


def batch_limits(device_type: str, *, batch_size: int | None = None, max_batch_tokens: int | None = None,
                 max_padding: float | None = None, packing: bool = False, free_bytes: int | None = None,
                 shape: ModelShape | None = None) -> BatchLimits:
    """The limits of a batch on a device: each the caller's where given, else the device's default.

    Rows: ``DEFAULT_BATCH_SIZE`` on the CPU, none on an accelerator. Tokens: :func:`device_token_budget`.
    Padding: any (1.0) on an accelerator or with ``packing`` (packed rows have none), else ``CPU_MAX_PADDING``.

    Example:
        >>> batch_limits("cpu")
        BatchLimits(rows=16, tokens=2048, padding=0.1)
        >>> batch_limits("cuda", batch_size=8)
        BatchLimits(rows=8, tokens=16384, padding=1.0)
    """
    on_cpu = device_type == "cpu"
    rows = batch_size if batch_size is not None else (DEFAULT_BATCH_SIZE if on_cpu else None)
    tokens = max_batch_tokens or device_token_budget(device_type, free_bytes, shape)
    if max_padding is None:
        max_padding = 1.0 if packing or not on_cpu else CPU_MAX_PADDING
    return BatchLimits(rows, tokens, max_padding)


def free_memory(device: Any) -> int | None:
    """Bytes a batch can use on ``device`` (a ``torch.device``): the device's free memory plus what
    PyTorch's allocator holds unused; None where torch cannot tell (the CPU, most non-CUDA devices)."""
    import torch

    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    module = getattr(torch, device.type, None)
    if device.type != "cpu" and hasattr(module, "mem_get_info"):
        try:
            return int(module.mem_get_info(device)[0])
        except (RuntimeError, TypeError):
            return None
    return None
