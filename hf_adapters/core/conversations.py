"""Conversations (OpenAI-style ``messages`` or ShareGPT ``conversations``) into the core's items: each
assistant turn, as a continuation, after its whole history rendered as the model's chat prompt."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

#: Roles of ``messages`` turns.
ROLES = ("system", "user", "assistant")
#: ShareGPT's ``from`` values and the roles they stand for.
SHAREGPT_ROLES = {"system": "system", "human": "user", "gpt": "assistant"}
#: The seed's ChatML layout of one turn, used when the tokenizer has no chat template. The text
#: before ``{content}``, with the assistant role, is the generation prompt.
CHATML_TURN = "<|im_start|>{role}\n{content}<|im_end|>\n"
#: ``last``: the last assistant turn; ``all``: every assistant turn, each after its full history.
TURNS = ("last", "all")
#: ChatML's markers: one token each in a tokenizer of a model trained on ChatML (Qwen, SmolLM2...).
CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")
#: The (tokenizer, markers, fix) already warned about: each is said once per process.
_warned_markers: set[tuple[str, int, tuple[str, ...], str]] = set()


class ConversationError(ValueError):
    """A conversation cannot be scored: an unknown role, no turns, no assistant turn, non-string content."""


def check_messages(conversation: Any) -> list[dict[str, str]]:
    """``conversation`` as ``[{"role", "content"}]`` messages: OpenAI form as it is, ShareGPT's
    ``{"from", "value"}`` turns converted; a ConversationError says what is wrong."""
    if not isinstance(conversation, Sequence) or isinstance(conversation, str) or not conversation:
        raise ConversationError("the conversation is empty or not a list of turns.")
    messages = []
    for number, turn in enumerate(conversation):
        if not isinstance(turn, Mapping):
            raise ConversationError(f"turn {number} is not an object with a role and a content.")
        if turn.get("from") is not None and turn.get("role") is None:
            role, content = SHAREGPT_ROLES.get(turn["from"]), turn.get("value")
            if role is None:
                raise ConversationError(f"turn {number} is from {turn['from']!r}; ShareGPT roles are "
                                        f"{sorted(SHAREGPT_ROLES)}.")
        else:
            role, content = turn.get("role"), turn.get("content")
            if role not in ROLES:
                raise ConversationError(f"turn {number} has the role {role!r}; roles are {list(ROLES)}.")
        if not isinstance(content, str):
            raise ConversationError(f"turn {number}: the content must be a string, got {type(content).__name__}.")
        messages.append({"role": role, "content": content})
    if not any(message["role"] == "assistant" for message in messages):
        raise ConversationError("the conversation has no assistant turn to score.")
    return messages


def check_conversation_list(conversations: Any, name: str = "messages") -> list:
    """``conversations`` as a list, if it is a list of conversations at all; each conversation is
    checked where it is scored (a bad one gets NaN and a warning naming it in a batch)."""
    if conversations is None or isinstance(conversations, (str, Mapping)) or not isinstance(conversations, Sequence):
        raise TypeError(f"`{name}` must be a list of conversations (each a list of turns), got "
                        f"{type(conversations).__name__}.")
    return list(conversations)


def checked_or_none(conversations: Sequence[Any], labels: Sequence[str]) -> list[list[dict[str, str]] | None]:
    """Each conversation as messages (:func:`check_messages`), or None where it cannot be scored: a
    warning then names it by its label in ``labels`` and says what is wrong (its scores are NaN)."""
    checked = []
    for label, conversation in zip(labels, conversations, strict=True):
        try:
            checked.append(check_messages(conversation))
        except ConversationError as error:
            logger.warning("%s: %s Its scores are NaN.", label, error)
            checked.append(None)
    return checked


def spread(values: Sequence[Any], checked: Sequence[Any], missing: Any) -> list[Any]:
    """The ``values`` of the conversations that were scored put back in place among all of ``checked``,
    with ``missing`` for each None (one that could not be scored)."""
    scored = iter(values)
    return [missing if messages is None else next(scored) for messages in checked]


def to_messages(row: Mapping[str, Any]) -> list[dict[str, str]]:
    """A row's conversation as messages: its ``messages`` field (OpenAI form) or its ``conversations``
    field (ShareGPT form); the field name decides."""
    for field in ("messages", "conversations"):
        if row.get(field) is not None:
            return check_messages(row[field])
    raise ConversationError("the row has no `messages` or `conversations` field.")


def missing_markers(tokenizer: PreTrainedTokenizerBase, template: str) -> list[str]:
    """The ChatML markers that ``template`` uses and the tokenizer does not encode as one token."""
    return [marker for marker in CHATML_MARKERS if marker in template and
            len(tokenizer(marker, add_special_tokens=False).input_ids) != 1]


def warn_missing_markers(tokenizer: PreTrainedTokenizerBase, templates: Sequence[str], what: str, fix: str) -> None:
    """Warn, once per process for a tokenizer, when ``templates`` use ChatML markers that the tokenizer
    does not hold as single tokens (the model never saw them as markers, so it scores a prompt format it
    was not trained on): ``what`` (the text before the markers named) and ``fix``."""
    missing = tuple(dict.fromkeys(marker for template in templates for marker in missing_markers(tokenizer, template)))
    key = (tokenizer.name_or_path, len(tokenizer), missing, fix)
    if not missing or key in _warned_markers:
        return
    _warned_markers.add(key)
    name = f" ({tokenizer.name_or_path})" if tokenizer.name_or_path else ""
    logger.warning("%s %s, which this tokenizer%s does not have as single tokens: they are split into pieces, and "
                   "the model scores a prompt format it never saw. %s", what, " and ".join(missing), name, fix)


def history_prompt(tokenizer: PreTrainedTokenizerBase, history: Sequence[Mapping[str, str]],
                   template: str | None = None) -> str:
    """The text before an assistant turn: the tokenizer's chat template with a generation prompt, or
    ``template`` (a turn layout with ``{role}`` and ``{content}``; ChatML when the tokenizer has no
    chat template) for every turn and its text before ``{content}`` for the assistant."""
    if template is None and tokenizer.chat_template:
        return tokenizer.apply_chat_template(list(history), add_generation_prompt=True, tokenize=False)
    layout = template or CHATML_TURN
    if template is None:
        warn_missing_markers(tokenizer, [layout], "The tokenizer has no chat template, so the turns are laid out in "
                             "ChatML, with its markers", "Pass `turn_template`: the model's own turn layout, with "
                             "{role} and {content}.")
    else:
        leave_out = ", or leave it out to use the tokenizer's chat template" if tokenizer.chat_template else ""
        warn_missing_markers(tokenizer, [layout], "The `turn_template` uses ChatML's markers",
                             f"Write `turn_template` in the model's own turn layout{leave_out}.")
    turns = "".join(layout.format(role=message["role"], content=message["content"]) for message in history)
    return turns + layout.split("{content}")[0].format(role="assistant")


def check_turn_template(template: str | None) -> None:
    """Raise a ValueError unless ``template`` is None or formats with ``{role}`` and ``{content}``."""
    if template is None:
        return
    try:
        template.format(role="", content="")
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(f"The turn `template` must use only {{role}} and {{content}}: {error!r}") from None
    if "{content}" not in template:
        raise ValueError("The turn `template` must hold {content}.")


def turn_pairs(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping[str, str]], turns: str = "last",
               template: str | None = None) -> list[tuple[list[int], list[int]]]:
    """Per scored assistant turn, the (history ids, answer ids) pair: the history as
    :func:`history_prompt` renders it, tokenized without added special tokens (the template holds
    its own), and the turn's content alone (its end-of-turn token is not scored)."""
    indexes = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    if turns == "last":
        indexes = indexes[-1:]
    return [
        (tokenizer(history_prompt(tokenizer, messages[:i], template), add_special_tokens=False).input_ids,
         tokenizer(messages[i]["content"], add_special_tokens=False).input_ids)
        for i in indexes
    ]
