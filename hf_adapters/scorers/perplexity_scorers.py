"""Perplexity of a text column (``PerplexityScorer``), and of the seed's joined instruction rows (``PPLScorer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hf_adapters.core.options import DEFAULT_MAX_LENGTH
from hf_adapters.core.texts import ppl_text
from hf_adapters.formulas.perplexity import PerplexityOptions, score_perplexity
from hf_adapters.scorers.base import ModelRowScorer, register_scorer


def add_entropy_output(scorer: ModelRowScorer) -> None:
    """With the option ``return_entropy``, an ``entropy`` output after the perplexity: each row's mean
    predictive entropy over its scored tokens (the result's ``entropies``)."""
    if scorer.spec.return_entropy:
        scorer.outputs = (*scorer.outputs[:1], "entropy", *scorer.outputs[1:])
        scorer.result_keys = (*scorer.result_keys[:1], "entropies", *scorer.result_keys[1:])


@register_scorer
class PerplexityScorer(ModelRowScorer):
    """Perplexity of each text (lower: more predictable), as the ``perplexity`` metric computes it;
    its keys are those of :class:`~hf_adapters.formulas.perplexity.PerplexityOptions` for texts.

    With ``stride`` every token of a long text is scored, in rolling windows of at most
    ``max_length`` tokens (see :func:`hf_adapters.formulas.perplexity.compute_perplexity`).

    Example config::

        name: PerplexityScorer
        text_column: text
        max_length: 2048
        stride: 512
    """

    name = "PerplexityScorer"
    option_spec = PerplexityOptions
    seed_keys = ("max_length", "add_start_token", "stride", "return_token_losses")
    roles = {"text": "text"}
    text_roles = ("text",)
    outputs = ("perplexity",)
    result_keys = ("perplexities",)
    token_outputs = ("tokens", "token_losses")
    output_types = {"tokens": ["string"], "token_losses": ["float64"]}

    def __init__(self, **config: Any):
        super().__init__(**config)
        add_entropy_output(self)

    def texts(self, texts: Mapping[str, Sequence[str]]) -> Sequence[str]:
        """The texts to score, from the texts of each role."""
        return texts["text"]

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        return score_perplexity(self.load(), self.texts(texts), self.spec, batch_size=self.run.batch_size,
                                progress=self.progress)


@register_scorer
class PPLScorer(PerplexityScorer):
    """Perplexity of the non-empty instruction, input and output joined with newlines (lower: more
    predictable), as the perplexity metric computes it.

    Unlike the seed, which scores the text as the tokenizer encodes it (so without a BOS-adding
    tokenizer, e.g. Qwen or SmolLM2, the first token is never scored), the start token (BOS, else
    EOS) is put in front, so every token of the text is scored whatever the tokenizer.
    ``convention: opendataarena`` scores as the seed did (see
    :func:`hf_adapters.formulas.perplexity.compute_perplexity`).
    """

    name = "PPLScorer"
    seed_keys = ("max_length",)
    option_defaults = {"max_length": DEFAULT_MAX_LENGTH}
    roles = {"instruction": "instruction", "input": "input", "output": "output"}
    optional_roles = ("input",)
    text_roles = ("instruction", "input", "output")

    def texts(self, texts: Mapping[str, Sequence[str]]) -> list[str]:
        return [ppl_text(*row) for row in zip(texts["instruction"], texts["input"], texts["output"], strict=True)]
