"""The one interface every formula talks to: a :class:`LikelihoodBackend` scores continuations.

A backend holds a model (in this process, on a server, in an actor...) and its tokenizer, and
answers one question: the NLL of continuation tokens given context tokens. Perplexity, IFD and
Information Parity are formulas over :meth:`LikelihoodBackend.score`; they tokenize with the
backend's ``tokenizer`` and read its position limit, and never touch the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..likelihood import ContinuationScore, Item, start_token_id

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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
    tokenizer: PreTrainedTokenizerBase

    @property
    def max_length(self) -> int | None:
        """The longest sequence the model can read (its position limit), or None if it has none or does not say."""
        return None

    def identity(self) -> dict[str, Any] | None:
        """What produces the scores, as a JSON-able dict (model files or commit, dtype, device type...),
        for the ``datasets`` cache fingerprint and a job's manifest; None when it cannot be said
        (the results are then never reused across calls)."""
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
        progress: bool | None = None,
        desc: str = "Scoring",
    ) -> list[ContinuationScore]:
        """Score each (context ids, continuation ids) item; results in input order.

        The rules are those of :func:`hf_adapters.likelihood.prepare_items`: an empty context is
        the start token; with ``truncate`` a sequence is cut to ``max_length`` (capped at the
        position limit) keeping the context; with ``truncate=False`` nothing is cut. An item with
        nothing to score gets NaN. ``token_losses`` fills each score's ``token_nlls``.
        ``batch_size`` (None: the backend's choice), ``progress`` and ``desc`` change how the work
        runs, never a score.
        """

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
