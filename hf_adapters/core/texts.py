"""Texts into the core's (context, continuation) items, and the checks every text goes through first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing transformers is slow, and checking texts needs none of it
    from transformers import PreTrainedTokenizerBase


def check_texts(texts: Sequence, name: str = "predictions") -> None:
    """Raise a TypeError naming ``texts`` if it is missing or a single string, or the first row that
    is not a string; a ValueError naming a row that is not valid Unicode (a lone surrogate)."""
    if texts is None:
        raise TypeError(f"`{name}` is missing: pass a list of strings.")
    if isinstance(texts, str):
        raise TypeError(f"`{name}` must be a list of strings, not a single string.")
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"`{name}`[{row}] must be a string, got {type(text).__name__}: {text!r:.80}")
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise ValueError(f"`{name}`[{row}] is not valid Unicode: {error.reason} at character "
                                 f"{error.start}.") from None


def instruction_rows(instructions: Sequence[str], inputs: Sequence[str] | None, outputs: Sequence[str] | None
                     ) -> tuple[Sequence[str], Sequence[str], Sequence[str]]:
    """Checked instruction rows: each column a list of strings (:func:`check_texts`), all as long; an
    omitted ``inputs`` or ``outputs`` reads as empty strings."""
    check_texts(instructions, "instructions")
    inputs = [""] * len(instructions) if inputs is None else inputs
    outputs = [""] * len(instructions) if outputs is None else outputs
    check_texts(inputs, "inputs")
    check_texts(outputs, "outputs")
    if not len(inputs) == len(outputs) == len(instructions):
        raise ValueError(f"`instructions`, `inputs` and `outputs` must have the same length, got {len(instructions)}, "
                         f"{len(inputs)} and {len(outputs)}.")
    return instructions, inputs, outputs


def text_items(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], add_start_token: bool = True
) -> list[tuple[list[int], list[int]]]:
    """(context, continuation) pairs that score every token of each text.

    With ``add_start_token`` the context is empty (the core puts the start token there), so the
    first token is scored too; without it the first token is the context and is not scored.
    """
    ids = tokenizer(list(texts), add_special_tokens=False).input_ids if texts else []
    if add_start_token:
        return [([], text_ids) for text_ids in ids]
    return [(text_ids[:1], text_ids[1:]) for text_ids in ids]


def instruction_with_input(instruction: str, input: str | None) -> str:
    """An instruction row's question: the instruction, with a non-empty input on the next line.

    Example:
        >>> instruction_with_input("Add.", "2 + 3"), instruction_with_input("Add.", "")
        ('Add.\\n2 + 3', 'Add.')
    """
    return f"{instruction}\n{input}" if input else instruction


def ppl_text(instruction: str, input: str | None, output: str) -> str:
    """The seed PPLScorer's text: the non-empty instruction, input and output joined with newlines."""
    return "\n".join(part for part in (instruction, input, output) if part)


def rolling_items(ids: Sequence[int], max_length: int, stride: int) -> list[tuple[list[int], list[int]]]:
    """(context, continuation) windows that score every token of ``ids`` exactly once, as
    lm-evaluation-harness's ``loglikelihood_rolling`` does (``get_rolling_token_windows`` with
    ``max_seq_len=max_length`` and ``context_len=max_length - stride + 1``, then
    ``make_disjoint_window``).

    The model reads at most ``max_length`` tokens per window. The first window predicts the first
    ``max_length`` tokens after the start token (its empty context, filled in by the core); each
    later one predicts the next ``stride`` tokens (fewer at the end) after the ``max_length -
    stride`` tokens before them.
    """
    if not ids:
        return []
    first = min(max_length, len(ids))
    windows = [([], list(ids[:first]))]
    predicted = first
    while predicted < len(ids):
        count = min(len(ids) - predicted, stride)
        end = predicted + count
        windows.append((list(ids[end - max_length - 1: end - count]), list(ids[end - count: end])))
        predicted = end
    return windows


def token_strings(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> list[str]:
    """Each token as the text it stands for."""
    return [tokenizer.decode([token]) for token in ids]
