"""The `metrics/ifd` evaluate module: same numbers as `compute_ifd`, bad rows named, and one real-model run."""

import math
from pathlib import Path

import evaluate
import pytest
from datasets import Dataset

from hf_adapters import add_ifd_column
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, load_model
from hf_adapters.formulas.ifd import compute_ifd
from tests.conftest import assert_exact
from tests.core.test_conversations import GOOD
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS, naive_ifd

METRIC = str(Path(__file__).resolve().parents[2] / "metrics" / "ifd")
ALPACA_ROWS = [
    ("Give three tips for staying healthy.", "",
     "1. Eat a balanced diet.\n2. Exercise regularly.\n3. Get enough sleep."),
    ("Translate the sentence into French.", "The cat is sleeping.", "Le chat dort."),
    ("Classify the sentiment of this review.", "I loved every minute of it!", "Positive"),
]


@pytest.fixture(scope="module")
def ifd_metric():
    return evaluate.load(METRIC)


@pytest.mark.parametrize("mode", ["ppl_ratio", "loss_ratio"])
@pytest.mark.kernels
def test_metric_returns_the_numbers_of_compute_ifd(ifd_metric, model, tokenizer, mode):
    result = ifd_metric.compute(instructions=INSTRUCTIONS, inputs=INPUTS, outputs=OUTPUTS, model=model,
                                tokenizer=tokenizer, mode=mode, batch_size=2)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, mode=mode)
    assert sorted(result) == ["conditional_perplexities", "direct_perplexities", "ifd_scores", "mean_ifd", "num_valid"]
    for key in ("ifd_scores", "conditional_perplexities", "direct_perplexities"):
        assert result[key] == pytest.approx(expected[key], rel=1e-6)
    assert result["mean_ifd"] == pytest.approx(expected["mean_ifd"], rel=1e-6)
    assert result["num_valid"] == expected["num_valid"]


@pytest.mark.parametrize("convention", ["cherry", "superfiltering", "opendataarena"])
def test_metric_returns_a_peer_conventions_numbers_of_compute_ifd(ifd_metric, model, tokenizer, convention):
    result = ifd_metric.compute(instructions=INSTRUCTIONS, inputs=INPUTS, outputs=OUTPUTS, model=model,
                                tokenizer=tokenizer, convention=convention, max_length=256)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, convention=convention,
                           max_length=256)
    assert result["ifd_scores"] == pytest.approx(expected["ifd_scores"], rel=1e-6, nan_ok=True)
    assert result["num_valid"] == expected["num_valid"] > 0


def test_metric_accepts_omitted_inputs(ifd_metric, model, tokenizer):
    result = ifd_metric.compute(instructions=INSTRUCTIONS, outputs=OUTPUTS, model=model, tokenizer=tokenizer)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer)
    assert result["ifd_scores"] == pytest.approx(expected["ifd_scores"], rel=1e-6)


def test_metric_gives_nan_for_an_empty_output(ifd_metric, model, tokenizer):
    result = ifd_metric.compute(instructions=["Say hi.", "Say bye."], outputs=["", "Bye."], model=model,
                                tokenizer=tokenizer)
    assert math.isnan(result["ifd_scores"][0]) and result["num_valid"] == 1


def test_metric_names_a_bad_row_before_casting(ifd_metric, model, tokenizer):
    with pytest.raises(TypeError, match=r"`outputs`\[1\]"):
        ifd_metric.compute(instructions=["a", "b"], outputs=["x", 2], model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="same length"):
        ifd_metric.compute(instructions=["a", "b"], outputs=["x"], model=model, tokenizer=tokenizer)


@pytest.mark.slow
@pytest.mark.kernels
def test_real_default_model_matches_naive_reference_on_three_rows(ifd_metric):
    """Loads the real default model (SmolLM2-135M-Instruct, embedded GGUF); the exactness criterion
    holds for both perplexities and both IFD modes."""
    model, tokenizer = load_model(DEFAULT_MODEL_ID)
    instructions, inputs, outputs = (list(column) for column in zip(*ALPACA_ROWS, strict=True))
    result = ifd_metric.compute(instructions=instructions, inputs=inputs, outputs=outputs)
    loss = compute_ifd(instructions, outputs, inputs, mode="loss_ratio")
    keys = ("conditional", "direct", "ppl_ratio", "loss_ratio")

    def naive(m):
        return [[naive_ifd(m, tokenizer, *row)[key] for key in keys] for row in ALPACA_ROWS]

    actual = [[result["conditional_perplexities"][row], result["direct_perplexities"][row],
               result["ifd_scores"][row], loss["ifd_scores"][row]] for row in range(len(ALPACA_ROWS))]
    assert_exact(actual, naive, model)
    assert result["num_valid"] == 3
    # An instruction-tuned model finds its answers easier after the prompt.
    assert result["mean_ifd"] < 1


def test_missing_instructions_are_an_error_naming_them_not_a_cache_file_message(ifd_metric):
    with pytest.raises(TypeError, match="`instructions` is missing"):
        ifd_metric.compute(outputs=None)


@pytest.mark.parametrize(("option", "default"), [("convention", "exact"), ("direction", "forward"),
                                                 ("return_token_losses", False)])
def test_the_ifd_metric_with_messages_accepts_options_at_their_defaults(model, tokenizer, option, default):
    module = evaluate.load("./metrics/ifd")
    expected = add_ifd_column(Dataset.from_dict({"messages": [GOOD]}), messages_column="messages", model=model,
                              tokenizer=tokenizer, **{option: default})["ifd"]
    result = module.compute(messages=[GOOD], model=model, tokenizer=tokenizer, **{option: default})
    assert result["ifd_scores"] == pytest.approx(list(expected), rel=1e-6)


def test_the_ifd_metric_refuses_instructions_together_with_messages(model, tokenizer):
    with pytest.raises(ValueError, match="instructions"):
        evaluate.load("./metrics/ifd").compute(messages=[GOOD], instructions=["Say hi."], outputs=["Hi!"],
                                               model=model, tokenizer=tokenizer)


def test_the_ifd_metric_add_batch_without_inputs(model, tokenizer):
    module = evaluate.load("./metrics/ifd")
    module.add_batch(instructions=["Say hi.", "Name a colour."], outputs=["Hi!", "Red."])
    result = module.compute(model=model, tokenizer=tokenizer)
    expected = compute_ifd(["Say hi.", "Name a colour."], ["Hi!", "Red."], model=model, tokenizer=tokenizer)
    assert result["ifd_scores"] == pytest.approx(expected["ifd_scores"], rel=1e-6)
