"""Excess loss: a model's per-token loss minus a reference model's on the same tokens.

Per token ``L_model(x_i) - L_ref(x_i)``, with ``L = -ln p(x_i | x_<i)`` in nats; per text, the mean over
its scored tokens (and the sum). It is the quantity behind Rho-1's selective language modelling (the
tokens with the highest excess loss, taking the model as the reference-trained one), RHO-LOSS's
reducible holdout loss (the training model's loss minus the holdout model's), CoLoR-Filter's
conditional loss reduction (the conditioned model as ``model``, the prior one as the reference: lowest
first) and Token Cleaning's per-token scores. Both models score the same (context, continuation) items
in one batched call each; they must share their tokenizer (:mod:`hf_adapters.formulas.reference_models`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.core.conversations import (
    TURNS,
    check_conversation_list,
    check_turn_template,
    checked_or_none,
    spread,
    turn_pairs,
)
from hf_adapters.core.likelihood import ContinuationScore, Item, combined
from hf_adapters.core.options import OptionSpec, check_choice, check_max_length, split_options, takes_options
from hf_adapters.core.texts import check_texts, text_items, token_strings
from hf_adapters.formulas.ifd import labels_or_numbers
from hf_adapters.formulas.reference_models import ReferenceOptions, check_same_items, check_same_vocabulary

logger = logging.getLogger(__name__)

#: The per-row outputs of ``return_token_losses`` (a list per row).
TOKEN_KEYS = ("tokens", "token_excess_losses", "token_losses", "reference_token_losses")


@dataclass(frozen=True)
class ExcessLossOptions(OptionSpec):
    """The options of excess loss (beside :class:`~hf_adapters.formulas.reference_models.ReferenceOptions`).

    Attributes:
        max_length: texts are cut to this many tokens (default: the smaller position limit of the two models).
        add_start_token: texts only: put the start token first, so that the first token is scored too.
        return_token_losses: add, per row, its scored tokens, their excess losses and both models' NLLs.
        turns: conversations only: ``"all"`` (default) scores every assistant turn after its history,
            ``"last"`` the last one.
        turn_template: conversations only: a turn layout with ``{role}`` and ``{content}`` used instead of
            the tokenizer's chat template.
    """

    max_length: int | None = None
    add_start_token: bool = True
    return_token_losses: bool = False
    turns: str = "all"
    turn_template: str | None = None

    def check(self) -> None:
        check_max_length(self.max_length)
        check_choice("turns", self.turns, TURNS)
        check_turn_template(self.turn_template)

    def check_rows(self) -> None:
        """Raise a ValueError if a conversation's option is given for texts."""
        if given := [name for name in ("turns", "turn_template") if getattr(self, name) != self.defaults()[name]]:
            raise ValueError(f"{given} apply to conversations (`messages`); texts do not take them.")

    def check_conversations(self) -> None:
        """Raise a ValueError if an option of texts is given for conversations."""
        if not self.add_start_token:
            raise ValueError("`add_start_token` applies to texts; conversations score each assistant turn after "
                             "its history.")


@dataclass(frozen=True)
class ExcessLossSpec(ExcessLossOptions, ReferenceOptions):
    """Every option of an excess-loss score: :class:`ExcessLossOptions` and the reference model's."""

    def check(self) -> None:
        ExcessLossOptions.check(self)
        ReferenceOptions.check(self)

    def resolved(self) -> dict[str, Any]:
        """Every option, the reference named rather than held (what a config records)."""
        return {**{name: getattr(self, name) for name in self.names()}, **self.config_values()}


def token_excess_losses(score: ContinuationScore, reference: ContinuationScore) -> list[float]:
    """``L_model - L_ref`` at each scored token of one row (both scored with ``token_losses``)."""
    return [nll - ref for nll, ref in zip(score.token_nlls, reference.token_nlls, strict=True)]


def excess_loss_result(scores: Sequence[ContinuationScore], references: Sequence[ContinuationScore]) -> dict:
    """Per row the mean excess loss over its scored tokens (``excess_losses``), its sum
    (``excess_loss_sums``) and each model's mean NLL (``losses``, ``reference_losses``), NaN where
    nothing was scored; their mean over the rows that have one (``mean_excess_loss``)."""
    sums = [score.nll - reference.nll if score.num_tokens else math.nan
            for score, reference in zip(scores, references, strict=True)]
    means = [total / score.num_tokens if score.num_tokens else math.nan
             for total, score in zip(sums, scores, strict=True)]
    valid = [mean for mean in means if not math.isnan(mean)]
    return {
        "excess_losses": means,
        "excess_loss_sums": sums,
        "losses": [score.mean_nll for score in scores],
        "reference_losses": [reference.mean_nll for reference in references],
        "mean_excess_loss": float(np.mean(valid)) if valid else math.nan,
    }


def score_excess_loss_items(
    backend: LikelihoodBackend,
    reference: LikelihoodBackend,
    items: Sequence[Item],
    *,
    max_length: int | None = None,
    batch_size: int | None = None,
    progress: bool | None = None,
    token_losses: bool = False,
) -> tuple[list[ContinuationScore], list[ContinuationScore]]:
    """Both models' scores of the same items, cut to the same length (the smaller position limit)."""
    window = min((limit for limit in (backend.window(max_length), reference.window(max_length)) if limit is not None),
                 default=None)
    settings = {"max_length": window, "batch_size": batch_size, "progress": progress, "token_losses": token_losses}
    return (backend.score_checked(items, desc="Excess loss (model)", **settings),
            reference.score_checked(items, desc="Excess loss (reference)", **settings))


def score_excess_loss(
    backend: LikelihoodBackend,
    reference: LikelihoodBackend,
    texts: Sequence[str],
    options: ExcessLossOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
) -> dict:
    """Excess loss of checked texts (every token after the start token, or after the first token
    without ``add_start_token``); the tokenizers are checked to agree on every row first."""
    check_same_vocabulary(backend.tokenizer, reference.tokenizer)
    items = text_items(backend.tokenizer, texts, options.add_start_token)
    if reference.tokenizer is not backend.tokenizer:
        check_same_items(items, text_items(reference.tokenizer, texts, options.add_start_token),
                         labels_or_numbers(None, len(items)))
    scores, references = score_excess_loss_items(backend, reference, items, max_length=options.max_length,
                                                 batch_size=batch_size, progress=progress,
                                                 token_losses=options.return_token_losses)
    result = excess_loss_result(scores, references)
    if options.return_token_losses:
        add_token_outputs(result, backend, [continuation for _, continuation in items], scores, references)
    return result


def score_conversation_excess_loss(
    backend: LikelihoodBackend,
    reference: LikelihoodBackend,
    conversations: Sequence[Sequence[Mapping[str, str]]],
    options: ExcessLossOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
    labels: Sequence[str] | None = None,
) -> dict:
    """Excess loss of each checked conversation's assistant tokens, each turn after its history rendered by
    the chat template (``turns``: all of them, or the last), over all its scored assistant tokens."""
    check_same_vocabulary(backend.tokenizer, reference.tokenizer)
    labels = labels_or_numbers(labels, len(conversations))
    per_conversation, items = [], []
    for label, messages in zip(labels, conversations, strict=True):
        pairs = turn_pairs(backend.tokenizer, messages, options.turns, options.turn_template)
        if reference.tokenizer is not backend.tokenizer:
            check_same_items(pairs, turn_pairs(reference.tokenizer, messages, options.turns, options.turn_template),
                             [label] * len(pairs))
        pairs = [pair for pair in pairs if pair[1]]  # an empty turn has no token to score
        if not pairs:
            logger.warning("%s has no assistant token to score (%s empty); its excess loss is NaN.", label,
                           "its last assistant turn is" if options.turns == "last" else "every assistant turn is")
        per_conversation.append(len(pairs))
        items.extend(pairs)
    scores, references = score_excess_loss_items(backend, reference, items, max_length=options.max_length,
                                                 batch_size=batch_size, progress=progress,
                                                 token_losses=options.return_token_losses)
    scores, references = iter(scores), iter(references)
    joined = [(combined([next(scores) for _ in range(count)]), combined([next(references) for _ in range(count)]))
              for count in per_conversation]
    result = excess_loss_result([score for score, _ in joined], [reference for _, reference in joined])
    if options.return_token_losses:
        answers = [[token for _, answer in turn_pairs(backend.tokenizer, messages, options.turns,
                                                      options.turn_template) for token in answer]
                   for messages in conversations]
        add_token_outputs(result, backend, answers, [s for s, _ in joined], [r for _, r in joined])
    return result


def add_token_outputs(result: dict, backend: LikelihoodBackend, ids: Sequence[Sequence[int]],
                      scores: Sequence[ContinuationScore], references: Sequence[ContinuationScore]) -> None:
    """Per row: its scored tokens as strings (``tokens``), their excess losses (``token_excess_losses``)
    and each model's NLLs (``token_losses``, ``reference_token_losses``)."""
    result["tokens"] = [token_strings(backend.tokenizer, row[: score.num_tokens])
                        for row, score in zip(ids, scores, strict=True)]
    result["token_excess_losses"] = [token_excess_losses(score, reference)
                                     for score, reference in zip(scores, references, strict=True)]
    result["token_losses"] = [list(score.token_nlls) for score in scores]
    result["reference_token_losses"] = [list(reference.token_nlls) for reference in references]


@takes_options(BackendOptions, ExcessLossSpec)
def compute_excess_loss(predictions: Sequence[str] | None = None, *,
                        messages: Sequence[Sequence[Mapping[str, str]]] | None = None, **options: Any) -> dict:
    """Excess loss of each text (or conversation's assistant tokens) under a model against a reference model.

    Returns ``excess_losses`` (per row, the mean of ``L_model - L_ref`` over its scored tokens, in nats;
    NaN where nothing was scored, and for a conversation that cannot be scored, with a warning naming
    the row), ``excess_loss_sums``, both models' mean NLLs (``losses``, ``reference_losses``) and
    ``mean_excess_loss``; ``return_token_losses`` adds, per row, ``tokens``, ``token_excess_losses``,
    ``token_losses`` and ``reference_token_losses`` (empty for a row without a score). The model is named by the
    options of :class:`~hf_adapters.backends.BackendOptions`, the reference by those of
    :class:`~hf_adapters.formulas.reference_models.ReferenceOptions`; both must share the tokenizer
    (a :class:`~hf_adapters.formulas.reference_models.TokenizerMismatchError` before any row is scored).

    Example:
        >>> from hf_adapters.formulas.excess_loss import compute_excess_loss
        >>> result = compute_excess_loss(["The cat sat on the mat."],
        ...                              reference_model_id="HuggingFaceTB/SmolLM2-135M-Instruct")
        >>> result["excess_losses"]  # the model against itself
        [0.0]
    """
    run, spec = split_options(options, BackendOptions, ExcessLossSpec, caller="compute_excess_loss")
    spec.require()
    if messages is not None:
        if predictions is not None:
            raise ValueError("Pass `messages` (conversations) or `predictions` (texts), not both.")
        spec.check_conversations()
        conversations = check_conversation_list(messages)
        labels = labels_or_numbers(None, len(conversations))
        checked = checked_or_none(conversations, labels)
        result = score_conversation_excess_loss(
            run.load(), spec.load(dtype=run.dtype, device=run.device), [m for m in checked if m is not None], spec,
            batch_size=run.batch_size, progress=run.progress,
            labels=[label for label, m in zip(labels, checked, strict=True) if m is not None])
        for key in result.keys() - {"mean_excess_loss"}:
            result[key] = spread(result[key], checked, [] if key in TOKEN_KEYS else math.nan)
        return result
    check_texts(predictions)
    spec.check_rows()
    return score_excess_loss(run.load(), spec.load(dtype=run.dtype, device=run.device), predictions, spec,
                             batch_size=run.batch_size, progress=run.progress)
