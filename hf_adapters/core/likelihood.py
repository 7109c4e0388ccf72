"""What every likelihood backend computes, whatever runs the model: the NLL of continuation tokens
given context tokens (:class:`ContinuationScore`), and the preparation every backend shares.

An item is a pair (context ids, continuation ids). An empty context stands for the start token
(BOS, else EOS), so the first continuation token is always scored. :func:`prepare_items` applies
these rules and the truncation to ``max_length``; :func:`host_prefixes` and :func:`make_batches`
are the batching a backend may use. Nothing here runs a model: :mod:`hf_adapters.backends` does.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

#: An item of the core: (context token ids, continuation token ids).
Item = tuple[Sequence[int], Sequence[int]]
#: The largest x whose exp(x) is a finite float.
_LARGEST_EXPONENT = math.log(sys.float_info.max)


def exp_or_inf(x: float) -> float:
    """exp(x), inf past the float range instead of an OverflowError (NaN stays NaN)."""
    return math.inf if x > _LARGEST_EXPONENT else math.exp(x)


@dataclass(frozen=True)
class ContinuationScore:
    """Likelihood of one continuation.

    Attributes:
        nll: sum of negative log-likelihoods over the scored tokens, in nats (NaN if none was scored).
        num_tokens: number of continuation tokens scored (after truncation).
        truncated: whether the sequence was cut to ``max_length``.
        token_nlls: the NLL of each scored token, when they were asked for.
        token_entropies: the entropy of the model's prediction at each scored token,
            ``-sum_v p(v | x_<i) ln p(v | x_<i)`` over the whole vocabulary in nats, when asked for.
        greedy: whether every scored token is the model's most likely next token (lm-evaluation-harness's
            ``is_greedy``), when asked for; True when no token was scored.
    """

    nll: float
    num_tokens: int
    truncated: bool
    token_nlls: tuple[float, ...] | None = None
    token_entropies: tuple[float, ...] | None = None
    greedy: bool | None = None

    @property
    def mean_nll(self) -> float:
        """Mean NLL per scored token (NaN when nothing was scored)."""
        return self.nll / self.num_tokens if self.num_tokens else math.nan

    @property
    def perplexity(self) -> float:
        """exp of the mean NLL: NaN when nothing was scored, inf rather than an error past float range."""
        return exp_or_inf(self.mean_nll)

    @property
    def mean_entropy(self) -> float:
        """Mean predictive entropy over the scored tokens, in nats (NaN when nothing was scored or
        entropies were not asked for)."""
        if not self.num_tokens or self.token_entropies is None:
            return math.nan
        return math.fsum(self.token_entropies) / self.num_tokens


def combined(scores: Sequence[ContinuationScore]) -> ContinuationScore:
    """Several continuations scored as one (a document's windows, a conversation's turns): the NLLs
    and token counts of those with a scored token added, their token NLLs (if all have them) in
    order (their token entropies likewise), greedy if all are (when all say); NaN when none has a scored token."""
    valid = [score for score in scores if score.num_tokens]
    with_tokens = all(score.token_nlls is not None for score in scores)
    token_nlls = tuple(nll for score in valid for nll in score.token_nlls) if with_tokens else None
    with_entropies = all(score.token_entropies is not None for score in scores)
    entropies = tuple(h for score in valid for h in score.token_entropies) if with_entropies else None
    truncated = any(score.truncated for score in scores)
    greedy = all(score.greedy for score in scores) if all(score.greedy is not None for score in scores) else None
    if not valid:
        return ContinuationScore(math.nan, 0, truncated, token_nlls, entropies, greedy)
    return ContinuationScore(sum(score.nll for score in valid), sum(score.num_tokens for score in valid),
                             truncated, token_nlls, entropies, greedy)


@dataclass(frozen=True)
class PreparedItem:
    """One item as a model reads it: the whole sequence, where its scored tokens start, and whether it was cut.

    Attributes:
        index: the item's position in the caller's list.
        input_ids: context (or the start token) and continuation, cut to ``max_length``.
        first_scored: position in ``input_ids`` of the first scored token.
        truncated: whether the sequence was cut to ``max_length``.
        guests: items whose whole sequence begins this one's, scored in its forward pass.
    """

    index: int
    input_ids: list[int]
    first_scored: int
    truncated: bool
    guests: tuple[PreparedItem, ...] = ()

    @property
    def targets(self) -> list[int]:
        """The scored token ids (the continuation, as far as it was kept)."""
        return self.input_ids[self.first_scored:]

    @property
    def units(self) -> tuple[PreparedItem, ...]:
        """The items this sequence's forward pass scores: itself, then its guests."""
        return (self, *self.guests)

    def unscored(self, token_losses: bool = False, entropies: bool = False, greedy: bool = False
                 ) -> ContinuationScore:
        """The score of an item with no token to score: NaN."""
        return ContinuationScore(math.nan, 0, self.truncated, () if token_losses else None,
                                 () if entropies else None, True if greedy else None)


def start_token_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token that stands in for an empty context: BOS, or EOS when there is no BOS."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    raise ValueError("The tokenizer has neither a BOS nor an EOS token to start an empty context with.")


def prepare_items(
    items: Sequence[Item],
    start_id: int,
    *,
    max_length: int | None = None,
    truncate: bool = True,
    position_limit: int | None = None,
) -> list[PreparedItem]:
    """Each item as the model reads it, in input order, with the rules every backend follows.

    An empty context becomes ``[start_id]``. With ``truncate`` a sequence longer than
    ``max_length`` (capped at, and by default, ``position_limit``) is right-truncated, keeping the
    context. With ``truncate=False`` nothing is cut: ``max_length`` must be None, and an item whose
    tokens but the last (the last one's prediction is never read) pass ``position_limit`` raises a
    ValueError. Items left with nothing to score are logged; their score is :meth:`PreparedItem.unscored`.
    """
    if not truncate and max_length is not None:
        raise ValueError("Pass `max_length=None` with `truncate=False`: the items are scored as they are.")
    if truncate and position_limit is not None and (max_length is None or max_length > position_limit):
        max_length = position_limit
    prepared = []
    for index, (context, continuation) in enumerate(items):
        context = list(context) or [start_id]
        input_ids = context + list(continuation)
        truncated = max_length is not None and len(input_ids) > max_length
        prepared.append(PreparedItem(index, input_ids[:max_length] if truncated else input_ids, len(context),
                                     truncated))
    if not truncate and position_limit is not None:
        if too_long := [item.index for item in prepared if len(item.input_ids) - 1 > position_limit]:
            raise ValueError(f"Item {too_long[0]} needs {len(prepared[too_long[0]].input_ids) - 1} positions; "
                             f"the model has {position_limit}.")
    for item in prepared:
        if len(item.input_ids) <= item.first_scored:
            reason = "the context fills max_length" if item.truncated else "the continuation is empty"
            logger.warning("Item %d has no token to score (%s); its score is NaN.", item.index, reason)
    return prepared


def host_prefixes(items: Sequence[PreparedItem], *, siblings: bool = False) -> list[PreparedItem]:
    """The items to run, each holding as guests the items before it (in order) whose whole sequence
    begins its own, such as the turns of one conversation: a causal model's output at a position
    depends only on the tokens up to it, so the guests' scores come from the host's pass, with no
    forward pass of their own.

    With ``siblings`` a guest's last token need not be in the host: it is only predicted, never
    read, so an item whose sequence but its last token begins the host's is a guest too (the label
    tokens "1".."6" after one rating prompt: one pass). Only a backend that reads any token's
    log-probability at a position, not only the token that follows it in the sequence, may ask for this.

    Example:
        >>> prompt = [5, 6, 7]
        >>> items = prepare_items([(prompt, [1]), (prompt, [2])], start_id=0)
        >>> [len(host.units) for host in host_prefixes(items)], [len(host.units) for host in host_prefixes(
        ...     items, siblings=True)]
        ([1, 1], [2])
    """
    hosts: list[PreparedItem] = []
    for item in items:
        if hosts and _scored_within(hosts[-1].input_ids, item.input_ids, siblings):
            previous = hosts.pop()
            item = replace(item, guests=(*previous.guests, replace(previous, guests=())))
        hosts.append(item)
    return hosts


def _scored_within(guest: Sequence[int], host: Sequence[int], siblings: bool) -> bool:
    """Whether a forward pass over ``host`` reads every token that ``guest``'s predictions depend on:
    all of them, or with ``siblings`` all but the last."""
    read = len(guest) - 1 if siblings else len(guest)
    return len(guest) <= len(host) and list(host[:read]) == list(guest[:read])


def make_batches(
    lengths: Sequence[int], batch_size: int | None, max_batch_tokens: int | None, max_padding: float | None = None
) -> list[list[int]]:
    """Group item indices, longest first, so that each batch holds at most ``batch_size`` rows and
    ``max_batch_tokens`` padded tokens (always at least one row). With ``max_padding``, an item
    joins a batch only if padding it to the batch's longest adds at most that fraction of the
    longest length (0: only equal lengths share a batch)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            padded_tokens = lengths[batch[0]] * (len(batch) + 1)
            fits_rows = batch_size is None or len(batch) < batch_size
            fits_tokens = max_batch_tokens is None or padded_tokens <= max_batch_tokens
            fits_padding = max_padding is None or lengths[batch[0]] - lengths[i] <= max_padding * lengths[batch[0]]
            if fits_rows and fits_tokens and fits_padding:
                batch.append(i)
                continue
        batches.append([i])
    return batches
