"""Reward models: the head's value at the last token of each chat-templated row against each row run
alone, OpenDataArena-Tool's convention, and what is refused (remote code, a model without the head)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from hf_adapters.backends import RewardModelBackend, TransformersBackend
from hf_adapters.backends.transformers.reward_model import RewardModelError
from hf_adapters.formulas.reward import RewardOptions, reward_conversation
from hf_adapters.scorers import ConfigError, build_scorer
from tests.conftest import assert_exact, build_tokenizer, saved_model
from tests.formulas.test_judgment_scores import ROWS

CHAT_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
EXACT = RewardOptions()
RECORDS = [{"instruction": i, "input": n, "output": o} for i, n, o in ROWS]


@pytest.fixture(scope="module")
def reward_tokenizer():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def reward_model(reward_tokenizer):
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=len(reward_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, num_labels=1,
                         pad_token_id=reward_tokenizer.pad_token_id)
    return LlamaForSequenceClassification(config).eval()


@pytest.fixture(scope="module")
def reward_dir(tmp_path_factory, reward_model, reward_tokenizer) -> str:
    return saved_model(tmp_path_factory.mktemp("tiny-reward-model"), reward_model, reward_tokenizer)


def row_ids(tokenizer, row, options=EXACT) -> list[int]:
    text = tokenizer.apply_chat_template(reward_conversation(*row, options), tokenize=False)
    return tokenizer(text, add_special_tokens=False).input_ids


@torch.inference_mode()
def naive_rewards(model, tokenizer, rows, options=EXACT, cut=None) -> list[float]:
    """Each row alone through the model: transformers' own pooled logit of an unpadded sequence."""
    return [float(model(torch.tensor([row_ids(tokenizer, row, options)[-cut if cut else 0:]])).logits[0, 0])
            for row in rows]


@pytest.mark.kernels
@pytest.mark.parametrize("batch_size", [1, 3])
def test_a_reward_is_the_head_at_the_last_token_of_the_row_alone(reward_dir, reward_model, reward_tokenizer,
                                                                  batch_size):
    rewards = build_scorer({"name": "RewardModelScorer", "model": reward_dir,
                            "batch_size": batch_size}).score_rows(RECORDS)
    assert_exact(rewards, lambda m: naive_rewards(m, reward_tokenizer, ROWS), reward_model)


def test_opendataarenas_convention_drops_the_input_and_keeps_the_last_tokens(reward_dir, reward_model,
                                                                            reward_tokenizer, caplog):
    lengths = [len(row_ids(reward_tokenizer, row)) for row in ROWS]
    cut = sorted(lengths)[1]
    exact = build_scorer({"name": "SkyworkRewardScorer", "model": reward_dir, "max_length": cut}).score_rows(RECORDS)
    assert [math.isnan(value) for value in exact] == [length > cut for length in lengths]
    assert "the conversation has" in caplog.text
    peer = build_scorer({"name": "SkyworkRewardScorer", "model": reward_dir, "max_length": cut,
                         "convention": "opendataarena"}).score_rows(RECORDS)
    options = RewardOptions(convention="opendataarena")
    assert reward_conversation("Add.", "2 + 3", "5", options)[0]["content"] == "Add."
    assert peer == pytest.approx(naive_rewards(reward_model, reward_tokenizer, ROWS, options, cut), rel=1e-5, abs=1e-6)


def test_a_reward_model_that_needs_its_own_code_is_refused_naming_it(reward_dir, tmp_path):
    folder = tmp_path / "custom-rm"
    folder.mkdir()
    config = json.loads((Path(reward_dir) / "config.json").read_text(encoding="utf-8"))
    config.update(architectures=["CustomForSequenceClassification"],
                  auto_map={"AutoModelForSequenceClassification": "modeling_custom.CustomForSequenceClassification"})
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(RewardModelError, match="CustomForSequenceClassification.*needs its own code"):
        RewardModelBackend.from_pretrained(str(folder))


@pytest.mark.parametrize("backend", ["reward-model", "vllm"])
def test_a_reward_model_that_needs_its_own_code_is_refused_whichever_backend_loads_it(reward_dir, tmp_path, backend):
    """vLLM would read such a model with its own class of the declared architecture, whatever the model's code."""
    folder = tmp_path / "custom-rm"
    folder.mkdir()
    for file in Path(reward_dir).iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_custom.CustomForSequenceClassification"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    scorer = build_scorer({"name": "RewardModelScorer", "model": str(folder), "backend": backend})
    with pytest.raises(RewardModelError, match="LlamaForSequenceClassification.*needs its own code"):
        scorer.score_rows(RECORDS[:1])


def test_a_causal_lm_is_not_a_reward_model_and_a_likelihood_backend_computes_no_rewards(model, tokenizer):
    with pytest.raises(RewardModelError, match="no linear `score` head"):
        RewardModelBackend(model, tokenizer)
    with pytest.raises(NotImplementedError, match="holds no sequence classifier"):
        TransformersBackend(model, tokenizer).head_values([[1, 2]])


def test_a_tokenizer_without_a_chat_template_is_a_clear_error(reward_model):
    with pytest.raises(ValueError, match="has no chat template"):
        build_scorer({"name": "RewardModelScorer", "model": reward_model,
                      "tokenizer": build_tokenizer()}).score_rows(RECORDS[:1])


def test_a_reward_model_of_an_architecture_transformers_lacks_is_refused_not_given_a_random_head(reward_dir,
                                                                                                  tmp_path):
    folder = tmp_path / "custom-head"
    folder.mkdir()
    for file in Path(reward_dir).iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = ["AtheneForSequenceClassification"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(RewardModelError, match="AtheneForSequenceClassification, which transformers does not ship"):
        RewardModelBackend.from_pretrained(str(folder))


def test_a_reward_model_cannot_join_a_score_set_of_one_causal_lm():
    with pytest.raises(ConfigError, match="SkyworkRewardScorer .member 1 of the score set. reads a model of its own"):
        build_scorer({"scores": ["IFDScorer", "SkyworkRewardScorer"]})
