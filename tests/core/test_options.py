"""Numeric options are checked in one place, before any model is loaded, by every entry point."""

import pytest
from datasets import Dataset

from hf_adapters.backends import score_continuations
from hf_adapters.columns.dataset_columns import add_information_parity_column, add_perplexity_column
from hf_adapters.core.options import check_lengths
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.information_parity import compute_information_parity
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.scorers import ConfigError, build_scorer, load_config

BAD_OPTIONS = [({"max_length": -5}, "max_length"), ({"max_length": 1}, "max_length"),
               ({"max_length": 2.5}, "max_length"), ({"batch_size": 0}, "batch_size"),
               ({"batch_size": -1}, "batch_size"), ({"batch_size": "8"}, "batch_size"),
               ({"batch_size": True}, "batch_size")]


@pytest.mark.parametrize(("options", "name"), BAD_OPTIONS)
def test_every_entry_point_refuses_a_bad_length_or_batch_size_before_loading(options, name, load_calls):
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        compute_perplexity(["a text"], **options)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        compute_information_parity(["un texte"], ["a text"], **options)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        compute_ifd(["Say hi."], ["Hi."], **options)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        add_perplexity_column(Dataset.from_dict({"text": ["a"]}), text_column="text", model_id="tiny", **options)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        add_information_parity_column(Dataset.from_dict({"t": ["a"], "r": ["b"]}), prediction_column="t",
                                      reference_column="r", model_id="tiny",
                                      **options)
    for scorer in ("PPLScorer", "IFDScorer", "InformationParityScorer"):
        with pytest.raises(ConfigError, match=f"{scorer}: `{name}` must be"):
            build_scorer({"name": scorer, **options})
    assert load_calls == []


@pytest.mark.parametrize(("options", "name"), BAD_OPTIONS)
def test_the_core_refuses_them_too(model, tokenizer, options, name):
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        score_continuations(model, tokenizer, [([1], [2, 3])], **options)


def test_good_options_pass():
    check_lengths(None, 1)
    check_lengths(2, 16)


def test_malformed_yaml_is_a_config_error_naming_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: PPLScorer\nbatch_size: [1,\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.yaml is not valid YAML"):
        load_config(path)
