"""Instruction ids, their kwargs, and validation: turns an IFEval row into bound checks."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hf_adapters.ifeval import checkers
from hf_adapters.ifeval.checkers import RELATIONS


class IFEvalInputError(ValueError):
    """An IFEval row cannot be scored: unknown instruction id, malformed kwargs or fields."""


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("expected an integer, got a bool")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not hasattr(value, "__index__"):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value.__index__()


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"expected a list of strings, got {type(value).__name__}")
    return tuple(_string(item) for item in value)


def _pattern(value: Any) -> str:
    try:
        re.compile(_string(value))
    except re.error as error:
        raise ValueError(f"not a valid regular expression {value!r}: {error}") from None
    return value


def _patterns(value: Any) -> tuple[str, ...]:
    return tuple(_pattern(item) for item in _strings(value))


def _relation(value: Any) -> str:
    if value not in RELATIONS:
        raise ValueError(f"expected one of {list(RELATIONS)}, got {value!r}")
    return value


def _letter(value: Any) -> str:
    if not isinstance(value, str) or len(value) != 1:
        raise ValueError(f"expected a single character, got {value!r}")
    return value


@dataclass(frozen=True)
class InstructionSpec:
    """One instruction id: its check and the converter for each of its kwargs (all required)."""

    check: Callable[..., bool]
    params: Mapping[str, Callable[[Any], Any]]


INSTRUCTIONS: dict[str, InstructionSpec] = {
    "keywords:existence": InstructionSpec(checkers.keyword_existence, {"keywords": _patterns}),
    "keywords:frequency": InstructionSpec(
        checkers.keyword_frequency, {"keyword": _pattern, "frequency": _integer, "relation": _relation}
    ),
    "keywords:forbidden_words": InstructionSpec(checkers.forbidden_words, {"forbidden_words": _patterns}),
    "keywords:letter_frequency": InstructionSpec(
        checkers.letter_frequency, {"letter": _letter, "let_frequency": _integer, "let_relation": _relation}
    ),
    "language:response_language": InstructionSpec(checkers.response_language, {"language": _string}),
    "length_constraints:number_sentences": InstructionSpec(
        checkers.number_sentences, {"num_sentences": _integer, "relation": _relation}
    ),
    "length_constraints:number_paragraphs": InstructionSpec(checkers.number_paragraphs, {"num_paragraphs": _integer}),
    "length_constraints:number_words": InstructionSpec(
        checkers.number_words, {"num_words": _integer, "relation": _relation}
    ),
    "length_constraints:nth_paragraph_first_word": InstructionSpec(
        checkers.nth_paragraph_first_word,
        {"num_paragraphs": _integer, "nth_paragraph": _integer, "first_word": _string},
    ),
    "detectable_content:number_placeholders": InstructionSpec(
        checkers.number_placeholders, {"num_placeholders": _integer}
    ),
    "detectable_content:postscript": InstructionSpec(checkers.postscript, {"postscript_marker": _pattern}),
    "detectable_format:number_bullet_lists": InstructionSpec(checkers.number_bullet_lists, {"num_bullets": _integer}),
    "detectable_format:constrained_response": InstructionSpec(checkers.constrained_response, {}),
    "detectable_format:number_highlighted_sections": InstructionSpec(
        checkers.number_highlighted_sections, {"num_highlights": _integer}
    ),
    "detectable_format:multiple_sections": InstructionSpec(
        checkers.multiple_sections, {"section_spliter": _pattern, "num_sections": _integer}
    ),
    "detectable_format:json_format": InstructionSpec(checkers.json_format, {}),
    "detectable_format:title": InstructionSpec(checkers.title, {}),
    "combination:two_responses": InstructionSpec(checkers.two_responses, {}),
    "combination:repeat_prompt": InstructionSpec(checkers.repeat_prompt, {"prompt_to_repeat": _string}),
    "startend:end_checker": InstructionSpec(checkers.end_checker, {"end_phrase": _string}),
    "startend:quotation": InstructionSpec(checkers.quotation, {}),
    "change_case:capital_word_frequency": InstructionSpec(
        checkers.capital_word_frequency, {"capital_frequency": _integer, "capital_relation": _relation}
    ),
    "change_case:english_capital": InstructionSpec(checkers.english_capital, {}),
    "change_case:english_lowercase": InstructionSpec(checkers.english_lowercase, {}),
    "punctuation:no_comma": InstructionSpec(checkers.no_comma, {}),
}


def where(row: int | None, key: Any) -> str:
    """`` (row 3, key 1005)``-style suffix for error messages; empty when nothing is known."""
    parts = [] if row is None else [f"row {row}"]
    if key is not None:
        parts.append(f"key {key}")
    return f" ({', '.join(parts)})" if parts else ""


def build_check(
    instruction_id: str, kwargs: Mapping[str, Any] | None, *, row: int | None = None, key: Any = None
) -> Callable[[str], bool]:
    """Bind ``kwargs`` to the check of ``instruction_id``; ``None`` values count as absent.

    Raises IFEvalInputError naming the row, key and id for an unknown id, a missing, unexpected or
    ill-typed kwarg.
    """
    at = where(row, key)
    spec = INSTRUCTIONS.get(instruction_id)
    if spec is None:
        raise IFEvalInputError(f"unknown IFEval instruction id {instruction_id!r}{at}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise IFEvalInputError(f"kwargs for {instruction_id!r}{at} must be a dict, got {type(kwargs).__name__}")
    given = {name: value for name, value in kwargs.items() if value is not None}
    unexpected = sorted(set(given) - set(spec.params))
    missing = [name for name in spec.params if name not in given]
    if unexpected or missing:
        problems = [f"unexpected {unexpected}" if unexpected else "", f"missing {missing}" if missing else ""]
        raise IFEvalInputError(
            f"malformed kwargs for {instruction_id!r}{at}: {', '.join(p for p in problems if p)}; "
            f"expected {sorted(spec.params) or 'none'}"
        )
    bound = {}
    for name, convert in spec.params.items():
        try:
            bound[name] = convert(given[name])
        except (TypeError, ValueError) as error:
            raise IFEvalInputError(f"malformed kwarg {name!r} for {instruction_id!r}{at}: {error}") from None
    return functools.partial(spec.check, **bound)


def build_checks(
    instruction_ids: Sequence[str],
    kwargs_list: Sequence[Mapping[str, Any] | None] | None,
    *,
    row: int | None = None,
    key: Any = None,
) -> list[Callable[[str], bool]]:
    """Bound checks for one IFEval row (``instruction_id_list`` and ``kwargs``). Every entry point that
    takes IFEval rows checks them here; a row without instructions is refused (it would count as followed)."""
    at = where(row, key)
    if isinstance(instruction_ids, str) or not isinstance(instruction_ids, Sequence):
        raise IFEvalInputError(f"instruction_id_list{at} must be a list of ids")
    if len(instruction_ids) == 0:
        raise IFEvalInputError(f"instruction_id_list{at} is empty: an IFEval row needs at least one instruction")
    if kwargs_list is None:
        kwargs_list = [None] * len(instruction_ids)
    if len(kwargs_list) != len(instruction_ids):
        raise IFEvalInputError(f"kwargs{at} has {len(kwargs_list)} entries for {len(instruction_ids)} instruction ids")
    return [
        build_check(instruction_id, kwargs, row=row, key=key)
        for instruction_id, kwargs in zip(instruction_ids, kwargs_list, strict=True)
    ]


def row_checks(row: Any, *, index: int | None = None) -> list[Callable[[str], bool]]:
    """Bound checks for an IFEval row dict; IFEvalInputError naming the row and id if it is malformed."""
    if not isinstance(row, Mapping):
        raise IFEvalInputError(f"an IFEval reference{where(index, None)} must be a dict, got {type(row).__name__}")
    if "instruction_id_list" not in row:
        raise IFEvalInputError(f"IFEval reference{where(index, row.get('key'))} has no 'instruction_id_list'")
    return build_checks(row["instruction_id_list"], row.get("kwargs"), row=index, key=row.get("key"))
