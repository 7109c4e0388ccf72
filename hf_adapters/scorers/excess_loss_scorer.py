"""Excess loss against a reference model: of a text column (``TextExcessLossScorer``), of the seed's
joined instruction rows (``ExcessLossScorer``) and of conversations' assistant tokens
(``ConversationExcessLossScorer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.core.texts import ppl_text
from hf_adapters.formulas.excess_loss import (
    TOKEN_KEYS,
    ExcessLossSpec,
    score_conversation_excess_loss,
    score_excess_loss,
)
from hf_adapters.scorers.base import ModelRowScorer, register_scorer
from hf_adapters.scorers.conversation_scorers import ConversationScorer


class ReferenceModelScorer(ModelRowScorer):
    """Base of scorers that run a reference model beside the model: the config's ``reference_model``
    (a model id or path, or from Python a loaded model with ``reference_tokenizer``, or
    ``reference_backend``) is loaded on first use, with the model's dtype and device."""

    _reference: LikelihoodBackend | None = None

    def check_spec(self) -> None:
        super().check_spec()
        self.spec.require()

    def reference(self) -> LikelihoodBackend:
        """The reference backend, loaded once per scorer (the model itself once per process)."""
        if self._reference is None:
            self._reference = self.spec.load(dtype=self.run.dtype, device=self.run.device)
        return self._reference

    def prepare(self) -> None:
        super().prepare()
        self.reference()

    def model_identity(self) -> dict[str, Any] | None:
        """Both models' identities (None when either cannot be said)."""
        model, reference = super().model_identity(), self.spec.identity(dtype=self.run.dtype, device=self.run.device)
        return None if model is None or reference is None else {"model": model, "reference": reference}


@register_scorer
class TextExcessLossScorer(ReferenceModelScorer):
    """Excess loss of each text against the reference model: the mean over its tokens of
    ``L_model - L_ref`` in nats (:func:`hf_adapters.formulas.excess_loss.compute_excess_loss`), with its sum
    and both models' mean NLLs. Example config::

        name: TextExcessLossScorer
        model: HuggingFaceTB/SmolLM2-135M-Instruct
        reference_model: path/to/reference
        text_column: text
    """

    name = "TextExcessLossScorer"
    option_spec = ExcessLossSpec
    seed_keys = ("max_length", "reference_model")
    roles = {"text": "text"}
    text_roles = ("text",)
    outputs = ("excess_loss", "excess_loss_sum", "loss", "reference_loss")
    result_keys = ("excess_losses", "excess_loss_sums", "losses", "reference_losses")
    token_outputs = TOKEN_KEYS
    output_types = {"tokens": ["string"], "token_excess_losses": ["float64"], "token_losses": ["float64"],
                    "reference_token_losses": ["float64"]}

    def texts(self, texts: Mapping[str, Sequence[str]]) -> Sequence[str]:
        """The texts to score, from the texts of each role."""
        return texts["text"]

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        return score_excess_loss(self.load(), self.reference(), self.texts(texts), self.spec,
                                 batch_size=self.run.batch_size, progress=self.progress)


@register_scorer
class ExcessLossScorer(TextExcessLossScorer):
    """Excess loss of the non-empty instruction, input and output joined with newlines (the text the
    seed's ``PPLScorer`` scores), every token after the start token. Example config::

        name: ExcessLossScorer
        model: HuggingFaceTB/SmolLM2-135M-Instruct
        reference_model: path/to/reference
    """

    name = "ExcessLossScorer"
    roles = {"instruction": "instruction", "input": "input", "output": "output"}
    optional_roles = ("input",)
    text_roles = ("instruction", "input", "output")

    def texts(self, texts: Mapping[str, Sequence[str]]) -> list[str]:
        return [ppl_text(*row) for row in zip(texts["instruction"], texts["input"], texts["output"], strict=True)]


@register_scorer
class ConversationExcessLossScorer(ConversationScorer, ReferenceModelScorer):
    """Excess loss of each conversation's assistant tokens, every assistant turn (``turns: all``, the
    default; or the last) after its history rendered by the chat template."""

    name = "ConversationExcessLossScorer"
    option_spec = ExcessLossSpec
    seed_keys = ("max_length", "reference_model")
    outputs = ("excess_loss", "excess_loss_sum", "loss", "reference_loss")
    result_keys = ("excess_losses", "excess_loss_sums", "losses", "reference_losses")
    token_outputs = TOKEN_KEYS
    output_types = TextExcessLossScorer.output_types
    missing = dict.fromkeys(TOKEN_KEYS, [])

    def check_spec(self) -> None:
        self.spec.check_conversations()
        self.spec.require()

    def score_conversations(self, conversations: list[list[dict[str, str]]], labels: list[str]) -> dict[str, Any]:
        return score_conversation_excess_loss(self.load(), self.reference(), conversations, self.spec,
                                              batch_size=self.run.batch_size, progress=self.progress, labels=labels)
