"""Several formulas' likelihood calls on one batch of rows, run as one call per backend.

A score set (:class:`hf_adapters.scorers.ScoreSet`) runs each member's formula as it runs alone, twice:
while :meth:`SharedPasses.recording`, every :meth:`~hf_adapters.backends.base.LikelihoodBackend.score_checked`
call is written down and answered with stand-in scores (the formulas' results are dropped, their
warnings held back); :meth:`SharedPasses.run` then sends, per backend, each distinct sequence that some
call asked for through the model once (identical sequences merged, a sequence that begins another
scored in that one's pass; entropies computed only for the sequences they were asked of); while
:meth:`SharedPasses.replaying`, each call gets its own items' scores from those passes, holding what it
asked for and nothing more, and the formulas give their results. A call the formula makes
differently in replay than it recorded (a formula whose items depend on earlier scores) is run as
it is, so the results stay those of the formula alone.

Example:
    >>> from hf_adapters.backends import TransformersBackend
    >>> backend = TransformersBackend.from_pretrained()
    >>> ids = backend.tokenizer("The sky is blue.", add_special_tokens=False).input_ids
    >>> passes = SharedPasses()
    >>> with passes.recording():
    ...     _ = backend.score_checked([([], ids)]), backend.score_checked([([], ids[:3])], token_losses=True)
    >>> passes.run()
    >>> passes.sequences, passes.forward_passes
    (2, 1)
    >>> with passes.replaying():
    ...     whole, start = backend.score_checked([([], ids)]), backend.score_checked([([], ids[:3])], token_losses=True)
    >>> len(start[0].token_nlls), whole[0].token_nlls is None
    (3, True)
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hf_adapters.backends.base import SHARED_PASSES, LikelihoodBackend
from hf_adapters.core.likelihood import ContinuationScore, Item, PreparedItem, prepare_items

logger = logging.getLogger(__name__)

#: The per-token outputs a call may ask for, in :meth:`LikelihoodBackend.score`'s keyword names.
TOKEN_OUTPUTS = ("token_losses", "entropies", "greedy")
#: A sequence as the model reads it, with where its scored tokens start.
Key = tuple[tuple[int, ...], int]


@dataclass
class _Call:
    """One recorded call: its items, how they are prepared and what it asks for."""

    items: list[tuple[tuple[int, ...], tuple[int, ...]]]
    max_length: int | None
    truncate: bool
    asks: frozenset[str]
    prepared: list[PreparedItem] = field(default_factory=list)


def _frozen(items: Sequence[Item]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(tuple(context), tuple(continuation)) for context, continuation in items]


def _key(item: PreparedItem) -> Key:
    return tuple(item.input_ids), item.first_scored


def _scorable(item: PreparedItem) -> bool:
    return len(item.input_ids) > item.first_scored


def _stand_in(item: PreparedItem, asks: frozenset[str]) -> ContinuationScore:
    """A score of the right shape (one nat per token) for a recorded call: its value is never used."""
    if not _scorable(item):
        return item.unscored(*(name in asks for name in TOKEN_OUTPUTS))
    count = len(item.input_ids) - item.first_scored
    ones = (1.0,) * count
    return ContinuationScore(float(count), count, item.truncated, ones if "token_losses" in asks else None,
                             ones if "entropies" in asks else None, True if "greedy" in asks else None)


def _as_asked(score: ContinuationScore, item: PreparedItem, asks: frozenset[str]) -> ContinuationScore:
    """A shared pass's score of an item, holding what its call asked for and nothing more."""
    return ContinuationScore(score.nll, score.num_tokens, item.truncated,
                             score.token_nlls if "token_losses" in asks else None,
                             score.token_entropies if "entropies" in asks else None,
                             score.greedy if "greedy" in asks else None)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Warnings and log records below ERROR held back: a recorded formula's are given again in replay."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


class SharedPasses:
    """The calls of one batch of rows, shared (see the module's docstring).

    Args:
        batch_size: the most rows in one forward pass of the shared calls (None: the backend's choice).
        progress: show a progress bar for the shared calls (None: for long work only).

    Attributes:
        sequences: how many items the recorded calls asked for, counting each scorable one once per call
            (after :meth:`run`; :meth:`count` says it before).
        forward_passes: how many sequences went through a model in :meth:`run` (identical ones, and those
            that begin another, counted once).
    """

    def __init__(self, *, batch_size: int | None = None, progress: bool | None = None):
        self.batch_size, self.progress = batch_size, progress
        self._calls: dict[int, list[_Call]] = {}
        self._backends: dict[int, LikelihoodBackend] = {}
        self._scores: dict[int, dict[Key, ContinuationScore]] = {}
        self._mode: str | None = None
        self._replayed: dict[int, int] = {}
        self.sequences = 0
        self.forward_passes = 0

    @contextlib.contextmanager
    def _active(self, mode: str) -> Iterator[None]:
        token = SHARED_PASSES.set(self)
        self._mode = mode
        try:
            yield
        finally:
            SHARED_PASSES.reset(token)
            self._mode = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Write down every likelihood call made inside, answering each with stand-in scores."""
        with self._active("record"), _quiet():
            yield

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Answer the calls made inside, in the order they were recorded, from :meth:`run`'s passes."""
        with self._active("replay"):
            yield

    @property
    def recording_calls(self) -> bool:
        """Whether calls are being recorded (and answered with stand-ins)."""
        return self._mode == "record"

    def score(self, backend: LikelihoodBackend, items: Sequence[Item], settings: dict[str, Any]
              ) -> list[ContinuationScore]:
        """What :meth:`LikelihoodBackend.score_checked` answers while this is active (``settings``: its keywords)."""
        asks = frozenset(name for name in TOKEN_OUTPUTS if settings.get(name))
        max_length, truncate = settings.get("max_length"), settings.get("truncate", True)
        calls = self._calls.setdefault(id(backend), [])
        if self._mode == "record":
            self._backends[id(backend)] = backend
            call = _Call(_frozen(items), max_length, truncate, asks)
            call.prepared = prepare_items(call.items, backend.start_token_id, max_length=max_length, truncate=truncate,
                                          position_limit=backend.max_length)
            calls.append(call)
            return [_stand_in(item, asks) for item in call.prepared]
        position = self._replayed.get(id(backend), 0)
        self._replayed[id(backend)] = position + 1
        recorded = calls[position] if position < len(calls) else None
        if recorded is None or (recorded.items, recorded.max_length, recorded.truncate, recorded.asks) != \
                (_frozen(items), max_length, truncate, asks):
            logger.debug("A call differs from the one recorded; it is scored as it is.")
            token = SHARED_PASSES.set(None)
            try:
                return backend.score_checked(items, **settings)
            finally:
                SHARED_PASSES.reset(token)
        scores = self._scores[id(backend)]
        return [_as_asked(scores[_key(item)], item, recorded.asks) if _scorable(item)
                else item.unscored(*(name in recorded.asks for name in TOKEN_OUTPUTS))
                for item in recorded.prepared]

    def _groups(self, calls: Sequence[_Call]) -> dict[frozenset[str], list[Key]]:
        """The distinct scorable sequences of ``calls``, by the per-token outputs some caller asked of each,
        each group in lexical order: a sequence then comes just before those it begins, so the core scores
        it in their pass."""
        asked: dict[Key, frozenset[str]] = {}
        for call in calls:
            for item in filter(_scorable, call.prepared):
                asked[_key(item)] = asked.get(_key(item), frozenset()) | call.asks
        # Entropies cost a float64 pass over the vocabulary per token: only the sequences they are asked of
        # get them. Token losses and greedy flags cost next to nothing beside the NLL: a group gets them all.
        groups: dict[bool, list[Key]] = {}
        for key, asks in asked.items():
            groups.setdefault("entropies" in asks, []).append(key)
        return {frozenset().union(*(asked[key] for key in keys)): sorted(keys) for keys in groups.values()}

    def count(self) -> tuple[int, int]:
        """(items the recorded calls ask for, sequences that :meth:`run` sends through a model)."""
        items = sum(1 for calls in self._calls.values() for call in calls for item in call.prepared if _scorable(item))
        passes = sum(len(_hosts(keys)) for calls in self._calls.values() for keys in self._groups(calls).values())
        return items, passes

    def tokens(self) -> int:
        """The tokens the recorded calls send through a model: the length of each sequence that runs a
        forward pass (:meth:`count`'s)."""
        return sum(tokens for _, tokens in self.backend_tokens())

    def backend_tokens(self) -> list[tuple[LikelihoodBackend, int]]:
        """Each backend the recorded calls went to, with the tokens they send through it (:meth:`tokens`)."""
        return [(backend, sum(len(ids) for keys in self._groups(self._calls[key]).values() for ids, _ in _hosts(keys)))
                for key, backend in self._backends.items()]

    def run(self) -> None:
        """Score every distinct recorded sequence, one backend call per backend and set of per-token outputs."""
        self.sequences, self.forward_passes = self.count()
        for backend_id, calls in self._calls.items():
            backend = self._backends[backend_id]
            scores: dict[Key, ContinuationScore] = {}
            for asks, keys in self._groups(calls).items():
                items = [(list(ids[:first]), list(ids[first:])) for ids, first in keys]
                results = backend.score_checked(items, max_length=None, truncate=False, batch_size=self.batch_size,
                                                progress=self.progress, desc="Scoring (shared passes)",
                                                **dict.fromkeys(asks, True))
                scores.update(zip(keys, results, strict=True))
            self._scores[backend_id] = scores
        self._replayed = {}


def _hosts(keys: Sequence[Key]) -> list[Key]:
    """The sorted sequences that run a forward pass: those that do not begin the next one."""
    return [key for key, following in zip(keys, [*keys[1:], None], strict=True)
            if following is None or following[0][:len(key[0])] != key[0]]
