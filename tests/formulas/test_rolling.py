"""Rolling-window perplexity (``stride``): every token scored once in lm-evaluation-harness's windows,
equal to a naive window-by-window computation, with lm-eval's word and byte aggregates."""

from __future__ import annotations

import math
import re

import pytest
import torch
from datasets import Dataset

from hf_adapters.cli import main
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.core.texts import rolling_items
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.scorers import ConfigError, build_scorer
from tests.conftest import LONG_CJK, assert_exact, build_model, read_jsonl, write_config, write_jsonl

DOCUMENT = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog near river {i % 7}." for i in range(12))
TEXTS = [DOCUMENT, "A short text.", "", DOCUMENT[:300]]


def lm_eval_windows(tokens: list[int], prefix: int, max_seq_len: int, context_len: int):
    """lm-evaluation-harness's rolling windows as its documentation describes them (``get_rolling_token_windows``):
    (input tokens, predicted tokens); the first window predicts up to ``max_seq_len`` tokens after the
    prefix, each later one the next ``max_seq_len - context_len + 1``, scored on the last logits of
    inputs ending just before its last predicted token."""
    if not tokens:
        return []
    first = min(max_seq_len, len(tokens))
    windows = [([prefix] + tokens[: first - 1], tokens[:first])]
    done = first
    while done < len(tokens):
        count = min(len(tokens) - done, max_seq_len - context_len + 1)
        end = done + count
        windows.append((tokens[max(0, end - max_seq_len - 1): end - 1], tokens[end - count: end]))
        done = end
    return windows


def naive_rolling_nll(model, tokenizer, text: str, max_length: int, stride: int) -> tuple[float, int]:
    """One forward pass per window, as lm-eval scores them: the last len(pred) logits against pred."""
    tokens = tokenizer(text, add_special_tokens=False).input_ids
    total, count = 0.0, 0
    for inputs, predicted in lm_eval_windows(tokens, start_token_id(tokenizer), max_length, max_length - stride + 1):
        with torch.no_grad():
            logits = model(torch.tensor([inputs]), use_cache=False).logits[0].double()
        logprobs = torch.log_softmax(logits[-len(predicted):], dim=-1)
        total -= sum(logprobs[i, token].item() for i, token in enumerate(predicted))
        count += len(predicted)
    return (total, count) if count else (math.nan, 0)


@pytest.mark.parametrize("length", [0, 1, 5, 16, 17, 32, 33, 70])
@pytest.mark.parametrize("stride", [16, 4, 1])
def test_windows_are_lm_evals_made_disjoint(length, stride):
    tokens = list(range(100, 100 + length))
    ours = rolling_items(tokens, 16, stride)
    theirs = lm_eval_windows(tokens, 0, 16, 16 - stride + 1)
    assert len(ours) == len(theirs)
    for (context, continuation), (inputs, predicted) in zip(ours, theirs, strict=True):
        assert continuation == predicted
        assert (context or [0]) + continuation[:-1] == inputs  # what the model reads is lm-eval's input
    assert [token for _, continuation in ours for token in continuation] == tokens  # each token once


def test_windows_equal_lm_evals_own_function_when_it_is_installed():
    utils = pytest.importorskip("lm_eval.utils", reason="lm-eval is not installed (the test above pins its rules)")
    for length in (0, 3, 16, 17, 50):
        for stride in (1, 5, 16):
            tokens = list(range(length))
            theirs = [utils.make_disjoint_window(window)
                      for window in utils.get_rolling_token_windows(tokens, -1, 16, 16 - stride + 1)]
            assert [(context or [-1], cont) for context, cont in rolling_items(tokens, 16, stride)] == theirs


@pytest.mark.parametrize(("max_length", "stride"), [(32, 32), (32, 8)])
def test_rolling_nll_equals_a_naive_window_by_window_computation(model, tokenizer, max_length, stride):
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, max_length=max_length, stride=stride,
                                batch_size=3)

    def naive(m):
        return [naive_rolling_nll(m, tokenizer, text, max_length, stride)[0] for text in TEXTS]

    assert_exact(result["nlls"], naive, model)
    counts = [naive_rolling_nll(model, tokenizer, text, max_length, stride)[1] for text in TEXTS]
    assert result["token_counts"] == counts == [len(tokenizer(t, add_special_tokens=False).input_ids) for t in TEXTS]
    assert math.isnan(result["perplexities"][2])


def test_scores_do_not_depend_on_batch_size(model, tokenizer):
    one = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, max_length=24, stride=6, batch_size=1)
    many = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, max_length=24, stride=6, batch_size=16)
    assert many["nlls"] == pytest.approx(one["nlls"], rel=1e-5, nan_ok=True)


def test_word_and_byte_aggregates_are_lm_evals(model, tokenizer):
    result = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, max_length=32, stride=16)
    valid = [(text, nll) for text, nll in zip(TEXTS, result["nlls"], strict=True) if text]
    nll = sum(value for _, value in valid)
    words = sum(len(re.split(r"\s+", text)) for text, _ in valid)
    size = sum(len(text.encode("utf-8")) for text, _ in valid)
    assert result["word_perplexity"] == pytest.approx(math.exp(nll / words), rel=1e-12)
    assert result["byte_perplexity"] == pytest.approx(math.exp(nll / size), rel=1e-12)
    assert result["bits_per_byte"] == pytest.approx(nll / size / math.log(2), rel=1e-12)
    assert result["corpus_perplexity"] == pytest.approx(math.exp(nll / sum(result["token_counts"])), rel=1e-12)


def test_a_window_as_long_as_the_position_limit_fits(tokenizer):
    short = build_model(len(tokenizer), max_position_embeddings=32)
    result = compute_perplexity([DOCUMENT], model=short, tokenizer=tokenizer, max_length=32, stride=32)
    assert_exact(result["nlls"], lambda m: [naive_rolling_nll(m, tokenizer, DOCUMENT, 32, 32)[0]], short)


def test_without_max_length_the_window_is_the_position_limit(tokenizer):
    short = build_model(len(tokenizer), max_position_embeddings=32)
    default = compute_perplexity([DOCUMENT], model=short, tokenizer=tokenizer, stride=32)
    explicit = compute_perplexity([DOCUMENT], model=short, tokenizer=tokenizer, max_length=32, stride=32)
    assert default["nlls"] == explicit["nlls"]


@pytest.mark.parametrize(("stride", "message"), [(0, "positive integer"), (-3, "positive integer"),
                                                 (2.5, "positive integer"), (65, "cannot be larger")])
def test_a_stride_below_one_or_above_max_length_is_refused(stride, message, load_calls):
    with pytest.raises(ValueError, match=message):
        compute_perplexity(["text"], max_length=64, stride=stride)
    with pytest.raises(ConfigError, match=message):
        build_scorer({"name": "PPLScorer", "max_length": 64, "stride": stride})
    assert load_calls == []


def test_stride_needs_the_start_token(model, tokenizer):
    with pytest.raises(ValueError, match="add_start_token=True"):
        compute_perplexity(["text"], model=model, tokenizer=tokenizer, max_length=16, stride=8, add_start_token=False)


def test_the_truncation_warning_points_to_stride(model, tokenizer, caplog):
    compute_perplexity([DOCUMENT], model=model, tokenizer=tokenizer, max_length=16)
    assert "Pass `stride`" in caplog.text


def test_metric_column_and_config_give_the_same_rolling_perplexities(model, tokenizer, load_calls):
    import evaluate

    expected = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, max_length=32, stride=8)["perplexities"]
    metric = evaluate.load("./metrics/perplexity")
    from_metric = metric.compute(predictions=TEXTS, model=model, tokenizer=tokenizer, max_length=32, stride=8)
    assert from_metric["perplexities"] == pytest.approx(expected, rel=1e-6, nan_ok=True)
    assert from_metric["bits_per_byte"] > 0

    from hf_adapters import add_perplexity_column

    ds = add_perplexity_column(Dataset.from_dict({"text": TEXTS}), text_column="text", model_id="tiny",
                               max_length=32, stride=8)
    assert list(ds["perplexity"]) == pytest.approx(expected, rel=1e-6, nan_ok=True)
    rows = [{"instruction": text, "input": "", "output": ""} for text in TEXTS if text]
    scorer = build_scorer({"name": "PPLScorer", "max_length": 32, "stride": 8})
    assert scorer.score_rows(rows) == pytest.approx([p for t, p in zip(TEXTS, expected, strict=True) if t], rel=1e-6)


def test_a_score_job_with_stride_finishes_on_text_without_white_space(tmp_path, model_dir):
    """From the round-three review: jobs that never finish."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "zh", "text": LONG_CJK}, {"id": "en", "text": "Cats."}])
    config = write_config(tmp_path / "ppl.yaml",
                          "name: PerplexityScorer\ntext_column: text\nmax_length: 64\nstride: 32\n")
    output = tmp_path / "scores.jsonl"
    assert main(["score", config, "--data", str(data), "--output", str(output), "--model", model_dir,
                 "--no-progress"]) == 0
    assert all(math.isfinite(line["score"]) for line in read_jsonl(output))
