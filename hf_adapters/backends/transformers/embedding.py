"""Pooled final hidden states of a ``transformers`` causal LM: what :meth:`TransformersBackend.embed` returns.

Sequences run in length-sorted, right-padded batches with no attention mask, as scoring does:
under causal attention no position sees the padding after it, so a sequence's states, and its
vector, do not depend on the batch it runs in beyond float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from hf_adapters.backends.transformers.attention import without_cudnn_attention
from hf_adapters.backends.transformers.batching import batch_limits
from hf_adapters.backends.transformers.cpu_kernels import check_cpu_dtype, cpu_linear_kernel
from hf_adapters.core.likelihood import make_batches

#: How token states become one vector: their mean, or the last token's state (DEITA's embedder).
POOLINGS = ("mean", "last")


def check_pooling(pooling: str) -> None:
    """Raise a ValueError for a pooling other than :data:`POOLINGS`."""
    if pooling not in POOLINGS:
        raise ValueError(f"`pooling` must be one of {list(POOLINGS)}, got {pooling!r}.")


def fit_sequences(sequences: Sequence[Sequence[int]], start_id: int, limit: int | None) -> list[list[int]]:
    """Each sequence as the model reads it: the start token if empty, its first ``limit`` tokens if longer."""
    return [list(sequence)[:limit] if sequence else [start_id] for sequence in sequences]


@torch.inference_mode()
def pooled_states(
    model: PreTrainedModel,
    sequences: Sequence[Sequence[int]],
    *,
    pooling: str,
    pad_id: int,
    batch_size: int | None,
    max_batch_tokens: int | None = None,
    max_padding: float | None = None,
    progress: bool | None = None,
) -> np.ndarray:
    """The ``pooling`` of each sequence's final hidden states (float32, one row per sequence, in
    input order); means are summed in float64. Batches are bounded as in scoring (each limit the
    device's default where None: :func:`~hf_adapters.backends.transformers.batching.batch_limits`)."""
    check_pooling(pooling)
    body = model.base_model
    device = model.get_output_embeddings().weight.device
    limits = batch_limits(device.type, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
                          max_padding=max_padding)
    lengths = [len(sequence) for sequence in sequences]
    vectors = np.empty((len(sequences), model.config.hidden_size), dtype=np.float32)
    check_cpu_dtype(model)
    batches = make_batches(lengths, limits.rows, limits.tokens, limits.padding)
    show = progress if progress is not None else len(batches) > 8
    for batch in tqdm(batches, desc="Embedding", unit="batch", disable=not show):
        width = lengths[batch[0]]  # the longest: batches come longest first
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        for row, index in enumerate(batch):
            input_ids[row, : lengths[index]] = torch.tensor(sequences[index])
        with cpu_linear_kernel(model, input_ids.numel()), without_cudnn_attention(device):
            states = body(input_ids=input_ids.to(device), use_cache=False).last_hidden_state
        for row, index in enumerate(batch):
            if pooling == "last":
                vector = states[row, lengths[index] - 1].float()
            else:
                vector = states[row, : lengths[index]].double().mean(dim=0)
            vectors[index] = vector.float().cpu().numpy()
    return vectors
