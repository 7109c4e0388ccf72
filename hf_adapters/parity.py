"""Information Parity (Tsvetkov & Kipnis, 2024): how well a model compresses a language relative to a reference.

For a text ``x`` in the language under test and its parallel text ``r`` in the reference language
(usually English), the parity is ``NLL(r) / NLL(x)``, each the total NLL of the whole text: every
token is scored, the first one after the start token (BOS, else EOS). A value near 1 means the
model spends as many bits on the language as on the reference; below 1, more.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .likelihood import ContinuationScore, score_continuations
from .models import DEFAULT_MODEL_ID, model_and_tokenizer
from .options import DEFAULT_BATCH_SIZE, check_lengths
from .texts import check_texts, text_items

logger = logging.getLogger(__name__)

#: The keys of :func:`compute_information_parity`'s result, in order.
RESULT_KEYS = (
    "scores",
    "information_parity",
    "information_parity_std",
    "information_parity_median",
    "corpus_information_parity",
    "tokenization_parity",
    "bits_per_byte",
    "reference_bits_per_byte",
)


def check_pairs(predictions: Sequence, references: Sequence) -> None:
    """Raise a TypeError naming a row that is not a string, or a ValueError if the lengths differ."""
    check_texts(predictions, "predictions")
    check_texts(references, "references")
    if len(predictions) != len(references):
        raise ValueError(
            f"`predictions` and `references` must be parallel: got {len(predictions)} predictions "
            f"and {len(references)} references."
        )


def score_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    max_length: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
) -> dict[str, ContinuationScore]:
    """Total NLL of each distinct text, every token scored after the start token, in one core call."""
    distinct = list(dict.fromkeys(texts))
    scores = score_continuations(
        model, tokenizer, text_items(tokenizer, distinct), max_length=max_length, batch_size=batch_size,
        progress=progress, desc="Information parity",
    )
    if truncated := sum(score.truncated for score in scores):
        logger.warning("%d text(s) were longer than max_length and were truncated.", truncated)
    return dict(zip(distinct, scores, strict=True))


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan


def summarize_information_parity(
    predictions: Sequence[str], references: Sequence[str], scores: Mapping[str, ContinuationScore]
) -> dict[str, Any]:
    """The metric's result from already scored texts (``scores`` maps each text to its score).

    A pair where either text has no scored token gets a NaN score and is left out of every aggregate.
    """
    per_pair, valid = [], []
    for prediction, reference in zip(predictions, references, strict=True):
        prediction_score, reference_score = scores[prediction], scores[reference]
        if prediction_score.num_tokens and reference_score.num_tokens and prediction_score.nll:
            per_pair.append(reference_score.nll / prediction_score.nll)
            valid.append((prediction, reference))
        else:
            per_pair.append(math.nan)
    finite = np.array([score for score in per_pair if not math.isnan(score)], dtype=np.float64)

    def total(side: int, field: str) -> float:
        return float(sum(getattr(scores[pair[side]], field) for pair in valid))

    # A truncated text's NLL covers only its kept tokens, not all its bytes: bits per byte leaves its pair out.
    whole = [pair for pair in valid if not (scores[pair[0]].truncated or scores[pair[1]].truncated)]

    def bits_per_byte(side: int) -> float:
        nll = sum(scores[pair[side]].nll for pair in whole)
        return _ratio(nll / math.log(2), sum(len(pair[side].encode("utf-8")) for pair in whole))

    return {
        "scores": per_pair,
        "information_parity": float(finite.mean()) if finite.size else math.nan,
        "information_parity_std": float(finite.std(ddof=0)) if finite.size else math.nan,
        "information_parity_median": float(np.median(finite)) if finite.size else math.nan,
        "corpus_information_parity": _ratio(total(1, "nll"), total(0, "nll")),
        "tokenization_parity": _ratio(total(0, "num_tokens"), total(1, "num_tokens")),
        "bits_per_byte": bits_per_byte(0),
        "reference_bits_per_byte": bits_per_byte(1),
    }


def compute_information_parity(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    model_id: str = DEFAULT_MODEL_ID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Information Parity of texts in a language under test (``predictions``) against parallel
    ``references`` (usually English).

    Returns ``scores`` (per pair, NLL(reference) / NLL(prediction), NaN when either text is empty),
    their mean ``information_parity``, population std ``information_parity_std`` and
    ``information_parity_median``; ``corpus_information_parity`` (total reference NLL / total
    prediction NLL), ``tokenization_parity`` (prediction tokens / reference tokens) and
    ``bits_per_byte`` / ``reference_bits_per_byte`` (total NLL in bits / UTF-8 bytes), all over
    the valid pairs; bits per byte leaves out pairs with a text cut to ``max_length`` (NaN if no
    pair is left). Each distinct text is scored once.

    Example:
        >>> from hf_adapters.parity import compute_information_parity
        >>> result = compute_information_parity(["Le chat dort."], ["The cat is sleeping."])
        >>> 0 < result["information_parity"] < 2
        True
    """
    check_pairs(predictions, references)
    check_lengths(max_length, batch_size)
    model, tokenizer = model_and_tokenizer(model_id, model, tokenizer, dtype, device)
    return score_information_parity(model, tokenizer, predictions, references, max_length=max_length,
                                    batch_size=batch_size, progress=progress)


def score_information_parity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    max_length: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Information Parity of checked pairs with a loaded model: the body of :func:`compute_information_parity`."""
    scores = score_texts(model, tokenizer, [*predictions, *references], max_length=max_length,
                         batch_size=batch_size, progress=progress)
    return summarize_information_parity(predictions, references, scores)
