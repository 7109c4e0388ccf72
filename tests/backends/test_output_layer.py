"""The output layer at scored positions: a bfloat16 chunk's NLL and entropies summed a vocabulary slice at a
time, with no float32 or float64 copy of the chunk's logits, equal to the whole-vocabulary computation within
float32 rounding (float64 for entropies)."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_adapters.backends.transformers import output_layer
from hf_adapters.backends.transformers.cpu_kernels import check_cpu_dtype
from hf_adapters.backends.transformers.model import score_continuations
from hf_adapters.backends.transformers.output_layer import chunk_entropies, chunk_nlls


class WideTensors(TorchDispatchMode):
    """Records the dtype and shape of every tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.made: list[tuple[torch.dtype, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for value in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(value, torch.Tensor):
                self.made.append((value.dtype, tuple(value.shape)))
        return result


@pytest.mark.kernels
def test_a_bfloat16_chunk_is_scored_without_a_float32_copy_of_its_logits(model, tokenizer, monkeypatch):
    bfloat16 = copy.deepcopy(model).to(torch.bfloat16)
    vocabulary = bfloat16.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(output_layer, "OUTPUT_VOCAB_SLICE", 64)
    monkeypatch.setattr("hf_adapters.backends.transformers.model.OUTPUT_CHUNK_POSITIONS", 8)
    items = [([5, 6, 7], list(range(10, 10 + n))) for n in (30, 25, 12)]
    with warnings.catch_warnings():  # the CPU's bfloat16 rate, measured once per process, before recording
        warnings.simplefilter("ignore")
        check_cpu_dtype(bfloat16)
    with WideTensors() as recorded:
        scores = score_continuations(bfloat16, tokenizer, items, token_losses=True, entropies=True)
    wide = [(dtype, shape) for dtype, shape in recorded.made if shape and shape[-1] == vocabulary]
    assert wide and all(dtype == torch.bfloat16 for dtype, _ in wide)  # the logits, in the model's dtype
    assert max(math.prod(shape[:-1]) for _, shape in wide) <= 8  # one chunk of positions at a time
    assert all(math.isfinite(nll) and nll > 0 for score in scores for nll in score.token_nlls)
    assert all(h >= 0 for score in scores for h in score.token_entropies)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_sliced_nlls_and_entropies_equal_the_whole_vocabulary_computation(dtype):
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(6, 1000, generator=generator) * 4).to(dtype)
    logits[2, 10:500] = -math.inf  # a masked part of the vocabulary adds nothing
    targets = torch.tensor([0, 999, 5, 500, 123, 77])
    logprobs32 = torch.log_softmax(logits.float(), dim=-1)
    expected_nll = -logprobs32.gather(1, targets.unsqueeze(1)).squeeze(1)
    logprobs64 = torch.log_softmax(logits.double(), dim=-1)
    expected_entropy = -(logprobs64.exp() * logprobs64).nansum(dim=-1)
    for width in (7, 128, None):
        nlls = chunk_nlls(logits, targets, width)
        assert nlls.dtype == torch.float32
        torch.testing.assert_close(nlls, expected_nll, rtol=4e-6, atol=4e-6)
        torch.testing.assert_close(chunk_entropies(logits, width), expected_entropy, rtol=1e-12, atol=1e-12)
