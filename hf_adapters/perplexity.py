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
from .texts import check_texts, text_items

logger = logging.getLogger(__name__)


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
    return score_perplexity(model, tokenizer, predictions, add_start_token=add_start_token, max_length=max_length,
                            batch_size=batch_size, progress=progress)


def score_perplexity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    add_start_token: bool = True,
    max_length: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
) -> dict:
    """Perplexity of checked texts with a loaded model: the body of :func:`compute_perplexity`."""
    scores = score_continuations(
        model, tokenizer, text_items(tokenizer, texts, add_start_token), max_length=max_length,
        batch_size=batch_size, progress=progress, desc="Perplexity",
    )
    if truncated := sum(score.truncated for score in scores):
        logger.warning("%d text(s) were longer than max_length and were truncated.", truncated)
    return summarize_perplexity(scores)
