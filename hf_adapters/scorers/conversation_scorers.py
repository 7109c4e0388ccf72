"""Scorers of conversations: IFD of assistant turns (``turns: last`` or ``all``) and the perplexity of
assistant tokens after their history. They read the ``messages`` column, or ``conversations``
(ShareGPT) in data that has no ``messages``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from hf_adapters.core.conversations import ConversationError, check_messages, checked_or_none, spread
from hf_adapters.formulas.ifd import IFDOptions, labels_or_numbers, score_conversation_ifd
from hf_adapters.formulas.perplexity import PerplexityOptions, score_conversation_perplexity
from hf_adapters.scorers.base import ModelRowScorer, register_scorer, row_name
from hf_adapters.scorers.perplexity_scorers import add_entropy_output


class ConversationScorer(ModelRowScorer):
    """Base of scorers of conversations: one conversation per row, in OpenAI ``messages`` or
    ShareGPT ``conversations`` form. A row whose conversation cannot be scored gets NaN (and a
    warning) in ``Dataset.map``; a job refuses it up front, naming it."""

    roles = {"messages": "messages"}
    #: Values of the outputs for a row whose conversation cannot be scored.
    missing: ClassVar[dict[str, Any]] = {}

    def check_spec(self) -> None:
        """Raise a ValueError for an option of instruction rows or texts."""
        self.spec.check_conversations()

    def use_columns(self, column_names: Sequence[str]) -> None:
        if self.columns["messages"] == "messages" and "messages" not in column_names and \
                "conversations" in column_names:
            self.columns["messages"] = "conversations"

    def check_rows(self, rows: Sequence[Mapping[str, Any]], offset: int = 0) -> None:
        """Also check every row's conversation, naming the row."""
        super().check_rows(rows, offset)
        for i, row in enumerate(rows):
            try:
                check_messages(row[self.columns["messages"]])
            except ConversationError as error:
                raise ValueError(f"{row_name(row, offset + i)}: {error}") from None

    def result(self, conversations: Sequence[Any], labels: Sequence[str] | None = None) -> dict[str, Any]:
        """The formula's result for a batch of conversations; one that cannot be scored gets the
        ``missing`` values and a warning naming its row by its label in ``labels`` (default ``Row 0``,
        ``Row 1``...)."""
        labels = labels_or_numbers(labels, len(conversations))
        checked = checked_or_none(conversations, labels)
        valid = [label for label, messages in zip(labels, checked, strict=True) if messages is not None]
        result = self.score_conversations([messages for messages in checked if messages is not None], valid)
        for key, output in zip(self.result_keys, self.outputs, strict=True):
            result[key] = spread(result[key], checked, self.missing.get(output, math.nan))
        return result

    def read_inputs(self, batch: Mapping[str, list], first_row: int = 0) -> list:
        return batch[self.columns["messages"]]

    def score_conversations(self, conversations: list[list[dict[str, str]]], labels: list[str]) -> dict[str, Any]:
        """The formula's result for checked conversations, named in warnings by ``labels``."""
        raise NotImplementedError


@register_scorer
class ConversationIFDScorer(ConversationScorer):
    """IFD of each conversation's last assistant turn (``turns: last``) or of all of them (``turns:
    all``: per turn, and over all assistant tokens of the conversation), each turn after its
    history rendered by the tokenizer's chat template (``turn_template``: a turn layout with
    ``{role}`` and ``{content}``; ChatML when the tokenizer has no chat template). Its keys are
    those of :class:`~hf_adapters.formulas.ifd.IFDOptions` for conversations; a config ``name: IFDScorer``
    with a ``turns`` key builds this scorer (see :func:`~hf_adapters.scorers.build_scorer`).
    """

    name = "ConversationIFDScorer"
    option_spec = IFDOptions
    seed_keys = ("max_length", "turns")
    outputs = ("ifd", "ppl_conditional", "ppl_direct", "turn_ifd")
    result_keys = ("ifd_scores", "conditional_perplexities", "direct_perplexities", "turn_ifd_scores")
    missing = {"turn_ifd": []}
    output_types = {"turn_ifd": ["float64"]}

    def score_conversations(self, conversations: list[list[dict[str, str]]], labels: list[str]) -> dict[str, Any]:
        return score_conversation_ifd(self.load(), conversations, self.spec, batch_size=self.run.batch_size,
                                      progress=self.progress, labels=labels)


@register_scorer
class ConversationPerplexityScorer(ConversationScorer):
    """Perplexity of each conversation's assistant tokens, every turn after its history: what a
    supervised fine-tuning loss sees. Its keys are those of
    :class:`~hf_adapters.formulas.perplexity.PerplexityOptions` for conversations."""

    name = "ConversationPerplexityScorer"
    option_spec = PerplexityOptions
    outputs = ("perplexity",)
    result_keys = ("perplexities",)

    def __init__(self, **config: Any):
        super().__init__(**config)
        add_entropy_output(self)

    def score_conversations(self, conversations: list[list[dict[str, str]]], labels: list[str]) -> dict[str, Any]:
        return score_conversation_perplexity(self.load(), conversations, self.spec, batch_size=self.run.batch_size,
                                             progress=self.progress)
