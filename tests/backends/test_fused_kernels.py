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
from tests.conftest import build_model

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


def test_liger_fuses_only_the_given_model_and_leaves_the_familys_transformers_module_as_it_was(
        model, tokenizer, monkeypatch):
    """A fake ``liger_kernel`` whose Llama patch, like Liger's, replaces the model's norms and also the module's
    RMSNorm class and rotary function: after it, the module holds its own again; the rotary function is
    Liger's only inside the fused model's forward passes."""
    import sys
    import types

    from transformers.models.llama import modeling_llama

    rope, norm_class = modeling_llama.apply_rotary_pos_emb, modeling_llama.LlamaRMSNorm
    seen = []

    class FakeNorm(torch.nn.Module):
        pass

    def fake_rope(*args, **kwargs):
        seen.append("liger rope")
        return rope(*args, **kwargs)

    def apply_liger_kernel_to_llama(model=None, rope=True, rms_norm=True, **options):
        modeling_llama.apply_rotary_pos_emb, modeling_llama.LlamaRMSNorm = fake_rope, FakeNorm
        modeling_llama.LIGER_ADDED = True

    fake = types.ModuleType("liger_kernel.transformers.monkey_patch")
    fake.MODEL_TYPE_TO_APPLY_LIGER_FN = {"llama": apply_liger_kernel_to_llama}
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.monkey_patch", fake)
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    fused = build_model(len(tokenizer), seed=3)
    fused_kernels.patch_this_model_only(fused, lambda: MODEL_TYPE_TO_APPLY_LIGER_FN["llama"](model=fused))
    assert modeling_llama.apply_rotary_pos_emb is rope and modeling_llama.LlamaRMSNorm is norm_class
    assert not hasattr(modeling_llama, "LIGER_ADDED")
    with torch.no_grad():
        fused(torch.tensor([[5, 6, 7]]))
    assert seen and modeling_llama.apply_rotary_pos_emb is rope  # Liger's inside the forward pass, not after
    seen.clear()
    with torch.no_grad():
        model(torch.tensor([[5, 6, 7]]))  # another model of the family: not fused
    assert seen == []
