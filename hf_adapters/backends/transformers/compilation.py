"""Compiled scoring: the model's body under ``torch.compile``, where the job repays the compile time.

``compile`` is ``"auto"`` (default), ``"on"`` or ``"off"``: the backend's option, else
``HF_ADAPTERS_COMPILE`` (``--compile`` on the command line). ``"auto"`` compiles only on an
accelerator, and only where :func:`compile_pays`: the first ``COMPILE_TIMED_BATCHES`` batches of the
job's first call (after one that warms the device up; all of them where it has fewer) run eagerly and
are timed, and scoring is compiled from there on where the time compiled scoring would save on the
job's tokens at that rate exceeds the compile time (the job's tokens are the backend's ``job_tokens``,
which the local engine sets from the job, else the first call's). The decision is taken once, at
that fixed point, before a job saves its first rows. The body is compiled
with dynamic shapes, so that batches of any rows and length share one graph: a job compiles a
bounded number of times (PyTorch specializes a dimension of size 1, so single-row batches get a
graph of their own; ``torch._dynamo``'s recompile limit bounds the rest). Compiled kernels fuse
element-wise work and may sum in another order: float32 scores stay within the exactness bound, not
bit for bit. The choice is one of the backend's measured choices, so that a resumed job scores its
other rows the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hf_adapters.core.options import COMPILE_ENV, COMPILE_SETTINGS, setting

#: Measured on an NVIDIA H200 (``../shared/gpu/README.md``, 2026-11-28): the 1B Llama's body compiled
#: in 49-55 s (16 layers) and the 8B's (32 layers) had not compiled within 100 s: about 3.5 s a layer.
COMPILE_SECONDS_PER_LAYER = 3.5
#: The same probe: the compiled 1B body scored Alpaca-length rows at 49.2% of the bf16 peak against
#: the defaults' 40.5-41.0%, 1.2 times as fast.
COMPILE_SPEEDUP = 1.2
#: ``"auto"`` decides after timing this many eager batches of a job's first call, after one that warms
#: the device up (or at the end of a first call of fewer): at the same batch on every run of the job.
COMPILE_TIMED_BATCHES = 4


def compile_setting(value: str | None = None) -> str:
    """``value`` (the backend's), else ``HF_ADAPTERS_COMPILE``, else ``"auto"``
    (:func:`~hf_adapters.core.options.setting`)."""
    return setting(value, COMPILE_ENV, COMPILE_SETTINGS, "compile")


def compile_seconds(num_layers: int) -> float:
    """The time compiling a body of ``num_layers`` layers is expected to take (``COMPILE_SECONDS_PER_LAYER`` each)."""
    return COMPILE_SECONDS_PER_LAYER * num_layers


def compile_pays(device_type: str, job_tokens: int, tokens_per_second: float, seconds_to_compile: float,
                 speedup: float = COMPILE_SPEEDUP) -> bool:
    """Whether ``"auto"`` compiles: only off the CPU, and only where the time compiled scoring saves on
    the job's tokens at the measured eager rate exceeds the compile time.

    Example:
        >>> compile_pays("cuda", 50_000_000, 135_000, 56.0)  # 1B shape, 50M tokens: 6 min eager, 1 min saved
        True
        >>> compile_pays("cuda", 1_000_000, 135_000, 56.0), compile_pays("cpu", 10**9, 1_000, 0.0)
        (False, False)
    """
    if device_type == "cpu" or tokens_per_second <= 0:
        return False
    eager_seconds = job_tokens / tokens_per_second
    return eager_seconds * (1 - 1 / speedup) > seconds_to_compile


def num_layers(model: Any) -> int:
    """The model's layer count (its text model's, for a multimodal one; 1 where the config does not say)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(getattr(config, "num_hidden_layers", 1) or 1)


def compiled(body: torch.nn.Module) -> Callable:
    """``body`` under ``torch.compile`` with dynamic shapes (inductor); compiled on its first call."""
    return torch.compile(body, dynamic=True, backend="inductor")
