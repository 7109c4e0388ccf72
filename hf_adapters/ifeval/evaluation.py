"""Strict and loose scoring of IFEval rows, and the prompt- and instruction-level aggregates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hf_adapters.ifeval.registry import IFEvalInputError, row_checks, where


@dataclass(frozen=True)
class RowResult:
    """Per-instruction outcomes for one response, in ``instruction_id_list`` order."""

    instruction_ids: tuple[str, ...]
    strict: tuple[bool, ...]
    loose: tuple[bool, ...]


def loose_variants(response: str) -> list[str]:
    """The 8 responses loose mode tries, in the reference's order (blank ones included)."""
    lines = response.split("\n")
    trimmed = ["\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [response, response.replace("*", ""), *trimmed, *(text.replace("*", "") for text in trimmed)]


def _alternatives(response: str) -> list[str]:
    """The distinct non-blank loose variants other than the response itself, first occurrence first."""
    seen = {response}
    alternatives = []
    for text in loose_variants(response)[1:]:
        if text not in seen and text.strip():
            seen.add(text)
            alternatives.append(text)
    return alternatives


def score_checks(response: str, checks: Sequence[Callable[[str], bool]]) -> tuple[list[bool], list[bool]]:
    """Strict and loose outcome of each check on ``response``.

    Strict: the response is non-blank and passes. Loose: some non-blank loose variant passes.
    Variants that repeat an earlier one are checked once; the result is the same.
    """
    strict = [bool(response.strip()) and check(response) for check in checks]
    alternatives = None
    loose = []
    for check, passed in zip(checks, strict, strict=True):
        if not passed:
            if alternatives is None:
                alternatives = _alternatives(response)
            passed = any(check(text) for text in alternatives)
        loose.append(passed)
    return strict, loose


def score_row(response: str, row: Mapping[str, Any], *, index: int | None = None) -> RowResult:
    """Score one response against one IFEval row (``instruction_id_list``, ``kwargs``, optional ``key``)."""
    checks = row_checks(row, index=index)
    if not isinstance(response, str):
        at = where(index, row.get("key"))
        raise IFEvalInputError(f"the response{at} must be a string, got {type(response).__name__}")
    strict, loose = score_checks(response, checks)
    return RowResult(tuple(row["instruction_id_list"]), tuple(strict), tuple(loose))


def score_rows(responses: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[RowResult]:
    """Score each response against the IFEval row at the same position."""
    if len(responses) != len(rows):
        raise ValueError(f"got {len(responses)} responses for {len(rows)} IFEval rows")
    return [score_row(response, row, index=i) for i, (response, row) in enumerate(zip(responses, rows, strict=True))]


def _accuracy(hits: int, total: int) -> float:
    return hits / total if total else float("nan")


def aggregate(results: Sequence[RowResult], *, detailed: bool = False) -> dict[str, Any]:
    """Prompt-level (all instructions followed) and instruction-level (micro average) accuracies.

    With ``detailed``, also the per-prompt lists and a per-instruction-id breakdown.
    """
    flat = [(iid, s, lo) for r in results for iid, s, lo in zip(r.instruction_ids, r.strict, r.loose, strict=True)]
    scores: dict[str, Any] = {
        "prompt_level_strict_acc": _accuracy(sum(all(r.strict) for r in results), len(results)),
        "inst_level_strict_acc": _accuracy(sum(s for _, s, _ in flat), len(flat)),
        "prompt_level_loose_acc": _accuracy(sum(all(r.loose) for r in results), len(results)),
        "inst_level_loose_acc": _accuracy(sum(lo for _, _, lo in flat), len(flat)),
    }
    if detailed:
        counts: dict[str, list[int]] = {}
        for iid, s, lo in flat:
            tally = counts.setdefault(iid, [0, 0, 0])
            tally[0] += 1
            tally[1] += s
            tally[2] += lo
        scores["strict_follow_instruction_list"] = [list(r.strict) for r in results]
        scores["loose_follow_instruction_list"] = [list(r.loose) for r in results]
        scores["per_instruction"] = {
            iid: {
                "count": n,
                "strict_followed": s,
                "strict_acc": s / n,
                "loose_followed": lo,
                "loose_acc": lo / n,
            }
            for iid, (n, s, lo) in sorted(counts.items())
        }
    return scores


def compute_ifeval(
    predictions: Sequence[str], references: Sequence[Mapping[str, Any]], *, detailed: bool = False
) -> dict[str, Any]:
    """IFEval accuracies of ``predictions`` (responses) against ``references`` (IFEval rows)."""
    return aggregate(score_rows(predictions, references), detailed=detailed)


def ifeval_row_score(row: Mapping[str, Any], response_field: str = "response") -> float:
    """1.0 if the row's response follows all its instructions (prompt-level strict), else 0.0.

    ``row`` carries the IFEval fields (``instruction_id_list``, ``kwargs``, optional ``key``)
    plus the response under ``response_field``.
    """
    if response_field not in row:
        raise ValueError(f"row has no response field {response_field!r}; fields: {sorted(row)}")
    return 1.0 if all(score_row(row[response_field], row).strict) else 0.0
