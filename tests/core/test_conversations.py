"""Conversations (OpenAI messages, ShareGPT): IFD per assistant turn and over a conversation, the
perplexity of assistant tokens, against naive one-at-a-time references; and reverse IFD."""

from __future__ import annotations

import json
import logging
import math
import re

import evaluate
import pytest
from datasets import Dataset

from hf_adapters import add_ifd_column, add_perplexity_column
from hf_adapters.core.conversations import ConversationError, check_messages, history_prompt, to_messages
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.formulas.ifd import DEFAULT_REVERSE_TEMPLATE, compute_ifd
from hf_adapters.scorers import ConversationIFDScorer, build_scorer
from tests.conftest import assert_exact, build_model, naive_nll
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS

CONVERSATIONS = [
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue is a colour."},
     {"role": "user", "content": "And a fruit?"}, {"role": "assistant", "content": "An apple, for one."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."},
     {"role": "assistant", "content": "Hi!"}],
    [{"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "One, two, three."}],
]
GOOD = [{"role": "user", "content": "Write a short poem about the sea."},
        {"role": "assistant", "content": "The sea is wide and grey."}]
NO_ASSISTANT = [{"role": "user", "content": "Hello?"}]


def chatml(messages) -> str:
    """The ChatML history, written out by hand, as the reference renders it."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n"


def naive_turns(model, tokenizer, messages, turns="last"):
    """Per scored assistant turn: (conditional NLL, direct NLL, tokens), each pass its own forward pass."""
    start = start_token_id(tokenizer)
    indexes = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    results = []
    for i in indexes[-1:] if turns == "last" else indexes:
        history = tokenizer(chatml(messages[:i]), add_special_tokens=False).input_ids
        answer = tokenizer(messages[i]["content"], add_special_tokens=False).input_ids
        conditional, count = naive_nll(model, history, answer, start)
        direct, _ = naive_nll(model, [], answer, start)
        results.append((conditional, direct, count))
    return results


def naive_conversation_ifd(model, tokenizer, messages, turns):
    parts = naive_turns(model, tokenizer, messages, turns)
    tokens = sum(count for _, _, count in parts)
    return math.exp(sum(c for c, _, _ in parts) / tokens) / math.exp(sum(d for _, d, _ in parts) / tokens)


@pytest.mark.parametrize("turns", ["last", "all"])
@pytest.mark.parametrize("batch_size", [1, 16])
def test_conversation_ifd_equals_naive_turn_by_turn(model, tokenizer, turns, batch_size):
    metric = evaluate.load("./metrics/ifd")
    result = metric.compute(messages=CONVERSATIONS, turns=turns, model=model, tokenizer=tokenizer,
                            batch_size=batch_size)
    assert_exact(result["ifd_scores"],
                 lambda m: [naive_conversation_ifd(m, tokenizer, c, turns) for c in CONVERSATIONS], model)
    per_turn = [[math.exp(c / n) / math.exp(d / n) for c, d, n in naive_turns(model, tokenizer, conv, turns)]
                for conv in CONVERSATIONS]
    assert [len(turn) for turn in result["turn_ifd_scores"]] == [len(turn) for turn in per_turn]
    assert_exact(result["turn_ifd_scores"],
                 lambda m: [[math.exp(c / n) / math.exp(d / n) for c, d, n in naive_turns(m, tokenizer, conv, turns)]
                            for conv in CONVERSATIONS], model)
    assert result["num_valid"] == 3


def test_conversation_perplexity_is_that_of_the_assistant_tokens_after_their_history(model, tokenizer):
    metric = evaluate.load("./metrics/perplexity")
    result = metric.compute(messages=CONVERSATIONS, model=model, tokenizer=tokenizer)

    def naive(m):
        out = []
        for conversation in CONVERSATIONS:
            parts = naive_turns(m, tokenizer, conversation, "all")
            out.append(math.exp(sum(c for c, _, _ in parts) / sum(n for _, _, n in parts)))
        return out

    assert_exact(result["perplexities"], naive, model)


def test_sharegpt_and_messages_forms_give_the_same_scores(model, tokenizer, shared_dir):
    sharegpt = json.loads((shared_dir / "data" / "sharegpt_sample.json").read_text(encoding="utf-8"))[:4]
    as_messages = [{"messages": to_messages(row)} for row in sharegpt]
    ds = Dataset.from_list([{"conversations": row["conversations"]} for row in sharegpt])
    from_sharegpt = add_ifd_column(ds, messages_column="messages", turns="all", model=model, tokenizer=tokenizer)
    from_messages = add_ifd_column(Dataset.from_list(as_messages), messages_column="messages", turns="all",
                                   model=model, tokenizer=tokenizer)
    assert list(from_sharegpt["ifd"]) == pytest.approx(list(from_messages["ifd"]), rel=1e-6)
    assert [len(turns) for turns in from_sharegpt["turn_ifd"]] == \
        [sum(m["role"] == "assistant" for m in row["messages"]) for row in as_messages]


def test_real_mt_bench_conversations_match_the_naive_reference(tokenizer, shared_dir):
    model = build_model(len(tokenizer), max_position_embeddings=4096)  # room for the longest history
    lines = (shared_dir / "data" / "mtbench_gpt4_reference.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    conversations = [json.loads(line)["messages"] for line in lines]
    result = ConversationIFDScorer(model=model, tokenizer=tokenizer, turns="all", max_length=None).result(
        conversations)
    assert_exact(result["ifd_scores"],
                 lambda m: [naive_conversation_ifd(m, tokenizer, c, "all") for c in conversations], model)


@pytest.mark.parametrize(("conversation", "message"), [
    ([{"role": "robot", "content": "hi"}], "role 'robot'"),
    ([{"role": "user", "content": "hi"}], "no assistant turn"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": 3}], "must be a string"),
    ([], "empty"),
    ([{"from": "bot", "value": "hi"}], "ShareGPT roles"),
])
def test_bad_conversations_get_a_clear_error(conversation, message):
    with pytest.raises(ConversationError, match=message):
        check_messages(conversation)


def test_a_bad_conversation_is_nan_in_a_batch_and_an_error_naming_the_row_in_a_job(model, tokenizer, caplog):
    rows = [{"messages": CONVERSATIONS[0]}, {"messages": [{"role": "user", "content": "hi"}]}]
    scores = add_ifd_column(Dataset.from_list(rows), messages_column="messages", model=model, tokenizer=tokenizer)
    assert not math.isnan(scores["ifd"][0]) and math.isnan(scores["ifd"][1]) and scores["turn_ifd"][1] == []
    assert "Row 1: the conversation has no assistant turn" in caplog.text
    with pytest.raises(ValueError, match="Row 1: the conversation has no assistant turn"):
        ConversationIFDScorer().check_rows(rows)


def test_a_history_longer_than_max_length_gives_nan_for_that_turn(model, tokenizer):
    long = [{"role": "user", "content": "word " * 200}, {"role": "assistant", "content": "Done."}]
    result = ConversationIFDScorer(model=model, tokenizer=tokenizer, max_length=200).result([CONVERSATIONS[1], long])
    assert not math.isnan(result["ifd_scores"][0]) and math.isnan(result["ifd_scores"][1])


def test_the_chat_template_is_used_when_the_tokenizer_has_one(tokenizer, monkeypatch):
    monkeypatch.setattr(tokenizer, "chat_template",
                        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}[assistant] {% endif %}")
    assert history_prompt(tokenizer, CONVERSATIONS[1][:2]) == "[system] Be brief.\n[user] Say hi.\n[assistant] "
    assert history_prompt(tokenizer, CONVERSATIONS[1][:1], template="{role}: {content}\n") == \
        "system: Be brief.\nassistant: "


def test_a_config_ifd_scorer_with_turns_scores_conversations():
    scorer = build_scorer({"name": "IFDScorer", "turns": "all"})
    assert isinstance(scorer, ConversationIFDScorer) and scorer.config["turns"] == "all"


def test_conversation_perplexity_column(model, tokenizer):
    ds = add_perplexity_column(Dataset.from_dict({"messages": CONVERSATIONS}), messages_column="messages",
                               model=model, tokenizer=tokenizer)
    expected = evaluate.load("./metrics/perplexity").compute(messages=CONVERSATIONS, model=model,
                                                             tokenizer=tokenizer)["perplexities"]
    assert list(ds["perplexity"]) == pytest.approx(expected, rel=1e-6)


def naive_reverse_ifd(model, tokenizer, instruction, input, output):
    start = start_token_id(tokenizer)
    prompt = tokenizer(DEFAULT_REVERSE_TEMPLATE.format(output=output)).input_ids
    question = tokenizer(f"{instruction}\n{input}" if input else instruction, add_special_tokens=False).input_ids
    conditional, count = naive_nll(model, prompt, question, start)
    direct, _ = naive_nll(model, [], question, start)
    return math.exp(conditional / count) / math.exp(direct / count)


def test_reverse_ifd_equals_naive_reference(model, tokenizer):
    result = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, direction="reverse",
                         max_length=None, batch_size=2)

    def naive(m):
        return [naive_reverse_ifd(m, tokenizer, i, x, o) if o else math.nan
                for i, x, o in zip(INSTRUCTIONS, INPUTS, OUTPUTS, strict=True)]

    assert_exact(result["ifd_scores"], naive, model)


def test_reverse_ifd_column_is_named_r_ifd(model, tokenizer):
    ds = Dataset.from_dict({"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS})
    scored = add_ifd_column(ds, direction="reverse", max_length=None, model=model, tokenizer=tokenizer)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, direction="reverse",
                           max_length=None)["ifd_scores"]
    assert "r_ifd" in scored.column_names and "ifd" not in scored.column_names
    assert list(scored["r_ifd"]) == pytest.approx(expected, rel=1e-6, nan_ok=True)
    with pytest.raises(ValueError, match="valid directions"):
        compute_ifd(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer, direction="backwards")


def test_the_chatml_turn_layout_warns_once_for_a_tokenizer_without_chatml_markers(model, tokenizer, caplog,
                                                                                   monkeypatch):
    """A tokenizer without a chat template lays conversations out in ChatML; without ChatML's markers
    as tokens the model scores a format it never saw. Warned once (IFD and perplexity of conversations
    alike), naming the markers and `turn_template` as the fix; a turn_template without them is quiet.
    Round five, item 5."""
    import logging

    from hf_adapters.core import conversations

    monkeypatch.setattr(conversations, "_warned_markers", set())
    ds = Dataset.from_dict({"messages": CONVERSATIONS})
    with caplog.at_level(logging.WARNING):
        add_ifd_column(ds, messages_column="messages", model=model, tokenizer=tokenizer, batch_size=1)
        add_perplexity_column(ds, messages_column="messages", model=model, tokenizer=tokenizer)
    [message] = [record.getMessage() for record in caplog.records if "as single tokens" in record.getMessage()]
    assert "<|im_start|> and <|im_end|>" in message and "`turn_template`" in message
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        add_ifd_column(ds, messages_column="messages", model=model, tokenizer=tokenizer,
                       turn_template="<{role}>{content}\n")
    assert "as single tokens" not in caplog.text


@pytest.mark.parametrize(("metric", "key"), [("ifd", "ifd_scores"), ("perplexity", "perplexities")])
def test_a_bad_conversation_gets_nan_and_a_warning_naming_it_in_the_metrics(model, tokenizer, caplog, metric, key):
    module = evaluate.load(f"./metrics/{metric}")
    with caplog.at_level(logging.WARNING):
        result = module.compute(messages=[GOOD, NO_ASSISTANT], model=model, tokenizer=tokenizer)
    assert math.isfinite(result[key][0]) and math.isnan(result[key][1])
    assert re.search(r"(Row |\[)1\b", caplog.text), caplog.text


def test_an_instruction_template_with_conversations_is_the_same_clear_error_everywhere(model, tokenizer):
    template = "Q: {instruction}\n{input}\nA: "
    with pytest.raises(ValueError, match="template"):
        evaluate.load("./metrics/ifd").compute(messages=[GOOD], template=template, model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="template"):
        add_ifd_column(Dataset.from_dict({"messages": [GOOD]}), messages_column="messages", template=template,
                       model=model, tokenizer=tokenizer)
