"""Liger's fused kernels: applied only on CUDA, to the families the installed Liger supports, in bfloat16 or
float16, and by default only on bodies as wide as the shape measured faster; forced on where they cannot
apply, a no-op that says why; auto compiling stays off where they run."""

from __future__ import annotations

import pytest
import torch

from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.transformers import fused_kernels
from hf_adapters.backends.transformers.fused_kernels import (
    FUSED_KERNELS_ENV,
    FusedKernelsWarning,
    apply_fused_kernels,
    plan_fused_kernels,
)

LIGER = frozenset({"llama", "qwen2"})


@pytest.mark.parametrize(("setting", "device", "dtype", "family", "supported", "hidden", "applies", "why"), [
    ("auto", "cuda", torch.bfloat16, "llama", LIGER, 4096, True, "Liger's fused kernels for llama"),
    ("auto", "cuda", torch.bfloat16, "llama", LIGER, 2048, False, "measured no faster"),
    ("on", "cuda", torch.float16, "llama", LIGER, 2048, True, "Liger's fused kernels"),
    ("on", "cuda", torch.float32, "llama", LIGER, 4096, False, "float32 scores stay within the exactness bound"),
    ("on", "cpu", torch.bfloat16, "llama", LIGER, 4096, False, "CUDA only"),
    ("on", "cuda", torch.bfloat16, "gpt2", LIGER, 4096, False, "no kernels for the model family 'gpt2'"),
    ("on", "cuda", torch.bfloat16, "llama", None, 4096, False, "pip install 'hf_adapters[liger]'"),
    ("off", "cuda", torch.bfloat16, "llama", LIGER, 4096, False, "off"),
])
def test_fused_kernels_apply_only_on_cuda_in_half_precision_to_the_families_liger_supports(
        setting, device, dtype, family, supported, hidden, applies, why):
    plan = plan_fused_kernels(setting, device, dtype, family, supported, hidden)
    assert plan.apply is applies and why in plan.reason


def test_fused_kernels_forced_on_on_the_cpu_are_a_no_op_that_says_so(model, tokenizer, monkeypatch):
    monkeypatch.setattr(fused_kernels, "_liger_families", lambda: pytest.fail("Liger looked up on the CPU"))
    with pytest.warns(FusedKernelsWarning, match="fused_kernels=on does nothing here: they run on CUDA only"):
        assert apply_fused_kernels(model, "on") is False
    monkeypatch.setenv(FUSED_KERNELS_ENV, "on")
    backend = TransformersBackend(model, tokenizer)
    with pytest.warns(FusedKernelsWarning):
        [score] = backend.score([([5, 6], [7, 8])])
    assert score.num_tokens == 2
    with pytest.raises(ValueError, match="fused_kernels='maybe'; use one of auto, on, off"):
        TransformersBackend(model, tokenizer, fused_kernels="maybe")


def test_where_fused_kernels_run_auto_does_not_compile(model, tokenizer, monkeypatch):
    monkeypatch.setattr(TransformersBackend, "_device_type", lambda self: "cuda")
    monkeypatch.delenv("HF_ADAPTERS_COMPILE", raising=False)
    backend = TransformersBackend(model, tokenizer)
    backend._fused, backend._compile_choice = True, True
    assert backend._compiles() is False
    assert TransformersBackend(model, tokenizer, compile="on")._compiles() is True
