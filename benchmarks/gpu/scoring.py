"""The ways of scoring items that the GPU benchmark times: the package's backend, the naive loop and
evaluate's padded loop, each giving every item's summed NLL."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from benchmarks.common import timed
from benchmarks.gpu.random_model import whole_sequence
from benchmarks.references import full_forward_nll
from hf_adapters.backends.transformers.model import TransformersBackend
from hf_adapters.core.likelihood import Item

#: Batch size of evaluate's perplexity metric.
EVALUATE_BATCH_SIZE = 16


def naive_nlls(model: PreTrainedModel, items: Sequence[Item], start_id: int) -> list[float]:
    """Each item alone, one unpadded forward pass with logits everywhere, in the model's dtype."""
    return [full_forward_nll(model, *whole_sequence(item, start_id)).nll for item in items]


def core_nlls(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, items: Sequence[Item],
              batch_size: int | None, max_batch_tokens: int | None = None) -> list[float]:
    """``TransformersBackend.score`` with its default token budget and padding (``batch_size`` None:
    the device's default; ``max_batch_tokens`` another budget)."""
    backend = TransformersBackend(model, tokenizer, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
    return [score.nll for score in backend.score(items, progress=False)]


@torch.inference_mode()
def pad_to_longest_nlls(model: PreTrainedModel, items: Sequence[Item], start_id: int, pad_id: int,
                        batch_size: int = EVALUATE_BATCH_SIZE, longest_of_batch: bool = False) -> list[float]:
    """evaluate's perplexity loop on token ids: fixed batches in input order, every row padded to the
    data set's longest sequence (``longest_of_batch``: the batch's) with an attention mask, logits at
    every position, the loss masked afterwards (here to each item's scored tokens)."""
    sequences = [whole_sequence(item, start_id) for item in items]
    longest = max(len(ids) for ids, _ in sequences)
    device = model.device
    results: list[float] = []
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start:start + batch_size]
        width = max(len(ids) for ids, _ in chunk) if longest_of_batch else longest
        input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        labels = torch.full((len(chunk), width), -100, dtype=torch.long)
        for row, (ids, first) in enumerate(chunk):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            mask[row, :len(ids)] = 1
            labels[row, first:len(ids)] = torch.tensor(ids[first:])
        logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device), use_cache=False).logits
        token_nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), labels[:, 1:].to(device),
                                    reduction="none", ignore_index=-100)
        results.extend(token_nll.double().sum(-1).tolist())
    return results



def timed_after_warm_up(function: Callable[[Sequence[Item]], object], items: Sequence[Item], warm_up: int,
                        device: torch.device) -> float:
    """Seconds of ``function(items)`` after one untimed run on the first ``warm_up`` items."""
    function(items[:warm_up])
    return timed(lambda: function(items), device)[1]
