"""Which models the Space's model box loads, and how many it keeps.

On a public Space (``SPACE_ID`` is set, as Hugging Face sets it) or whenever
``HF_ADAPTERS_SPACE_MODELS`` is set, the box accepts only hub ids and the models that variable
lists (comma-separated ids or server paths; the default model always). Anything refused gets one
message that says nothing of the server's files. Run locally without either variable, it loads
any id or path. At most ``HF_ADAPTERS_SPACE_MAX_MODELS`` (default 2) models stay loaded; the
least recently used is dropped first.

Where vLLM is installed the Space also scores on the ``vllm`` backend: one engine per model, started
on first use and kept for the life of the process (so, restricted, it runs only the listed models).
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict

from hf_adapters.backends import LikelihoodBackend, TransformersBackend, VLLMBackend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, ModelLoadError, clear_model_cache, load_model
from hf_adapters.backends.vllm import vllm_version

#: A hub repository id: ``name`` or ``owner/name``, letters, digits, ``-``, ``_`` and ``.``, no ``..``.
HUB_ID = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?$")

#: The ids of the models kept loaded, least recently used first.
_RECENT: OrderedDict[str, None] = OrderedDict()
_LOCK = threading.Lock()
#: The backend the Space scores with unless told otherwise.
DEFAULT_BACKEND = TransformersBackend.name


class ModelRefused(ValueError):
    """The model box named a model this Space does not serve."""


def is_restricted() -> bool:
    """True on a Hugging Face Space, or when the allowed models are configured."""
    return bool(os.environ.get("SPACE_ID") or os.environ.get("HF_ADAPTERS_SPACE_MODELS"))


def allowed_models() -> set[str]:
    """The models listed in ``HF_ADAPTERS_SPACE_MODELS``, and the default model."""
    listed = os.environ.get("HF_ADAPTERS_SPACE_MODELS", "")
    return {DEFAULT_MODEL_ID, *(name.strip() for name in listed.split(",") if name.strip())}


def max_models() -> int:
    value = os.environ.get("HF_ADAPTERS_SPACE_MAX_MODELS", "2")
    return max(1, int(value)) if value.isdigit() else 2


def check_allowed(model_id: str) -> None:
    """Raise ModelRefused, with the same message for every refusal, unless the model may be loaded."""
    if not is_restricted() or model_id in allowed_models():
        return
    if HUB_ID.match(model_id) and not os.path.exists(model_id):
        return
    raise ModelRefused(f"Could not load model {model_id!r}: this Space serves hub models and the models it lists "
                       f"(such as {DEFAULT_MODEL_ID}).")


def load_allowed_model(model_id: str):
    """The model and tokenizer for the model box, if allowed; keeps the most recently used few loaded."""
    check_allowed(model_id)
    with _LOCK:
        try:
            pair = load_model(model_id)
        except ModelLoadError:
            if is_restricted():  # the loader's message names the paths it tried
                raise ModelRefused(f"Could not load model {model_id!r}.") from None
            raise
        _RECENT[model_id] = None
        _RECENT.move_to_end(model_id)
        while len(_RECENT) > max_models():
            dropped, _ = _RECENT.popitem(last=False)
            clear_model_cache(dropped)
        return pair


def backend_choices() -> list[str]:
    """The backends this Space offers: transformers, and vllm where vLLM is installed (found, not imported)."""
    return [DEFAULT_BACKEND, *([VLLMBackend.name] if vllm_version() is not None else [])]


def load_allowed_backend(model_id: str, backend: str = DEFAULT_BACKEND) -> LikelihoodBackend:
    """The model box's model on ``backend``, if allowed: the transformers model :func:`load_allowed_model`
    keeps, or the model's vLLM engine, started on first use and never dropped."""
    if backend not in backend_choices():
        raise ModelRefused(f"This Space has no {backend!r} backend; choose {' or '.join(backend_choices())}.")
    if backend == DEFAULT_BACKEND:
        return TransformersBackend(*load_allowed_model(model_id))
    if is_restricted() and model_id not in allowed_models():
        raise ModelRefused(f"Could not load model {model_id!r} on {backend}: this Space runs there only the models "
                           f"it lists (such as {DEFAULT_MODEL_ID}); choose {DEFAULT_BACKEND} for other hub models.")
    try:
        return VLLMBackend.from_pretrained(model_id)
    except ModelLoadError:
        if is_restricted():  # the message names the model's path
            raise ModelRefused(f"Could not load model {model_id!r}.") from None
        raise
