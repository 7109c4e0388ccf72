"""The evaluate module script, the datasets column helper, the CLI row scorer and the demo rows."""

from pathlib import Path

import datasets
import evaluate
import pytest

from hf_adapters import add_ifeval_columns
from hf_adapters.ifeval import IFEvalInputError, demo_rows, ifeval_row_score

METRIC_DIR = Path(__file__).resolve().parents[2] / "metrics" / "ifeval"

JSONL_ROW = {
    "key": 1,
    "prompt": "Write two words without commas.",
    "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
    "kwargs": [{}, {"num_words": 2, "relation": "at least"}],
}
# the same row as the hub data set google/IFEval gives it: every kwarg key, None when absent
HUB_KWARGS = {"num_words": None, "relation": None, "keyword": None, "letter": None, "num_highlights": None}
HUB_ROW = JSONL_ROW | {"kwargs": [HUB_KWARGS, HUB_KWARGS | {"num_words": 2, "relation": "at least"}]}


@pytest.fixture(scope="module")
def metric():
    return evaluate.load(str(METRIC_DIR))


def test_metric_scores_jsonl_and_hub_rows_alike(metric):
    predictions = ["hello world", "hello, world", "hi"]
    expected = {
        "prompt_level_strict_acc": pytest.approx(1 / 3),
        "inst_level_strict_acc": pytest.approx(4 / 6),
        "prompt_level_loose_acc": pytest.approx(1 / 3),
        "inst_level_loose_acc": pytest.approx(4 / 6),
    }
    assert metric.compute(predictions=predictions, references=[JSONL_ROW] * 3) == expected
    assert metric.compute(predictions=predictions, references=[HUB_ROW] * 3) == expected


def test_metric_detailed_output(metric):
    scores = metric.compute(predictions=["hello world", "hello, world"], references=[JSONL_ROW] * 2, detailed=True)
    assert scores["strict_follow_instruction_list"] == [[True, True], [False, True]]
    assert scores["per_instruction"]["punctuation:no_comma"]["strict_acc"] == 0.5
    assert scores["per_instruction"]["length_constraints:number_words"]["count"] == 2


def test_metric_add_and_add_batch_accumulate(metric):
    metric.add(prediction="hello world", reference=JSONL_ROW)
    metric.add_batch(predictions=["a, b"], references=[HUB_ROW])
    assert metric.compute()["prompt_level_strict_acc"] == 0.5


def test_metric_rejects_an_unknown_id_naming_the_row(metric):
    bad = {"key": 9, "instruction_id_list": ["punctuation:semicolon"], "kwargs": [{}]}
    with pytest.raises(IFEvalInputError, match=r"'punctuation:semicolon' \(row 1, key 9\)"):
        metric.compute(predictions=["x", "y"], references=[JSONL_ROW, bad])


def test_add_ifeval_columns_adds_per_row_results_from_arrow_rows():
    ds = datasets.Dataset.from_list(
        [JSONL_ROW | {"response": "hello world"}, JSONL_ROW | {"key": 2, "response": "hello, world"}]
    )
    # Arrow unified the kwargs structs: absent keys are now None
    assert ds[0]["kwargs"][0] == {"num_words": None, "relation": None}
    out = add_ifeval_columns(ds)
    assert out["ifeval_strict"] == [[True, True], [False, True]]
    assert out["ifeval_loose"] == [[True, True], [False, True]]
    assert out["ifeval_prompt_strict"] == [True, False]
    assert out["ifeval_prompt_loose"] == [True, False]


def test_add_ifeval_columns_custom_names_and_dataset_dict():
    ds = datasets.Dataset.from_list([{"ids": ["punctuation:no_comma"], "kw": [{}], "answer": "a, b"}])
    out = add_ifeval_columns(
        datasets.DatasetDict(test=ds),
        response_column="answer",
        instruction_ids_column="ids",
        kwargs_column="kw",
        prefix="if_",
    )
    assert out["test"]["if_prompt_strict"] == [False]


def test_add_ifeval_columns_missing_column_is_named():
    ds = datasets.Dataset.from_list([{"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}])
    with pytest.raises(ValueError, match="column 'response' not found"):
        add_ifeval_columns(ds)


def test_row_score_is_prompt_level_strict():
    assert ifeval_row_score(JSONL_ROW | {"response": "hello world"}) == 1.0
    assert ifeval_row_score(JSONL_ROW | {"response": "hello, world"}) == 0.0
    assert ifeval_row_score(HUB_ROW | {"text": "hello world"}, response_field="text") == 1.0
    with pytest.raises(ValueError, match="no response field 'response'"):
        ifeval_row_score(JSONL_ROW)


def test_demo_rows_score_and_mix_outcomes():
    scores = [ifeval_row_score(row) for row in demo_rows()]
    assert scores == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("response", [None, 3])
def test_a_response_that_is_not_a_string_is_an_error_naming_it(metric, response):
    with pytest.raises(TypeError, match=r"`predictions`\[1\] must be a string"):
        metric.compute(predictions=["hello world", response], references=[JSONL_ROW, JSONL_ROW])


def test_missing_predictions_is_an_error_naming_them(metric):
    with pytest.raises(TypeError, match="`predictions` is missing"):
        metric.compute(references=[JSONL_ROW])
