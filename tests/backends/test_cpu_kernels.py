"""CPU kernels: oneDNN linear layers equal the default within float32 rounding, the kernel is chosen by
measurement or forced by HF_ADAPTERS_CPU_LINEAR, and bfloat16 warns where it is measured slower than float32."""

import logging
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from hf_adapters.backends import score_continuations
from hf_adapters.backends.transformers import cpu_kernels
from hf_adapters.backends.transformers.cpu_kernels import (
    CPU_LINEAR_ENV,
    OneDNNLinear,
    SlowBfloat16Warning,
    choose_cpu_linear,
    cpu_has_native_bfloat16,
    cpu_linear_kernel,
    linear_shapes,
    measure_linear_rates,
    onednn_linear_available,
)
from hf_adapters.formulas.perplexity import compute_perplexity
from tests.conftest import build_model

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture
def fresh_choice(monkeypatch):
    """No remembered measurement, no forced kernel, and recorded calls to the measurement."""
    monkeypatch.setattr(cpu_kernels, "_measured", {})
    monkeypatch.delenv(CPU_LINEAR_ENV, raising=False)
    measured = []

    def fake_rates(rates):
        def measure(shapes):
            measured.append(shapes)
            return dict(rates)
        monkeypatch.setattr(cpu_kernels, "measure_linear_rates", measure)

    return measured, fake_rates


def score_once(model, tokenizer):
    ids = tokenizer("The quick brown fox", add_special_tokens=False).input_ids
    return score_continuations(model, tokenizer, [([], ids)])


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


def test_models_off_the_cpu_get_no_kernel_context():
    assert not isinstance(cpu_linear_kernel(torch.nn.Linear(4, 4, device="meta")), OneDNNLinear)


def test_linear_shapes_count_float32_layers_by_weight_shape(model):
    shapes = linear_shapes(model)
    assert shapes[(64, 64)] == 4 and shapes[(128, 64)] == 4 and shapes[(64, 128)] == 2
    assert sum(shapes.values()) == sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert linear_shapes(torch.nn.Linear(4, 4).to(torch.bfloat16)) == Counter()


@needs_onednn
def test_measurement_gives_both_candidates_a_positive_rate():
    rates = measure_linear_rates(Counter({(32, 16): 2, (8192, 16): 1}), rows=8, repeats=1)
    assert sorted(rates) == ["default", "onednn"] and all(rate > 0 for rate in rates.values())


@needs_onednn
@pytest.mark.parametrize(("rates", "kernel"), [({"default": 2e9, "onednn": 1e9}, "default"),
                                               ({"default": 1e9, "onednn": 3e9}, "onednn")])
def test_auto_runs_the_faster_kernel_measured_once_and_logged(model, tokenizer, fresh_choice, onednn_calls, caplog,
                                                              rates, kernel):
    measured, fake_rates = fresh_choice
    fake_rates(rates)
    with caplog.at_level(logging.DEBUG, logger="hf_adapters.backends.transformers.cpu_kernels"):
        score_once(model, tokenizer)
        score_once(model, tokenizer)
    assert measured == [linear_shapes(model)]
    assert choose_cpu_linear(model).kernel == kernel and choose_cpu_linear(model).rates == rates
    assert any(onednn_calls) == (kernel == "onednn")
    [message] = [r.getMessage() for r in caplog.records if r.name == "hf_adapters.backends.transformers.cpu_kernels"]
    assert (f"default BLAS ran at {rates['default'] / 1e9:.1f} GFLOP/s and oneDNN at {rates['onednn'] / 1e9:.1f} "
            "GFLOP/s") in message


def test_measured_once_per_set_of_weight_shapes(model, tokenizer, fresh_choice):
    measured, fake_rates = fresh_choice
    fake_rates({"default": 2e9, "onednn": 1e9})
    other = build_model(len(tokenizer), max_position_embeddings=64)
    choose_cpu_linear(model)
    choose_cpu_linear(other)
    wider = torch.nn.Sequential(torch.nn.Linear(64, 96))
    choose_cpu_linear(wider)
    assert len(measured) == (2 if onednn_linear_available() else 0)


@needs_onednn
def test_long_batches_get_their_own_choice_measured_at_long_shapes(model, tokenizer, monkeypatch, onednn_calls):
    monkeypatch.setattr(cpu_kernels, "_measured", {})
    monkeypatch.setattr(cpu_kernels, "_measured_long", {})
    monkeypatch.delenv(CPU_LINEAR_ENV, raising=False)
    measured = []

    def measure(shapes, rows=cpu_kernels.MEASURE_ROWS):
        measured.append(rows)  # oneDNN wins short products, the default BLAS long ones
        return {"default": 2e9, "onednn": 1e9} if rows >= cpu_kernels.LONG_ROWS else {"default": 1e9, "onednn": 2e9}

    monkeypatch.setattr(cpu_kernels, "measure_linear_rates", measure)
    assert choose_cpu_linear(model).kernel == "onednn"
    assert choose_cpu_linear(model, rows=cpu_kernels.LONG_ROWS - 1).kernel == "onednn"
    assert choose_cpu_linear(model, rows=cpu_kernels.LONG_ROWS).kernel == "default"
    assert measured == [cpu_kernels.MEASURE_ROWS, cpu_kernels.LONG_MEASURE_ROWS]
    long_text = tokenizer("word " * 400, add_special_tokens=False).input_ids[:500]
    onednn_calls.clear()
    score_continuations(model, tokenizer, [([], long_text), ([], long_text[::-1])], batch_size=2, max_batch_tokens=None,
                        max_padding=1.0)
    assert not any(onednn_calls)  # 2 x 501 positions: the long choice, the default BLAS
    score_once(model, tokenizer)
    assert any(onednn_calls)  # a short batch: oneDNN


@pytest.mark.parametrize("setting", ["default", "onednn"])
def test_the_environment_variable_forces_a_kernel_without_measuring(model, tokenizer, fresh_choice, onednn_calls,
                                                                    monkeypatch, setting):
    measured, _ = fresh_choice
    monkeypatch.setenv(CPU_LINEAR_ENV, setting)
    score_once(model, tokenizer)
    forced = setting == "onednn" and onednn_linear_available()
    assert measured == []
    assert choose_cpu_linear(model).kernel == ("onednn" if forced else "default")
    layers = sum(isinstance(module, torch.nn.Linear) for module in model.modules())
    assert onednn_calls == ([True] * layers if forced else [])


def test_an_unknown_setting_is_a_clear_error(model, monkeypatch):
    monkeypatch.setenv(CPU_LINEAR_ENV, "mkl")
    with pytest.raises(ValueError, match="auto, onednn, default"):
        choose_cpu_linear(model)


def test_cpu_flags_and_cpuinfo_values_come_from_the_first_line_of_that_name(monkeypatch):
    text = "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: avx2 fma\n\nprocessor\t: 1\nflags\t\t: other\n"
    monkeypatch.setattr(cpu_kernels, "Path", lambda path: SimpleNamespace(read_text=lambda encoding: text))
    assert cpu_kernels.cpuinfo_value("model name") == "Test CPU"
    assert cpu_kernels.cpu_flags() == {"avx2", "fma"}
    assert cpu_kernels.cpuinfo_value("no such field") is None


@pytest.fixture
def processor(monkeypatch):
    """Pretend to run on a processor with the given machine name and feature flags."""
    def pretend(machine, flags):
        monkeypatch.setattr(cpu_kernels.platform, "machine", lambda: machine)
        monkeypatch.setattr(cpu_kernels.platform, "system", lambda: "Linux")
        monkeypatch.setattr(cpu_kernels, "cpu_flags", lambda: set(flags))
        cpu_has_native_bfloat16.cache_clear()

    yield pretend
    cpu_has_native_bfloat16.cache_clear()


@pytest.mark.parametrize(
    ("machine", "flags", "native"),
    [("x86_64", {"avx2", "fma"}, False), ("x86_64", {"avx2", "avx512f"}, False),
     ("x86_64", {"avx512f", "avx512_bf16"}, True), ("x86_64", {"amx_tile", "amx_bf16"}, True),
     ("aarch64", {"asimd", "sve"}, False), ("aarch64", {"asimd", "bf16"}, True), ("riscv64", {"bf16"}, False)],
)
def test_native_bfloat16_is_read_from_the_processor_flags(processor, machine, flags, native):
    processor(machine, flags)
    assert cpu_has_native_bfloat16() is native


@pytest.mark.parametrize(("native", "speedup"), [(False, 0.14), (True, 0.54), (True, 2.0), (False, 1.3)])
def test_bfloat16_measured_slower_than_float32_warns_once_with_the_ratio_whatever_the_flags(
        tokenizer, processor, monkeypatch, native, speedup):
    processor("x86_64", {"avx2", "avx512_bf16"} if native else {"avx2"})
    monkeypatch.setattr(cpu_kernels, "bfloat16_speedup", lambda model: speedup)
    cpu_kernels.warn_slow_bfloat16.cache_clear()
    model = build_model(len(tokenizer)).to(torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        score_once(model, tokenizer)
        score_once(model, tokenizer)
        score_once(build_model(len(tokenizer)), tokenizer)
    slow = [w for w in caught if issubclass(w.category, SlowBfloat16Warning)]
    assert len(slow) == (1 if speedup < 1 else 0)
    if slow:
        assert "slower than float32" in str(slow[0].message) and f"{speedup:.2f}x the float32 rate" in str(
            slow[0].message)
    cpu_kernels.warn_slow_bfloat16.cache_clear()


def test_the_slow_bfloat16_warning_prints_as_one_line_without_the_packages_source_line():
    """Python's format adds the line of source the warning points at (``check_cpu_dtype(model)``), which tells the
    user nothing; the package's warning is one line, as a fresh process prints it."""
    code = ("import torch\nfrom hf_adapters.backends import score_continuations\n"
            "from hf_adapters.backends.transformers import cpu_kernels\n"
            "from tests.conftest import build_model, build_tokenizer\n"
            "cpu_kernels.bfloat16_speedup = lambda model: 0.54\ntokenizer = build_tokenizer()\n"
            "model = build_model(len(tokenizer)).to(torch.bfloat16)\n"
            "score_continuations(model, tokenizer, [([], tokenizer('The quick fox').input_ids)], progress=False)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stderr.splitlines() == [
        "SlowBfloat16Warning: On this processor bfloat16 products ran at 0.54x the float32 rate (timed on the model's "
        "own layer shapes): scoring in bfloat16 is slower than float32 here, as well as approximate. "
        'Use dtype="float32" (the CPU default).']


def test_the_bfloat16_speedup_is_timed_on_the_models_shapes_once(tokenizer, monkeypatch):
    timed = []
    original = cpu_kernels.measure_linear_rates

    def counting(shapes, *args, **kwargs):
        timed.append((dict(shapes), kwargs.get("dtype", torch.float32)))
        return original(shapes, *args, repeats=1, **kwargs)

    monkeypatch.setattr(cpu_kernels, "measure_linear_rates", counting)
    monkeypatch.setattr(cpu_kernels, "_bfloat16_speedups", {})
    model = build_model(len(tokenizer)).to(torch.bfloat16)
    first = cpu_kernels.bfloat16_speedup(model)
    assert cpu_kernels.bfloat16_speedup(model) == first > 0
    assert [dtype for _, dtype in timed] == [torch.float32, torch.bfloat16]
    assert timed[0][0] == dict(cpu_kernels.linear_shapes(model, dtype=None)) != {}


@pytest.mark.parametrize("flags", [[], ["--verbose"]])
def test_the_kernel_timings_are_printed_only_with_verbose(model_dir, tmp_path, flags):
    """The CPU-kernel timing line came on every run (often twice, inside the progress bar, even with
    ``--no-progress``): a debug message now, which ``--verbose`` shows once per choice measured.

    Round five, item 22."""
    import os
    import subprocess
    import sys

    from tests.conftest import write_jsonl
    from tests.engines.test_local import REPO, run_env

    config = tmp_path / "ppl.yaml"
    config.write_text(f"name: PPLScorer\nmodel: {model_dir}\nbatch_size: 2\n", encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": i, "instruction": "Say hi.", "output": "Hi " * i}
                                                 for i in range(1, 7)])
    env = {key: value for key, value in run_env().items() if key != CPU_LINEAR_ENV}
    done = subprocess.run([sys.executable, "-m", "hf_adapters", "score", str(config), "--data", str(data), "--output",
                           str(tmp_path / "scores.jsonl"), "--no-progress", *flags], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    timings = done.stderr.count("CPU float32 linear layers run on")
    assert timings == (1 if flags and onednn_linear_available() else 0), done.stderr
    assert done.stdout.startswith("6 rows, 6 valid scores") and os.path.exists(tmp_path / "scores.jsonl")


def test_bfloat16_slower_than_float32_here_warns_with_the_measured_ratio(monkeypatch, tokenizer):
    """From the round-three review: silently wrong."""
    from hf_adapters.backends.transformers import cpu_kernels

    # Proposed: the speed-up of bfloat16 over float32 on the model's own shapes, measured once per process.
    monkeypatch.setattr(cpu_kernels, "bfloat16_speedup", lambda *args, **kwargs: 0.54)
    for cached in ("warn_slow_bfloat16",):
        getattr(getattr(cpu_kernels, cached, None), "cache_clear", lambda: None)()
    model = build_model(len(tokenizer), seed=3).to(torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compute_perplexity(["The quick brown fox jumps over the lazy dog."], model=model, tokenizer=tokenizer)
    messages = [str(warning.message) for warning in caught]
    assert any("0.54" in message for message in messages), messages
