"""The one interface every formula talks to: a :class:`LikelihoodBackend` scores continuations.

A backend holds a model (in this process, on a server, in an actor...) and its tokenizer, and
answers one question: the NLL of continuation tokens given context tokens. Perplexity, IFD and
Information Parity are formulas over :meth:`LikelihoodBackend.score`, which they call through
:meth:`LikelihoodBackend.score_checked` (its result checked against the contract, :func:`check_scores`);
they tokenize with the backend's ``tokenizer`` and read its position limit, and never touch the model.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

from hf_adapters.core.likelihood import ContinuationScore, Item, start_token_id

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class PassSharing(Protocol):
    """What answers :meth:`LikelihoodBackend.score_checked` while a score set records or replays its members'
    calls (:class:`hf_adapters.backends.shared_passes.SharedPasses`)."""

    @property
    def recording_calls(self) -> bool:
        """Whether the answers are stand-ins, given while the calls are recorded."""

    def score(self, backend: LikelihoodBackend, items: Sequence[Item], settings: dict[str, Any]
              ) -> list[ContinuationScore]:
        """The answer to ``backend.score_checked(items, **settings)``."""


#: The score set's passes, while one records or replays its members' calls; None otherwise.
SHARED_PASSES: ContextVar[PassSharing | None] = ContextVar("shared_passes", default=None)


def scores_are_stand_ins() -> bool:
    """Whether :meth:`LikelihoodBackend.score_checked` now answers with a score set's stand-in scores
    (while it records its members' calls): a formula must not keep them for later calls."""
    shared = SHARED_PASSES.get()
    return shared is not None and shared.recording_calls


class LikelihoodBackend(ABC):
    """What computes likelihoods. Subclass it and implement :meth:`score` (and, to serve as a
    config's ``backend:``, the class methods :meth:`from_pretrained` and :meth:`identify`).

    Attributes:
        tokenizer: the tokenizer the formulas encode texts with (a ``transformers`` tokenizer).
        name: the key of :data:`hf_adapters.backends.BACKENDS` this class is registered under.

    Example, a backend that scores one item per forward pass of a transformers model::

        class OneAtATime(LikelihoodBackend):
            def __init__(self, model, tokenizer):
                self.model, self.tokenizer = model, tokenizer

            def score(self, items, *, max_length=None, truncate=True, token_losses=False, **settings):
                scores = []
                for item in prepare_items(items, self.start_token_id, max_length=max_length, truncate=truncate):
                    logits = self.model(torch.tensor([item.input_ids])).logits[0, item.first_scored - 1:-1]
                    nlls = torch.nn.functional.cross_entropy(logits.double(), torch.tensor(item.targets),
                                                             reduction="none").tolist()
                    scores.append(ContinuationScore(sum(nlls), len(nlls), item.truncated,
                                                    tuple(nlls) if token_losses else None)
                                  if nlls else item.unscored(token_losses))
                return scores
    """

    name: ClassVar[str] = ""
    #: Whether :meth:`score` computes predictive entropies (``entropies=True``); a backend that does
    #: not is refused that option by :meth:`score_checked`, with an error naming it.
    computes_entropies: ClassVar[bool] = False
    #: Whether :meth:`score` says if each continuation is the model's greedy one (``greedy=True``),
    #: likewise refused where it does not.
    computes_greedy: ClassVar[bool] = False
    tokenizer: PreTrainedTokenizerBase
    #: The tokens the whole job sends through this backend in this process, where the caller knows them
    #: (the local engine sets them before the job's first rows): a backend whose choices depend on the
    #: job's size (the transformers backend's ``compile="auto"``) reads them.
    job_tokens: int | None = None

    @property
    def max_length(self) -> int | None:
        """The longest sequence the model can read (its position limit), or None if it has none or does not say."""
        return None

    def identity(self) -> dict[str, Any] | None:
        """What produces the scores, as a JSON-able dict (model files or commit, dtype, device type...),
        for the ``datasets`` cache fingerprint and a job's manifest; None when it cannot be said
        (the results are then never reused across calls)."""
        return None

    def measured_choices(self) -> dict[str, Any]:
        """Choices this backend has made by measuring that move a score's last bits (which CPU kernel
        runs the float32 products), as a JSON-able dict: a resumed job hands them to
        :meth:`reuse_measured_choices` so that its rows are scored as the first run's were. None made: ``{}``."""
        return {}

    def reuse_measured_choices(self, choices: Mapping[str, Any]) -> None:
        """Make the choices of an earlier process (:meth:`measured_choices`) instead of measuring again."""
        return None

    @abstractmethod
    def score(
        self,
        items: Sequence[Item],
        *,
        max_length: int | None = None,
        truncate: bool = True,
        batch_size: int | None = None,
        token_losses: bool = False,
        entropies: bool = False,
        greedy: bool = False,
        progress: bool | None = None,
        desc: str = "Scoring",
    ) -> list[ContinuationScore]:
        """Score each (context ids, continuation ids) item; results in input order.

        The rules are those of :func:`hf_adapters.core.likelihood.prepare_items`: an empty context is
        the start token; with ``truncate`` a sequence is cut to ``max_length`` (capped at the
        position limit) keeping the context; with ``truncate=False`` nothing is cut. An item with
        nothing to score gets NaN. ``token_losses`` fills each score's ``token_nlls``; ``entropies``
        (only where ``computes_entropies`` says so) its ``token_entropies``, from the same forward pass;
        ``greedy`` (only where ``computes_greedy`` says so) its ``greedy``.
        ``batch_size`` (None: the backend's choice), ``progress`` and ``desc`` change how the work
        runs, never a score. The formulas check the result (:meth:`score_checked`).
        """

    def score_checked(self, items: Sequence[Item], **settings: Any) -> list[ContinuationScore]:
        """:meth:`score` (``settings`` are its keyword arguments), its result checked against the
        contract (:func:`check_scores`): what the formulas call, so that a backend's mistake stops with
        an error naming it instead of wrong scores. Subclasses implement :meth:`score`, not this.
        ``entropies=True`` is refused (:class:`EntropyUnsupportedError`) unless ``computes_entropies``,
        ``greedy=True`` (:class:`GreedyUnsupportedError`) unless ``computes_greedy``; a False option is
        not passed on, so a backend written without it keeps working."""
        entropies = settings.pop("entropies", False)
        greedy = settings.pop("greedy", False)
        if entropies and not self.computes_entropies:
            raise EntropyUnsupportedError(
                f"The backend {backend_label(self)} does not compute predictive entropies (they need the whole "
                "output distribution at each token); score with the transformers backend for entropy-based scores.")
        if greedy and not self.computes_greedy:
            raise GreedyUnsupportedError(
                f"The backend {backend_label(self)} does not say whether a continuation is the model's greedy one; "
                "score with the transformers or vllm backend.")
        settings.update({name: True for name, asked in (("entropies", entropies), ("greedy", greedy)) if asked})
        if (shared := SHARED_PASSES.get()) is not None:
            return shared.score(self, items, settings)
        return check_scores(self, items, self.score(items, **settings), settings.get("token_losses", False),
                            entropies, greedy)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        stop_token_ids: Sequence[int] | None = None,
        batch_size: int | None = None,
        progress: bool | None = None,
        desc: str = "Generating",
        on_result: Callable[[int, list[int]], None] | None = None,
    ) -> list[list[int]]:
        """The greedy continuation of each prompt (token ids), stopping before a stop token (the
        tokenizer's EOS by default) or after ``max_new_tokens``; in input order. A backend that can
        calls ``on_result(index, tokens)`` as each response is complete (a run keeps it then)."""
        raise NotImplementedError(f"{type(self).__name__} does not generate text.")

    def embed(
        self,
        sequences: Sequence[Sequence[int]],
        *,
        pooling: str = "mean",
        max_length: int | None = None,
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> Any:
        """One vector per token sequence, pooled from the model's final hidden states: a float32
        ``numpy`` array of shape (sequences, hidden size), in input order. ``pooling`` is ``"mean"``
        (over every token) or ``"last"`` (the last token's state, DEITA's). An empty sequence is the
        start token; a longer one than ``max_length`` (capped at the position limit) keeps its first
        tokens. A vector must not depend on the batch it runs in beyond float rounding."""
        raise NotImplementedError(f"{type(self).__name__} does not compute embeddings.")

    def head_values(
        self,
        sequences: Sequence[Sequence[int]],
        *,
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> list[list[float]]:
        """The values of a sequence classifier's head (a reward model's one score) at the last token of
        each token sequence, in input order; a value must not depend on the batch it runs in beyond float
        rounding. Only a backend that holds a sequence classifier computes them."""
        raise NotImplementedError(f"{type(self).__name__} holds no sequence classifier: reward scores need a reward "
                                  "model, loaded by the `reward-model` backend.")

    @classmethod
    def from_pretrained(cls, model_id: str, *, dtype: Any = None, device: Any = None) -> LikelihoodBackend:
        """The backend for a model id or path (what a config's ``model:`` names)."""
        raise NotImplementedError(f"{cls.__name__} cannot load a model by name; pass it as `backend=`.")

    @classmethod
    def identify(cls, model_id: str, *, dtype: Any = None, device: Any = None) -> dict[str, Any] | None:
        """``from_pretrained(model_id, ...).identity()``, without loading the model if it can be helped."""
        return cls.from_pretrained(model_id, dtype=dtype, device=device).identity()

    @property
    def start_token_id(self) -> int:
        """The token that stands in for an empty context: BOS, else EOS."""
        return start_token_id(self.tokenizer)

    def window(self, max_length: int | None) -> int | None:
        """``max_length`` capped at the position limit (the limit itself when None)."""
        limit = self.max_length
        if limit is None or (max_length is not None and max_length <= limit):
            return max_length
        return limit


class BackendContractError(ValueError):
    """A backend's :meth:`LikelihoodBackend.score` returned what its contract rules out."""


class EntropyUnsupportedError(ValueError):
    """Predictive entropies were asked of a backend that does not compute them."""


class GreedyUnsupportedError(ValueError):
    """Whether continuations are greedy was asked of a backend that does not say."""


def backend_label(backend: LikelihoodBackend) -> str:
    """How errors name a backend: its registered name and its class, else its class."""
    cls = type(backend).__name__
    return f"{backend.name!r} ({cls})" if backend.name else cls


def score_problem(item: Item, score: Any, token_losses: bool, entropies: bool = False,
                  greedy: bool = False) -> str | None:
    """What breaks the contract in one item's score, or None."""
    if not isinstance(score, ContinuationScore):
        return f"a {type(score).__name__}, not a ContinuationScore"
    length, count, nll = len(item[1]), score.num_tokens, score.nll
    # A truncated item keeps fewer tokens than its continuation (none where its context filled max_length).
    if not isinstance(count, numbers.Integral) or \
            not (0 <= count < max(length, 1) if score.truncated else count == length):
        return (f"num_tokens={count!r}, truncated={score.truncated!r} for a continuation of {length} tokens "
                "(every token is scored unless the item was truncated)")
    if not isinstance(nll, numbers.Real):
        return f"nll is a {type(nll).__name__}, not a float"
    # NaN is the score of an item with a token whose log-probability the model gave as -inf or NaN
    # (an underflow): its token NLLs, given then, show that value.
    unscorable = math.isnan(nll) and any(isinstance(value, numbers.Real) and not math.isfinite(value)
                                         for value in score.token_nlls or ())
    if count and not (math.isfinite(nll) and nll >= 0) and not unscorable:
        return f"nll={nll!r} for {count} scored tokens (a finite NLL >= 0 is expected)"
    if not count and not math.isnan(nll):
        return f"nll={nll!r} with no scored token (NaN is expected)"
    if token_losses and (score.token_nlls is None or len(score.token_nlls) != count):
        given = "None" if score.token_nlls is None else f"{len(score.token_nlls)} values"
        return f"token_nlls is {given} for {count} scored tokens (token losses were asked for)"
    if greedy and not isinstance(score.greedy, bool):
        return f"greedy={score.greedy!r} (True or False is expected: it was asked for)"
    if entropies:
        return entropy_problem(score.token_entropies, count)
    return None


def entropy_problem(token_entropies: Any, count: int) -> str | None:
    """What is wrong with the entropies of a score with ``count`` scored tokens, or None: one finite
    entropy >= 0 per scored token is expected."""
    if token_entropies is None or len(token_entropies) != count:
        given = "None" if token_entropies is None else f"{len(token_entropies)} values"
        return f"token_entropies is {given} for {count} scored tokens (entropies were asked for)"
    for position, entropy in enumerate(token_entropies):
        if not isinstance(entropy, numbers.Real) or not (math.isfinite(entropy) and entropy >= 0):
            return f"token_entropies[{position}]={entropy!r} (a finite entropy >= 0 is expected)"
    return None


def check_scores(backend: LikelihoodBackend, items: Sequence[Item], scores: Any,
                 token_losses: bool = False, entropies: bool = False, greedy: bool = False
                 ) -> list[ContinuationScore]:
    """``scores`` as a list, if they keep the contract of ``backend.score(items)``: one
    :class:`ContinuationScore` per item; every continuation token scored unless the item was
    truncated (then fewer); a finite NLL >= 0 where a token was scored (or NaN, where its token NLLs
    hold a non-finite one: an underflow), NaN where none was; with
    ``token_losses``, one token NLL per scored token; with ``entropies``, one finite entropy >= 0 per
    scored token; with ``greedy``, a bool. Else a :class:`BackendContractError` naming the
    backend, the item and what is wrong."""
    label = backend_label(backend)
    if not isinstance(scores, (list, tuple)):
        raise BackendContractError(f"The backend {label} returned a {type(scores).__name__} for {len(items)} items; "
                                   "`score` returns a list of one ContinuationScore per item.")
    if len(scores) != len(items):
        raise BackendContractError(f"The backend {label} returned {len(scores)} scores for {len(items)} items; "
                                   "`score` returns one ContinuationScore per item, in order.")
    for index, (item, score) in enumerate(zip(items, scores, strict=True)):
        if problem := score_problem(item, score, token_losses, entropies, greedy):
            raise BackendContractError(f"The backend {label} broke the contract of `score` at item {index} of "
                                       f"{len(items)}: {problem}.")
    return list(scores)


def is_out_of_memory(error: BaseException) -> bool:
    """True for CUDA's out-of-memory error and for the RuntimeErrors other backends raise for it."""
    return isinstance(error, torch.cuda.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "out of memory" in str(error)
    )
