"""Predictive entropy beside the NLLs: exact against a naive float64 computation, off by default,
refused by a backend that cannot compute it, checked by the backend contract."""

from __future__ import annotations

import math

import pytest
import torch

from hf_adapters import ContinuationScore, LikelihoodBackend
from hf_adapters.backends.base import BackendContractError, EntropyUnsupportedError, check_scores
from hf_adapters.backends.transformers.model import TransformersBackend, score_continuations
from hf_adapters.core.likelihood import combined, start_token_id
from hf_adapters.formulas.perplexity import compute_perplexity
from tests.backends.test_likelihood import TEXTS, encode
from tests.conftest import assert_exact

PERPLEXITY_TEXTS = ["The sea is wide and deep.", "Cats purr. 🐈", "", "Write a short poem about the sea, please."]


def naive_entropies(model, context, continuation, start_id) -> list[float]:
    """One unpadded forward pass; H_i = -sum_v p(v|x_<i) ln p(v|x_<i) at each scored token, in the model's dtype."""
    ids = (list(context) or [start_id]) + list(continuation)
    first = len(ids) - len(continuation)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids]), use_cache=False).logits[0].double(), dim=-1)
    return [-(logprobs[p - 1].exp() * logprobs[p - 1]).sum().item() for p in range(first, len(ids))]


@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_entropies_equal_naive_float64_entropies_for_any_batch_size(model, tokenizer, batch_size):
    items = encode(tokenizer, TEXTS)
    scores = score_continuations(model, tokenizer, items, batch_size=batch_size, max_padding=1.0, entropies=True)
    start = start_token_id(tokenizer)
    assert_exact([list(score.token_entropies) for score in scores],
                 lambda m: [naive_entropies(m, c, a, start) for c, a in items], model)
    assert all(score.token_nlls is None for score in scores)


def test_asking_for_entropies_leaves_the_nlls_bit_for_bit_unchanged(model, tokenizer):
    items = encode(tokenizer, TEXTS)
    plain = score_continuations(model, tokenizer, items, token_losses=True)
    with_entropies = score_continuations(model, tokenizer, items, token_losses=True, entropies=True)
    assert [s.token_nlls for s in plain] == [s.token_nlls for s in with_entropies]
    assert [s.nll for s in plain] == [s.nll for s in with_entropies]


def test_entropies_are_off_by_default(model, tokenizer):
    scores = score_continuations(model, tokenizer, encode(tokenizer, TEXTS))
    assert all(score.token_entropies is None for score in scores)


def test_an_unscored_item_has_no_entropies(model, tokenizer):
    [score] = score_continuations(model, tokenizer, [([1, 2], [])], entropies=True)
    assert score.token_entropies == () and math.isnan(score.mean_entropy)


def test_perplexity_returns_the_mean_entropy_over_the_scored_tokens(model, tokenizer):
    result = compute_perplexity(PERPLEXITY_TEXTS, model=model, tokenizer=tokenizer, return_entropy=True,
                                batch_size=2)
    start = start_token_id(tokenizer)

    def naive(m):
        means = []
        for text in PERPLEXITY_TEXTS:
            values = naive_entropies(m, [], tokenizer(text, add_special_tokens=False).input_ids, start)
            means.append(sum(values) / len(values) if values else math.nan)
        return means

    assert_exact(result["entropies"], naive, model)
    assert "entropies" not in compute_perplexity(PERPLEXITY_TEXTS[:1], model=model, tokenizer=tokenizer)


def test_rolling_windows_give_one_entropy_per_token(model, tokenizer):
    text = "The quick brown fox jumps over the lazy dog. " * 6
    result = compute_perplexity([text], model=model, tokenizer=tokenizer, max_length=16, stride=8,
                                return_entropy=True)
    whole = compute_perplexity([text], model=model, tokenizer=tokenizer, max_length=16, stride=8)
    assert result["perplexities"] == whole["perplexities"] and result["entropies"][0] > 0


class NoEntropies(LikelihoodBackend):
    """A backend that scores but cannot compute entropies (as one that sees top-k log-probabilities only)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def score(self, items, **settings):
        return [ContinuationScore(1.0, len(continuation), False) for _, continuation in items]


def test_a_backend_that_cannot_compute_entropies_refuses_them_by_name(tokenizer):
    backend = NoEntropies(tokenizer)
    with pytest.raises(EntropyUnsupportedError, match="NoEntropies does not compute predictive entropies"):
        backend.score_checked([([1], [2, 3])], entropies=True)
    with pytest.raises(EntropyUnsupportedError):
        compute_perplexity(["Some text."], backend=backend, return_entropy=True)
    assert backend.score_checked([([1], [2, 3])])[0].num_tokens == 2


@pytest.mark.parametrize("entropies, problem", [
    (None, "token_entropies is None for 2 scored tokens"),
    ((0.5,), "token_entropies is 1 values for 2 scored tokens"),
    ((0.5, -0.1), r"token_entropies\[1\]=-0.1"),
    ((math.nan, 0.5), r"token_entropies\[0\]=nan"),
])
def test_the_contract_check_names_missing_or_impossible_entropies(tokenizer, entropies, problem):
    backend = TransformersBackend.__new__(TransformersBackend)
    score = ContinuationScore(1.0, 2, False, None, entropies)
    with pytest.raises(BackendContractError, match=problem):
        check_scores(backend, [([1], [2, 3])], [score], entropies=True)


def test_combined_scores_keep_their_entropies_in_order():
    joined = combined([ContinuationScore(1.0, 1, False, None, (0.25,)),
                       ContinuationScore(math.nan, 0, False, None, ()),
                       ContinuationScore(2.0, 2, False, None, (0.5, 1.0))])
    assert joined.token_entropies == (0.25, 0.5, 1.0)
    assert joined.mean_entropy == pytest.approx(1.75 / 3)


def test_perplexity_columns_carry_the_mean_entropy(model, tokenizer):
    from datasets import Dataset

    from hf_adapters import add_perplexity_column

    ds = add_perplexity_column(Dataset.from_dict({"text": PERPLEXITY_TEXTS[:2]}), text_column="text", model=model,
                               tokenizer=tokenizer, return_entropy=True)
    assert ds.column_names == ["text", "perplexity", "entropy"]
    expected = compute_perplexity(PERPLEXITY_TEXTS[:2], model=model, tokenizer=tokenizer, return_entropy=True)
    assert list(ds["entropy"]) == expected["entropies"]
