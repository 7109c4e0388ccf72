"""CPU kernels chosen by measurement: which library runs float32 linear layers, and whether
bfloat16 is worth using on this processor.

PyTorch's x86 builds send float32 matrix products to MKL; oneDNN, bundled with the same builds,
does its own dispatch. Which is faster depends on the processor: ``make bench`` measured a
2048 x 2048 product at about 420 GFLOP/s through oneDNN against MKL's 190 on a 2-core AMD EPYC
with AVX-512 (Zen 4), 222 against 198 on another (2026-11-24), and 137 against 131 on one with
AVX2 only (Zen 3); a Zen 3 machine has also been seen where MKL was the faster, and on one
(2026-11-23) oneDNN won at 128 to 512 positions per product but MKL at 1024 and 2048, by up to
17%. So the first time a model is scored in a process, both run the model's own linear-layer
shapes for a fraction of a second, at 128 positions, and the faster one is used from then on; a
batch of at least ``LONG_ROWS`` positions (long documents and histories) gets its own choice,
measured the same way at 1024 positions the first time one comes. Both compute in float32 and
differ only in the order of the sums, as different batch shapes already make them differ.
``HF_ADAPTERS_CPU_LINEAR=auto|onednn|default`` overrides the choice.

Whether bfloat16 is worth using is decided the same way: the first time a bfloat16 model is scored
on the CPU, bfloat16 and float32 products run the model's own shapes, and where bfloat16 is
slower (emulated, as on AVX2-only processors, or slow despite the AVX512-BF16 flag) scoring warns
once with the measured ratio.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from hf_adapters.core.console import warn_user

logger = logging.getLogger(__name__)

#: Environment variable that overrides the measured choice: ``auto`` (default), ``onednn`` or ``default``.
CPU_LINEAR_ENV = "HF_ADAPTERS_CPU_LINEAR"
CPU_LINEAR_SETTINGS = ("auto", "onednn", "default")
#: Rows (token positions) of the products timed for each of the model's weight shapes.
MEASURE_ROWS = 128
#: Batches of at least this many positions (rows x padded length) use the choice measured at ``LONG_MEASURE_ROWS``.
LONG_ROWS = 768
LONG_MEASURE_ROWS = 1024
#: Output features a timed product keeps at most: the output layer's rows are timed on a slice and scaled.
MEASURE_MAX_OUTPUTS = 4096
MEASURE_REPEATS = 3

_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
_X86 = ("x86_64", "amd64", "i386", "i686")
_ARM = ("aarch64", "arm64")


@functools.cache
def onednn_linear_available() -> bool:
    """Whether this PyTorch build can run float32 linear layers through oneDNN on this processor."""
    return (
        platform.machine().lower() in ("x86_64", "amd64")
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def _runs_on_onednn(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    tensors = [t for t in (input, weight, bias) if t is not None]
    return (
        all(type(t) in _PLAIN_TENSOR_TYPES and t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
        and weight.is_contiguous()
        and input.numel() > 0
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    )


def onednn_linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed by oneDNN (float32 CPU tensors, contiguous weight)."""
    return torch.ops.mkldnn._linear_pointwise(input, weight, bias, "none", [], "")


#: The candidate float32 CPU kernels for linear layers, by the name ``HF_ADAPTERS_CPU_LINEAR`` uses.
LINEAR_KERNELS = {"default": F.linear, "onednn": onednn_linear}


def _linear_arguments(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    return input, weight, bias


class OneDNNLinear(TorchFunctionMode):
    """While active, ``F.linear`` on float32 CPU tensors (hence every ``nn.Linear``) runs on oneDNN;
    anything else (other dtypes or devices, tensor subclasses, autograd) runs as usual.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(8, 4)
        >>> x = torch.randn(3, 8)
        >>> with torch.inference_mode(), OneDNNLinear():
        ...     y = layer(x)
        >>> torch.allclose(y, layer(x), atol=1e-6)
        True
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            input, weight, bias = _linear_arguments(*args, **kwargs)
            if _runs_on_onednn(input, weight, bias):
                return onednn_linear(input, weight, bias)
        return func(*args, **kwargs)


@dataclass(frozen=True)
class LinearKernelChoice:
    """The kernel that runs a model's float32 linear layers on the CPU, and why.

    Attributes:
        kernel: ``"onednn"`` or ``"default"`` (PyTorch's own BLAS, MKL on x86 builds).
        reason: ``"measured"``, or what decided without measuring.
        rates: FLOP/s of each candidate on the model's weight shapes, when measured.
    """

    kernel: str
    reason: str
    rates: dict[str, float] = field(default_factory=dict)


def linear_shapes(model: torch.nn.Module, dtype: torch.dtype | None = torch.float32) -> Counter[tuple[int, int]]:
    """How many CPU ``nn.Linear`` layers of each (out features, in features) the model has, of
    ``dtype`` (None: of any dtype)."""
    return Counter(
        tuple(module.weight.shape)
        for module in model.modules()
        if isinstance(module, torch.nn.Linear)
        and (dtype is None or module.weight.dtype == dtype)
        and module.weight.device.type == "cpu"
    )


def _seconds(linear, operands: list[tuple[torch.Tensor, torch.Tensor, float]]) -> float:
    """Wall time of one pass over the timed products, each weighted by how often the model runs it."""
    total = 0.0
    for x, weight, weight_count in operands:
        start = time.perf_counter()
        linear(x, weight)
        total += (time.perf_counter() - start) * weight_count
    return total


@torch.inference_mode()
def measure_linear_rates(
    shapes: Counter[tuple[int, int]], rows: int = MEASURE_ROWS, repeats: int = MEASURE_REPEATS,
    kernels: Mapping[str, Callable] = LINEAR_KERNELS, dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """FLOP/s of each of ``kernels`` on ``rows`` positions through every weight shape, in ``dtype``,
    weighted by how many layers have it: best of ``repeats`` interleaved passes after a warm-up."""
    operands, flops = [], 0.0
    for (out_features, in_features), count in shapes.items():
        kept = min(out_features, MEASURE_MAX_OUTPUTS)
        operands.append((torch.randn(rows, in_features, dtype=dtype), torch.randn(kept, in_features, dtype=dtype),
                         count * out_features / kept))
        flops += 2.0 * rows * in_features * out_features * count
    best = dict.fromkeys(kernels, float("inf"))
    for linear in kernels.values():
        _seconds(linear, operands)
    for _ in range(repeats):
        for name, linear in kernels.items():
            best[name] = min(best[name], _seconds(linear, operands))
    return {name: flops / max(seconds, 1e-9) for name, seconds in best.items()}


def cpu_linear_setting() -> str:
    """The value of ``HF_ADAPTERS_CPU_LINEAR`` (``auto`` when unset)."""
    setting = os.environ.get(CPU_LINEAR_ENV, "").strip().lower() or "auto"
    if setting not in CPU_LINEAR_SETTINGS:
        raise ValueError(f"{CPU_LINEAR_ENV}={setting!r}; use one of {', '.join(CPU_LINEAR_SETTINGS)}.")
    return setting


_measured: dict[frozenset, LinearKernelChoice] = {}
_measured_long: dict[frozenset, LinearKernelChoice] = {}


def choose_cpu_linear(model: torch.nn.Module, rows: int | None = None) -> LinearKernelChoice:
    """The kernel for the model's float32 CPU linear layers: forced by ``HF_ADAPTERS_CPU_LINEAR``,
    else the faster of the default BLAS and oneDNN on the model's weight shapes, measured once per
    process and set of shapes and logged at DEBUG (``--verbose`` shows it). A batch of ``rows`` positions at or above
    ``LONG_ROWS`` gets the choice measured at ``LONG_MEASURE_ROWS`` positions."""
    setting = cpu_linear_setting()
    if setting == "default":
        return LinearKernelChoice("default", f"forced by {CPU_LINEAR_ENV}")
    if not onednn_linear_available():
        return LinearKernelChoice("default", "oneDNN linear is not available in this PyTorch build")
    if setting == "onednn":
        return LinearKernelChoice("onednn", f"forced by {CPU_LINEAR_ENV}")
    shapes = linear_shapes(model)
    if not shapes:
        return LinearKernelChoice("default", "no float32 linear layer on the CPU")
    key = frozenset(shapes.items())
    long = rows is not None and rows >= LONG_ROWS
    measured = _measured_long if long else _measured
    if key not in measured:
        rates = measure_linear_rates(shapes, rows=LONG_MEASURE_ROWS) if long else measure_linear_rates(shapes)
        kernel = max(rates, key=rates.get)
        measured[key] = LinearKernelChoice(kernel, "measured", rates)
        logger.debug(
            "CPU float32 linear layers run on %s%s: on this model's shapes the default BLAS ran at %.1f GFLOP/s "
            "and oneDNN at %.1f GFLOP/s (set %s to override).",
            "oneDNN" if kernel == "onednn" else "the default BLAS",
            f" in batches of {LONG_ROWS}+ positions" if long else "", rates["default"] / 1e9, rates["onednn"] / 1e9,
            CPU_LINEAR_ENV,
        )
    return measured[key]


def _choice_tables() -> dict[str, dict[frozenset, LinearKernelChoice]]:
    """The choices made, by batch class: below ``LONG_ROWS`` positions, and at or above."""
    return {"short": _measured, "long": _measured_long}


def linear_choices(model: torch.nn.Module) -> dict[str, str]:
    """The kernels this process has chosen for the model's float32 CPU linear layers, by batch class
    (``"short"``, ``"long"``): forced by ``HF_ADAPTERS_CPU_LINEAR``, or measured so far (a class not
    measured yet is absent)."""
    shapes = linear_shapes(model)
    if not shapes:
        return {}
    if cpu_linear_setting() != "auto" or not onednn_linear_available():
        kernel = choose_cpu_linear(model).kernel
        return dict.fromkeys(_choice_tables(), kernel)
    key = frozenset(shapes.items())
    return {name: measured[key].kernel for name, measured in _choice_tables().items() if key in measured}


def reuse_linear_choices(model: torch.nn.Module, choices: Mapping[str, str]) -> None:
    """Use ``choices`` (of :func:`linear_choices`, made by an earlier process: the first run of a
    resumed job) for the model's batch classes instead of measuring, so that the same kernel runs the
    same products. ``HF_ADAPTERS_CPU_LINEAR=onednn|default`` still overrides them."""
    key = frozenset(linear_shapes(model).items())
    tables = _choice_tables()
    for name, kernel in choices.items():
        if name in tables and kernel in LINEAR_KERNELS and key:
            tables[name][key] = LinearKernelChoice(kernel, "chosen by an earlier run of the same job")


def cpu_linear_kernel(model: torch.nn.Module, rows: int | None = None) -> contextlib.AbstractContextManager:
    """Context in which the model's float32 CPU linear layers run on the kernel chosen for batches of
    ``rows`` positions (:func:`choose_cpu_linear`); a no-op for models off the CPU."""
    device = next(model.parameters()).device
    if device.type != "cpu" or choose_cpu_linear(model, rows).kernel != "onednn":
        return contextlib.nullcontext()
    return OneDNNLinear()


def cpuinfo_value(*names: str) -> str | None:
    """The value of the first line of Linux's ``/proc/cpuinfo`` named one of ``names`` (None elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in names:
            return value.strip()
    return None


def cpu_flags() -> set[str]:
    """The processor's feature flags as Linux lists them (``flags`` on x86, ``Features`` on Arm)."""
    return set((cpuinfo_value("flags", "Features") or "").split())


def _macos_arm_has_bfloat16() -> bool:
    import subprocess

    result = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True)
    return result.stdout.strip() == "1"


@functools.cache
def cpu_has_native_bfloat16() -> bool:
    """Whether this processor says it multiplies bfloat16 natively: AVX512-BF16 or AMX on x86, the
    BF16 extension on Arm. Without it PyTorch emulates bfloat16 products, slower than float32; with
    it bfloat16 may still be slower (:func:`bfloat16_speedup` measures), so this is for reports only."""
    machine = platform.machine().lower()
    if machine in _X86:
        return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    if machine in _ARM:
        return "bf16" in cpu_flags() or (platform.system() == "Darwin" and _macos_arm_has_bfloat16())
    return False


_bfloat16_speedups: dict[frozenset, float] = {}


def bfloat16_speedup(model: torch.nn.Module) -> float:
    """How many times the float32 rate bfloat16 products run at on this processor (against the faster
    float32 kernel), timed on the model's own linear-layer shapes once per process and set of shapes
    and logged at DEBUG. Below 1, bfloat16 is slower here: a processor flag cannot tell (AVX512-BF16
    has been seen at 0.54x float32)."""
    shapes = linear_shapes(model, dtype=None)
    key = frozenset(shapes.items())
    if key not in _bfloat16_speedups:
        candidates = {name: kernel for name, kernel in LINEAR_KERNELS.items()
                      if name == "default" or onednn_linear_available()}
        float32 = max(measure_linear_rates(shapes, kernels=candidates).values())
        bfloat16 = measure_linear_rates(shapes, kernels={"bfloat16": F.linear}, dtype=torch.bfloat16)["bfloat16"]
        _bfloat16_speedups[key] = bfloat16 / float32
        logger.debug("On this model's shapes bfloat16 products ran at %.1f GFLOP/s, %.2fx the float32 rate "
                    "(%.1f GFLOP/s).", bfloat16 / 1e9, bfloat16 / float32, float32 / 1e9)
    return _bfloat16_speedups[key]


class SlowBfloat16Warning(UserWarning):
    """bfloat16 measured slower than float32 on this CPU: scoring in it is slower, and approximate."""


@functools.cache
def warn_slow_bfloat16(speedup: float) -> None:
    """Warn, once per process and measured ratio, that bfloat16 is slower than float32 here."""
    warn_user(
        f"On this processor bfloat16 products ran at {speedup:.2f}x the float32 rate (timed on the model's own "
        "layer shapes): scoring in bfloat16 is slower than float32 here, as well as approximate. "
        'Use dtype="float32" (the CPU default).',
        SlowBfloat16Warning,
    )


def check_cpu_dtype(model: torch.nn.Module) -> None:
    """Warn once if the model holds bfloat16 weights on a CPU where bfloat16 is measured slower than float32."""
    parameter = next(model.parameters())
    if parameter.device.type == "cpu" and parameter.dtype == torch.bfloat16:
        if (speedup := bfloat16_speedup(model)) < 1:
            warn_slow_bfloat16(round(speedup, 2))
