"""``InformationParityScorer``: Information Parity of a text (``prediction``) against its parallel ``reference``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hf_adapters.formulas.information_parity import InformationParityOptions, check_pairs, score_information_parity
from hf_adapters.scorers.base import ModelRowScorer, register_scorer


@register_scorer
class InformationParityScorer(ModelRowScorer):
    """Per-row NLL(reference) / NLL(prediction), NaN where either text is empty, as the
    ``information_parity`` metric computes it.

    Example config::

        name: InformationParityScorer
        model: HuggingFaceTB/SmolLM2-135M-Instruct
        prediction_column: fr   # the language under test
        reference_column: en
    """

    name = "InformationParityScorer"
    option_spec = InformationParityOptions
    roles = {"prediction": "prediction", "reference": "reference"}
    text_roles = ("prediction", "reference")
    outputs = ("information_parity",)
    result_keys = ("scores",)

    def check_spec(self) -> None:
        """Information Parity has no options that only some rows take."""

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        check_pairs(texts["prediction"], texts["reference"])
        return score_information_parity(self.load(), texts["prediction"], texts["reference"], self.spec,
                                        batch_size=self.run.batch_size, progress=self.progress)
