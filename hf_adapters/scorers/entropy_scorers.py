"""OpenDataArena's entropy- and loss-based scorers by their names: ``UPDScorer``, ``HESScorer`` and
``NormLossScorer`` (:mod:`hf_adapters.formulas.entropy_scores`), on instruction rows; with
``convention: exact`` each reads the answer after IFD's prompt, as ``AnswerEntropyScorer`` does."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from hf_adapters.formulas.entropy_scores import (
    AnswerEntropyOptions,
    HESOptions,
    NormLossOptions,
    UPDOptions,
    score_answer_entropy,
    score_hes,
    score_norm_loss,
    score_upd,
)
from hf_adapters.scorers.base import ModelRowScorer, register_scorer


class InstructionRowScorer(ModelRowScorer):
    """Base of scorers of instruction rows (``instruction``, an optional ``input``, ``output``) whose
    formula takes the three columns."""

    roles: ClassVar[dict[str, str]] = {"instruction": "instruction", "input": "input", "output": "output"}
    optional_roles = ("input",)
    text_roles = ("instruction", "input", "output")

    #: The score's function of (backend, instructions, inputs, outputs, options, batch_size=, progress=,
    #: labels=): ``labels`` name the rows in its warnings.
    formula: ClassVar[Callable[..., dict[str, Any]]]

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        return self.formula(self.load(), texts["instruction"], texts["input"], texts["output"], self.spec,
                            batch_size=self.run.batch_size, progress=self.progress, labels=labels)


@register_scorer
class UPDScorer(InstructionRowScorer):
    """UPD of each row's answer, as OpenDataArena's ``UPDScorer`` computes it
    (:func:`~hf_adapters.formulas.entropy_scores.score_upd`). Config keys: ``model``, ``max_length``, ``batch_size``;
    ``convention: exact`` (with IFD's ``template`` and ``template_no_input``) for the answer after IFD's prompt."""

    name = "UPDScorer"
    option_spec = UPDOptions
    outputs = ("upd",)
    result_keys = ("upd_scores",)
    formula = staticmethod(score_upd)


@register_scorer
class HESScorer(InstructionRowScorer):
    """High-Entropy Sum of each row's answer, in bits, as OpenDataArena's ``HESScorer`` computes it
    (:func:`~hf_adapters.formulas.entropy_scores.score_hes`). Config keys: ``model``, ``percentile_cutoff``,
    ``max_length``, ``batch_size``."""

    name = "HESScorer"
    option_spec = HESOptions
    seed_keys = ("max_length", "percentile_cutoff")
    outputs = ("hes", "completion_token_length")
    result_keys = ("hes_scores", "completion_token_lengths")
    output_types = {"completion_token_length": "int64"}
    formula = staticmethod(score_hes)


@register_scorer
class NormLossScorer(InstructionRowScorer):
    """Mean NLL in bits of each row's joined text, as OpenDataArena's ``NormLossScorer`` computes it
    (:func:`~hf_adapters.formulas.entropy_scores.score_norm_loss`). That code reads the input from a field
    ``input_text``, so ``input_column`` defaults to ``input_text`` here too (``input_column: input`` to
    include Alpaca inputs); with ``convention: exact`` (the answer after IFD's prompt) to IFD's ``input``."""

    name = "NormLossScorer"
    option_spec = NormLossOptions
    roles = {"instruction": "instruction", "input": "input_text", "output": "output"}
    outputs = ("norm_loss",)
    result_keys = ("norm_losses",)
    formula = staticmethod(score_norm_loss)

    def __init__(self, **config: Any):
        super().__init__(**config)
        if self.spec.convention == "exact" and "input_column" not in config:
            self.columns["input"] = "input"  # IFD's rows


@register_scorer
class AnswerEntropyScorer(InstructionRowScorer):
    """Mean predictive entropy (nats) over each row's answer tokens after IFD's prompt
    (:func:`~hf_adapters.formulas.entropy_scores.score_answer_entropy`): the tokens of IFD's conditional
    pass, which it shares in a score set with IFD. Config keys: ``model``, ``max_length``, ``template``,
    ``template_no_input``, ``batch_size``."""

    name = "AnswerEntropyScorer"
    option_spec = AnswerEntropyOptions
    outputs = ("answer_entropy",)
    result_keys = ("answer_entropies",)
    formula = staticmethod(score_answer_entropy)
