"""A model's rating read from its next-token distribution: the log-probabilities of label tokens
("1".."6", "yes") after a prompt, and the expected rating they give.

The scores built on these (DEITA's complexity and quality, SelectIT, Ask-LLM) ask the one primitive
of the core: the NLL of a one-token continuation (a label) after its context (the prompt). The
labels of one prompt differ only in the token that is predicted, never read, so the transformers
backend scores all of them in the prompt's one forward pass
(:func:`~hf_adapters.core.likelihood.host_prefixes` with ``siblings``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.core.options import check_choice

logger = logging.getLogger(__name__)

#: How a prompt longer than ``max_length`` is read: ``exact`` gives the row NaN (the rating is asked
#: after the whole prompt or not at all); ``opendataarena`` keeps its first ``max_length`` tokens and
#: reads the labels after them, as OpenDataArena-Tool's scorers do (the end of the prompt is lost).
RATING_CONVENTIONS = ("exact", "opendataarena")


def check_convention(convention: str) -> None:
    """Raise a ValueError unless ``convention`` is one of :data:`RATING_CONVENTIONS`."""
    check_choice("convention", convention, RATING_CONVENTIONS)


def label_token_ids(tokenizer, labels: Sequence[str]) -> list[int]:
    """The vocabulary id of each label, a vocabulary entry such as ``"1"`` (for DEITA's Llama-2
    scorers, the ids 29896...29953); a ValueError names a label the vocabulary lacks.

    Example:
        >>> from hf_adapters.backends.loading import load_model
        >>> _, tokenizer = load_model()
        >>> len(label_token_ids(tokenizer, ["1", "2", "3"]))
        3
    """
    vocabulary = tokenizer.get_vocab()
    if missing := [label for label in labels if label not in vocabulary]:
        raise ValueError(f"The tokenizer's vocabulary has no entry {missing[0]!r}: a rating label must be one token "
                         f"of the scorer model's vocabulary (labels: {list(labels)}).")
    return [vocabulary[label] for label in labels]


def label_log_probs(backend: LikelihoodBackend, prompts: Sequence[Sequence[int]], label_ids: Sequence[int], *,
                    max_length: int | None, convention: str = "exact", labels: Sequence[str] | None = None,
                    batch_size: int | None = None, progress: bool | None = None,
                    desc: str = "Rating") -> list[list[float]]:
    """ln P(label | prompt) for each prompt (token ids) and label id, in the model's whole next-token
    distribution after the prompt. A prompt longer than ``max_length`` (capped at the model's position
    limit, less the label) gets NaN for every label under ``exact``, and a warning naming its row
    (``labels``); under ``opendataarena`` its first tokens are kept."""
    window = backend.window(max_length)
    room = None if window is None else window - 1
    asked, items = [], []
    for index, prompt in enumerate(prompts):
        if room is not None and len(prompt) > room:
            if convention == "exact":
                name = labels[index] if labels else f"Row {index}"
                logger.warning("%s: the rating prompt has %d tokens, more than max_length %d allows; its score is "
                               "NaN.", name, len(prompt), window)
                continue
            prompt = prompt[:room]
        asked.append(index)
        items.extend((prompt, [label]) for label in label_ids)
    scores = backend.score_checked(items, max_length=None, truncate=False, batch_size=batch_size,
                                   progress=progress, desc=desc) if items else []
    per_prompt = [[math.nan] * len(label_ids) for _ in prompts]
    for position, index in enumerate(asked):
        answers = scores[position * len(label_ids):(position + 1) * len(label_ids)]
        per_prompt[index] = [-score.nll for score in answers]
    return per_prompt


def expected_rating(log_probs: Sequence[float], ratings: Sequence[float]) -> float:
    """The mean rating under the model's next-token distribution restricted to the labels:
    ``sum_i r_i softmax(log_probs)_i`` (the softmax of the labels' logits, the same thing); NaN if a
    log-probability is NaN.

    Example:
        >>> round(expected_rating([math.log(0.25), math.log(0.25)], [1, 2]), 6)
        1.5
    """
    if any(math.isnan(value) for value in log_probs):
        return math.nan
    top = max(log_probs)
    weights = [math.exp(value - top) for value in log_probs]
    return math.fsum(rating * weight for rating, weight in zip(ratings, weights, strict=True)) / math.fsum(weights)
