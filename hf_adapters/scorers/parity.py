"""``InformationParityScorer``: Information Parity of a text (``prediction``) against its parallel ``reference``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..models import DEFAULT_MODEL_ID
from ..options import DEFAULT_BATCH_SIZE
from ..parity import check_pairs, score_information_parity
from .base import ModelRowScorer, register_scorer


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
    options = {"model": DEFAULT_MODEL_ID, "max_length": None, "batch_size": DEFAULT_BATCH_SIZE, "dtype": None}
    roles = {"prediction": "prediction", "reference": "reference"}
    text_roles = ("prediction", "reference")
    outputs = ("information_parity",)
    result_keys = ("scores",)

    def result(self, texts: Mapping[str, Sequence[str]], first_row: int = 0) -> dict[str, Any]:
        check_pairs(texts["prediction"], texts["reference"])
        model, tokenizer = self.load()
        return score_information_parity(
            model, tokenizer, texts["prediction"], texts["reference"], max_length=self.config["max_length"],
            batch_size=self.config["batch_size"], progress=self.progress,
        )
