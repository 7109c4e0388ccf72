"""The output layer's statistics at one chunk of scored positions, without a wider copy of its logits.

The logits of a chunk stay in the model's dtype. A float32 model's NLL is PyTorch's cross-entropy
on them, as before. Otherwise (bfloat16, float16 logits, and every entropy) the softmax's normaliser
``log sum_v exp(logit_v)`` is summed in float32 (float64 for entropies) over ``OUTPUT_VOCAB_SLICE``
vocabulary columns at a time, so that the wider copy is at most chunk x slice values, never chunk x
vocabulary: the NLL is that normaliser minus the target's logit, and the entropy
``-sum_v p_v ln p_v`` is summed slice by slice the same way. The arithmetic is float32's (float64's)
as before; only the order of the sums differs.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from hf_adapters.backends.transformers.batching import OUTPUT_VOCAB_SLICE


def _slices(logits: torch.Tensor, width: int | None) -> Iterator[torch.Tensor]:
    width = width or OUTPUT_VOCAB_SLICE
    return (logits[:, start:start + width] for start in range(0, logits.shape[-1], width))


def log_normalizers(logits: torch.Tensor, dtype: torch.dtype, width: int | None = None) -> torch.Tensor:
    """``log sum_v exp(logit_v)`` of each row of ``logits`` in ``dtype``, converting ``width`` columns
    (default ``OUTPUT_VOCAB_SLICE``) at a time."""
    peak = logits.amax(dim=-1, keepdim=True).to(dtype)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.zeros(logits.shape[0], dtype=dtype, device=logits.device)
    for part in _slices(logits, width):
        total += (part.to(dtype) - peak).exp_().sum(dim=-1)
    return total.log_() + peak.squeeze(-1)


def chunk_nlls(logits: torch.Tensor, targets: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """The NLL of each row's target: float32 cross-entropy on float32 logits; on others, the float32
    normaliser (:func:`log_normalizers`) minus the target's logit, with no float32 copy of the chunk."""
    if logits.dtype == torch.float32:
        return torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    chosen = logits.gather(1, targets.unsqueeze(1)).squeeze(1).float()
    return log_normalizers(logits, torch.float32, width) - chosen


def chunk_entropies(logits: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """The entropy of each row's distribution, ``-sum_v p_v ln p_v``, in float64, ``width`` columns at a
    time: a near-uniform prediction's entropy is close to ``ln V``, and scores such as UPD's
    ``1 - H / ln V`` would magnify float32's rounding of it (a -inf log-probability adds 0)."""
    normalizers = log_normalizers(logits, torch.float64, width).unsqueeze(-1)
    total = torch.zeros(logits.shape[0], dtype=torch.float64, device=logits.device)
    for part in _slices(logits, width):
        logprobs = part.double() - normalizers
        total -= (logprobs.exp() * logprobs).nansum(dim=-1)
    return total
