"""The `metrics/ifd` evaluate module: same numbers as `compute_ifd`, bad rows named, and one real-model run."""

import math
from pathlib import Path

import evaluate
import pytest

from hf_adapters.ifd import compute_ifd
from hf_adapters.models import DEFAULT_MODEL_ID, load_model
from tests.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS, naive_ifd

METRIC = str(Path(__file__).resolve().parents[1] / "metrics" / "ifd")
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
def test_metric_returns_the_numbers_of_compute_ifd(ifd_metric, model, tokenizer, mode):
    result = ifd_metric.compute(instructions=INSTRUCTIONS, inputs=INPUTS, outputs=OUTPUTS, model=model,
                                tokenizer=tokenizer, mode=mode, batch_size=2)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, mode=mode)
    assert sorted(result) == ["conditional_perplexities", "direct_perplexities", "ifd_scores", "mean_ifd", "num_valid"]
    for key in ("ifd_scores", "conditional_perplexities", "direct_perplexities"):
        assert result[key] == pytest.approx(expected[key], rel=1e-6)
    assert result["mean_ifd"] == pytest.approx(expected["mean_ifd"], rel=1e-6)
    assert result["num_valid"] == expected["num_valid"]


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
def test_real_default_model_matches_naive_reference_on_three_rows(ifd_metric):
    """The only test that loads the real default model (SmolLM2-135M-Instruct, embedded GGUF).

    Mean NLLs and the loss ratio agree to 1e-5 relative. PPL(A|Q) / PPL(A) = exp(c - d) turns the
    float32 rounding of c and d (about 1e-6 of each) into a relative error of about 1e-6 (c + d),
    so its log is compared to c - d at that scale.
    """
    model, tokenizer = load_model(DEFAULT_MODEL_ID)
    instructions, inputs, outputs = (list(column) for column in zip(*ALPACA_ROWS, strict=True))
    result = ifd_metric.compute(instructions=instructions, inputs=inputs, outputs=outputs)
    loss = compute_ifd(instructions, outputs, inputs, mode="loss_ratio")
    for row, (instruction, input, output) in enumerate(ALPACA_ROWS):
        expected = naive_ifd(model, tokenizer, instruction, input, output)
        c, d = expected["nll_conditional"], expected["nll_direct"]
        assert math.log(result["conditional_perplexities"][row]) == pytest.approx(c, rel=1e-5)
        assert math.log(result["direct_perplexities"][row]) == pytest.approx(d, rel=1e-5)
        assert loss["ifd_scores"][row] == pytest.approx(expected["loss_ratio"], rel=1e-5)
        assert math.log(result["ifd_scores"][row]) == pytest.approx(c - d, abs=1e-5 * (c + d))
    assert result["num_valid"] == 3
    # An instruction-tuned model finds its answers easier after the prompt.
    assert result["mean_ifd"] < 1
