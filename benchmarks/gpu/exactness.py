"""Sections 1 and 2 of the GPU benchmark: how far float32 and bfloat16 scores are from float64, with
the tests' exactness criterion; and what the random model predicts."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from benchmarks.common import relative_differences, timed
from benchmarks.gpu.random_model import VOCAB_SIZE
from benchmarks.gpu.report import length_summary
from benchmarks.gpu.scoring import core_nlls, naive_nlls
from hf_adapters.backends.transformers.model import TransformersBackend
from hf_adapters.core.likelihood import Item

#: The tests' exactness floor, relative to the float64 value (``EXACT_FLOOR`` in tests/conftest.py).
EXACT_FLOOR = 2e-5


def relative_summary(scores: Sequence[float], reference: Sequence[float]) -> tuple[float, float]:
    """Median and max relative difference."""
    differences = relative_differences(scores, reference)
    return float(np.median(differences)), float(differences.max())


def criterion_misses(ours: Sequence[float], naive: Sequence[float], double: Sequence[float]) -> tuple[int, float]:
    """Items outside ``|ours - f64| <= 2 |naive - f64| + EXACT_FLOOR |f64|``, and the largest relative
    floor the criterion would need."""
    a, b, c = (np.asarray(values, dtype=np.float64) for values in (ours, naive, double))
    excess = (np.abs(a - c) - 2 * np.abs(b - c)) / np.abs(c)
    return int((excess > EXACT_FLOOR).sum()), float(max(excess.max(), 0.0))



def distribution_section(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                         items: Sequence[Item]) -> list[str]:
    """Mean NLL and predictive entropy, against ln V (a uniform prediction's value of both)."""
    backend = TransformersBackend(model, tokenizer, batch_size=64)
    scores = backend.score(items, entropies=True, progress=False)
    tokens = sum(score.num_tokens for score in scores)
    nll = math.fsum(score.nll for score in scores) / tokens
    entropy = math.fsum(h for score in scores for h in score.token_entropies) / tokens
    return [
        "## The random model's predictions",
        "",
        f"Mean NLL of the (random) scored tokens {nll:.3f} nats, mean predictive entropy {entropy:.3f} nats; "
        f"ln V = {math.log(VOCAB_SIZE):.3f} (a uniform prediction has both equal to ln V; an NLL above ln V "
        "and an entropy below it mean peaked, non-uniform predictions).",
        "",
    ]


def exactness_section(model: PreTrainedModel, double: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                      items: Sequence[Item], batch_sizes: Sequence[int], device: torch.device,
                      ) -> tuple[list[str], list[float]]:
    """Rows per batch size: relative distance from float64, the criterion, and the distance from batch size 1."""
    start_id = tokenizer.bos_token_id
    (naive, naive_s), (reference, double_s) = (timed(lambda m=m: naive_nlls(m, items, start_id), device)
                                               for m in (model, double))
    naive_median, naive_max = relative_summary(naive, reference)
    lines = [
        "## 1. Exactness of float32 scores",
        "",
        f"{length_summary(items, start_id)}; scores are each item's summed NLL. Reference: the model cast to "
        f"float64, each item alone ({double_s:.1f} s); naive: float32, each item alone ({naive_s:.1f} s). "
        f"Criterion (tests/conftest.py): |ours - f64| <= 2 |naive f32 - f64| + {EXACT_FLOOR:g} |f64|.",
        "",
        "| float32 scores | rel. diff. from f64: median | max | items missing the criterion | floor needed "
        f"| max rel. diff. from batch size {batch_sizes[0]} |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| naive, one at a time | {naive_median:.1e} | {naive_max:.1e} | | | |",
    ]
    runs = {f"`TransformersBackend.score`, batch size {size}": core_nlls(model, tokenizer, items, size)
            for size in batch_sizes}
    with sdpa_kernel(SDPBackend.MATH):
        runs[f"the same, batch size {batch_sizes[-1]}, attention on SDPA's math kernel"] = core_nlls(
            model, tokenizer, items, batch_sizes[-1])
    first = next(iter(runs.values()))
    for name, ours in runs.items():
        median, largest = relative_summary(ours, reference)
        misses, floor = criterion_misses(ours, naive, reference)
        lines.append(f"| {name} | {median:.1e} | {largest:.1e} | {misses} of {len(items)} | {floor:.1e} | "
                     f"{relative_summary(ours, first)[1]:.1e} |")
    return [*lines, ""], reference


def drift_section(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, items: Sequence[Item],
                  reference: Sequence[float], batch_size: int) -> list[str]:
    """bfloat16 scores against float64, summed NLL and perplexity: ours, and the naive loop's."""
    half = copy.deepcopy(model).to(torch.bfloat16)
    runs = {f"`TransformersBackend.score`, batch size {batch_size}": core_nlls(half, tokenizer, items, batch_size),
            "naive, one at a time, full logits": naive_nlls(half, items, tokenizer.bos_token_id)}
    del half
    counts = [len(continuation) for _, continuation in items]
    reference_perplexities = [math.exp(nll / n) for nll, n in zip(reference, counts, strict=True)]
    lines = [
        "## 2. bfloat16 drift",
        "",
        "The model cast to bfloat16 (log-softmax in float32), the same items, against float64. A random model's "
        "drift depends on its weights' scale (`--init-std`, `--final-norm-gain`); it is not the trained model's.",
        "",
        "| bfloat16 scores | summed NLL, rel. diff. from f64: median | max | perplexity: median | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, nlls in runs.items():
        perplexities = [math.exp(nll / n) for nll, n in zip(nlls, counts, strict=True)]
        nll_median, nll_max = relative_summary(nlls, reference)
        ppl_median, ppl_max = relative_summary(perplexities, reference_perplexities)
        lines.append(f"| {name} | {nll_median:.1e} | {nll_max:.1e} | {ppl_median:.1e} | {ppl_max:.1e} |")
    return [*lines, ""]
