"""From generated token ids to the text IFEval scores: decoding, and a reasoning model's thinking removed.

Example:
    >>> from hf_adapters.ifeval.responses import strip_thinking
    >>> strip_thinking("<think>The user wants one line.</think>\\n\\nHello there.")
    'Hello there.'
    >>> strip_thinking("<think>Still thinking when the tokens ran out")
    ''
    >>> strip_thinking("No thinking at all.")
    'No thinking at all.'
"""

from __future__ import annotations

from collections.abc import Sequence

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def decode_response(tokenizer, token_ids: Sequence[int]) -> str:
    """The generated tokens as text, special tokens dropped (as lm-evaluation-harness decodes them)."""
    return tokenizer.decode(list(token_ids), skip_special_tokens=True)


def response_fields(text: str, strip: bool) -> dict[str, str]:
    """The ``response`` a sample is scored on: ``text``, or with ``strip`` ``text`` without its
    thinking block (:func:`strip_thinking`), the text itself then kept as ``raw_response``."""
    return {"response": strip_thinking(text), "raw_response": text} if strip else {"response": text}


def strip_thinking(text: str) -> str:
    """``text`` without a leading ``<think>...</think>`` block, and the white space after it.

    The block ends at the first ``</think>``. A ``</think>`` with no ``<think>`` before it also ends
    one: chat templates of reasoning models often open the block in the prompt. A block that never
    ends (the response ran out of tokens while thinking) leaves an empty response. Text without a
    leading block is returned unchanged.
    """
    opened = text.lstrip().startswith(THINK_OPEN)
    end = text.find(THINK_CLOSE)
    if end >= 0 and (opened or THINK_OPEN not in text[:end]):
        return text[end + len(THINK_CLOSE):].lstrip()
    return "" if opened else text
