"""``IFEvalScorer``: does each response follow its IFEval instructions, strictly and loosely (no model)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hf_adapters.ifeval.evaluation import score_row
from hf_adapters.ifeval.registry import build_checks
from hf_adapters.scorers.base import RowScorer, register_scorer


@register_scorer
class IFEvalScorer(RowScorer):
    """Per row: whether each instruction was followed (``strict``, ``loose``: lists of bools) and
    whether all were (``prompt_strict``, ``prompt_loose``). A job writes ``prompt_strict`` as 1.0 or 0.0."""

    name = "IFEvalScorer"
    roles = {"response": "response", "instruction_ids": "instruction_id_list", "kwargs": "kwargs"}
    text_roles = ("response",)
    outputs = ("prompt_strict", "prompt_loose", "strict", "loose")
    output_types = {"prompt_strict": "bool", "prompt_loose": "bool", "strict": ["bool"], "loose": ["bool"]}

    def check_rows(self, rows: Sequence[Mapping[str, Any]], offset: int = 0) -> None:
        """Also check every row's instruction ids and kwargs, naming the row."""
        super().check_rows(rows, offset)
        ids, kwargs = self.columns["instruction_ids"], self.columns["kwargs"]
        for i, row in enumerate(rows):
            build_checks(row[ids], row[kwargs], row=offset + i, key=row.get("key", row.get("id")))

    def score_batch(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list]:
        responses = self.read_texts(batch, first_row)["response"]
        keys = batch.get("key") or [None] * len(responses)
        results = [
            score_row(response, {"instruction_id_list": ids, "kwargs": kwargs, "key": key}, index=index)
            for index, (response, ids, kwargs, key) in enumerate(
                zip(responses, batch[self.columns["instruction_ids"]], batch[self.columns["kwargs"]], keys,
                    strict=True),
                first_row,
            )
        ]
        return {
            "prompt_strict": [all(result.strict) for result in results],
            "prompt_loose": [all(result.loose) for result in results],
            "strict": [list(result.strict) for result in results],
            "loose": [list(result.loose) for result in results],
        }
