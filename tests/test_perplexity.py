"""The perplexity metric: evaluate's canonical definition, computed exactly on the shared core."""

import math

import evaluate
import pytest

from hf_adapters.perplexity import compute_perplexity
from tests.conftest import build_model, build_tokenizer, naive_nll

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Write a short poem about the sea.",
    "Le renard brun saute par-dessus le chien paresseux.",
    "敏捷的棕色狐狸跳过了懒狗。🦊🐶",
    "a",
]


def naive_perplexity(model, tokenizer, text, add_start_token=True):
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if add_start_token:
        context, continuation = [], ids
    else:
        context, continuation = ids[:1], ids[1:]
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    nll, count = naive_nll(model, context, continuation, start)
    return math.exp(nll / count) if count else math.nan


@pytest.fixture(scope="module")
def metric():
    return evaluate.load("./metrics/perplexity")


@pytest.mark.parametrize("batch_size", [1, 2, 16])
def test_metric_equals_naive_one_at_a_time_perplexity(metric, model, tokenizer, batch_size):
    result = metric.compute(predictions=TEXTS, model=model, tokenizer=tokenizer, batch_size=batch_size)
    expected = [naive_perplexity(model, tokenizer, text) for text in TEXTS]
    assert result["perplexities"] == pytest.approx(expected, rel=1e-5)
    assert result["mean_perplexity"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)


def test_corpus_perplexity_is_exp_of_total_nll_over_total_tokens(model, tokenizer):
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer)
    totals = [naive_nll(model, [], tokenizer(t, add_special_tokens=False).input_ids, tokenizer.bos_token_id)
              for t in TEXTS]
    expected = math.exp(sum(n for n, _ in totals) / sum(c for _, c in totals))
    assert result["corpus_perplexity"] == pytest.approx(expected, rel=1e-5)


def test_without_start_token_the_first_token_is_context(model, tokenizer):
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, add_start_token=False)
    expected = [naive_perplexity(model, tokenizer, text, add_start_token=False) for text in TEXTS]
    assert result["perplexities"] == pytest.approx(expected, rel=1e-5, nan_ok=True)


def test_empty_text_gets_nan_and_others_keep_their_scores(metric, model, tokenizer):
    result = metric.compute(predictions=["", TEXTS[0], ""], model=model, tokenizer=tokenizer)
    assert math.isnan(result["perplexities"][0]) and math.isnan(result["perplexities"][2])
    assert result["perplexities"][1] == pytest.approx(naive_perplexity(model, tokenizer, TEXTS[0]), rel=1e-5)
    assert result["mean_perplexity"] == pytest.approx(result["perplexities"][1])


@pytest.mark.parametrize("bad", [None, 3, ["a list"]])
def test_non_string_row_gets_an_error_naming_the_row(metric, model, tokenizer, bad):
    with pytest.raises(TypeError, match=r"predictions`\[1\]"):
        metric.compute(predictions=["fine", bad], model=model, tokenizer=tokenizer)


def test_single_string_instead_of_a_list_is_refused(model, tokenizer):
    with pytest.raises(TypeError, match="list of strings"):
        compute_perplexity("just one text", model=model, tokenizer=tokenizer)


def test_fifty_thousand_character_text_is_truncated_to_the_model_limit(model, tokenizer, caplog):
    long_text = ("The quick brown fox jumps over the lazy dog. " * 1200)[:50_000]
    result = compute_perplexity([long_text, TEXTS[1]], model=model, tokenizer=tokenizer)
    assert math.isfinite(result["perplexities"][0])
    assert "truncated" in caplog.text
    assert result["perplexities"][1] == pytest.approx(naive_perplexity(model, tokenizer, TEXTS[1]), rel=1e-5)


def test_max_length_truncates_start_token_included(model, tokenizer):
    ids = tokenizer(TEXTS[0], add_special_tokens=False).input_ids
    result = compute_perplexity([TEXTS[0]], model=model, tokenizer=tokenizer, max_length=5)
    nll, count = naive_nll(model, [], ids, tokenizer.bos_token_id, max_length=5)
    assert count == 4
    assert result["perplexities"][0] == pytest.approx(math.exp(nll / count), rel=1e-5)


def test_tokenizer_without_pad_or_bos_token_uses_eos_to_start():
    tokenizer = build_tokenizer(bos=False, pad=False)
    model = build_model(len(tokenizer), seed=1)
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, batch_size=3)
    expected = [naive_perplexity(model, tokenizer, text) for text in TEXTS]
    assert result["perplexities"] == pytest.approx(expected, rel=1e-5)


def test_model_without_tokenizer_is_refused(model):
    with pytest.raises(ValueError, match="both"):
        compute_perplexity(TEXTS, model=model)
