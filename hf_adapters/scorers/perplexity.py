"""Perplexity of a text column (``PerplexityScorer``), and of the seed's joined instruction rows (``PPLScorer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..models import DEFAULT_MODEL_ID
from ..options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH, check_stride
from ..perplexity import check_perplexity_convention, score_perplexity
from ..texts import ppl_text
from .base import ConfigError, ModelRowScorer, register_scorer


@register_scorer
class PerplexityScorer(ModelRowScorer):
    """Perplexity of each text (lower: more predictable), as the ``perplexity`` metric computes it.

    With ``stride`` every token of a long text is scored, in rolling windows of at most
    ``max_length`` tokens (see :func:`hf_adapters.perplexity.compute_perplexity`).

    Example config::

        name: PerplexityScorer
        text_column: text
        max_length: 2048
        stride: 512
    """

    name = "PerplexityScorer"
    options = {"model": DEFAULT_MODEL_ID, "max_length": None, "batch_size": DEFAULT_BATCH_SIZE, "dtype": None,
               "add_start_token": True, "stride": None, "return_token_losses": False}
    extra_options = {"convention": "exact"}
    roles = {"text": "text"}
    text_roles = ("text",)
    outputs = ("perplexity",)
    result_keys = ("perplexities",)
    token_outputs = ("tokens", "token_losses")

    def __init__(self, **config: Any):
        super().__init__(**config)
        try:
            check_stride(self.setting("stride"), self.config["max_length"])
            check_perplexity_convention(self.setting("convention"), self.setting("stride"))
        except ValueError as error:
            raise ConfigError(f"{self.name}: {error}") from None

    def texts(self, texts: Mapping[str, Sequence[str]]) -> Sequence[str]:
        """The texts to score, from the texts of each role."""
        return texts["text"]

    def result(self, texts: Mapping[str, Sequence[str]], first_row: int = 0) -> dict[str, Any]:
        model, tokenizer = self.load()
        return score_perplexity(
            model, tokenizer, self.texts(texts), add_start_token=self.setting("add_start_token"),
            max_length=self.config["max_length"], batch_size=self.config["batch_size"], progress=self.progress,
            stride=self.setting("stride"), return_token_losses=self.setting("return_token_losses"),
            convention=self.setting("convention"),
        )


@register_scorer
class PPLScorer(PerplexityScorer):
    """Perplexity of the non-empty instruction, input and output joined with newlines (lower: more
    predictable), as the perplexity metric computes it.

    Unlike the seed, which scores the text as the tokenizer encodes it (so without a BOS-adding
    tokenizer, e.g. Qwen or SmolLM2, the first token is never scored), the start token (BOS, else
    EOS) is put in front, so every token of the text is scored whatever the tokenizer.
    ``convention: opendataarena`` scores as the seed did (see
    :func:`hf_adapters.perplexity.compute_perplexity`).
    """

    name = "PPLScorer"
    options = {
        "model": DEFAULT_MODEL_ID, "max_length": DEFAULT_MAX_LENGTH, "batch_size": DEFAULT_BATCH_SIZE, "dtype": None,
    }
    extra_options = {"add_start_token": True, "stride": None, "return_token_losses": False, "convention": "exact"}
    roles = {"instruction": "instruction", "input": "input", "output": "output"}
    optional_roles = ("input",)
    text_roles = ("instruction", "input", "output")

    def texts(self, texts: Mapping[str, Sequence[str]]) -> list[str]:
        return [ppl_text(*row) for row in zip(texts["instruction"], texts["input"], texts["output"], strict=True)]
