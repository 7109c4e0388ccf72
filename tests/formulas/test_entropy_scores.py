"""UPD, HES and NormLoss (OpenDataArena's scorers) against naive float64 one-row-at-a-time computations of
their definitions, and the configs that name them (and ExcessLossScorer) on the command line."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch
from datasets import Dataset

from hf_adapters import cli
from hf_adapters.formulas.entropy_scores import HESOptions, high_entropy_sum
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT
from hf_adapters.scorers import AnswerEntropyScorer, HESScorer, NormLossScorer, UPDScorer
from tests.conftest import assert_exact

ROWS = [
    {"id": "a", "instruction": "Write a poem about the sea.", "input": "", "output": "The sea is wide and deep."},
    {"id": "b", "instruction": "Summarise:", "input": "Cats are small mammals.", "output": "Cats. 🐈"},
    {"id": "c", "instruction": "Say nothing.", "input": "", "output": ""},
    {"id": "d", "instruction": "Translate.", "input": "Le chien", "output": "The dog runs fast, very fast, today."},
]


def log_probs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids]), use_cache=False).logits[0].double(), dim=-1)


def naive_upd(model, tokenizer, row):
    prompt = row["instruction"] + "\n" + (row["input"] + "\n" if row["input"] else "")
    ids = tokenizer(prompt + row["output"], add_special_tokens=False).input_ids
    start = len(tokenizer(prompt, add_special_tokens=False).input_ids)
    if start >= len(ids):
        return math.nan
    logprobs, values = log_probs(model, ids), []
    for j in range(start, len(ids)):
        if ids[j] == tokenizer.pad_token_id:
            continue
        nll, entropy = -logprobs[j - 1, ids[j]].item(), -(logprobs[j - 1].exp() * logprobs[j - 1]).sum().item()
        values.append(1 / (1 + math.exp(-nll)) * max(0.0, 1 - entropy / math.log(model.config.vocab_size)))
    return sum(values) / len(values)


def naive_hes(model, tokenizer, row, cutoff=0.005):
    if not row["output"]:
        return math.nan
    prompt = row["instruction"] + ("\n" + row["input"] if row["input"] else "")
    ids = tokenizer(prompt + row["output"]).input_ids
    start = max(len(tokenizer(prompt, add_special_tokens=False).input_ids), 1)
    logprobs = log_probs(model, ids)
    bits = [-(logprobs[j - 1].exp() * logprobs[j - 1]).sum().item() / math.log(2) for j in range(start, len(ids))]
    threshold = np.percentile(bits, (1 - cutoff) * 100)
    return sum(b for b in bits if b >= threshold)


def naive_norm_loss(model, tokenizer, row):
    ids = tokenizer(row["instruction"] + "\n" + row["output"]).input_ids  # the peer reads `input_text`, absent here
    logprobs = log_probs(model, ids)
    return sum(-logprobs[j - 1, ids[j]].item() for j in range(1, len(ids))) / (len(ids) - 1) / math.log(2)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_upd_equals_its_naive_float64_definition(model, tokenizer, batch_size):
    scores = UPDScorer(model=model, tokenizer=tokenizer, batch_size=batch_size).score_rows(ROWS)
    assert_exact(scores, lambda m: [naive_upd(m, tokenizer, row) for row in ROWS], model)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_hes_equals_its_naive_float64_definition(model, tokenizer, batch_size):
    scorer = HESScorer(model=model, tokenizer=tokenizer, batch_size=batch_size, percentile_cutoff=0.3)
    assert_exact(scorer.score_rows(ROWS), lambda m: [naive_hes(m, tokenizer, row, 0.3) for row in ROWS], model)
    assert math.isnan(scorer.score_rows(ROWS[2:3])[0])


def test_norm_loss_equals_its_naive_float64_definition(model, tokenizer):
    scores = NormLossScorer(model=model, tokenizer=tokenizer, batch_size=2).score_rows(ROWS)
    assert_exact(scores, lambda m: [naive_norm_loss(m, tokenizer, row) for row in ROWS], model)


def test_high_entropy_sum_keeps_the_top_percentile():
    assert high_entropy_sum([1.0, 2.0, 3.0, 4.0], 0.005) == 4.0
    assert high_entropy_sum([1.0, 4.0, 4.0], 0.005) == 8.0
    with pytest.raises(ValueError, match="percentile_cutoff"):
        HESOptions(percentile_cutoff=1.5)


@pytest.mark.parametrize("config, key", [("upd.yaml", "upd"), ("hes.yaml", "hes"), ("normloss.yaml", "norm_loss"),
                                         ("excess_loss.yaml", "excess_loss")])
def test_the_shipped_configs_run_on_the_command_line(tmp_path, model_dir, config, key):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "hf_adapters" / "configs" / config).read_text()
    path = tmp_path / config
    path.write_text(text.replace("reference_model: HuggingFaceTB/SmolLM2-135M-Instruct",
                                 f"reference_model: {model_dir}"))
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    output = tmp_path / "scores.jsonl"
    assert cli.main(["score", str(path), "--data", str(data), "--output", str(output), "--model", model_dir,
                     "--no-progress"]) == 0
    scores = [json.loads(line)["score"] for line in output.read_text().splitlines()]
    assert len(scores) == len(ROWS) and scores[0] is not None
    if key == "excess_loss":
        assert scores[0] == 0.0  # the tiny model against itself


def test_norm_loss_warns_naming_a_row_whose_text_is_one_token(model, tokenizer, caplog):
    """NormLoss never scores a text's first token: a row whose text is one token is NaN, and, as for
    every scorer, a warning names it. Round five, item 11."""
    import logging

    rows = [ROWS[0], {"id": "z", "instruction": "", "input": "", "output": ""}]
    with caplog.at_level(logging.WARNING):
        scores = NormLossScorer(model=model, tokenizer=tokenizer).score_rows(rows)
    assert math.isfinite(scores[0]) and math.isnan(scores[1])
    assert "Row 1 (id='z'): its text is one token" in caplog.text, caplog.text


def naive_answer_scores(model, tokenizer, row, cutoff=0.3):
    """UPD, HES, NormLoss and the mean entropy of the answer's tokens after IFD's default prompt, one row
    at a time: (prompt with the tokenizer's special tokens) + (answer tokenized alone)."""
    if not row["output"]:
        return [math.nan] * 4
    template = DEFAULT_TEMPLATE if row["input"] else DEFAULT_TEMPLATE_NO_INPUT
    context = tokenizer(template.format(instruction=row["instruction"], input=row["input"])).input_ids
    answer = tokenizer(row["output"], add_special_tokens=False).input_ids
    ids, logprobs = context + answer, log_probs(model, context + answer)
    nlls = [-logprobs[j - 1, ids[j]].item() for j in range(len(context), len(ids))]
    entropies = [-(logprobs[j - 1].exp() * logprobs[j - 1]).sum().item() for j in range(len(context), len(ids))]
    upd = [1 / (1 + math.exp(-nll)) * max(0.0, 1 - h / math.log(model.config.vocab_size))
           for nll, h in zip(nlls, entropies, strict=True)]
    bits = [h / math.log(2) for h in entropies]
    threshold = np.percentile(bits, (1 - cutoff) * 100)
    return [sum(upd) / len(upd), sum(b for b in bits if b >= threshold), sum(nlls) / len(nlls) / math.log(2),
            sum(entropies) / len(entropies)]


@pytest.mark.parametrize("batch_size", [1, 3])
def test_the_exact_convention_scores_the_answer_after_ifds_prompt_as_its_naive_float64_definition(
        model, tokenizer, batch_size):
    common = {"model": model, "tokenizer": tokenizer, "batch_size": batch_size, "convention": "exact"}
    scores = [UPDScorer(**common).score_rows(ROWS), HESScorer(**common, percentile_cutoff=0.3).score_rows(ROWS),
              NormLossScorer(**common).score_rows(ROWS), AnswerEntropyScorer(**common).score_rows(ROWS)]
    assert_exact([list(row) for row in zip(*scores, strict=True)],
                 lambda m: [naive_answer_scores(m, tokenizer, row) for row in ROWS], model)


@pytest.mark.parametrize("scorer", [UPDScorer, HESScorer, NormLossScorer, AnswerEntropyScorer])
def test_the_exact_convention_on_chatml_markers_the_tokenizer_lacks_warns_as_ifd_does(
        model, tokenizer, caplog, monkeypatch, scorer):
    from hf_adapters.core import conversations

    monkeypatch.setattr(conversations, "_warned_markers", set())
    with caplog.at_level(logging.WARNING):
        scorer(model=model, tokenizer=tokenizer, convention="exact").score_rows(ROWS[:2])
    assert any("The IFD prompt (`template`) uses ChatML's markers" in message for message in caplog.messages)


@pytest.mark.parametrize(("scorer", "label"), [("UPDScorer", "UPD"), ("HESScorer", "HES")])
def test_upd_and_hes_warn_naming_a_row_with_an_empty_answer(model, tokenizer, caplog, scorer, label):
    """UPD and HES gave NaN for an empty answer without the warning naming the row that the other
    scorers give; it names the row by its index in the data and its id."""
    from hf_adapters.columns.dataset_columns import add_score_columns
    from hf_adapters.scorers import build_scorer

    ds = Dataset.from_dict({"id": ["a", "b", "c"], "instruction": ["Say hi.", "Say nothing.", "Say bye."],
                            "input": ["", "", ""], "output": ["Hi!", "", "Bye."]})
    with caplog.at_level(logging.WARNING):
        scored = add_score_columns(ds, build_scorer({"name": scorer}, model=model, tokenizer=tokenizer), batch_size=2)
    values = scored[scorer[:-6].lower()]
    assert math.isnan(values[1]) and math.isfinite(values[0]) and math.isfinite(values[2])
    assert f"Row 1 (id='b') has an empty output; its {label} is NaN." in caplog.text, caplog.text
