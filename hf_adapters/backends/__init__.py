"""Likelihood backends and their registry: what a config's ``backend:`` key and every ``backend=`` names.

``transformers`` (:class:`TransformersBackend`, the default) runs a ``transformers`` model in this
process; ``vllm`` (:class:`VLLMBackend`, where vLLM is installed) runs a vLLM engine in this process.
Another way of computing likelihoods is a subclass of :class:`LikelihoodBackend`: pass an
instance as ``backend=`` to any entry point, or register the class under its ``name`` to make
``backend: NAME`` work in configs: with :func:`register_backend`, or from an installed package's
entry point ``NAME = "module:Class"`` in the group :data:`BACKEND_GROUP` (:mod:`hf_adapters.core.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hf_adapters.backends.base import LikelihoodBackend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, resolve_dtype
from hf_adapters.backends.transformers.model import TransformersBackend, score_continuations
from hf_adapters.backends.transformers.reward_model import RewardModelBackend
from hf_adapters.backends.vllm import VLLMBackend
from hf_adapters.core.options import OptionSpec, check_batch_size
from hf_adapters.core.plugins import BACKEND_GROUP
from hf_adapters.core.registry import Registry

#: Backend classes by the name a config's ``backend:`` key gives (a :class:`Registry`).
BACKENDS: Registry[LikelihoodBackend] = Registry("backend", LikelihoodBackend, group=BACKEND_GROUP,
                                                 where_named="in the config", guide="docs/guides/adding_a_backend.md")
#: Make a class available as ``backend: cls.name`` in configs (a class decorator); a ValueError for a
#: class without a name, or with a built-in backend's name (``transformers``, ``vllm``, ``reward-model``).
register_backend = BACKENDS.register
#: The package's own backends, whose names no other class may take.
BUILTIN_BACKENDS = BACKENDS.builtins

register_backend(TransformersBackend)
register_backend(VLLMBackend)
register_backend(RewardModelBackend)
BACKENDS.reserve_builtins()


def backend_class(name: str) -> type[LikelihoodBackend]:
    """The backend class called ``name``: a registered one, else the one an installed package declares
    under ``name`` in the entry point group :data:`BACKEND_GROUP` (imported now, and registered).
    A ValueError lists the valid names; a :class:`~hf_adapters.core.registry.PluginError` names an entry
    point that cannot be loaded."""
    return BACKENDS.lookup(name)


def resolve_backend(
    backend: LikelihoodBackend | str | None = None,
    *,
    model_id: str = DEFAULT_MODEL_ID,
    model: Any = None,
    tokenizer: Any = None,
    dtype: Any = None,
    device: Any = None,
) -> LikelihoodBackend:
    """The backend an entry point scores with: ``backend`` itself when it is one; else a loaded
    ``model`` and its ``tokenizer`` (both or neither) in a :class:`TransformersBackend`; else
    ``model_id`` loaded by the backend named ``backend`` (default ``transformers``)."""
    if isinstance(backend, LikelihoodBackend):
        if model is not None or tokenizer is not None:
            raise ValueError("Pass `backend`, or `model` and `tokenizer`, not both.")
        return backend
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"`backend` must be a LikelihoodBackend or a backend name, got {type(backend).__name__}.")
    if (model is None) != (tokenizer is None):
        raise ValueError("Pass both `model` and `tokenizer`, or neither (then `model_id` is loaded).")
    cls = backend_class(backend or TransformersBackend.name)
    if model is not None:
        if cls is not TransformersBackend:
            raise ValueError(f"A `model` object runs on the transformers backend, not {backend!r}.")
        return TransformersBackend(model, tokenizer)
    return cls.from_pretrained(model_id, dtype=dtype, device=device)


@dataclass(frozen=True)
class BackendOptions(OptionSpec):
    """What computes the scores, and how it runs: none of these changes a score (beyond float
    rounding, or the dtype's approximation). Every entry point that runs a model takes them.

    Attributes:
        backend: a :class:`LikelihoodBackend`, or the name of a registered one (default ``transformers``).
        model_id: the model the backend loads: a hub id, a local folder or a ``.gguf`` file.
        model: a loaded ``transformers`` model, with its ``tokenizer``, used instead of ``model_id``.
        tokenizer: the tokenizer of ``model``.
        dtype: ``"float32"`` (the CPU default), ``"bfloat16"`` (the GPU default; approximate) or ``"float16"``.
        device: anything torch accepts (``"cpu"``, ``"cuda:1"``); default: accelerate's device.
        batch_size: the most rows in one forward pass (None: the backend's default; the transformers
            backend's is 16 on the CPU and none on an accelerator, where a token budget bounds a batch).
        max_batch_tokens: the transformers backend's token budget, the most padded tokens in one forward
            pass (None: its default, 2,048 on the CPU, chosen from an accelerator's free memory there).
        progress: show a progress bar (None: for long work only).
    """

    backend: LikelihoodBackend | str | None = None
    model_id: str = DEFAULT_MODEL_ID
    model: Any = None
    tokenizer: Any = None
    dtype: str | torch.dtype | None = None
    device: str | torch.device | None = None
    batch_size: int | None = None
    max_batch_tokens: int | None = None
    progress: bool | None = None

    def check(self) -> None:
        if self.batch_size is not None:
            check_batch_size(self.batch_size)
        if self.max_batch_tokens is not None:
            check_batch_size(self.max_batch_tokens, "max_batch_tokens")
            cls = (type(self.backend) if isinstance(self.backend, LikelihoodBackend)
                   else backend_class(self.backend or TransformersBackend.name))
            if not issubclass(cls, TransformersBackend):
                raise ValueError(f"`max_batch_tokens` bounds the transformers backend's batches; the "
                                 f"{cls.name!r} backend batches by itself.")
        resolve_dtype(self.dtype, torch.device("cpu"))
        if isinstance(self.backend, str):
            backend_class(self.backend)
        elif self.backend is not None and not isinstance(self.backend, LikelihoodBackend):
            raise TypeError(f"`backend` must be a LikelihoodBackend or a backend name, got "
                            f"{type(self.backend).__name__}.")
        if (self.model is None) != (self.tokenizer is None):
            raise ValueError("Pass both `model` and `tokenizer`, or neither (then `model_id` is loaded).")
        if isinstance(self.backend, LikelihoodBackend) and self.model is not None:
            raise ValueError("Pass `backend`, or `model` and `tokenizer`, not both.")

    @property
    def model_name(self) -> str:
        """How results name the model: ``model_id``, the loaded model's path or class, or the backend's class."""
        if isinstance(self.backend, LikelihoodBackend):
            return str((self.backend.identity() or {}).get("model") or type(self.backend).__name__)
        if self.model is not None:
            return getattr(self.model, "name_or_path", "") or type(self.model).__name__
        return self.model_id

    def identity(self) -> dict[str, Any] | None:
        """The identity of the backend these options name, without loading a model where the backend
        can tell (:meth:`LikelihoodBackend.identify`); None for a model object."""
        if isinstance(self.backend, LikelihoodBackend):
            return self.backend.identity()
        if self.model is not None:
            return None
        return backend_class(self.backend or TransformersBackend.name).identify(self.model_id, dtype=self.dtype,
                                                                                 device=self.device)

    def load(self) -> LikelihoodBackend:
        """The backend these options name (:func:`resolve_backend`), with their token budget if they give one."""
        backend = resolve_backend(self.backend, model_id=self.model_id, model=self.model, tokenizer=self.tokenizer,
                                  dtype=self.dtype, device=self.device)
        if self.max_batch_tokens is not None:
            backend.max_batch_tokens = self.max_batch_tokens
        return backend


__all__ = [
    "BACKENDS",
    "BackendOptions",
    "LikelihoodBackend",
    "RewardModelBackend",
    "TransformersBackend",
    "VLLMBackend",
    "backend_class",
    "register_backend",
    "resolve_backend",
    "score_continuations",
]
