"""MIWV (OpenDataArena's MIWVScorer) against a naive float64 one-row-at-a-time computation of its
definition, its nearest rows against a brute-force search, and its column."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from datasets import Dataset

from hf_adapters.columns.miwv_columns import add_miwv_column
from hf_adapters.formulas.miwv import compute_miwv, nearest_rows
from tests.conftest import float64_copy
from tests.formulas.test_excess_loss import assert_exact_difference

ROWS = [
    {"instruction": "Write a poem about the sea.", "input": "", "output": "The sea is wide and deep."},
    {"instruction": "Write a poem about a lake.", "input": "", "output": "The lake is still."},
    {"instruction": "Summarise:", "input": "Cats are small mammals.", "output": "Cats. 🐈"},
    {"instruction": "Translate.", "input": "Le chien", "output": "The dog runs fast, very fast, today."},
    {"instruction": "Say nothing.", "input": "", "output": ""},
]
EMBEDDINGS = np.array([[1.0, 0.0, 0.2], [0.9, 0.1, 0.2], [0.0, 1.0, 0.0], [0.1, 0.8, 0.5], [0.5, 0.5, 0.5]])


def naive_answer_loss(model, tokenizer, before_answer: str, text: str, max_length: int) -> float:
    """The mean NLL of the answer tokens, one unpadded forward pass, as the definition reads."""
    full = tokenizer(text).input_ids
    ids = full[:max_length]
    start = len(tokenizer(before_answer).input_ids)
    if len(ids) < len(full):
        start = min(start, len(ids) - 1)
    start = max(start, 1)
    if start >= len(ids):
        return math.nan
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids]), use_cache=False).logits[0].double(), dim=-1)
    return sum(-logprobs[p - 1, ids[p]].item() for p in range(start, len(ids))) / (len(ids) - start)


def naive_losses(model, tokenizer, rows, embeddings, max_length=2048):
    """Per row, (one-shot loss, zero-shot loss), the neighbour found by comparing every pair in float64."""
    vectors = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    prompts = [row["instruction"] + ("\n" + row["input"] if row["input"] else "") for row in rows]
    one, zero = [], []
    for i, (prompt, row) in enumerate(zip(prompts, rows, strict=True)):
        others = [j for j in range(len(rows)) if j != i]
        j = max(others, key=lambda other: (float(vectors[i] @ vectors[other]), -other))
        example = f"User: {prompts[j]}\nAssistant: {rows[j]['output']}\n"
        head = f"User: {prompt}\nAssistant: "
        one.append(naive_answer_loss(model, tokenizer, example + head, example + head + row["output"], max_length))
        zero.append(naive_answer_loss(model, tokenizer, head, head + row["output"], max_length))
    return one, zero


def columns(rows):
    return ([row["instruction"] for row in rows], [row["output"] for row in rows], [row["input"] for row in rows])


@pytest.mark.parametrize("batch_size", [1, 4])
def test_miwv_equals_its_naive_float64_definition_for_any_batch_size(model, tokenizer, batch_size):
    result = compute_miwv(*columns(ROWS), embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer,
                          batch_size=batch_size)
    terms32 = naive_losses(model, tokenizer, ROWS, EMBEDDINGS)
    terms64 = naive_losses(float64_copy(model), tokenizer, ROWS, EMBEDDINGS)
    assert_exact_difference(result["miwv_scores"], terms32, terms64)
    assert result["neighbours"] == [1, 0, 3, 4, 3]
    assert math.isnan(result["miwv_scores"][4])  # an empty answer has no token to score


def test_a_cut_text_keeps_its_last_token_as_the_answer(model, tokenizer):
    result = compute_miwv(*columns(ROWS), embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer, max_length=12)
    terms32 = naive_losses(model, tokenizer, ROWS, EMBEDDINGS, max_length=12)
    terms64 = naive_losses(float64_copy(model), tokenizer, ROWS, EMBEDDINGS, max_length=12)
    assert_exact_difference(result["miwv_scores"], terms32, terms64)


@pytest.mark.parametrize("distance", ["cosine", "euclidean", "squared_euclidean"])
def test_nearest_rows_equal_a_brute_force_search(distance):
    vectors = np.random.default_rng(0).normal(size=(40, 6))
    vectors[7] = vectors[3]  # a duplicate: the nearest row of each other, ties to the earlier row elsewhere
    vectors[30] = vectors[3]
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def gap(i, j):
        return -float(units[i] @ units[j]) if distance == "cosine" else float(np.linalg.norm(vectors[i] - vectors[j]))

    expected = [min((j for j in range(40) if j != i), key=lambda j: (round(gap(i, j), 12), j)) for i in range(40)]
    assert nearest_rows(vectors, distance) == expected
    assert expected[3] == 7 and expected[7] == 3 and expected[30] == 3


def test_bad_inputs_are_clear_errors(model, tokenizer):
    with pytest.raises(ValueError, match="valid distances"):
        compute_miwv(*columns(ROWS), embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer, distance="manhattan")
    with pytest.raises(ValueError, match="4 embeddings for 5 rows"):
        compute_miwv(*columns(ROWS), embeddings=EMBEDDINGS[:4], model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="at least 2 rows"):
        nearest_rows(EMBEDDINGS[:1])


def test_the_column_holds_the_scores_and_each_rows_example(model, tokenizer):
    ds = Dataset.from_list(ROWS).add_column("embedding", EMBEDDINGS.tolist())
    scored = add_miwv_column(ds, model=model, tokenizer=tokenizer)
    expected = compute_miwv(*columns(ROWS), embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer)
    assert scored["miwv_neighbour"] == expected["neighbours"]
    assert scored["miwv"] == pytest.approx(expected["miwv_scores"], nan_ok=True)
    with pytest.raises(ValueError, match="a stream does not hold"):
        add_miwv_column(ds.to_iterable_dataset(), model=model, tokenizer=tokenizer)


def test_a_missing_input_reads_as_empty_as_in_every_scorer(model, tokenizer):
    """``add_miwv_column`` on rows whose ``input`` is None (JSON null, a column with gaps) raised a
    TypeError, where every other scorer reads a missing input as "". Round five, item 20."""
    rows = [{**row, "input": row["input"] or None} for row in ROWS]
    ds = Dataset.from_list(rows).add_column("embedding", EMBEDDINGS.tolist())
    scored = add_miwv_column(ds, model=model, tokenizer=tokenizer)
    expected = compute_miwv(*columns(ROWS), embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer)
    assert scored["miwv"] == pytest.approx(expected["miwv_scores"], nan_ok=True)
    direct = compute_miwv(*columns(rows), embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer)
    assert direct["miwv_scores"] == pytest.approx(expected["miwv_scores"], nan_ok=True)
    with pytest.raises(TypeError, match="single string"):
        compute_miwv(*columns(ROWS)[:2], inputs="", embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer)


def test_a_row_without_an_answer_token_is_nan_with_a_warning_naming_it(model, tokenizer, caplog):
    """The same policy as every scorer: NaN for the row, and a warning that names it. Round five, item 11."""
    import logging

    with caplog.at_level(logging.WARNING):
        result = compute_miwv(*columns(ROWS), embeddings=EMBEDDINGS, model=model, tokenizer=tokenizer)
    assert math.isnan(result["miwv_scores"][4])
    assert "Row 4 has an empty output; its MIWV is NaN." in caplog.text
