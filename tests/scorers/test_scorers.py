"""PPLScorer and IFDScorer: built from seed YAML configs, same numbers as the metrics, bad rows named."""

from pathlib import Path

import pytest

from hf_adapters.backends import loading as models
from hf_adapters.core.texts import ppl_text
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT, compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.ifeval import demo_rows
from hf_adapters.scorers import SCORERS, ConfigError, IFDScorer, PPLScorer, build_scorer, load_config
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS

CONFIGS = Path(__file__).resolve().parents[2] / "hf_adapters" / "configs"
# The seed's example configs, verbatim.
SEED_IFD_YAML = r"""name: IFDScorer
model: Qwen/Qwen2.5-3B-Instruct
max_length: 2048
batch_size: 1
template: "<|im_start|>user\n{instruction}\n{input}<|im_end|>\n<|im_start|>assistant\n"
template_no_input: "<|im_start|>user\n{instruction}<|im_end|>\n<|im_start|>assistant\n"
"""
SEED_PPL_YAML = """name: PPLScorer
model: meta-llama/Llama-3.1-8B
max_length: 2048
batch_size: 8
"""
ROWS = [
    {"id": f"r{i}", "instruction": instruction, "input": input, "output": output}
    for i, (instruction, input, output) in enumerate(zip(INSTRUCTIONS, INPUTS, OUTPUTS, strict=True))
]


def write(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_scorers_are_registered_with_the_seed_keys_plus_an_optional_dtype():
    assert SCORERS["PPLScorer"] is PPLScorer and SCORERS["IFDScorer"] is IFDScorer
    assert set(PPLScorer.options) == {"model", "max_length", "batch_size", "dtype"}
    assert set(IFDScorer.options) == {"model", "max_length", "batch_size", "dtype", "template", "template_no_input"}
    assert IFDScorer.options["template"] == DEFAULT_TEMPLATE
    assert IFDScorer.options["template_no_input"] == DEFAULT_TEMPLATE_NO_INPUT
    assert PPLScorer.options["model"] == IFDScorer.options["model"] == models.DEFAULT_MODEL_ID


def test_seed_ifd_yaml_verbatim_builds_and_scores_like_the_metric(tmp_path, model, tokenizer, load_calls):
    scorer = build_scorer(load_config(write(tmp_path, SEED_IFD_YAML)))
    assert isinstance(scorer, IFDScorer)
    assert scorer.config["template"] == DEFAULT_TEMPLATE and scorer.config["batch_size"] == 1
    assert load_calls == []  # nothing is loaded until rows are scored
    scores = scorer.score_rows(ROWS)
    assert load_calls == ["Qwen/Qwen2.5-3B-Instruct"]
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer)["ifd_scores"]
    assert scores == pytest.approx(expected, rel=1e-6)


def test_seed_ppl_yaml_verbatim_builds_and_scores_like_the_metric(tmp_path, model, tokenizer, load_calls):
    scorer = build_scorer(load_config(write(tmp_path, SEED_PPL_YAML)))
    assert isinstance(scorer, PPLScorer)
    scores = scorer.score_rows(ROWS)
    assert load_calls == ["meta-llama/Llama-3.1-8B"]
    texts = [ppl_text(*row) for row in zip(INSTRUCTIONS, INPUTS, OUTPUTS, strict=True)]
    assert scores == pytest.approx(compute_perplexity(texts, model=model, tokenizer=tokenizer)["perplexities"],
                                   rel=1e-6)


@pytest.mark.parametrize(("file", "cls"), [("ifd.yaml", IFDScorer), ("ppl.yaml", PPLScorer)])
def test_shipped_example_configs_build_the_default_model_scorers(file, cls):
    scorer = build_scorer(load_config(CONFIGS / file))
    assert isinstance(scorer, cls)
    assert scorer.config == {**cls.options, "batch_size": 16}  # the seed's; without it, the backend's choice


def test_the_getting_started_set_scores_ifd_perplexity_and_entropy_on_ifds_two_passes(model_dir):
    """Issue 59: the recipe ran IFD and perplexity as two jobs (1.4x the cost) and gave no entropy."""
    score_set = build_scorer(load_config(CONFIGS / "ifd_perplexity_entropy.yaml"), model=model_dir)
    rows = {"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS}
    scores = score_set.score_batch(rows)
    assert {"ifd", "perplexity", "answer_entropy"} <= scores.keys()
    assert score_set.work["forward_passes"] == 2 * len(OUTPUTS)
    assert scores["ifd"] == pytest.approx(compute_ifd(INSTRUCTIONS, OUTPUTS, inputs=INPUTS, model_id=model_dir,
                                                      template=DEFAULT_TEMPLATE,
                                                      template_no_input=DEFAULT_TEMPLATE_NO_INPUT)["ifd_scores"],
                                          rel=1e-5)


def test_overrides_replace_config_keys(tmp_path):
    scorer = build_scorer(load_config(write(tmp_path, SEED_IFD_YAML)), batch_size=32, model=None)
    assert scorer.config["batch_size"] == 32 and scorer.config["model"] == "Qwen/Qwen2.5-3B-Instruct"


def test_unknown_key_is_an_error_listing_the_valid_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"\['temperature'\].*valid keys: \['name', 'batch_size', 'dtype', "
                                          r"'max_length', 'model', 'template', 'template_no_input'\]"):
        build_scorer(load_config(write(tmp_path, SEED_IFD_YAML + "temperature: 0.5\n")))
    with pytest.raises(ConfigError, match=r"valid keys: \['name', 'batch_size', 'dtype', 'max_length', 'model'\]"):
        build_scorer({"name": "PPLScorer", "template": "{instruction}"})


def test_unknown_name_is_an_error_listing_the_valid_names(tmp_path):
    with pytest.raises(ConfigError, match=r"'IFDScore'.*valid scorers: \[.*'IFDScorer'.*'PPLScorer'"):
        build_scorer(load_config(write(tmp_path, SEED_IFD_YAML.replace("IFDScorer", "IFDScore"))))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"max_length": "2048"}, "`max_length` must be an integer of at least 2"),
        ({"batch_size": 0}, "`batch_size` must be a positive integer"),
        ({"model": None}, "`model` must be a model id"),
        ({"template": 3}, "`template` must be a string"),
        ({"template": "{instruction} {context}"}, "only {instruction} and {input}"),
        ({"template_no_input": "{instruction}\n{input}"}, "`template_no_input` must use only"),
    ],
)
def test_bad_config_values_are_clear_errors(config, message):
    with pytest.raises(ConfigError, match=message):
        IFDScorer(**config)


@pytest.mark.parametrize("cls", [IFDScorer, PPLScorer])
def test_missing_or_none_input_is_empty_and_missing_id_is_fine(cls, load_calls):
    rows = [{"instruction": "Say hi.", "output": "Hi."}, {"instruction": "Say hi.", "input": None, "output": "Hi."},
            {"id": "c", "instruction": "Say hi.", "input": "", "output": "Hi."}]
    scores = cls().score_rows(rows)
    assert scores[0] == scores[1] == scores[2]


@pytest.mark.parametrize("cls", [IFDScorer, PPLScorer])
@pytest.mark.parametrize("field", ["instruction", "output"])
def test_missing_instruction_or_output_is_an_error_naming_row_and_field(cls, field, load_calls):
    rows = [dict(row) for row in ROWS[:3]]
    del rows[2][field]
    with pytest.raises(ValueError, match=rf"Row 2 \(id='r2'\) has no field '{field}'"):
        cls().score_rows(rows)
    assert load_calls == []


@pytest.mark.parametrize("cls", [IFDScorer, PPLScorer])
def test_non_string_field_is_an_error_naming_row_and_field(cls, load_calls):
    rows = [dict(row) for row in ROWS[:2]]
    rows[1]["input"] = ["a", "list"]
    with pytest.raises(ValueError, match=r"Row 1 \(id='r1'\): field 'input' must be a string"):
        cls().score_rows(rows)


def test_empty_output_scores_nan_and_keeps_every_row(load_calls):
    rows = [dict(row) for row in ROWS[:3]]
    rows[1]["output"] = ""
    scores = IFDScorer().score_rows(rows)
    assert len(scores) == 3 and scores[1] != scores[1] and scores[0] == scores[0]


def test_ifeval_scorer_gives_prompt_level_strict_per_row():
    scorer = build_scorer({"name": "IFEvalScorer"})
    assert scorer.score_rows(demo_rows()) == [1.0, 1.0, 0.0, 0.0]


def test_ifeval_scorer_names_a_row_without_its_response_field():
    rows = demo_rows()
    scorer = build_scorer({"name": "IFEvalScorer", "response_column": "answer"})
    with pytest.raises(ValueError, match="Row 0 .* 'answer'"):
        scorer.score_rows(rows)


def test_dtype_key_is_optional_and_checked():
    assert build_scorer({"name": "IFDScorer", "dtype": "bfloat16"}).config["dtype"] == "bfloat16"
    assert build_scorer({"name": "PPLScorer"}).config["dtype"] is None
    with pytest.raises(ConfigError, match="Unknown dtype"):
        build_scorer({"name": "PPLScorer", "dtype": "int4"})
