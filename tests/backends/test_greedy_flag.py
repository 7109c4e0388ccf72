"""``score(..., greedy=True)``: whether each continuation is the model's greedy one, against a naive
argmax one item at a time; refused by a backend that cannot say; checked by the contract."""

from __future__ import annotations

import math

import pytest
import torch

from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.base import BackendContractError, GreedyUnsupportedError, check_scores
from hf_adapters.core.likelihood import ContinuationScore, combined
from tests.backends.test_entropies import NoEntropies


def naive_greedy(model, context: list[int], continuation: list[int]) -> bool:
    with torch.inference_mode():
        logits = model(torch.tensor([context + continuation])).logits[0, len(context) - 1:-1]
    return logits.argmax(dim=-1).tolist() == continuation


def test_the_greedy_flag_is_the_naive_argmax_whatever_the_batch(model, tokenizer):
    backend = TransformersBackend(model, tokenizer)
    contexts = [tokenizer.encode(text) for text in ("The quick brown fox", "Write a short poem", "Le renard")]
    greedy = backend.generate(contexts, max_new_tokens=4, stop_token_ids=[])
    items = [(c, g) for c, g in zip(contexts, greedy, strict=True)] + \
        [(c, g[:-1] + [(g[-1] + 1) % len(tokenizer)]) for c, g in zip(contexts, greedy, strict=True)]
    for batch_size in (1, 6):
        flags = [score.greedy for score in backend.score_checked(items, greedy=True, batch_size=batch_size)]
        assert flags == [naive_greedy(model, c, t) for c, t in items] == [True] * 3 + [False] * 3


def test_a_backend_that_cannot_say_refuses_greedy_by_name(tokenizer):
    with pytest.raises(GreedyUnsupportedError, match="NoEntropies does not say whether a continuation"):
        NoEntropies(tokenizer).score_checked([([1], [2, 3])], greedy=True)


def test_the_contract_check_wants_a_bool_when_greedy_was_asked_for():
    backend = TransformersBackend.__new__(TransformersBackend)
    with pytest.raises(BackendContractError, match="greedy=None"):
        check_scores(backend, [([1], [2, 3])], [ContinuationScore(1.0, 2, False)], greedy=True)


def test_combined_scores_are_greedy_only_if_every_part_is():
    parts = [ContinuationScore(1.0, 1, False, greedy=True), ContinuationScore(math.nan, 0, False, greedy=True)]
    assert combined(parts).greedy is True
    assert combined([*parts, ContinuationScore(2.0, 2, False, greedy=False)]).greedy is False
    assert combined([*parts, ContinuationScore(2.0, 2, False)]).greedy is None
