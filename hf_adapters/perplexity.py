"""Perplexity of texts: exp of the mean NLL of each text's tokens, as evaluate's canonical metric."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .conventions import PERPLEXITY_CONVENTIONS, check_convention, peer_text_pairs
from .conversations import turn_pairs
from .likelihood import (
    ContinuationScore,
    combined,
    effective_max_length,
    model_max_length,
    score_continuations,
    unwrap_model,
)
from .models import DEFAULT_MODEL_ID, model_and_tokenizer
from .options import DEFAULT_BATCH_SIZE, check_lengths, check_stride
from .texts import check_texts, rolling_items, text_items, token_strings

logger = logging.getLogger(__name__)


def with_token_losses(result: dict, tokenizer: PreTrainedTokenizerBase, ids: Sequence[Sequence[int]],
                      scores: Sequence[ContinuationScore], prefix: str = "") -> dict:
    """``result`` with, per row, its scored tokens as strings (``tokens``) and their NLLs (``{prefix}token_losses``)."""
    result["tokens"] = [token_strings(tokenizer, row_ids[: score.num_tokens]) for row_ids, score in
                        zip(ids, scores, strict=True)]
    result[f"{prefix}token_losses"] = [list(score.token_nlls) for score in scores]
    return result


def summarize_perplexity(scores: Sequence[ContinuationScore]) -> dict:
    """Per-text perplexities, their mean over valid texts, and corpus perplexity."""
    perplexities = [score.perplexity for score in scores]
    valid = [score for score in scores if score.num_tokens]
    total_tokens = sum(score.num_tokens for score in valid)
    corpus = math.exp(sum(score.nll for score in valid) / total_tokens) if total_tokens else math.nan
    finite = [p for p in perplexities if not math.isnan(p)]
    return {
        "perplexities": perplexities,
        "mean_perplexity": float(np.mean(finite)) if finite else math.nan,
        "corpus_perplexity": corpus,
    }


def compute_perplexity(
    predictions: Sequence[str],
    model_id: str = DEFAULT_MODEL_ID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    add_start_token: bool = True,
    device: str | torch.device | None = None,
    max_length: int | None = None,
    dtype: str | torch.dtype | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    progress: bool | None = None,
    stride: int | None = None,
    return_token_losses: bool = False,
    convention: str = "exact",
) -> dict:
    """Perplexity of each text under a causal LM.

    Returns ``perplexities`` (one per text, NaN for a text with no scored token),
    ``mean_perplexity`` (their mean over valid texts) and ``corpus_perplexity``
    (exp of total NLL over total tokens).

    Without ``stride`` a text longer than ``max_length`` (default: the model's position limit) is
    cut there. With ``stride`` every token of every text is scored, in lm-evaluation-harness's
    rolling windows of at most ``max_length`` model inputs, each predicting at most ``stride`` new
    tokens (:func:`hf_adapters.texts.rolling_items`); the result then adds lm-eval's
    ``word_perplexity``, ``byte_perplexity`` and ``bits_per_byte`` over all texts.

    ``return_token_losses`` adds, per text, its scored tokens as strings (``tokens``) and their NLLs
    (``token_losses``).

    ``convention="opendataarena"`` scores the tokens OpenDataArena-Tool's ``PPLScorer`` scores: the
    text tokenized with the tokenizer's default special tokens, cut to ``max_length``, every token
    after the first (``add_start_token`` is not used; without a BOS the first token is unscored).

    Example:
        >>> from hf_adapters import compute_perplexity
        >>> result = compute_perplexity(["The cat sat on the mat.", ""])
        >>> result["perplexities"][1]
        nan
    """
    check_texts(predictions)
    check_lengths(max_length, batch_size)
    check_stride(stride, max_length)
    check_perplexity_convention(convention, stride)
    model, tokenizer = model_and_tokenizer(model_id, model, tokenizer, dtype, device)
    return score_perplexity(model, tokenizer, predictions, add_start_token=add_start_token, max_length=max_length,
                            batch_size=batch_size, progress=progress, stride=stride,
                            return_token_losses=return_token_losses, convention=convention)


def check_perplexity_convention(convention: str, stride: int | None) -> None:
    """Raise a ValueError for an unknown convention, or a peer's with ``stride`` (no peer has rolling windows)."""
    check_convention(convention, PERPLEXITY_CONVENTIONS)
    if convention != "exact" and stride is not None:
        raise ValueError(f"convention={convention!r} has no rolling windows: `stride` needs convention='exact'.")


def score_perplexity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    add_start_token: bool = True,
    max_length: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
    stride: int | None = None,
    return_token_losses: bool = False,
    convention: str = "exact",
) -> dict:
    """Perplexity of checked texts with a loaded model: the body of :func:`compute_perplexity`."""
    if stride is not None:
        return score_rolling_perplexity(model, tokenizer, texts, max_length=max_length, stride=stride,
                                        batch_size=batch_size, progress=progress, add_start_token=add_start_token,
                                        return_token_losses=return_token_losses)
    if convention == "opendataarena":
        items = peer_text_pairs(tokenizer, texts, effective_max_length(model, max_length))
    else:
        items = text_items(tokenizer, texts, add_start_token)
    scores = score_continuations(
        model, tokenizer, items, max_length=max_length, batch_size=batch_size, progress=progress,
        desc="Perplexity", token_losses=return_token_losses,
    )
    if truncated := sum(score.truncated for score in scores):
        logger.warning("%d text(s) were longer than max_length and were truncated; pass `stride` to score every "
                       "token in rolling windows.", truncated)
    result = summarize_perplexity(scores)
    if return_token_losses:
        return with_token_losses(result, tokenizer, [continuation for _, continuation in items], scores)
    return result


def count_words(text: str) -> int:
    """Words as lm-evaluation-harness counts them for word perplexity: the pieces between runs of white space."""
    return len(re.split(r"\s+", text))


def score_rolling_perplexity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    max_length: int | None,
    stride: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
    add_start_token: bool = True,
    return_token_losses: bool = False,
) -> dict:
    """Perplexity of every token of each text in rolling windows, each text's total NLL (``nlls``, in
    nats) and scored tokens (``token_counts``), and lm-eval's word perplexity, byte perplexity and
    bits per byte over all texts (an empty text: NaN, counted nowhere). All windows of all texts go
    through one batched call of the core."""
    if not add_start_token:
        raise ValueError("`stride` scores every token after the start token; it needs `add_start_token=True`.")
    window = max_length if max_length is not None else model_max_length(unwrap_model(model))
    if window is None:
        raise ValueError("Pass `max_length` with `stride`: the model does not say how many positions it has.")
    check_stride(stride, window)
    ids = tokenizer(list(texts), add_special_tokens=False).input_ids if texts else []
    windows = [rolling_items(text_ids, window, stride) for text_ids in ids]
    scores = iter(score_continuations(
        model, tokenizer, [item for text_windows in windows for item in text_windows], batch_size=batch_size,
        progress=progress, desc="Perplexity (rolling)", truncate=False, token_losses=return_token_losses,
    ))
    per_text = [combined([next(scores) for _ in text_windows]) for text_windows in windows]
    result = summarize_perplexity(per_text)
    result["nlls"] = [score.nll for score in per_text]
    result["token_counts"] = [score.num_tokens for score in per_text]
    valid = [(text, score) for text, score in zip(texts, per_text, strict=True) if score.num_tokens]
    nll = sum(score.nll for _, score in valid)
    words = sum(count_words(text) for text, _ in valid)
    size = sum(len(text.encode("utf-8")) for text, _ in valid)
    result["word_perplexity"] = math.exp(nll / words) if words else math.nan
    result["byte_perplexity"] = math.exp(nll / size) if size else math.nan
    result["bits_per_byte"] = nll / size / math.log(2) if size else math.nan
    return with_token_losses(result, tokenizer, ids, per_text) if return_token_losses else result


def score_conversation_perplexity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[Sequence[Mapping[str, str]]],
    *,
    template: str | None = None,
    max_length: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
) -> dict:
    """Perplexity of each conversation's assistant tokens, each turn after its whole history (what an
    SFT loss sees), over checked messages: exp(total NLL / total assistant tokens) per conversation,
    their mean and the corpus perplexity. All turns of all conversations go through one core call."""
    per_conversation = [turn_pairs(tokenizer, messages, "all", template) for messages in conversations]
    scores = iter(score_continuations(
        model, tokenizer, [pair for pairs in per_conversation for pair in pairs], max_length=max_length,
        batch_size=batch_size, progress=progress, desc="Perplexity (conversations)",
    ))
    return summarize_perplexity([combined([next(scores) for _ in pairs]) for pairs in per_conversation])
