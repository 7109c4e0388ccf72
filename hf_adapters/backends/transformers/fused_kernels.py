"""Liger's fused RMSNorm, RoPE and SwiGLU/GeGLU kernels on the model's body, where they apply.

``pip install 'hf_adapters[liger]'`` installs ``liger-kernel``. ``fused_kernels`` (the backend's
option, else ``HF_ADAPTERS_FUSED_KERNELS``) is ``"auto"`` (default), ``"on"`` or ``"off"``. They
apply only on CUDA (Triton kernels), only to the families Liger patches, and only in bfloat16 or
float16: they compute in another order than the eager layers, and float32 scores must stay within the
exactness bound, which they are not tested against. ``"auto"`` applies them where they were measured
faster: on an H200 (``../shared/gpu/README.md``, liger-kernel 0.8.5) the 8B Llama shape (hidden size
4,096) scored Alpaca-length rows at 54.7% of the bf16 peak against 48.6% for the defaults, the 1B
shape (hidden size 2,048) at 40.0% against 40.5-41.0%; so from ``AUTO_MIN_HIDDEN_SIZE``. ``"on"``
applies them wherever they can apply, and says why where they cannot (on the CPU: a no-op). Only the
given model is fused: its norm and MLP modules are replaced, and Liger's rotary function runs in its
forward passes only (:func:`patch_this_model_only`; Liger itself would patch the family's classes and
functions in ``transformers`` for every later model of the process). Its output layer is not used:
scores come from :mod:`~hf_adapters.backends.transformers.output_layer`. Where they run,
``compile="auto"`` does not compile: both together ran the 8B shape at 47.6%.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from hf_adapters.core.console import warn_user
from hf_adapters.core.options import FUSED_KERNELS_ENV, FUSED_KERNELS_SETTINGS, setting

logger = logging.getLogger(__name__)

#: The narrowest body ``"auto"`` fuses: the 8B shape's width, measured faster; the 1B shape's (2,048) was not.
AUTO_MIN_HIDDEN_SIZE = 4096
#: What is fused: the body's norms, rotary embeddings and gated MLPs (never Liger's loss or output layer).
LIGER_OPTIONS = {"rope": True, "rms_norm": True, "swiglu": True, "geglu": True, "layer_norm": True,
                 "cross_entropy": False, "fused_linear_cross_entropy": False}


class FusedKernelsWarning(UserWarning):
    """``fused_kernels="on"`` where the fused kernels cannot apply: the model runs without them."""


def fused_kernels_setting(value: str | None = None) -> str:
    """``value`` (the backend's), else ``HF_ADAPTERS_FUSED_KERNELS``, else ``"auto"``
    (:func:`~hf_adapters.core.options.setting`)."""
    return setting(value, FUSED_KERNELS_ENV, FUSED_KERNELS_SETTINGS, "fused_kernels")


@dataclass(frozen=True)
class FusedKernelsPlan:
    """Whether the fused kernels apply to a model, and why (or why not)."""

    apply: bool
    reason: str


def plan_fused_kernels(setting: str, device_type: str, dtype: torch.dtype, family: str | None,
                       supported: frozenset[str] | None, hidden_size: int) -> FusedKernelsPlan:
    """Whether to fuse a model of ``family`` and ``hidden_size`` in ``dtype`` on ``device_type``, given
    the families the installed Liger supports (None: not installed), under ``setting``.

    Example:
        >>> plan_fused_kernels("auto", "cuda", torch.bfloat16, "llama", frozenset({"llama"}), 4096).apply
        True
        >>> plan_fused_kernels("on", "cpu", torch.bfloat16, "llama", frozenset({"llama"}), 4096).reason
        'they run on CUDA only, and this model is on cpu'
    """
    if setting == "off":
        return FusedKernelsPlan(False, "off")
    if device_type != "cuda":
        return FusedKernelsPlan(False, f"they run on CUDA only, and this model is on {device_type}")
    if dtype not in (torch.bfloat16, torch.float16):
        return FusedKernelsPlan(False, f"only bfloat16 and float16 models are fused (this one is {dtype}): "
                                       "float32 scores stay within the exactness bound")
    if supported is None:
        return FusedKernelsPlan(False, "liger-kernel is not installed (pip install 'hf_adapters[liger]')")
    if family not in supported:
        return FusedKernelsPlan(False, f"Liger has no kernels for the model family {family!r}")
    if setting == "auto" and hidden_size < AUTO_MIN_HIDDEN_SIZE:
        return FusedKernelsPlan(False, f"a body {hidden_size} wide was measured no faster fused "
                                       f"(auto fuses from {AUTO_MIN_HIDDEN_SIZE})")
    return FusedKernelsPlan(True, f"Liger's fused kernels for {family}")


def _liger_families() -> dict[str, Any] | None:
    """Liger's patch function of each model family it supports (None: liger-kernel is not installed)."""
    if importlib.util.find_spec("liger_kernel") is None:
        return None
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    return dict(MODEL_TYPE_TO_APPLY_LIGER_FN)


def apply_fused_kernels(model: Any, setting: str) -> bool:
    """Fuse ``model``'s body as :func:`plan_fused_kernels` decides; where ``setting`` is ``"on"`` and
    they cannot apply, warn once saying why. Returns whether they were applied."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    weight = model.get_output_embeddings().weight
    families = _liger_families() if weight.device.type == "cuda" else None
    plan = plan_fused_kernels(setting, weight.device.type, weight.dtype, getattr(config, "model_type", None),
                              None if families is None else frozenset(families), int(config.hidden_size))
    if not plan.apply:
        if setting == "on":
            warn_user(f"fused_kernels=on does nothing here: {plan.reason}.", FusedKernelsWarning)
        return False
    patch = families[config.model_type]
    accepted = inspect.signature(patch).parameters
    patch_this_model_only(model, lambda: patch(model=model, **{name: value for name, value in LIGER_OPTIONS.items()
                                                               if name in accepted}))
    logger.info("Scoring runs %s.", plan.reason)
    return True


def _modeling_modules(model: torch.nn.Module) -> list[ModuleType]:
    """The ``transformers`` modules that define the classes of ``model``'s modules."""
    names = {type(module).__module__ for module in model.modules()}
    return [sys.modules[name] for name in sorted(names) if name.startswith("transformers.models.")]


def patch_this_model_only(model: torch.nn.Module, patch: Callable[[], object]) -> None:
    """Run ``patch`` (Liger's ``apply_liger_kernel_to_<family>(model=model)``), which replaces the norm and MLP
    modules of ``model`` and also the classes and functions of its family's ``transformers`` module, then put
    those module attributes back, so that later models of the family (a float32 one, one on the CPU) are
    not fused. A replaced function (the rotary embedding) is what ``model``'s own forward passes see: it
    is set for each of them only."""
    modules = _modeling_modules(model)
    before = [dict(vars(module)) for module in modules]
    patch()
    fused: list[tuple[ModuleType, str, Any, Any]] = []
    for module, saved in zip(modules, before, strict=True):
        for name in set(vars(module)) - set(saved):
            delattr(module, name)
        for name, original in saved.items():
            if (replaced := getattr(module, name)) is not original:
                setattr(module, name, original)
                if callable(replaced) and not isinstance(replaced, type):
                    fused.append((module, name, replaced, original))
    if not fused:
        return

    def fuse(*_: Any) -> None:
        for module, name, replaced, _ in fused:
            setattr(module, name, replaced)

    def restore(*_: Any) -> None:
        for module, name, _, original in fused:
            setattr(module, name, original)

    body = getattr(model, "base_model", model)  # what scoring runs (generation runs it inside the model)
    body.register_forward_pre_hook(fuse)
    body.register_forward_hook(restore, always_call=True)
