"""Information Parity against a naive one-text-at-a-time float32 reference, and its bad-input rules."""

import math

import evaluate
import numpy as np
import pytest

import hf_adapters.backends.loading as models
from hf_adapters.backends import TransformersBackend
from hf_adapters.columns.dataset_columns import add_information_parity_column
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.formulas.information_parity import (
    RESULT_KEYS,
    compute_information_parity,
)
from hf_adapters.scorers import InformationParityScorer, build_scorer
from tests.conftest import assert_exact, build_model, naive_nll

REFERENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Write a short poem about the sea.",
    "Cats are small mammals.",
    "The quick brown fox jumps over the lazy dog.",
]
PREDICTIONS = [
    "Le renard brun saute par-dessus le chien paresseux.",
    "Écris un court poème sur la mer. 🌊",
    "敏捷的棕色狐狸跳过了懒狗。",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
]


def naive_information_parity(model, tokenizer, predictions, references):
    """The written definition, one text at a time: every token scored after the start token."""
    start = start_token_id(tokenizer)

    def nll(text):
        return naive_nll(model, [], tokenizer(text, add_special_tokens=False).input_ids, start)

    pairs = []
    for prediction, reference in zip(predictions, references, strict=True):
        (p_nll, p_tokens), (r_nll, r_tokens) = nll(prediction), nll(reference)
        pairs.append((p_nll, p_tokens, r_nll, r_tokens, prediction, reference) if p_tokens and r_tokens else None)
    scores = [pair[2] / pair[0] if pair else math.nan for pair in pairs]
    valid = [pair for pair in pairs if pair]
    finite = np.array([s for s in scores if not math.isnan(s)])
    return {
        "scores": scores,
        "information_parity": finite.mean(),
        "information_parity_std": finite.std(),
        "information_parity_median": np.median(finite),
        "corpus_information_parity": sum(p[2] for p in valid) / sum(p[0] for p in valid),
        "tokenization_parity": sum(p[1] for p in valid) / sum(p[3] for p in valid),
        "bits_per_byte": sum(p[0] for p in valid) / math.log(2) / sum(len(p[4].encode()) for p in valid),
        "reference_bits_per_byte": sum(p[2] for p in valid) / math.log(2) / sum(len(p[5].encode()) for p in valid),
    }


def assert_results_equal(actual, expected, rel=1e-5):
    assert list(actual) == list(RESULT_KEYS)
    assert actual["scores"] == pytest.approx(expected["scores"], rel=rel, nan_ok=True)
    for key in RESULT_KEYS[1:]:
        assert actual[key] == pytest.approx(expected[key], rel=rel), key


@pytest.mark.parametrize("batch_size", [1, 3, 16])
@pytest.mark.kernels
def test_every_key_equals_naive_reference_for_any_batch_size(model, tokenizer, batch_size):
    result = compute_information_parity(
        PREDICTIONS, REFERENCES, model=model, tokenizer=tokenizer, batch_size=batch_size
    )
    assert list(result) == list(RESULT_KEYS)

    def naive(m):
        expected = naive_information_parity(m, tokenizer, PREDICTIONS, REFERENCES)
        return [expected[key] for key in RESULT_KEYS]

    assert_exact([result[key] for key in RESULT_KEYS], naive, model)


def test_result_values_are_plain_floats(model, tokenizer):
    result = compute_information_parity(PREDICTIONS, REFERENCES, model=model, tokenizer=tokenizer)
    assert all(type(result[key]) is float for key in RESULT_KEYS[1:])
    assert all(type(score) is float for score in result["scores"])


def test_each_distinct_text_is_scored_once_in_one_core_call(model, tokenizer, monkeypatch):
    calls = []
    original = TransformersBackend.score

    def counting(backend, items, **kwargs):
        calls.append(len(items))
        return original(backend, items, **kwargs)

    monkeypatch.setattr(TransformersBackend, "score", counting)
    predictions = ["Le chat dort.", "Die Katze schläft.", "Le chat dort.", "The cat sleeps."]
    references = ["The cat sleeps."] * 4
    result = compute_information_parity(predictions, references, model=model, tokenizer=tokenizer)
    assert calls == [3]
    assert result["scores"][0] == result["scores"][2]
    assert result["scores"][3] == pytest.approx(1.0)


def test_empty_text_gives_nan_for_its_pair_and_is_left_out_of_aggregates(model, tokenizer):
    predictions = [PREDICTIONS[0], "", PREDICTIONS[1], PREDICTIONS[2]]
    references = [REFERENCES[0], REFERENCES[1], "", REFERENCES[2]]
    result = compute_information_parity(predictions, references, model=model, tokenizer=tokenizer)
    assert math.isnan(result["scores"][1]) and math.isnan(result["scores"][2])
    valid = [0, 3]
    expected = compute_information_parity(
        [predictions[i] for i in valid], [references[i] for i in valid], model=model, tokenizer=tokenizer
    )
    for key in RESULT_KEYS[1:]:
        assert result[key] == pytest.approx(expected[key], rel=1e-9), key


def test_all_pairs_empty_give_nan_aggregates_not_zero_division(model, tokenizer):
    result = compute_information_parity(["", ""], ["a", ""], model=model, tokenizer=tokenizer)
    assert all(math.isnan(result[key]) for key in RESULT_KEYS[1:])


def test_no_pairs_give_empty_scores(model, tokenizer):
    result = compute_information_parity([], [], model=model, tokenizer=tokenizer)
    assert result["scores"] == [] and math.isnan(result["information_parity"])


def test_unequal_lengths_raise_value_error(model, tokenizer):
    with pytest.raises(ValueError, match="2 predictions and 1 references"):
        compute_information_parity(["a", "b"], ["c"], model=model, tokenizer=tokenizer)


@pytest.mark.parametrize(
    ("predictions", "references", "message"),
    [(["a", None], ["b", "c"], r"`predictions`\[1\]"), (["a"], [3], r"`references`\[0\]"),
     ("a single string", ["b"], "not a single string")],
)
def test_non_string_rows_raise_type_error_naming_the_row(model, tokenizer, predictions, references, message):
    with pytest.raises(TypeError, match=message):
        compute_information_parity(predictions, references, model=model, tokenizer=tokenizer)


@pytest.mark.kernels
def test_truncation_scores_the_kept_tokens(model, tokenizer):
    result = compute_information_parity(PREDICTIONS, REFERENCES, model=model, tokenizer=tokenizer, max_length=6)
    start = start_token_id(tokenizer)

    def naive(m):
        def nll(text):
            return naive_nll(m, [], tokenizer(text, add_special_tokens=False).input_ids, start, max_length=6)[0]
        return [nll(r) / nll(p) for p, r in zip(PREDICTIONS, REFERENCES, strict=True)]

    assert_exact(result["scores"], naive, model)


def test_evaluate_module_matches_function(model, tokenizer):
    import evaluate

    metric = evaluate.load("./metrics/information_parity")
    result = metric.compute(predictions=PREDICTIONS, references=REFERENCES, model=model, tokenizer=tokenizer)
    expected = compute_information_parity(PREDICTIONS, REFERENCES, model=model, tokenizer=tokenizer)
    assert_results_equal(result, expected, rel=1e-9)
    with pytest.raises(TypeError, match=r"`references`\[1\]"):
        metric.compute(predictions=["a", "b"], references=["a", 2], model=model, tokenizer=tokenizer)


@pytest.mark.kernels
def test_column_equals_function_scores(model, tokenizer):
    from datasets import Dataset

    ds = Dataset.from_dict({"text": PREDICTIONS + [""], "reference": REFERENCES + ["x"]})
    scored = add_information_parity_column(ds, prediction_column="text", reference_column="reference",
                                           model=model, tokenizer=tokenizer, batch_size=2)
    expected = compute_information_parity(PREDICTIONS + [""], REFERENCES + ["x"], model=model, tokenizer=tokenizer)
    assert scored["information_parity"] == pytest.approx(expected["scores"], rel=1e-5, nan_ok=True)


def test_column_cache_hit_loads_no_model(model, tokenizer, tmp_path, monkeypatch):
    from datasets import Dataset, load_from_disk

    Dataset.from_dict({"text": PREDICTIONS, "reference": REFERENCES}).save_to_disk(tmp_path / "ds")
    ds = load_from_disk(tmp_path / "ds")
    loads = []

    def fake_load(*args, **kwargs):
        loads.append(args)
        return model, tokenizer

    monkeypatch.setattr(models, "load_model", fake_load)
    first = add_information_parity_column(ds, prediction_column="text", reference_column="reference",
                                          model_id="tiny-test-model")
    second = add_information_parity_column(ds, prediction_column="text", reference_column="reference",
                                          model_id="tiny-test-model")
    assert len(loads) == 1
    assert second["information_parity"] == first["information_parity"]
    add_information_parity_column(ds, prediction_column="text", reference_column="reference",
                                          model_id="tiny-test-model", max_length=5)
    assert len(loads) == 2


def test_column_rejects_missing_column(model, tokenizer):
    from datasets import Dataset

    with pytest.raises(ValueError, match="'reference' not found"):
        add_information_parity_column(Dataset.from_dict({"text": ["a"]}), prediction_column="text",
                                      reference_column="reference", model=model,
                                      tokenizer=tokenizer)


@pytest.mark.kernels
def test_scorer_config_scores_rows_like_the_function(model, tokenizer, monkeypatch):
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: (model, tokenizer))
    scorer = build_scorer({"name": "InformationParityScorer", "prediction_column": "fr", "batch_size": 2})
    assert isinstance(scorer, InformationParityScorer)
    assert scorer.required_fields == ("fr", "reference")
    rows = [{"fr": p, "reference": r} for p, r in zip(PREDICTIONS, REFERENCES, strict=True)]
    expected = compute_information_parity(PREDICTIONS, REFERENCES, model=model, tokenizer=tokenizer)
    assert scorer.score_rows(rows) == pytest.approx(expected["scores"], rel=1e-5)
    with pytest.raises(ValueError, match="has no field 'reference'"):
        scorer.score_rows([{"fr": "a"}])


def test_bits_per_byte_leaves_out_pairs_with_a_truncated_text(model, tokenizer):
    long_text = "The quick brown fox jumps over the lazy dog. " * 20
    predictions, references = [PREDICTIONS[0], long_text], [REFERENCES[0], REFERENCES[1]]
    result = compute_information_parity(predictions, references, model=model, tokenizer=tokenizer, max_length=64)
    alone = compute_information_parity(predictions[:1], references[:1], model=model, tokenizer=tokenizer,
                                       max_length=64)
    assert not math.isnan(result["scores"][1])  # the pair is still scored, on its kept tokens
    for key in ("bits_per_byte", "reference_bits_per_byte"):
        assert result[key] == pytest.approx(alone[key], rel=1e-9)
    only_truncated = compute_information_parity([long_text], [REFERENCES[0]], model=model, tokenizer=tokenizer,
                                                max_length=64)
    assert math.isnan(only_truncated["bits_per_byte"]) and math.isnan(only_truncated["reference_bits_per_byte"])


def test_missing_references_and_invalid_unicode_are_errors_naming_them(model, tokenizer):
    with pytest.raises(TypeError, match="`references` is missing"):
        compute_information_parity(["a"], None, model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"`predictions`\[1\] is not valid Unicode"):
        compute_information_parity(["fine", "bad \ud800 text"], ["a", "b"], model=model, tokenizer=tokenizer)


def test_a_per_language_loop_scores_the_shared_references_once(load_calls, monkeypatch):
    scored = []
    original = TransformersBackend.score

    def counting(backend, items, **kwargs):
        scored.extend(items)
        return original(backend, items, **kwargs)

    monkeypatch.setattr(TransformersBackend, "score", counting)
    monkeypatch.setattr(TransformersBackend, "identify", classmethod(lambda cls, model_id, **kw: {"model": model_id}))
    first = compute_information_parity(PREDICTIONS[:2], REFERENCES[:2], model_id="tiny-a")
    assert len(scored) == 4
    second = compute_information_parity(PREDICTIONS[2:], REFERENCES[:2], model_id="tiny-a")
    assert len(scored) == 6  # only the two new predictions: the references come from the first call
    fresh = compute_information_parity(PREDICTIONS[2:], REFERENCES[:2], model_id="tiny-b")
    assert len(scored) == 10  # another model's identity shares nothing
    assert second["scores"] == fresh["scores"] and first["scores"] != second["scores"]


def test_information_parity_reuses_the_reference_scores_of_an_earlier_call(tokenizer, monkeypatch):
    model = build_model(len(tokenizer), seed=11)
    # Named by id, as evaluate users name it: scores are reused under the model's identity (a model object
    # has none, since its weights may change between calls).
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: (model, tokenizer))
    references = ["The quick brown fox jumps over the lazy dog, and then it runs far away into the woods.",
                  "Write a short poem about the sea, the wind and the long grey waves that break on the shore."]
    first = ["Le renard brun saute.", "Écris un poème."]
    second = ["Der Fuchs springt.", "Schreib ein Gedicht."]
    fed = []

    def count(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        fed.append(0 if ids is None else int(ids.numel()))

    module = evaluate.load("./metrics/information_parity")
    module.compute(predictions=first, references=references, model_id="tiny-parity-model")
    hook = model.get_decoder().register_forward_pre_hook(count, with_kwargs=True)
    try:
        result = module.compute(predictions=second, references=references, model_id="tiny-parity-model")
    finally:
        hook.remove()
    prediction_tokens = sum(len(tokenizer(text, add_special_tokens=False).input_ids) + 1 for text in second)
    reference_tokens = sum(len(tokenizer(text, add_special_tokens=False).input_ids) for text in references)
    assert reference_tokens > 2 * prediction_tokens  # the bound below tells the two apart
    assert sum(fed) <= 1.5 * prediction_tokens, (sum(fed), prediction_tokens, reference_tokens)
    fresh = evaluate.load("./metrics/information_parity").compute(
        predictions=second, references=references, model=build_model(len(tokenizer), seed=11), tokenizer=tokenizer)
    assert result["scores"] == pytest.approx(fresh["scores"], rel=1e-5)
