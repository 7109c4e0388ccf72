"""IFEval prompts: the 541 of Google's release shipped with the package (or any file in its format),
checked, and rendered as one user turn of a model's chat.

Example:
    >>> from hf_adapters.ifeval.prompts import read_prompts
    >>> prompts = read_prompts()
    >>> len(prompts), prompts[0]["key"], prompts[0]["instruction_id_list"][0]
    (541, 1000, 'punctuation:no_comma')
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from hf_adapters.files.data_io import read_records
from hf_adapters.ifeval.registry import IFEvalInputError, row_checks, where

#: The packaged prompts, in ``hf_adapters/data`` (source and license: ``data/IFEVAL_SOURCE.md``).
PACKAGED_PROMPTS = "ifeval_input_data.jsonl"
#: What results and manifests name the packaged prompts by.
PACKAGED_NAME = "packaged:" + PACKAGED_PROMPTS


def _packaged_bytes() -> bytes:
    return (resources.files("hf_adapters") / "data" / PACKAGED_PROMPTS).read_bytes()


def prompts_source(path: str | Path | None = None) -> dict[str, str]:
    """What a prompt file is: its name (``packaged:...`` for the packaged prompts) and the SHA-256 of its bytes."""
    data = _packaged_bytes() if path is None else Path(path).read_bytes()
    return {"name": PACKAGED_NAME if path is None else str(path), "sha256": hashlib.sha256(data).hexdigest()}


def is_prompt_key(value: Any) -> bool:
    """Whether ``value`` can be a prompt's key: an integer or a string (a run finds samples by key)."""
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def check_prompt_rows(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """IFEval rows with a string ``prompt``, valid instruction ids and kwargs, and unique integer or
    string keys (a row without ``key`` gets its position). Raises IFEvalInputError naming the first bad row."""
    checked, seen = [], set()
    for index, row in enumerate(rows):
        row_checks(row, index=index)  # a dict with known instruction ids and well-formed kwargs
        row = dict(row)
        row.setdefault("key", index)
        if not is_prompt_key(row["key"]):
            raise IFEvalInputError(f"IFEval row {index}: its 'key' must be an integer or a string, "
                                   f"got {type(row['key']).__name__}.")
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise IFEvalInputError(f"IFEval row{where(index, row['key'])} has no prompt text ('prompt').")
        if row["key"] in seen:
            raise IFEvalInputError(f"IFEval row{where(index, row['key'])} repeats the key of an earlier row.")
        seen.add(row["key"])
        checked.append(row)
    if not checked:
        raise IFEvalInputError("The IFEval file holds no rows.")
    return checked


def read_prompts(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The rows of an IFEval-format JSONL file (``key``, ``prompt``, ``instruction_id_list``,
    ``kwargs``), checked with :func:`check_prompt_rows`; the packaged 541 prompts when ``path`` is None."""
    if path is None:
        with resources.as_file(resources.files("hf_adapters") / "data" / PACKAGED_PROMPTS) as packaged:
            return check_prompt_rows(read_records(packaged))
    if not Path(path).is_file():
        raise FileNotFoundError(f"IFEval data file {str(path)!r} does not exist.")
    return check_prompt_rows(read_records(path))


def render_prompt(tokenizer, prompt: str) -> str:
    """The prompt as one user turn followed by the start of the assistant's: the tokenizer's chat
    template with a generation prompt, or ChatML for a tokenizer without one."""
    from hf_adapters.core.conversations import history_prompt

    return history_prompt(tokenizer, [{"role": "user", "content": prompt}])


def prompt_token_ids(tokenizer, rows: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Each row's rendered prompt as token ids; the template holds its special tokens, so none are added."""
    return [tokenizer(render_prompt(tokenizer, row["prompt"]), add_special_tokens=False).input_ids for row in rows]
