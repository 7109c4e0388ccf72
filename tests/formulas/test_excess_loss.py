"""Excess loss against a naive float64 two-model computation, the shared-tokenizer check, the scorers,
columns, Rho-1's labels and the papers' selection rules."""

from __future__ import annotations

import logging
import math
import re

import evaluate
import pytest
import torch
from datasets import Dataset

from hf_adapters.columns.excess_loss_columns import add_excess_loss_column, add_rho1_labels_column
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.curation.selection_rules import select_by_rule
from hf_adapters.formulas.excess_loss import compute_excess_loss
from hf_adapters.formulas.reference_models import TokenizerMismatchError
from hf_adapters.formulas.token_selection import kept_tokens, rho1_labels
from hf_adapters.scorers import ExcessLossScorer, build_scorer
from tests.conftest import EXACT_FLOOR, build_model, build_tokenizer, float64_copy
from tests.core.test_conversations import GOOD, NO_ASSISTANT

TEXTS = ["The sea is wide and deep.", "Cats purr. 🐈", "", "Write a short poem about the sea, please, now."]
CHAT = [{"role": "user", "content": "Name a primary colour."}, {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And another?"}, {"role": "assistant", "content": "Red is one too."}]


@pytest.fixture(scope="module")
def reference(tokenizer):
    return build_model(len(tokenizer), seed=1)


def naive_token_nlls(model, context, continuation, start_id) -> list[float]:
    ids = (list(context) or [start_id]) + list(continuation)
    first = len(ids) - len(continuation)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids]), use_cache=False).logits[0].double(), dim=-1)
    return [-logprobs[p - 1, ids[p]].item() for p in range(first, len(ids))]


def text_items(tokenizer):
    return [([], tokenizer(text, add_special_tokens=False).input_ids) for text in TEXTS]


def mean_or_nan(values):
    return sum(values) / len(values) if values else math.nan


def assert_exact_difference(actual, terms32, terms64) -> None:
    """The exactness criterion for a difference of two models' values. ``terms32`` and ``terms64`` hold
    both terms (the model's values, the reference's), computed one text at a time in float32 and in
    float64. A difference of nearly equal losses cancels, so float32's rounding is that of its terms:
    each value of ``actual`` must lie within the sum of both terms' allowances
    (``2 |naive f32 - f64| + EXACT_FLOOR |f64|``) of the float64 difference."""
    (m32, r32), (m64, r64) = terms32, terms64
    assert len(actual) == len(m64)
    for index, (value, a32, b32, a64, b64) in enumerate(zip(actual, m32, r32, m64, r64, strict=True)):
        if math.isnan(a64):
            assert math.isnan(value), f"value {index}: {value} where the reference is NaN"
            continue
        allowed = 2 * abs(a32 - a64) + EXACT_FLOOR * abs(a64) + 2 * abs(b32 - b64) + EXACT_FLOOR * abs(b64)
        assert abs(value - (a64 - b64)) <= allowed, (index, value, a64 - b64, allowed)


def naive_terms(model, reference, items, start_id):
    """Per item, each model's token NLLs, in float32 and in float64 (the models' float64 copies)."""
    return {precision: [[naive_token_nlls(m, c, a, start_id) for c, a in items] for m in models]
            for precision, models in (("32", (model, reference)),
                                      ("64", (float64_copy(model), float64_copy(reference))))}


def reduced(terms, reduce):
    return [[reduce(row) for row in rows] for rows in terms]


def flat(rows):
    return [value for row in rows for value in row]


@pytest.mark.parametrize("batch_size", [1, 2, 16])
def test_excess_losses_equal_naive_float64_two_model_reference_for_any_batch_size(model, tokenizer, reference,
                                                                                  batch_size):
    result = compute_excess_loss(TEXTS, model=model, tokenizer=tokenizer, reference_model=reference,
                                 reference_tokenizer=tokenizer, batch_size=batch_size, return_token_losses=True)
    naive = naive_terms(model, reference, text_items(tokenizer), start_token_id(tokenizer))
    for key, reduce in (("token_excess_losses", None), ("excess_losses", mean_or_nan),
                        ("excess_loss_sums", lambda v: sum(v) if v else math.nan)):
        actual = flat(result[key]) if reduce is None else result[key]
        terms = {p: [flat(rows) for rows in naive[p]] if reduce is None else reduced(naive[p], reduce) for p in naive}
        assert_exact_difference(actual, terms["32"], terms["64"])
    assert math.isnan(result["excess_losses"][2]) and result["token_excess_losses"][2] == []
    assert result["mean_excess_loss"] == pytest.approx(
        sum(result["excess_losses"][i] for i in (0, 1, 3)) / 3, rel=1e-12)


def test_conversations_score_every_assistant_token_after_its_history(model, tokenizer, reference):
    from hf_adapters.core.conversations import turn_pairs

    result = compute_excess_loss(messages=[CHAT], model=model, tokenizer=tokenizer, reference_model=reference,
                                 reference_tokenizer=tokenizer, batch_size=1)
    naive = naive_terms(model, reference, turn_pairs(tokenizer, CHAT, "all"), start_token_id(tokenizer))
    terms = {p: [[mean_or_nan(flat(rows))] for rows in naive[p]] for p in naive}
    assert_exact_difference(result["excess_losses"], terms["32"], terms["64"])
    last = compute_excess_loss(messages=[CHAT], model=model, tokenizer=tokenizer, reference_model=reference,
                               reference_tokenizer=tokenizer, turns="last")
    assert last["excess_losses"] != result["excess_losses"]


def test_a_model_against_itself_has_no_excess_loss(model, tokenizer):
    result = compute_excess_loss(TEXTS, model=model, tokenizer=tokenizer, reference_model=model,
                                 reference_tokenizer=tokenizer)
    assert result["excess_losses"][0] == 0.0 and result["mean_excess_loss"] == 0.0


def test_a_reference_with_another_vocabulary_is_refused_before_scoring(model, tokenizer, monkeypatch):
    other = build_tokenizer(bos=False)
    calls = []
    monkeypatch.setattr("hf_adapters.backends.transformers.model.TransformersBackend.score",
                        lambda self, *args, **kwargs: calls.append(1))
    with pytest.raises(TokenizerMismatchError, match="different vocabularies"):
        compute_excess_loss(TEXTS, model=model, tokenizer=tokenizer, reference_model=build_model(len(other)),
                            reference_tokenizer=other)
    assert calls == []


def test_a_row_the_two_tokenizers_encode_differently_is_named(model, tokenizer, monkeypatch):
    twin = build_tokenizer()
    original = type(twin).__call__

    def encode_differently(self, text, *args, **kwargs):
        encoded = original(self, text, *args, **kwargs)
        if self is twin and isinstance(text, list) and len(text) > 1:
            encoded["input_ids"][1] = encoded["input_ids"][1][::-1]
        return encoded

    monkeypatch.setattr(type(twin), "__call__", encode_differently)
    with pytest.raises(TokenizerMismatchError, match="Row 1: the model's and the reference model's tokenizers"):
        compute_excess_loss(TEXTS, model=model, tokenizer=tokenizer, reference_model=model, reference_tokenizer=twin)


def test_a_reference_model_is_required(model, tokenizer):
    with pytest.raises(ValueError, match="needs a reference model"):
        compute_excess_loss(TEXTS, model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="needs a reference model"):
        build_scorer({"name": "ExcessLossScorer"})


def test_configs_name_the_reference_model_and_load_each_model_once(model_dir, load_calls):
    scorer = build_scorer({"name": "ExcessLossScorer", "model": model_dir, "reference_model": "reference-id"})
    rows = [{"instruction": "Name a colour.", "input": "", "output": "Blue."}]
    assert scorer.score_rows(rows) == scorer.score_rows(rows)
    assert load_calls == [model_dir, "reference-id"]
    assert scorer.config["reference_model"] == "reference-id"
    assert scorer.outputs == ("excess_loss", "excess_loss_sum", "loss", "reference_loss")


def test_the_metric_module_computes_excess_loss(model, tokenizer, reference):
    import evaluate

    module = evaluate.load("./metrics/excess_loss")
    result = module.compute(predictions=TEXTS[:2], model=model, tokenizer=tokenizer, reference_model=reference,
                            reference_tokenizer=tokenizer)
    direct = compute_excess_loss(TEXTS[:2], model=model, tokenizer=tokenizer, reference_model=reference,
                                 reference_tokenizer=tokenizer)
    assert result["excess_losses"] == direct["excess_losses"]
    chat = module.compute(messages=[CHAT], model=model, tokenizer=tokenizer, reference_model=reference,
                          reference_tokenizer=tokenizer)
    assert len(chat["excess_losses"]) == 1


def test_columns_and_rho1_labels(model, tokenizer, reference):
    ds = Dataset.from_dict({"text": TEXTS[:2] + TEXTS[3:]})
    options = {"model": model, "tokenizer": tokenizer, "reference_model": reference, "reference_tokenizer": tokenizer}
    scored = add_excess_loss_column(ds, text_column="text", return_token_losses=True, **options)
    assert {"excess_loss", "excess_loss_sum", "token_excess_losses"} <= set(scored.column_names)
    labelled = add_rho1_labels_column(ds, top=0.5, **options)
    for row, losses in zip(labelled, scored["token_excess_losses"], strict=True):
        assert row["input_ids"][0] == start_token_id(tokenizer) and row["labels"][0] == -100
        assert len(row["labels"]) == len(row["input_ids"]) == len(losses) + 1
        assert sum(label != -100 for label in row["labels"]) == int(len(losses) * 0.5)
        kept = [loss for loss, label in zip(losses, row["labels"][1:], strict=True) if label != -100]
        dropped = [loss for loss, label in zip(losses, row["labels"][1:], strict=True) if label == -100]
        assert min(kept) >= max(dropped)


def test_rho1_keeps_the_top_tokens_per_row_or_over_the_data_set():
    losses = [[0.1, 0.9, 0.5, 0.3], [2.0, -1.0]]
    assert kept_tokens(losses, 0.5) == [[False, True, True, False], [True, False]]
    assert kept_tokens(losses, 0.5, scope="dataset") == [[False, True, True, False], [True, False]]
    assert kept_tokens(losses, 0.34, scope="dataset") == [[False, True, False, False], [True, False]]
    assert rho1_labels([[1, 5, 6, 7, 8], [1, 3, 4]], losses, top=0.5) == [[-100, -100, 6, 7, -100], [-100, 3, -100]]
    with pytest.raises(ValueError, match="scope"):
        kept_tokens(losses, 0.5, scope="batch")


def test_selection_rules_rank_the_papers_way():
    ds = Dataset.from_dict({"id": ["a", "b", "c"], "excess_loss_sum": [0.4, -1.2, 2.0], "excess_loss": [3.0, 1.0, 2.0]})
    assert list(select_by_rule(ds, "rho-loss", top_n=1)["id"]) == ["c"]
    assert list(select_by_rule(ds, "color-filter", top_n=1)["id"]) == ["b"]
    assert list(select_by_rule(ds, "excess-loss", top_n=2)["id"]) == ["a", "c"]
    with pytest.raises(ValueError, match="Unknown rule"):
        select_by_rule(ds, "rho-2")


def test_excess_loss_scorer_reads_instruction_rows(model, tokenizer, reference):
    scorer = ExcessLossScorer(model=model, tokenizer=tokenizer, reference_model=reference,
                              reference_tokenizer=tokenizer)
    row = {"instruction": "Name a colour.", "input": "", "output": "Blue."}
    text = compute_excess_loss(["Name a colour.\nBlue."], model=model, tokenizer=tokenizer, reference_model=reference,
                               reference_tokenizer=tokenizer)
    assert scorer.score_rows([row]) == text["excess_losses"]
    assert scorer.model_identity() is None  # objects cannot be named: never served from the cache


def test_the_demo_prints_an_excess_loss_example(model_dir, capsys):
    import argparse

    from hf_adapters.backends import TransformersBackend
    from hf_adapters.cli.demo_command import _excess_loss, sample_rows

    args = argparse.Namespace(model=model_dir, dtype=None, device=None, batch_size=4)
    _excess_loss(sample_rows(), TransformersBackend.from_pretrained(model_dir), model_dir, args)
    printed = capsys.readouterr().out
    assert "Excess loss against a reference model" in printed and "excess loss" in printed
    rows = printed.splitlines()[-5:]  # the model against itself: no excess loss, 60% of the tokens kept
    assert all(line.split()[-2] in ("0.000", "-0.000") for line in rows), printed


def test_the_benchmarks_one_at_a_time_reference_gives_our_excess_losses(model, tokenizer):
    from benchmarks.speed.excess_loss import noisy_copy, one_at_a_time_excess

    reference = noisy_copy(model)
    assert not torch.equal(reference.model.embed_tokens.weight, model.model.embed_tokens.weight)
    ours = compute_excess_loss(TEXTS[:2], model=model, tokenizer=tokenizer, reference_model=reference,
                               reference_tokenizer=tokenizer)["excess_losses"]
    assert ours == pytest.approx(one_at_a_time_excess(model, reference, tokenizer, TEXTS[:2]), abs=1e-5)


def excess_loss_of(entry: str, conversations: list, model, tokenizer, **options) -> dict:
    """Excess loss of ``conversations`` (the model against itself) through the function or the metric module."""
    models = {"model": model, "tokenizer": tokenizer, "reference_model": model, "reference_tokenizer": tokenizer}
    if entry == "function":
        return compute_excess_loss(messages=conversations, **models, **options)
    return evaluate.load("./metrics/excess_loss").compute(messages=conversations, **models, **options)


@pytest.mark.parametrize("entry", ["function", "metric"])
def test_compute_excess_loss_gives_nan_and_a_warning_naming_a_conversation_it_cannot_score(
        model, tokenizer, caplog, entry):
    """``compute_excess_loss(messages=...)`` raised ConversationError for the whole batch when one
    conversation could not be scored, where the metric module, ``add_excess_loss_column`` and perplexity
    give that row NaN with a warning naming it. One policy; the token outputs stay one per row."""
    with caplog.at_level(logging.WARNING):
        result = excess_loss_of(entry, [GOOD, NO_ASSISTANT, GOOD], model, tokenizer, return_token_losses=True)
    assert result["excess_losses"][0] == result["excess_losses"][2] == 0.0 and math.isnan(result["excess_losses"][1])
    assert math.isnan(result["losses"][1]) and result["losses"][0] == result["losses"][2]
    assert result["tokens"][1] == [] and result["tokens"][0] == result["tokens"][2] != []
    assert all(len(result[key]) == 3 for key in ("excess_loss_sums", "reference_losses", "token_excess_losses",
                                                 "token_losses", "reference_token_losses"))
    assert re.search(r"Row 1: the conversation has no assistant turn", caplog.text), caplog.text


@pytest.mark.parametrize("entry", ["function", "metric"])
def test_an_empty_assistant_answer_gives_nan_and_a_warning_naming_the_conversation(model, tokenizer, caplog, entry):
    """A conversation whose assistant turns are all empty has no token to score: NaN, and the warning
    names the conversation (not the core's position of a turn among all turns)."""
    empty = [GOOD[0], {"role": "assistant", "content": ""}]
    with caplog.at_level(logging.WARNING):
        result = excess_loss_of(entry, [GOOD, GOOD, empty], model, tokenizer)
    assert math.isnan(result["excess_losses"][2]) and result["excess_losses"][:2] == [0.0, 0.0]
    assert "Row 2 has no assistant token to score" in caplog.text and "Item" not in caplog.text, caplog.text
