"""Compiled scoring: ``compile="auto"`` compiles only on an accelerator and only where the job's tokens at the
measured eager rate repay the compile time, the choice recorded so that a resumed job makes it again; a
setting is refused by name; compiled float32 scores on the CPU stay within the exactness bound, compiled a
bounded number of times."""

from __future__ import annotations

import itertools

import pytest
import torch

from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.transformers import compilation
from hf_adapters.backends.transformers import model as transformers_model
from hf_adapters.backends.transformers.compilation import (
    COMPILE_ENV,
    compile_pays,
    compile_seconds,
    compile_setting,
)
from tests.conftest import assert_exact, naive_nll

ITEMS = [([5 + i, 6, 7], list(range(10, 10 + n))) for i, n in enumerate((3, 9, 4, 12, 2, 7, 5, 10))]


def test_auto_compiles_only_on_an_accelerator_where_the_jobs_tokens_repay_the_compile_time():
    one_b = compile_seconds(16)  # the 1B Llama's 16 layers: about the 49-55 s measured on an H200
    assert 45 <= one_b <= 60
    rate = 135_000  # the 1B defaults' tokens/s on Alpaca rows on an H200
    assert not compile_pays("cuda", 1_000_000, rate, one_b)  # 7 s of scoring: the compile costs more
    assert compile_pays("cuda", 100_000_000, rate, one_b)  # 12 minutes of scoring
    assert not compile_pays("cpu", 100_000_000, 1_000, 0.0)  # never on the CPU
    assert not compile_pays("cuda", 100_000_000, 0.0, one_b)  # no rate measured: no compile


def test_a_compile_setting_other_than_auto_on_or_off_is_refused_by_name(model, tokenizer, monkeypatch):
    assert compile_setting() == "auto" and compile_setting(" ON ") == "on"
    with pytest.raises(ValueError, match="compile='sometimes'; use one of auto, on, off"):
        TransformersBackend(model, tokenizer, compile="sometimes")
    monkeypatch.setenv(COMPILE_ENV, "always")
    with pytest.raises(ValueError, match=f"{COMPILE_ENV}='always'; use one of auto, on, off"):
        TransformersBackend(model, tokenizer).score(ITEMS)


@pytest.fixture
def fake_accelerator(monkeypatch):
    """Backends that take their model's device for an accelerator, a clock that advances one second a reading,
    and a 'compiled' body that records its calls (nothing is compiled)."""
    monkeypatch.setattr(TransformersBackend, "_device_type", lambda self: "cuda")
    monkeypatch.setattr(transformers_model, "free_memory", lambda device: 40 * 2**30)
    ticks = itertools.count()
    monkeypatch.setattr(transformers_model, "clock", lambda: float(next(ticks)))
    calls = []

    def recorded(body):
        def run(**inputs):
            calls.append(inputs["input_ids"].shape)
            return body(**inputs)
        return run

    monkeypatch.setattr(transformers_model, "compiled", recorded)
    monkeypatch.delenv(COMPILE_ENV, raising=False)
    return calls


def test_auto_on_an_accelerator_times_eager_batches_then_compiles_and_a_resume_does_the_same(
        model, tokenizer, fake_accelerator, monkeypatch):
    monkeypatch.setattr(compilation, "COMPILE_SECONDS_PER_LAYER", 0.0)  # a compile that costs nothing pays
    backend = TransformersBackend(model, tokenizer, batch_size=1)
    scores = backend.score(ITEMS)
    # A warm-up and COMPILE_TIMED_BATCHES eager batches timed, then the compiled body runs the other three.
    assert compilation.COMPILE_TIMED_BATCHES == 4
    assert len(fake_accelerator) == 3 and backend.measured_choices()["compile"] is True
    assert_exact([score.nll for score in scores],
                 lambda m: [naive_nll(m, c, t, tokenizer.bos_token_id)[0] for c, t in ITEMS], model)
    monkeypatch.setattr(compilation, "COMPILE_SECONDS_PER_LAYER", 10**6)  # a rerun would not compile...
    resumed = TransformersBackend(model, tokenizer, batch_size=1)
    resumed.reuse_measured_choices(backend.measured_choices())
    resumed.score(ITEMS)
    assert len(fake_accelerator) == 3 + 8  # ...but the resumed job compiles every batch as the first run chose
    known = TransformersBackend(model, tokenizer, batch_size=1)
    known.job_tokens = 1000  # a job the caller knows, whose compile would cost more: eager, and recorded
    known.score(ITEMS)
    assert known.measured_choices()["compile"] is False and len(fake_accelerator) == 11


def test_auto_decides_once_at_a_fixed_batch_of_the_first_call_with_running_totals(
        model, tokenizer, fake_accelerator, monkeypatch):
    """The decision comes after the warm-up and COMPILE_TIMED_BATCHES timed batches of the first call, or at
    the end of a shorter first call, from the job's tokens (else the call's): later calls never revisit it,
    so a job decides at the same batch on every run, before its first chunk is saved."""
    monkeypatch.setattr(compilation, "COMPILE_SECONDS_PER_LAYER", 1.0)  # 2 s for the two layers
    short = TransformersBackend(model, tokenizer, batch_size=2)
    short.score(ITEMS)  # 4 batches, fewer than the fixed point: decided at the call's end, on its 90 tokens
    assert short.measured_choices()["compile"] is False and short._timed_batches == 4
    for _ in range(3):
        short.score(ITEMS)  # however long the job runs on, the decision stands and nothing more is timed
    assert fake_accelerator == [] and short._timed_batches == 4
    told = TransformersBackend(model, tokenizer, batch_size=1)
    told.job_tokens = 10**6  # the job's size, as the local engine sets it: the compile pays
    told.score(ITEMS)
    assert told.measured_choices()["compile"] is True and len(fake_accelerator) == 3
    assert (told._timed_batches, told._timed_seconds) == (5, 4.0)  # the warm-up's second left out


def test_forced_settings_win_over_auto_and_the_cpu_never_compiles_on_auto(model, tokenizer, fake_accelerator,
                                                                          monkeypatch):
    TransformersBackend(model, tokenizer, batch_size=2, compile="off").score(ITEMS)
    assert fake_accelerator == []
    monkeypatch.setenv(COMPILE_ENV, "on")
    TransformersBackend(model, tokenizer, batch_size=2).score(ITEMS)
    assert len(fake_accelerator) == 4
    monkeypatch.setenv(COMPILE_ENV, "auto")
    monkeypatch.setattr(TransformersBackend, "_device_type", lambda self: "cpu")
    on_cpu = TransformersBackend(model, tokenizer, batch_size=2)
    on_cpu.score(ITEMS)
    assert len(fake_accelerator) == 4 and "compile" not in on_cpu.measured_choices()


@pytest.mark.compile
def test_compiled_float32_scores_on_the_cpu_stay_exact_and_compile_a_bounded_number_of_times(model, tokenizer):
    from torch._dynamo.utils import counters

    backend = TransformersBackend(model, tokenizer, batch_size=4, max_padding=1.0, compile="on")
    graphs = counters["stats"]["unique_graphs"]
    try:
        # Four batches of 2 to 4 rows and 6 to 15 tokens.
        scores = backend.score(ITEMS) + backend.score(ITEMS[:6], batch_size=3, token_losses=True)
        compiles = counters["stats"]["unique_graphs"] - graphs
    finally:
        torch._dynamo.reset()
    assert 1 <= compiles <= 2
    assert_exact([score.nll for score in scores],
                 lambda m: [naive_nll(m, c, t, tokenizer.bos_token_id)[0] for c, t in ITEMS + ITEMS[:6]], model)


def test_ray_workers_get_this_processs_compile_and_fused_kernels_settings(monkeypatch):
    from hf_adapters.engines.ray_columns import worker_environment

    monkeypatch.setenv(COMPILE_ENV, "off")
    monkeypatch.setenv("HF_ADAPTERS_FUSED_KERNELS", "on")
    settings = worker_environment()
    assert settings[COMPILE_ENV] == "off" and settings["HF_ADAPTERS_FUSED_KERNELS"] == "on"
