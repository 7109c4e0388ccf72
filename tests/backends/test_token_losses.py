"""Per-token losses, on request: each scored token with its NLL, equal to a naive per-token computation."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset

from hf_adapters import add_ifd_column, add_perplexity_column
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity
from tests.conftest import assert_exact
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS

TEXTS = ["The sea is wide and deep.", "Cats purr. 🐈", ""]


def naive_token_losses(model, tokenizer, text: str) -> list[float]:
    ids = [start_token_id(tokenizer), *tokenizer(text, add_special_tokens=False).input_ids]
    if len(ids) < 2:
        return []
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids]), use_cache=False).logits[0].double(), dim=-1)
    return [-logprobs[p - 1, ids[p]].item() for p in range(1, len(ids))]


def test_perplexity_token_losses_equal_naive_per_token_nlls(model, tokenizer):
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, return_token_losses=True, batch_size=2)
    assert result["tokens"][0] == [tokenizer.decode([t]) for t in tokenizer(TEXTS[0], add_special_tokens=False)
                                   .input_ids]
    assert result["tokens"][2] == [] and result["token_losses"][2] == []
    assert_exact(result["token_losses"], lambda m: [naive_token_losses(m, tokenizer, t) for t in TEXTS], model)
    for losses, perplexity in zip(result["token_losses"][:2], result["perplexities"][:2], strict=True):
        assert math.exp(sum(losses) / len(losses)) == pytest.approx(perplexity, rel=1e-9)


def test_token_losses_are_off_by_default(model, tokenizer):
    assert "token_losses" not in compute_perplexity(TEXTS, model=model, tokenizer=tokenizer)


def test_ifd_token_losses_add_up_to_both_perplexities(model, tokenizer):
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, return_token_losses=True)
    for row, tokens in enumerate(result["tokens"]):
        assert len(tokens) == len(result["conditional_token_losses"][row]) == len(result["direct_token_losses"][row])
        for key, name in (("conditional_token_losses", "conditional_perplexities"),
                          ("direct_token_losses", "direct_perplexities")):
            losses = result[key][row]
            assert math.exp(sum(losses) / len(losses)) == pytest.approx(result[name][row], rel=1e-9)


def test_rolling_token_losses_cover_every_token_once(model, tokenizer):
    text = "The quick brown fox jumps over the lazy dog. " * 6
    result = compute_perplexity([text], model=model, tokenizer=tokenizer, max_length=16, stride=8,
                                return_token_losses=True)
    assert len(result["token_losses"][0]) == result["token_counts"][0] == len(result["tokens"][0])
    assert sum(result["token_losses"][0]) == pytest.approx(result["nlls"][0], rel=1e-9)


def test_columns_carry_the_token_losses(model, tokenizer):
    ds = add_perplexity_column(Dataset.from_dict({"text": TEXTS[:2]}), text_column="text", model=model,
                               tokenizer=tokenizer, return_token_losses=True)
    assert {"tokens", "token_losses"} <= set(ds.column_names)
    scored = add_ifd_column(Dataset.from_dict({"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS}),
                            model=model, tokenizer=tokenizer, return_token_losses=True)
    assert {"tokens", "conditional_token_losses", "direct_token_losses"} <= set(scored.column_names)
