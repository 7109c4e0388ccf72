"""Perplexity of texts: exp of the mean NLL of each text's tokens, as evaluate's canonical metric."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.core.conventions import PERPLEXITY_CONVENTIONS, PerplexityConvention, peer_text_pairs
from hf_adapters.core.conversations import check_turn_template, turn_pairs
from hf_adapters.core.likelihood import ContinuationScore, combined, exp_or_inf
from hf_adapters.core.options import (
    OptionSpec,
    check_choice,
    check_max_length,
    check_stride,
    split_options,
    takes_options,
)
from hf_adapters.core.texts import check_texts, rolling_items, text_items, token_strings
from hf_adapters.core.wording import longer_than_max_length

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


def with_token_losses(result: dict, tokenizer: PreTrainedTokenizerBase, ids: Sequence[Sequence[int]],
                      scores: Sequence[ContinuationScore], prefix: str = "") -> dict:
    """``result`` with, per row, its scored tokens as strings (``tokens``) and their NLLs (``{prefix}token_losses``)."""
    result["tokens"] = [token_strings(tokenizer, row_ids[: score.num_tokens]) for row_ids, score in
                        zip(ids, scores, strict=True)]
    result[f"{prefix}token_losses"] = [list(score.token_nlls) for score in scores]
    return result


def with_entropies(result: dict, scores: Sequence[ContinuationScore], asked: bool) -> dict:
    """``result`` with, when ``asked``, each row's mean predictive entropy over its scored tokens
    (``entropies``, in nats; NaN where none was scored)."""
    if asked:
        result["entropies"] = [score.mean_entropy for score in scores]
    return result


def summarize_perplexity(scores: Sequence[ContinuationScore]) -> dict:
    """Per-text perplexities, their mean over valid texts, and corpus perplexity."""
    perplexities = [score.perplexity for score in scores]
    valid = [score for score in scores if score.num_tokens]
    total_tokens = sum(score.num_tokens for score in valid)
    corpus = exp_or_inf(sum(score.nll for score in valid) / total_tokens) if total_tokens else math.nan
    finite = [p for p in perplexities if not math.isnan(p)]
    return {
        "perplexities": perplexities,
        "mean_perplexity": float(np.mean(finite)) if finite else math.nan,
        "corpus_perplexity": corpus,
    }


@dataclass(frozen=True)
class PerplexityOptions(OptionSpec):
    """The options of perplexity, declared once: :func:`compute_perplexity`, the ``perplexity``
    metric, ``add_perplexity_column``, the ``PerplexityScorer``, ``PPLScorer`` and
    ``ConversationPerplexityScorer`` configs, ``hf-adapters perplexity`` and the Space all take these.

    Attributes:
        max_length: texts are cut to this many tokens (default: the model's position limit); with
            ``stride``, the most tokens the model reads per window.
        add_start_token: put the start token (BOS, else EOS) first, so the text's first token is scored.
        stride: score every token, in lm-evaluation-harness's rolling windows, each predicting at most
            ``stride`` new tokens (``stride=max_length``: lm-eval's disjoint windows).
        return_token_losses: add, per text, its scored tokens and their NLLs.
        return_entropy: add, per text, the mean predictive entropy over its scored tokens (``entropies``,
            in nats), from the same forward pass.
        convention: ``"exact"``, or ``"opendataarena"``: the tokens OpenDataArena-Tool's ``PPLScorer`` scores.
        turn_template: conversations only: a turn layout with ``{role}`` and ``{content}`` used instead of
            the tokenizer's chat template.
    """

    max_length: int | None = None
    add_start_token: bool = True
    stride: int | None = None
    return_token_losses: bool = False
    return_entropy: bool = False
    convention: str = "exact"
    turn_template: str | None = None

    def check(self) -> None:
        check_max_length(self.max_length)
        check_stride(self.stride, self.max_length)
        check_choice("convention", self.convention, PERPLEXITY_CONVENTIONS)
        if self.peer.peer and self.stride is not None:
            raise ValueError(f"convention={self.convention!r} has no rolling windows: `stride` needs "
                             "convention='exact'.")
        if self.stride is not None and not self.add_start_token:
            raise ValueError("`stride` scores every token after the start token; it needs `add_start_token=True`.")
        check_turn_template(self.turn_template)

    @property
    def peer(self) -> PerplexityConvention:
        """The convention's entry in ``PERPLEXITY_CONVENTIONS``."""
        return PERPLEXITY_CONVENTIONS[self.convention]

    def resolved(self) -> dict[str, Any]:
        """Every option: what the scores depend on."""
        return {name: getattr(self, name) for name in self.names()}

    def check_rows(self) -> None:
        """Raise a ValueError if a conversation's option is given for texts."""
        if self.turn_template is not None:
            raise ValueError("`turn_template` applies to conversations (`messages`); texts do not take it.")

    def check_conversations(self) -> None:
        """Raise a ValueError if an option of texts is given for conversations."""
        if given := [name for name in ("add_start_token", "stride", "return_token_losses", "convention")
                     if getattr(self, name) != self.defaults()[name]]:
            raise ValueError(f"{given} apply to texts; conversations are scored turn by turn, each assistant "
                             "turn after its history (their layout is `turn_template`).")


@takes_options(BackendOptions, PerplexityOptions)
def compute_perplexity(predictions: Sequence[str], **options: Any) -> dict:
    """Perplexity of each text under a causal LM.

    Returns ``perplexities`` (one per text, NaN for a text with no scored token),
    ``mean_perplexity`` (their mean over valid texts) and ``corpus_perplexity``
    (exp of total NLL over total tokens).

    Without ``stride`` a text longer than ``max_length`` (default: the model's position limit) is
    cut there. With ``stride`` every token of every text is scored, in lm-evaluation-harness's
    rolling windows of at most ``max_length`` model inputs, each predicting at most ``stride`` new
    tokens (:func:`hf_adapters.core.texts.rolling_items`); the result then adds lm-eval's
    ``word_perplexity``, ``byte_perplexity`` and ``bits_per_byte`` over all texts.

    ``return_token_losses`` adds, per text, its scored tokens as strings (``tokens``) and their NLLs
    (``token_losses``); ``return_entropy`` the mean predictive entropy over its scored tokens
    (``entropies``, in nats: ``-sum_v p(v | x_<i) ln p(v | x_<i)`` over the whole vocabulary).

    ``convention="opendataarena"`` scores the tokens OpenDataArena-Tool's ``PPLScorer`` scores: the
    text tokenized with the tokenizer's default special tokens, cut to ``max_length``, every token
    after the first (``add_start_token`` is not used; without a BOS the first token is unscored).

    The options are those of :class:`PerplexityOptions` and :class:`~hf_adapters.backends.BackendOptions`.

    Example:
        >>> from hf_adapters import compute_perplexity
        >>> result = compute_perplexity(["The cat sat on the mat.", ""])
        >>> result["perplexities"][1]
        nan
    """
    check_texts(predictions)
    run, perplexity_options = split_options(options, BackendOptions, PerplexityOptions,
                                                 caller="compute_perplexity")
    perplexity_options.check_rows()
    return score_perplexity(run.load(), predictions, perplexity_options, batch_size=run.batch_size,
                            progress=run.progress)


def score_perplexity(
    backend: LikelihoodBackend,
    texts: Sequence[str],
    options: PerplexityOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
) -> dict:
    """Perplexity of checked texts with a backend: the body of :func:`compute_perplexity`."""
    if options.stride is not None:
        return score_rolling_perplexity(backend, texts, options, batch_size=batch_size, progress=progress)
    tokenizer = backend.tokenizer
    if options.peer.peer:
        items = peer_text_pairs(tokenizer, texts, backend.window(options.max_length))
    else:
        items = text_items(tokenizer, texts, options.add_start_token)
    scores = backend.score_checked(items, max_length=options.max_length, batch_size=batch_size, progress=progress,
                                   desc="Perplexity", token_losses=options.return_token_losses,
                                   entropies=options.return_entropy)
    if truncated := sum(score.truncated for score in scores):
        logger.warning("%s Pass `stride` to score every token in rolling windows.",
                       longer_than_max_length(truncated, "text", backend.window(options.max_length)))
    result = with_entropies(summarize_perplexity(scores), scores, options.return_entropy)
    if options.return_token_losses:
        return with_token_losses(result, tokenizer, [continuation for _, continuation in items], scores)
    return result


def count_words(text: str) -> int:
    """Words as lm-evaluation-harness counts them for word perplexity: the pieces between runs of white space."""
    return len(re.split(r"\s+", text))


def score_rolling_perplexity(
    backend: LikelihoodBackend,
    texts: Sequence[str],
    options: PerplexityOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
) -> dict:
    """Perplexity of every token of each text in rolling windows, each text's total NLL (``nlls``, in
    nats) and scored tokens (``token_counts``), and lm-eval's word perplexity, byte perplexity and
    bits per byte over all texts (an empty text: NaN, counted nowhere). All windows of all texts go
    through one batched call of the backend."""
    window = backend.window(options.max_length)
    if window is None:
        raise ValueError("Pass `max_length` with `stride`: the model does not say how many positions it has.")
    stride = min(options.stride, window)
    if options.max_length is not None and window < options.max_length:
        logger.info("Rolling windows of %d tokens, stride %d: the model has %d positions.", window, stride, window)
    tokenizer = backend.tokenizer
    ids = tokenizer(list(texts), add_special_tokens=False).input_ids if texts else []
    windows = [rolling_items(text_ids, window, stride) for text_ids in ids]
    scores = iter(backend.score_checked(
        [item for text_windows in windows for item in text_windows], batch_size=batch_size, progress=progress,
        desc="Perplexity (rolling)", truncate=False, token_losses=options.return_token_losses,
        entropies=options.return_entropy,
    ))
    per_text = [combined([next(scores) for _ in text_windows]) for text_windows in windows]
    result = with_entropies(summarize_perplexity(per_text), per_text, options.return_entropy)
    result["nlls"] = [score.nll for score in per_text]
    result["token_counts"] = [score.num_tokens for score in per_text]
    valid = [(text, score) for text, score in zip(texts, per_text, strict=True) if score.num_tokens]
    nll = sum(score.nll for _, score in valid)
    words = sum(count_words(text) for text, _ in valid)
    size = sum(len(text.encode("utf-8")) for text, _ in valid)
    result["word_perplexity"] = exp_or_inf(nll / words) if words else math.nan
    result["byte_perplexity"] = exp_or_inf(nll / size) if size else math.nan
    result["bits_per_byte"] = nll / size / math.log(2) if size else math.nan
    return with_token_losses(result, tokenizer, ids, per_text) if options.return_token_losses else result


def score_conversation_perplexity(
    backend: LikelihoodBackend,
    conversations: Sequence[Sequence[Mapping[str, str]]],
    options: PerplexityOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
) -> dict:
    """Perplexity of each conversation's assistant tokens, each turn after its whole history (what an
    SFT loss sees), over checked messages: exp(total NLL / total assistant tokens) per conversation,
    their mean and the corpus perplexity. All turns of all conversations go through one backend call."""
    per_conversation = [turn_pairs(backend.tokenizer, messages, "all", options.turn_template)
                        for messages in conversations]
    scores = iter(backend.score_checked(
        [pair for pairs in per_conversation for pair in pairs], max_length=options.max_length,
        batch_size=batch_size, progress=progress, desc="Perplexity (conversations)", entropies=options.return_entropy,
    ))
    per_conversation_scores = [combined([next(scores) for _ in pairs]) for pairs in per_conversation]
    return with_entropies(summarize_perplexity(per_conversation_scores), per_conversation_scores,
                          options.return_entropy)
