"""``IFDScorer``: Instruction-Following Difficulty of instruction rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hf_adapters.formulas.ifd import IFDOptions, score_ifd
from hf_adapters.scorers.base import ModelRowScorer, register_scorer


@register_scorer
class IFDScorer(ModelRowScorer):
    """Instruction-Following Difficulty, PPL(A|Q) / PPL(A) (``mode: loss_ratio``: the ratio of mean
    NLLs), with both perplexities, as the ``ifd`` metric computes them; its keys are those of
    :class:`~hf_adapters.formulas.ifd.IFDOptions` for instruction rows.

    ``convention: cherry``, ``superfiltering`` or ``opendataarena`` reproduces that peer's numbers
    (see :mod:`hf_adapters.core.conventions`); ``template``, ``template_no_input`` and ``mode`` then
    default to the peer's. The seed's config with ``convention: opendataarena`` gives what it gave
    in OpenDataArena-Tool.
    """

    name = "IFDScorer"
    option_spec = IFDOptions
    seed_keys = ("max_length", "template", "template_no_input")
    roles = {"instruction": "instruction", "input": "input", "output": "output"}
    optional_roles = ("input",)
    text_roles = ("instruction", "input", "output")
    outputs = ("ifd", "ppl_conditional", "ppl_direct")
    result_keys = ("ifd_scores", "conditional_perplexities", "direct_perplexities")
    token_outputs = ("tokens", "conditional_token_losses", "direct_token_losses")
    output_types = {"tokens": ["string"], "conditional_token_losses": ["float64"], "direct_token_losses": ["float64"]}

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        return score_ifd(self.load(), texts["instruction"], texts["output"], texts["input"], self.spec,
                         batch_size=self.run.batch_size, progress=self.progress, labels=labels)
