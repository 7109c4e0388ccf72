"""The perplexity metric: evaluate's canonical definition, computed exactly on the shared core."""

import copy
import math

import evaluate
import pytest
import torch

from hf_adapters.formulas.perplexity import compute_perplexity
from tests.conftest import assert_exact, build_model, build_tokenizer, naive_nll

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
@pytest.mark.kernels
def test_metric_equals_naive_one_at_a_time_perplexity(metric, model, tokenizer, batch_size):
    result = metric.compute(predictions=TEXTS, model=model, tokenizer=tokenizer, batch_size=batch_size)
    def naive(m):
        perplexities = [naive_perplexity(m, tokenizer, text) for text in TEXTS]
        return [perplexities, sum(perplexities) / len(perplexities)]

    assert_exact([result["perplexities"], result["mean_perplexity"]], naive, model)


@pytest.mark.kernels
def test_corpus_perplexity_is_exp_of_total_nll_over_total_tokens(model, tokenizer):
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer)
    def naive(m):
        totals = [naive_nll(m, [], tokenizer(t, add_special_tokens=False).input_ids, tokenizer.bos_token_id)
                  for t in TEXTS]
        return math.exp(sum(n for n, _ in totals) / sum(c for _, c in totals))

    assert_exact(result["corpus_perplexity"], naive, model)


@pytest.mark.kernels
def test_without_start_token_the_first_token_is_context(model, tokenizer):
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, add_start_token=False)
    assert_exact(result["perplexities"],
                 lambda m: [naive_perplexity(m, tokenizer, text, add_start_token=False) for text in TEXTS], model)


@pytest.mark.kernels
def test_empty_text_gets_nan_and_others_keep_their_scores(metric, model, tokenizer):
    result = metric.compute(predictions=["", TEXTS[0], ""], model=model, tokenizer=tokenizer)
    assert math.isnan(result["perplexities"][0]) and math.isnan(result["perplexities"][2])
    assert_exact(result["perplexities"][1], lambda m: naive_perplexity(m, tokenizer, TEXTS[0]), model)
    assert result["mean_perplexity"] == pytest.approx(result["perplexities"][1])


@pytest.mark.parametrize("bad", [None, 3, ["a list"]])
def test_non_string_row_gets_an_error_naming_the_row(metric, model, tokenizer, bad):
    with pytest.raises(TypeError, match=r"predictions`\[1\]"):
        metric.compute(predictions=["fine", bad], model=model, tokenizer=tokenizer)


def test_single_string_instead_of_a_list_is_refused(model, tokenizer):
    with pytest.raises(TypeError, match="list of strings"):
        compute_perplexity("just one text", model=model, tokenizer=tokenizer)


@pytest.mark.kernels
def test_fifty_thousand_character_text_is_truncated_to_the_model_limit(model, tokenizer, caplog):
    long_text = ("The quick brown fox jumps over the lazy dog. " * 1200)[:50_000]
    result = compute_perplexity([long_text, TEXTS[1]], model=model, tokenizer=tokenizer)
    assert math.isfinite(result["perplexities"][0])
    assert "truncated" in caplog.text
    assert_exact(result["perplexities"][1], lambda m: naive_perplexity(m, tokenizer, TEXTS[1]), model)


@pytest.mark.kernels
def test_max_length_truncates_start_token_included(model, tokenizer):
    ids = tokenizer(TEXTS[0], add_special_tokens=False).input_ids
    result = compute_perplexity([TEXTS[0]], model=model, tokenizer=tokenizer, max_length=5)
    assert naive_nll(model, [], ids, tokenizer.bos_token_id, max_length=5)[1] == 4

    def naive(m):
        nll, count = naive_nll(m, [], ids, tokenizer.bos_token_id, max_length=5)
        return math.exp(nll / count)

    assert_exact(result["perplexities"][0], naive, model)


@pytest.mark.kernels
def test_tokenizer_without_pad_or_bos_token_uses_eos_to_start():
    tokenizer = build_tokenizer(bos=False, pad=False)
    model = build_model(len(tokenizer), seed=1)
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, batch_size=3)
    assert_exact(result["perplexities"], lambda m: [naive_perplexity(m, tokenizer, text) for text in TEXTS], model)


def test_model_without_tokenizer_is_refused(model):
    with pytest.raises(ValueError, match="both"):
        compute_perplexity(TEXTS, model=model)


def test_missing_predictions_is_an_error_naming_them_not_a_cache_file_message(metric):
    with pytest.raises(TypeError, match="`predictions` is missing"):
        metric.compute(predictions=None)


@pytest.mark.kernels
def test_metric_with_the_opendataarena_convention_scores_every_token_after_the_first(metric, model, tokenizer):
    texts = ["The cat sat on the mat.", "Write a short poem about the sea."]
    result = metric.compute(predictions=texts, model=model, tokenizer=tokenizer, convention="opendataarena")
    ids = [tokenizer(text).input_ids for text in texts]
    assert_exact(result["perplexities"], lambda m: [
        math.exp(naive_nll(m, row[:1], row[1:], tokenizer.bos_token_id)[0] / (len(row) - 1)) for row in ids], model)


def test_corpus_perplexity_past_float_range_is_inf(model, tokenizer):
    """From the round-three review: jobs that never finish."""
    sharp = copy.deepcopy(model)
    with torch.no_grad():
        sharp.get_output_embeddings().weight.mul_(1e4)  # confident and wrong: mean NLL far above 709
    result = compute_perplexity(["The quick brown fox jumps over the lazy dog."], model=sharp, tokenizer=tokenizer)
    assert result["perplexities"][0] == math.inf
    assert result["corpus_perplexity"] == math.inf
