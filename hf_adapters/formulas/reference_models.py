"""A second model beside the scored one: the options that name it, and the check that both models
read the same tokens (same vocabulary, same token ids for every row) before any row is scored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hf_adapters.backends import LikelihoodBackend, resolve_backend
from hf_adapters.core.likelihood import Item
from hf_adapters.core.options import OptionSpec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class TokenizerMismatchError(ValueError):
    """The model and the reference model do not read the same tokens."""


@dataclass(frozen=True)
class ReferenceOptions(OptionSpec):
    """The reference model, loaded once per process like the scored one (dtype and device are the scored
    model's). Give one of ``reference_model_id`` (or ``reference_model`` as a string: a config's
    ``reference_model:`` key), ``reference_model`` with ``reference_tokenizer`` (loaded objects), or
    ``reference_backend`` (a :class:`~hf_adapters.backends.LikelihoodBackend`, or a registered name
    that loads ``reference_model_id``).
    """

    reference_model_id: str | None = None
    reference_model: Any = None
    reference_tokenizer: Any = None
    reference_backend: LikelihoodBackend | str | None = None

    def check(self) -> None:
        if isinstance(self.reference_model, str) and self.reference_model_id is not None:
            raise ValueError("Pass `reference_model_id` or `reference_model` as a name, not both.")
        model_object = self.reference_model is not None and not isinstance(self.reference_model, str)
        if model_object != (self.reference_tokenizer is not None):
            raise ValueError("Pass both `reference_model` and `reference_tokenizer` (loaded objects), or neither.")

    def require(self) -> None:
        """Raise a ValueError unless a reference model is named."""
        if self.reference_model_id is None and self.reference_model is None and \
                not isinstance(self.reference_backend, LikelihoodBackend):
            raise ValueError("This score needs a reference model: pass `reference_model_id` (or `reference_model` "
                             "and `reference_tokenizer`, or `reference_backend`); in a config, `reference_model:`.")

    @property
    def model_id(self) -> str | None:
        """The reference's model id or path, when it is named."""
        return self.reference_model if isinstance(self.reference_model, str) else self.reference_model_id

    def config_values(self) -> dict[str, Any]:
        """The reference options as a config holds them: names, not objects."""
        values = {"reference_model_id": self.reference_model_id, "reference_model": self.reference_model,
                  "reference_backend": self.reference_backend, "reference_tokenizer": self.reference_tokenizer}
        named = {key: value if value is None or isinstance(value, str) else self.name for key, value in values.items()}
        named["reference_tokenizer"] = None if self.reference_tokenizer is None else self.name
        return named

    @property
    def name(self) -> str:
        """How results and configs name the reference model."""
        if isinstance(self.reference_backend, LikelihoodBackend):
            return str((self.reference_backend.identity() or {}).get("model") or type(self.reference_backend).__name__)
        if self.model_id is not None:
            return self.model_id
        return getattr(self.reference_model, "name_or_path", "") or type(self.reference_model).__name__

    def load(self, *, dtype: Any = None, device: Any = None) -> LikelihoodBackend:
        """The reference backend (:func:`~hf_adapters.backends.resolve_backend`)."""
        self.require()
        model_object = None if isinstance(self.reference_model, str) else self.reference_model
        return resolve_backend(self.reference_backend, model_id=self.model_id or "", model=model_object,
                               tokenizer=self.reference_tokenizer, dtype=dtype, device=device)

    def identity(self, *, dtype: Any = None, device: Any = None) -> dict[str, Any] | None:
        """What identifies the reference by content, without loading it where the backend can tell (None:
        a model object)."""
        from hf_adapters.backends import backend_class

        if isinstance(self.reference_backend, LikelihoodBackend):
            return self.reference_backend.identity()
        if self.model_id is None:
            return None
        return backend_class(self.reference_backend or "transformers").identify(self.model_id, dtype=dtype,
                                                                              device=device)


def check_same_vocabulary(tokenizer: PreTrainedTokenizerBase, reference: PreTrainedTokenizerBase) -> None:
    """Raise a :class:`TokenizerMismatchError` unless both tokenizers have the same vocabulary (every
    token with the same id) and the same start token."""
    from hf_adapters.core.likelihood import start_token_id

    if tokenizer is reference:
        return
    vocabulary, other = tokenizer.get_vocab(), reference.get_vocab()
    if vocabulary != other:
        differing = sorted(set(vocabulary.items()) ^ set(other.items()), key=lambda pair: (pair[1], pair[0]))
        raise TokenizerMismatchError(
            f"The model and the reference model have different vocabularies ({len(vocabulary)} and {len(other)} "
            f"tokens; e.g. {differing[0][0]!r} is {vocabulary.get(differing[0][0])} and "
            f"{other.get(differing[0][0])}): a per-token difference of losses needs one tokenizer.")
    if start_token_id(tokenizer) != start_token_id(reference):
        raise TokenizerMismatchError("The model and the reference model start an empty context with different "
                                     "tokens (BOS, else EOS).")


def check_same_items(items: Sequence[Item], reference_items: Sequence[Item], labels: Sequence[str]) -> None:
    """Raise a :class:`TokenizerMismatchError` naming the first row (by ``labels``) whose token ids differ
    between the two tokenizers."""
    for label, item, other in zip(labels, items, reference_items, strict=True):
        if list(item[0]) != list(other[0]) or list(item[1]) != list(other[1]):
            raise TokenizerMismatchError(f"{label}: the model's and the reference model's tokenizers give it different "
                                         "token ids; both models must score the same tokens.")
