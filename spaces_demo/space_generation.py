"""The IFEval tab's generation: responses of the loaded model to packaged IFEval prompts, as rows the
tab then checks like pasted ones (the same greedy generation as ``hf-adapters ifeval``)."""

from __future__ import annotations

import functools
from typing import Any

from space_inputs import InputError

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts
from hf_adapters.ifeval.responses import decode_response, response_fields

#: Most prompts one request generates for (a Space has a few CPU cores), and most new tokens.
MAX_PROMPTS = 20
MAX_NEW_TOKENS = 1280
DEFAULT_NEW_TOKENS = 256
CHOICE_CHARS = 90


@functools.cache
def packaged_prompts() -> tuple[dict[str, Any], ...]:
    """The 541 IFEval prompts shipped with the library."""
    return tuple(read_prompts())


def prompt_choices() -> list[tuple[str, int]]:
    """Dropdown choices: ``(label, key)`` for each packaged prompt, the label its key and its opening words."""
    choices = []
    for row in packaged_prompts():
        text = " ".join(row["prompt"].split())
        label = text if len(text) <= CHOICE_CHARS else text[: CHOICE_CHARS - 1] + "…"
        choices.append((f"{row['key']}: {label}", row["key"]))
    return choices


def chosen_rows(key: Any, first_n: Any) -> list[dict[str, Any]]:
    """The first ``first_n`` packaged prompts when it is 1 or more, else the one whose key is ``key``."""
    rows = packaged_prompts()
    count = int(first_n or 0)
    if count > 0:
        if count > MAX_PROMPTS:
            raise InputError(f"This demo generates for at most {MAX_PROMPTS} prompts at once; run `hf-adapters "
                             "ifeval` for more.")
        return [dict(row) for row in rows[:count]]
    matches = [dict(row) for row in rows if str(row["key"]) == str(key)]
    if not matches:
        raise InputError("Choose a packaged IFEval prompt, or set the number of first prompts to generate for.")
    return matches


def generate_rows(rows: list[dict[str, Any]], backend: LikelihoodBackend, max_new_tokens: Any, strip: bool = False,
                  progress: bool = True) -> list[dict[str, Any]]:
    """``rows`` with the model's greedy ``response`` (and ``raw_response`` when ``strip`` removed a thinking block)."""
    max_new_tokens = int(max_new_tokens or DEFAULT_NEW_TOKENS)
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise InputError(f"Max new tokens must be from 1 to {MAX_NEW_TOKENS}.")
    tokenizer = backend.tokenizer
    outputs = backend.generate(prompt_token_ids(tokenizer, rows), max_new_tokens=max_new_tokens, progress=progress)
    generated = []
    for row, tokens in zip(rows, outputs, strict=True):
        generated.append({**row, **response_fields(decode_response(tokenizer, tokens), strip),
                          "generated_tokens": len(tokens)})
    return generated
