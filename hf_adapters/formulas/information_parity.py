"""Information Parity (Tsvetkov & Kipnis, 2024): how well a model compresses a language relative to a reference.

For a text ``x`` in the language under test and its parallel text ``r`` in the reference language
(usually English), the parity is ``NLL(r) / NLL(x)``, each the total NLL of the whole text: every
token is scored, the first one after the start token (BOS, else EOS). A value near 1 means the
model spends as many bits on the language as on the reference; below 1, more.
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.backends.base import scores_are_stand_ins
from hf_adapters.core.likelihood import ContinuationScore
from hf_adapters.core.options import OptionSpec, check_max_length, split_options, takes_options
from hf_adapters.core.texts import check_texts, text_items
from hf_adapters.core.wording import longer_than_max_length

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


@dataclass(frozen=True)
class InformationParityOptions(OptionSpec):
    """The options of Information Parity, declared once: :func:`compute_information_parity`, the
    ``information_parity`` metric, ``add_information_parity_column``, the ``InformationParityScorer``
    config, :func:`~hf_adapters.formulas.parallel_corpus.evaluate_parallel` and ``hf-adapters parity`` take these.

    Attributes:
        max_length: each text is cut to this many tokens, the start token included (default: the
            model's position limit).
    """

    max_length: int | None = None

    def check(self) -> None:
        check_max_length(self.max_length)

    def resolved(self) -> dict[str, Any]:
        return {"max_length": self.max_length}


#: Most text scores kept for reuse across calls (the references of a per-language loop).
TEXT_SCORE_CACHE_SIZE = 100_000
_text_scores: OrderedDict[tuple[str, int | None, str], ContinuationScore] = OrderedDict()


def score_texts(
    backend: LikelihoodBackend,
    texts: Sequence[str],
    options: InformationParityOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
) -> dict[str, ContinuationScore]:
    """Total NLL of each distinct text, every token scored after the start token, in one backend call.

    Scores are kept for later calls in this process, keyed by the backend's identity, ``max_length``
    and the text (at most ``TEXT_SCORE_CACHE_SIZE``, the least recently used dropped first), so the
    English references of a loop over languages are scored once; a backend without an identity (a
    model object) is not cached.
    """
    identity = backend.identity()
    scope = None if identity is None else json.dumps(identity, sort_keys=True, default=str)
    keys = {text: (scope, options.max_length, text) for text in dict.fromkeys(texts)}
    known = {text: _text_scores[key] for text, key in keys.items() if scope is not None and key in _text_scores}
    distinct = [text for text in keys if text not in known]
    scores = backend.score_checked(
        text_items(backend.tokenizer, distinct), max_length=options.max_length, batch_size=batch_size,
        progress=progress, desc="Information parity",
    ) if distinct else []
    if truncated := sum(score.truncated for score in scores):
        logger.warning(longer_than_max_length(truncated, "text", backend.window(options.max_length)))
    result = {**known, **dict(zip(distinct, scores, strict=True))}
    if scope is not None and not scores_are_stand_ins():
        for text, score in result.items():
            _text_scores[keys[text]] = score
            _text_scores.move_to_end(keys[text])
        while len(_text_scores) > TEXT_SCORE_CACHE_SIZE:
            _text_scores.popitem(last=False)
    return result


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


@takes_options(BackendOptions, InformationParityOptions)
def compute_information_parity(predictions: Sequence[str], references: Sequence[str], **options: Any) -> dict[str, Any]:
    """Information Parity of texts in a language under test (``predictions``) against parallel
    ``references`` (usually English).

    Returns ``scores`` (per pair, NLL(reference) / NLL(prediction), NaN when either text is empty),
    their mean ``information_parity``, population std ``information_parity_std`` and
    ``information_parity_median``; ``corpus_information_parity`` (total reference NLL / total
    prediction NLL), ``tokenization_parity`` (prediction tokens / reference tokens) and
    ``bits_per_byte`` / ``reference_bits_per_byte`` (total NLL in bits / UTF-8 bytes), all over
    the valid pairs; bits per byte leaves out pairs with a text cut to ``max_length`` (NaN if no
    pair is left). Each distinct text is scored once. The options are those of
    :class:`InformationParityOptions` and :class:`~hf_adapters.backends.BackendOptions`.

    Example:
        >>> from hf_adapters.formulas.information_parity import compute_information_parity
        >>> result = compute_information_parity(["Le chat dort."], ["The cat is sleeping."])
        >>> 0 < result["information_parity"] < 2
        True
    """
    check_pairs(predictions, references)
    run, parity_options = split_options(options, BackendOptions, InformationParityOptions,
                                             caller="compute_information_parity")
    return score_information_parity(run.load(), predictions, references, parity_options, batch_size=run.batch_size,
                                    progress=run.progress)


def score_information_parity(
    backend: LikelihoodBackend,
    predictions: Sequence[str],
    references: Sequence[str],
    options: InformationParityOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Information Parity of checked pairs with a backend: the body of :func:`compute_information_parity`."""
    scores = score_texts(backend, [*predictions, *references], options, batch_size=batch_size, progress=progress)
    return summarize_information_parity(predictions, references, scores)
