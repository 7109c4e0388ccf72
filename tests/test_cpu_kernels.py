"""oneDNN float32 linear layers: same float32 results as PyTorch's default, used only where they apply."""

import pytest
import torch
import torch.nn.functional as F

from hf_adapters import cpu_kernels
from hf_adapters.cpu_kernels import OneDNNLinear, fast_float32_linear, onednn_linear_available
from hf_adapters.likelihood import score_continuations

needs_onednn = pytest.mark.skipif(not onednn_linear_available(), reason="oneDNN linear needs an x86 build with mkldnn")


@pytest.fixture
def onednn_calls(monkeypatch):
    """How many F.linear calls went to oneDNN."""
    calls = []
    original = cpu_kernels._runs_on_onednn

    def recording(*args):
        applies = original(*args)
        calls.append(applies)
        return applies

    monkeypatch.setattr(cpu_kernels, "_runs_on_onednn", recording)
    return calls


@needs_onednn
@pytest.mark.parametrize("shape", [(48,), (1, 48), (5, 48), (2, 7, 48), (2, 3, 4, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_equals_default_linear_within_float32_rounding(shape, bias, onednn_calls):
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 24, bias=bias)
    x = torch.randn(shape)
    expected = layer(x)
    with torch.inference_mode(), OneDNNLinear():
        result = layer(x)
        transposed = F.linear(x.transpose(0, -1).contiguous().transpose(0, -1), layer.weight, layer.bias)
    assert onednn_calls == [True, True]
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(transposed, expected, rtol=1e-5, atol=1e-5)


def test_other_dtypes_transposed_weights_and_autograd_keep_pytorchs_default(onednn_calls):
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    with OneDNNLinear():
        layer(x).sum().backward()
        with torch.inference_mode():
            layer.to(torch.bfloat16)(x.detach().to(torch.bfloat16))
            F.linear(x.detach(), torch.randn(8, 4).t())
    assert onednn_calls == [False, False, False]
    assert x.grad is not None and x.grad.shape == x.shape


def test_fast_float32_linear_is_a_no_op_off_the_cpu():
    assert not isinstance(fast_float32_linear(torch.device("cuda")), OneDNNLinear)
    assert isinstance(fast_float32_linear(torch.device("cpu")), OneDNNLinear) == onednn_linear_available()


@needs_onednn
def test_core_runs_float32_cpu_models_on_onednn(model, tokenizer, onednn_calls):
    ids = tokenizer("The quick brown fox", add_special_tokens=False).input_ids
    score_continuations(model, tokenizer, [([], ids)])
    layers = sum(isinstance(module, torch.nn.Linear) for module in model.modules())
    assert onednn_calls == [True] * layers
