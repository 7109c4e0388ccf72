"""Token selection by excess loss: Rho-1's training mask (and Token Cleaning's global threshold) as
``labels`` for a ``transformers`` Trainer, ``-100`` on the tokens the loss leaves out."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hf_adapters.core.options import check_choice

#: The label a ``transformers`` loss ignores.
IGNORE_INDEX = -100
#: Where the top fraction is taken: within each row, or over all tokens of the data set at once.
SCOPES = ("row", "dataset")


def kept_tokens(token_scores: Sequence[Sequence[float]], top: float, scope: str = "row") -> list[list[bool]]:
    """Which tokens to keep: the ``top`` fraction (rounded down) with the highest score, per row or over
    all rows (``scope="dataset"``); ties go to the earlier token. NaN scores are never kept.

    Example:
        >>> kept_tokens([[0.5, -1.0, 2.0, 0.1]], top=0.5)
        [[True, False, True, False]]
    """
    if not 0 < top <= 1:
        raise ValueError(f"`top` must be a fraction in (0, 1], got {top!r}.")
    check_choice("scope", scope, SCOPES)
    groups = [[(row, i) for i in range(len(scores))] for row, scores in enumerate(token_scores)]
    if scope == "dataset":
        groups = [[token for group in groups for token in group]]
    kept = [[False] * len(scores) for scores in token_scores]
    for group in groups:
        ranked = sorted((token for token in group if not math.isnan(token_scores[token[0]][token[1]])),
                        key=lambda token: -token_scores[token[0]][token[1]])
        for row, i in ranked[: int(len(group) * top)]:
            kept[row][i] = True
    return kept


def rho1_labels(input_ids: Sequence[Sequence[int]], token_excess_losses: Sequence[Sequence[float]], *,
                top: float = 0.6, scope: str = "row") -> list[list[int]]:
    """Rho-1's selective language modelling mask as labels: for each row's ``input_ids`` (the tokens the
    model reads, whose last ``len(token_excess_losses[row])`` are the scored ones), the token id where the
    token is among the ``top`` fraction by excess loss (:func:`kept_tokens`; the paper's k, default 60%),
    ``-100`` elsewhere (the context and the dropped tokens). ``scope="dataset"`` takes one threshold over
    all tokens (Token Cleaning's global top-k%).

    Example:
        >>> rho1_labels([[1, 7, 8, 9]], [[0.3, -0.2, 0.9]], top=0.67)
        [[-100, 7, -100, 9]]
    """
    labels = []
    for ids, keep in zip(input_ids, kept_tokens(token_excess_losses, top, scope), strict=True):
        if len(keep) > len(ids):
            raise ValueError(f"A row has {len(keep)} excess losses for {len(ids)} input ids.")
        context = len(ids) - len(keep)
        labels.append([IGNORE_INDEX] * context + [token if kept else IGNORE_INDEX
                                                  for token, kept in zip(ids[context:], keep, strict=True)])
    return labels
