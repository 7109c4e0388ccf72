"""Perplexity of texts: exp of the mean NLL of each text's tokens, as evaluate's canonical metric."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .likelihood import ContinuationScore, score_continuations
from .models import DEFAULT_MODEL_ID, model_and_tokenizer
from .options import DEFAULT_BATCH_SIZE, check_lengths

logger = logging.getLogger(__name__)


def check_texts(texts: Sequence, name: str = "predictions") -> None:
    """Raise a TypeError naming ``texts`` if it is missing or a single string, or the first row that
    is not a string; a ValueError naming a row that is not valid Unicode (a lone surrogate)."""
    if texts is None:
        raise TypeError(f"`{name}` is missing: pass a list of strings.")
    if isinstance(texts, str):
        raise TypeError(f"`{name}` must be a list of strings, not a single string.")
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"`{name}`[{row}] must be a string, got {type(text).__name__}: {text!r:.80}")
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise ValueError(f"`{name}`[{row}] is not valid Unicode: {error.reason} at character "
                                 f"{error.start}.") from None


def text_items(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], add_start_token: bool = True
) -> list[tuple[list[int], list[int]]]:
    """(context, continuation) pairs that score every token of each text.

    With ``add_start_token`` the context is empty (the core puts the start token there), so the
    first token is scored too; without it the first token is the context and is not scored.
    """
    ids = tokenizer(list(texts), add_special_tokens=False).input_ids if texts else []
    if add_start_token:
        return [([], text_ids) for text_ids in ids]
    return [(text_ids[:1], text_ids[1:]) for text_ids in ids]


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
) -> dict:
    """Perplexity of each text under a causal LM.

    Returns ``perplexities`` (one per text, NaN for a text with no scored token),
    ``mean_perplexity`` (their mean over valid texts) and ``corpus_perplexity``
    (exp of total NLL over total tokens).

    Example:
        >>> from hf_adapters import compute_perplexity
        >>> result = compute_perplexity(["The cat sat on the mat.", ""])
        >>> result["perplexities"][1]
        nan
    """
    check_texts(predictions)
    check_lengths(max_length, batch_size)
    model, tokenizer = model_and_tokenizer(model_id, model, tokenizer, dtype, device)
    items = text_items(tokenizer, predictions, add_start_token)
    scores = score_continuations(
        model, tokenizer, items, max_length=max_length, batch_size=batch_size, progress=progress,
        desc="Perplexity",
    )
    if truncated := sum(score.truncated for score in scores):
        logger.warning("%d text(s) were longer than max_length and were truncated.", truncated)
    return summarize_perplexity(scores)
