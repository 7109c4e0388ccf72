"""Information Parity against the published `information-parity` 0.1.1 package (a test dependency only)."""

import math

import pytest

from hf_adapters.formulas.information_parity import compute_information_parity
from tests.formulas.test_parity import PREDICTIONS, REFERENCES

information_parity = pytest.importorskip("information_parity")


@pytest.fixture
def package(model, tokenizer):
    # Flag False: the package prepends the tokenizer's BOS, which this tokenizer does not add itself.
    return information_parity.InformationParity(model, tokenizer, is_sentence_piece_tokenizer=False, device="cpu")


def test_tokenizer_adds_no_bos_by_itself(tokenizer):
    assert tokenizer.bos_token_id not in tokenizer("hello").input_ids


def test_mean_and_std_equal_the_package(model, tokenizer, package):
    expected_mean, expected_std = package.compute_information_parity(REFERENCES, PREDICTIONS)
    result = compute_information_parity(PREDICTIONS, REFERENCES, model=model, tokenizer=tokenizer)
    assert result["information_parity"] == pytest.approx(float(expected_mean), rel=1e-4)
    assert result["information_parity_std"] == pytest.approx(float(expected_std), rel=1e-4)


def test_per_pair_scores_equal_the_package(model, tokenizer, package):
    expected = [package.compute_pair_information_parity(r, p) for p, r in zip(PREDICTIONS, REFERENCES, strict=True)]
    result = compute_information_parity(PREDICTIONS, REFERENCES, model=model, tokenizer=tokenizer)
    assert result["scores"] == pytest.approx(expected, rel=1e-4)


def test_package_divides_by_zero_on_empty_text_where_we_give_nan(model, tokenizer, package):
    with pytest.raises(ZeroDivisionError):
        package.compute_information_parity(["Hello there."], [""])
    result = compute_information_parity([""], ["Hello there."], model=model, tokenizer=tokenizer)
    assert math.isnan(result["scores"][0])


def test_benchmark_rows_compute_the_same_means_as_the_package(model, tokenizer):
    from benchmarks.peers.parity_vs_package import run_core_one_at_a_time, run_package

    grouped = {"eng": dict(enumerate(REFERENCES)), "xx": dict(enumerate(PREDICTIONS)), "yy": {0: PREDICTIONS[0]}}
    package_means = run_package(model, tokenizer, grouped, "eng")
    core_means = run_core_one_at_a_time(model, tokenizer, grouped, "eng")
    assert list(package_means) == list(core_means) == ["xx", "yy"]
    for lang, mean in package_means.items():
        assert core_means[lang] == pytest.approx(mean, rel=1e-4)
