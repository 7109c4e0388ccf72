"""IFD against a naive one-row-at-a-time reference, in both modes."""

import copy
import logging
import math

import pytest
from tokenizers import processors

from hf_adapters.backends import TransformersBackend
from hf_adapters.core.likelihood import ContinuationScore, start_token_id
from hf_adapters.formulas.ifd import (
    DEFAULT_TEMPLATE,
    DEFAULT_TEMPLATE_NO_INPUT,
    compute_ifd,
    ifd_ratio,
)
from tests.conftest import assert_exact, build_model, build_tokenizer, naive_nll

INSTRUCTIONS = [
    "Write a short poem about the sea.",
    "Summarise the text below.",
    "Translate to French.",
    "Name the fox.",
    "Explain 敏捷的棕色狐狸 in one line 🦊",
]
INPUTS = ["", "Cats are small mammals. They purr.", "The quick brown fox jumps over the lazy dog.", None, ""]
OUTPUTS = [
    "The sea is wide and deep, it sings.",
    "Cats are mammals.",
    "Le renard brun saute par-dessus le chien paresseux.",
    "The quick brown fox.",
    "A quick brown fox 🐶 jumps.",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def naive_ifd(model, tokenizer, instruction, input, output, template=DEFAULT_TEMPLATE,
              template_no_input=DEFAULT_TEMPLATE_NO_INPUT, max_length=2048):
    """One row, written out from the definition: both passes score the same (truncated) answer ids."""
    if template == "chat":
        content = instruction + ("\n" + input if input else "")
        text = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                             add_generation_prompt=True)
        context = tokenizer(text, add_special_tokens=False).input_ids
    elif input:
        context = tokenizer(template.format(instruction=instruction, input=input)).input_ids
    else:
        context = tokenizer(template_no_input.format(instruction=instruction)).input_ids
    max_length = min(max_length, model.config.max_position_embeddings)
    answer = tokenizer(output, add_special_tokens=False).input_ids[: max_length - len(context)]
    if not answer or len(context) >= max_length:
        return dict.fromkeys(["ppl_ratio", "loss_ratio", "conditional", "direct", "nll_conditional", "nll_direct"],
                             math.nan)
    start = start_token_id(tokenizer)
    conditional, n_conditional = naive_nll(model, context, answer, start)
    direct, n_direct = naive_nll(model, [], answer, start)
    assert n_conditional == n_direct == len(answer)
    conditional, direct = conditional / n_conditional, direct / n_direct
    return {
        "ppl_ratio": math.exp(conditional) / math.exp(direct),
        "loss_ratio": conditional / direct,
        "conditional": math.exp(conditional),
        "direct": math.exp(direct),
        "nll_conditional": conditional,
        "nll_direct": direct,
    }


def assert_matches_naive(model, tokenizer, result, mode="ppl_ratio", instructions=INSTRUCTIONS, inputs=INPUTS,
                         outputs=OUTPUTS, **options):
    inputs = inputs if inputs is not None else [""] * len(instructions)
    rows = list(zip(instructions, inputs, outputs, strict=True))
    keys = {"ifd_scores": mode, "conditional_perplexities": "conditional", "direct_perplexities": "direct"}

    def naive(m):
        expected = [naive_ifd(m, tokenizer, *row, **options) for row in rows]
        return [[row[key] for key in keys.values()] for row in expected]

    assert_exact([[result[key][row] for key in keys] for row in range(len(rows))], naive, model)


@pytest.fixture(scope="module")
def bos_tokenizer():
    """A tokenizer whose default special tokens put BOS in front of every text."""
    tokenizer = build_tokenizer()
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tokenizer.bos_token_id)]
    )
    assert tokenizer("hi").input_ids[0] == tokenizer.bos_token_id
    return tokenizer


@pytest.mark.parametrize("mode", ["ppl_ratio", "loss_ratio"])
@pytest.mark.kernels
def test_ifd_equals_naive_reference_in_both_modes(model, tokenizer, mode):
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, mode=mode)
    assert_matches_naive(model, tokenizer, result, mode)
    assert result["num_valid"] == len(OUTPUTS)
    assert result["mean_ifd"] == pytest.approx(sum(result["ifd_scores"]) / len(OUTPUTS))


@pytest.mark.parametrize("mode", ["ppl_ratio", "loss_ratio"])
@pytest.mark.kernels
def test_prompt_keeps_default_special_tokens_and_answer_has_none(model, bos_tokenizer, mode):
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=bos_tokenizer, mode=mode)
    assert_matches_naive(model, bos_tokenizer, result, mode)


@pytest.mark.kernels
def test_scores_do_not_depend_on_batch_size(model, tokenizer):
    reference = compute_ifd(INSTRUCTIONS * 3, OUTPUTS * 3, INPUTS * 3, model=model, tokenizer=tokenizer, batch_size=1)
    for batch_size in (2, 5, 64):
        result = compute_ifd(INSTRUCTIONS * 3, OUTPUTS * 3, INPUTS * 3, model=model, tokenizer=tokenizer,
                             batch_size=batch_size)
        assert result["ifd_scores"] == pytest.approx(reference["ifd_scores"], rel=1e-5)


def test_both_passes_share_one_core_call_and_the_same_answer_ids(model, tokenizer, monkeypatch):
    calls = []
    real = TransformersBackend.score

    def spy(backend, items, **kwargs):
        calls.append(list(items))
        return real(backend, items, **kwargs)

    monkeypatch.setattr(TransformersBackend, "score", spy)
    compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, max_length=72)
    [items] = calls
    n = len(OUTPUTS)
    conditional, direct = items[:n], items[n:]
    assert len(direct) == n
    for (context, answer), (empty, same_answer) in zip(conditional, direct, strict=True):
        assert context and empty == []
        assert same_answer == answer


def test_output_layer_runs_only_at_answer_positions(model, tokenizer):
    rows = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda module, args, output: rows.append(args[0].shape[0])
    )
    try:
        compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer)
    finally:
        handle.remove()
    answer_tokens = sum(len(ids) for ids in tokenizer(OUTPUTS, add_special_tokens=False).input_ids)
    assert sum(rows) == 2 * answer_tokens


@pytest.mark.parametrize("mode", ["ppl_ratio", "loss_ratio"])
@pytest.mark.kernels
def test_chat_template_uses_the_tokenizers_chat_template(model, tokenizer, mode):
    chat_tokenizer = copy.deepcopy(tokenizer)
    chat_tokenizer.chat_template = CHAT_TEMPLATE
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=chat_tokenizer, template="chat",
                         mode=mode)
    assert_matches_naive(model, chat_tokenizer, result, mode, template="chat")
    default = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=chat_tokenizer)
    assert result["ifd_scores"] != pytest.approx(default["ifd_scores"])


def test_chat_template_without_one_is_a_clear_error(model, tokenizer):
    with pytest.raises(ValueError, match="chat template"):
        compute_ifd(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer, template="chat")


@pytest.mark.parametrize("mode", ["ppl_ratio", "loss_ratio"])
@pytest.mark.kernels
def test_truncation_cuts_the_answer_and_scores_the_same_tokens_in_both_passes(model, tokenizer, mode, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_adapters.formulas.ifd"):
        result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, max_length=72, mode=mode)
    assert "truncated" in caplog.text
    assert_matches_naive(model, tokenizer, result, mode, max_length=72)
    assert result["num_valid"] == len(OUTPUTS)
    full = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, mode=mode)
    assert result["direct_perplexities"] != pytest.approx(full["direct_perplexities"])


@pytest.mark.kernels
def test_max_length_is_capped_at_the_models_position_limit(tokenizer):
    short = build_model(len(tokenizer), max_position_embeddings=72)
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=short, tokenizer=tokenizer, max_length=2048)
    assert_matches_naive(short, tokenizer, result)
    assert result["num_valid"] == len(OUTPUTS)


@pytest.mark.kernels
def test_invalid_rows_get_nan_and_a_warning_and_leave_neighbours_alone(model, tokenizer, caplog):
    instructions = ["Write a poem.", "Summarise.", "A very long instruction that keeps going " * 6, "Name it."]
    outputs = ["The sea.", "", "Some answer.", "The fox."]
    options = {"template_no_input": "{instruction}\n", "max_length": 30}
    with caplog.at_level(logging.WARNING, logger="hf_adapters.formulas.ifd"):
        result = compute_ifd(instructions, outputs, model=model, tokenizer=tokenizer, **options)
    assert "Row 1 has an empty output" in caplog.text
    assert "Row 2: the prompt" in caplog.text and "fills max_length=30" in caplog.text
    scores = result["ifd_scores"]
    assert math.isnan(scores[1]) and math.isnan(scores[2])
    assert math.isnan(result["conditional_perplexities"][2]) and math.isnan(result["direct_perplexities"][1])
    alone = compute_ifd([instructions[0], instructions[3]], [outputs[0], outputs[3]], model=model,
                        tokenizer=tokenizer, **options)
    assert [scores[0], scores[3]] == pytest.approx(alone["ifd_scores"], rel=1e-6)
    assert result["num_valid"] == 2
    assert result["mean_ifd"] == pytest.approx((scores[0] + scores[3]) / 2)


def test_all_rows_invalid_gives_nan_mean(model, tokenizer):
    result = compute_ifd(["Say nothing."], [""], model=model, tokenizer=tokenizer)
    assert math.isnan(result["mean_ifd"]) and result["num_valid"] == 0


def test_ifd_above_one_is_a_valid_score_and_is_kept(model, tokenizer):
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer)
    assert any(score > 1 for score in result["ifd_scores"])
    assert result["num_valid"] == len(OUTPUTS)


@pytest.mark.kernels
def test_inputs_may_be_omitted_or_none(model, tokenizer):
    omitted = compute_ifd(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer)
    empty = compute_ifd(INSTRUCTIONS, OUTPUTS, [""] * len(OUTPUTS), model=model, tokenizer=tokenizer)
    none = compute_ifd(INSTRUCTIONS, OUTPUTS, [None] * len(OUTPUTS), model=model, tokenizer=tokenizer)
    assert omitted["ifd_scores"] == empty["ifd_scores"] == none["ifd_scores"]
    assert_matches_naive(model, tokenizer, omitted, inputs=None)


@pytest.mark.kernels
def test_start_token_falls_back_to_eos_without_bos():
    tokenizer = build_tokenizer(bos=False, pad=False)
    model = build_model(len(tokenizer))
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, batch_size=2)
    assert_matches_naive(model, tokenizer, result)


def test_the_two_modes_rank_rows_differently():
    # ppl_ratio = exp(c - d) ranks by the NLL difference, loss_ratio = c / d by the NLL ratio.
    a = (ContinuationScore(1.0, 1, False), ContinuationScore(2.0, 1, False))
    b = (ContinuationScore(3.0, 1, False), ContinuationScore(4.5, 1, False))
    assert ifd_ratio(*a, "ppl_ratio") > ifd_ratio(*b, "ppl_ratio")
    assert ifd_ratio(*a, "loss_ratio") < ifd_ratio(*b, "loss_ratio")
    same = (ContinuationScore(2.0, 1, False), ContinuationScore(2.0, 1, False))
    assert ifd_ratio(*same, "ppl_ratio") == ifd_ratio(*same, "loss_ratio") == 1.0


def test_unequal_lengths_are_a_clear_error(model, tokenizer):
    with pytest.raises(ValueError, match="same length"):
        compute_ifd(["a", "b"], ["x"], model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="same length"):
        compute_ifd(["a"], ["x"], ["i", "j"], model=model, tokenizer=tokenizer)


@pytest.mark.parametrize(
    ("instructions", "outputs", "inputs", "message"),
    [
        (["a", 3], ["x", "y"], None, r"`instructions`\[1\] must be a string"),
        (["a", "b"], ["x", None], None, r"`outputs`\[1\] must be a string"),
        (["a", "b"], ["x", "y"], ["", 7], r"`inputs`\[1\] must be a string"),
        ("abc", ["x"], None, "not a single string"),
    ],
)
def test_non_string_rows_are_errors_naming_the_row(model, tokenizer, instructions, outputs, inputs, message):
    with pytest.raises(TypeError, match=message):
        compute_ifd(instructions, outputs, inputs, model=model, tokenizer=tokenizer)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "ratio"}, "valid modes"),
        ({"max_length": 0}, "max_length"),
        ({"batch_size": 0}, "batch_size"),
        ({"template": "{instruction} {context}"}, "template"),
        ({"template_no_input": "{instruction} {input}"}, "template_no_input"),
    ],
)
def test_bad_options_are_clear_errors(model, tokenizer, options, message):
    with pytest.raises(ValueError, match=message):
        compute_ifd(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer, **options)


def test_empty_input_list_gives_empty_result(model, tokenizer):
    result = compute_ifd([], [], model=model, tokenizer=tokenizer)
    assert result["ifd_scores"] == [] and result["num_valid"] == 0 and math.isnan(result["mean_ifd"])


# --- ChatML templates with a tokenizer without ChatML markers (round five, item 5) ---------------------------

MARKER_WARNING = "ChatML's markers"


def chatml_tokenizer(*markers: str):
    """The tiny tokenizer with ``markers`` added as single special tokens."""
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": list(markers)})
    return tokenizer


def marker_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if MARKER_WARNING in record.getMessage()]


@pytest.fixture
def fresh_marker_warnings(monkeypatch):
    """No marker warning said yet in this process, so each test sees its own."""
    from hf_adapters.core import conversations

    monkeypatch.setattr(conversations, "_warned_markers", set())


def score_ifd_by(entry: str, model, tokenizer, tmp_path, **options):
    """IFD of two rows through one entry point: the Python function, the evaluate module, the column helper
    or the command line (``score`` with the seed's ``ifd.yaml``)."""
    instructions, outputs = ["Name a colour.", "Say hi."], ["Red.", "Hi!"]
    if entry == "compute_ifd":
        return compute_ifd(instructions, outputs, model=model, tokenizer=tokenizer, **options)
    if entry == "metric":
        import evaluate

        return evaluate.load("./metrics/ifd").compute(instructions=instructions, outputs=outputs, model=model,
                                                      tokenizer=tokenizer, **options)
    if entry == "column":
        from datasets import Dataset

        from hf_adapters import add_ifd_column

        ds = Dataset.from_dict({"instruction": instructions, "input": ["", ""], "output": outputs})
        return add_ifd_column(ds, model=model, tokenizer=tokenizer, batch_size=1, **options)
    from pathlib import Path

    from hf_adapters.cli import main
    from tests.conftest import saved_model, write_jsonl

    seed = Path(__file__).resolve().parents[2] / "hf_adapters" / "configs" / "ifd.yaml"
    rows = [{"id": str(i), "instruction": instruction, "output": output}
            for i, (instruction, output) in enumerate(zip(instructions, outputs, strict=True))]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    folder = saved_model(tmp_path / "model", model, tokenizer)
    assert main(["score", str(seed), "--data", str(data), "--output", str(tmp_path / "o.jsonl"), "--model", folder,
                 "--batch-size", "1", "--no-progress"]) == 0


@pytest.mark.parametrize("entry", ["compute_ifd", "metric", "column", "cli"])
def test_the_seed_chatml_template_warns_once_for_a_tokenizer_without_chatml_markers(
        entry, model, tokenizer, tmp_path, caplog, fresh_marker_warnings):
    """The seed's ChatML prompt with a tokenizer that splits ``<|im_start|>`` into pieces (a Llama's, say)
    scored silently with a prompt format the model never saw. Warned, once per job however many batches,
    naming the markers the tokenizer lacks and ``template: chat`` as the fix, at every entry point.
    Round five, item 5."""
    with caplog.at_level(logging.WARNING):
        score_ifd_by(entry, model, tokenizer, tmp_path)
    [message] = marker_warnings(caplog)
    assert "<|im_start|> and <|im_end|>" in message and "template" in message


def test_the_marker_warning_names_template_chat_when_the_tokenizer_has_a_chat_template(
        model, caplog, fresh_marker_warnings):
    """Round five, item 5."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    with caplog.at_level(logging.WARNING):
        compute_ifd(["Say hi."], ["Hi!"], model=model, tokenizer=tokenizer)
    [message] = marker_warnings(caplog)
    assert "`template: chat`" in message and "template_no_input" in message
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        compute_ifd(["Say hi."], ["Hi!"], model=model, tokenizer=tokenizer, template="chat")
        compute_ifd(["Say hi."], ["Hi!"], model=model, tokenizer=tokenizer, template="Q: {instruction}\n{input}\nA:",
                    template_no_input="Q: {instruction}\nA:")
    assert not marker_warnings(caplog)


def test_the_marker_warning_names_only_the_markers_the_tokenizer_lacks(caplog, fresh_marker_warnings):
    """A tokenizer with both markers as tokens (SmolLM2's, Qwen's) is not warned about; one with only
    ``<|im_end|>`` is warned about ``<|im_start|>`` alone. Round five, item 5."""
    both = chatml_tokenizer("<|im_start|>", "<|im_end|>")
    with caplog.at_level(logging.WARNING):
        compute_ifd(["Say hi."], ["Hi!"], model=build_model(len(both)), tokenizer=both)
    assert not marker_warnings(caplog)
    one = chatml_tokenizer("<|im_end|>")
    with caplog.at_level(logging.WARNING):
        compute_ifd(["Say hi."], ["Hi!"], model=build_model(len(one)), tokenizer=one)
    [message] = marker_warnings(caplog)
    assert "<|im_start|>" in message and "<|im_end|>" not in message


def test_the_reverse_ifd_prompt_is_checked_for_chatml_markers_too(model, tokenizer, caplog, fresh_marker_warnings):
    """Round five, item 5."""
    with caplog.at_level(logging.WARNING):
        compute_ifd(["Say hi."], ["Hi!"], direction="reverse", model=model, tokenizer=tokenizer)
    [message] = marker_warnings(caplog)
    assert "reverse_template" in message


def test_a_template_without_input_is_refused_for_rows_with_an_input(model, tokenizer):
    """From the round-three review: silently wrong."""
    with pytest.raises(ValueError, match=r"\{input\}"):
        compute_ifd(["Translate.", "Translate."], ["Bonjour.", "Bonjour."], ["Good morning.", "Hello."],
                    template="Q: {instruction}\nA: ", model=model, tokenizer=tokenizer)


def test_a_reverse_template_without_output_is_refused(model, tokenizer):
    """From the round-three review: silently wrong."""
    with pytest.raises(ValueError, match=r"\{output\}"):
        compute_ifd(["Say hi."], ["Hi!"], direction="reverse", reverse_template="Write the instruction: ",
                    model=model, tokenizer=tokenizer)


def test_the_reverse_ifd_warning_names_the_empty_instruction(model, tokenizer, caplog):
    with caplog.at_level(logging.WARNING):
        result = compute_ifd(["", "Say hi."], ["Hello.", "Hi!"], direction="reverse", model=model, tokenizer=tokenizer)
    assert math.isnan(result["ifd_scores"][0])
    [message] = [record.getMessage() for record in caplog.records if "Row 0" in record.getMessage()]
    assert "instruction" in message and "output" not in message
