"""How the transformers backend bounds its batches: the CPU's limits as before, an accelerator's token
budget from its free memory (planned on the CPU with a fake device type and fake free memory), the
budget kept for a resumed job, a batch split when it runs out of memory, and attention kept off cuDNN."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.transformers import attention, budget_measurement, embedding
from hf_adapters.backends.transformers import model as transformers_model
from hf_adapters.backends.transformers.batching import (
    ACCELERATOR_MAX_BATCH_TOKENS,
    ACCELERATOR_MIN_BATCH_TOKENS,
    CPU_MAX_BATCH_TOKENS,
    CPU_MAX_PADDING,
    DEFAULT_MAX_BATCH_TOKENS,
    BatchLimits,
    ModelShape,
    activation_bytes_per_token,
    batch_limits,
    device_token_budget,
    output_layer_bytes,
)
from hf_adapters.core.likelihood import make_batches
from hf_adapters.core.options import DEFAULT_BATCH_SIZE
from tests.conftest import assert_exact, naive_nll

GiB = 2**30
LLAMA_1B = ModelShape(hidden_size=2048, intermediate_size=8192, vocab_size=128256, dtype_bytes=2)
LLAMA_8B = ModelShape(hidden_size=4096, intermediate_size=14336, vocab_size=128256, dtype_bytes=2)


def test_the_cpu_keeps_its_limits_whatever_memory_is_free():
    assert batch_limits("cpu") == BatchLimits(DEFAULT_BATCH_SIZE, CPU_MAX_BATCH_TOKENS, CPU_MAX_PADDING)
    assert batch_limits("cpu", free_bytes=80 * GiB, shape=LLAMA_1B) == batch_limits("cpu")
    assert batch_limits("cpu", packing=True) == BatchLimits(16, 2048, 1.0)
    assert batch_limits("cpu", batch_size=4, max_batch_tokens=100, max_padding=0.0) == BatchLimits(4, 100, 0.0)


def test_an_accelerator_batches_by_tokens_alone_unless_the_caller_gives_rows():
    limits = batch_limits("cuda", free_bytes=70 * GiB, shape=LLAMA_1B)
    assert limits == BatchLimits(None, ACCELERATOR_MAX_BATCH_TOKENS, 1.0)
    assert batch_limits("cuda", batch_size=8, free_bytes=70 * GiB, shape=LLAMA_1B).rows == 8
    assert batch_limits("cuda", max_batch_tokens=4096, free_bytes=70 * GiB, shape=LLAMA_1B).tokens == 4096
    # Alpaca-length rows: hundreds of rows share a batch, where 16 rows held 16 x 150 tokens.
    lengths = [150 + i % 50 for i in range(3000)]
    batches = make_batches(lengths, limits.rows, limits.tokens, limits.padding)
    assert max(len(batch) for batch in batches) > 300
    assert all(len(batch) * lengths[batch[0]] <= limits.tokens for batch in batches)


def test_the_token_budget_follows_the_free_memory_within_its_bounds():
    budgets = [device_token_budget("cuda", gib * GiB, LLAMA_8B) for gib in (1, 8, 12, 20, 30, 60, 140)]
    assert budgets == sorted(budgets)
    assert budgets[0] == ACCELERATOR_MIN_BATCH_TOKENS and budgets[-1] == ACCELERATOR_MAX_BATCH_TOKENS
    assert all(budget % 1024 == 0 for budget in budgets)
    # What the estimate allows fits in half the free memory, beside one output-layer chunk.
    for gib, budget in zip((12, 20, 30), budgets[2:5], strict=True):
        assert ACCELERATOR_MIN_BATCH_TOKENS < budget < ACCELERATOR_MAX_BATCH_TOKENS
        assert output_layer_bytes(LLAMA_8B) + 2 * budget * activation_bytes_per_token(LLAMA_8B) <= gib * GiB
    # Free memory unknown (a device torch cannot ask): the budget of before.
    assert device_token_budget("mps", None, LLAMA_8B) == DEFAULT_MAX_BATCH_TOKENS
    assert device_token_budget("cuda", 80 * GiB, None) == DEFAULT_MAX_BATCH_TOKENS


def test_model_shape_reads_the_config_and_the_dtype(model):
    assert ModelShape.of(model) == ModelShape(64, 128, model.lm_head.weight.shape[0], 4)
    assert ModelShape.of(copy.deepcopy(model).to(torch.bfloat16)).dtype_bytes == 2


def test_the_backend_batches_as_before_on_the_cpu(model, tokenizer):
    backend = TransformersBackend(model, tokenizer)
    assert backend.batch_limits() == BatchLimits(16, 2048, 0.1)
    assert backend.batch_limits(batch_size=3, packing=True) == BatchLimits(3, 2048, 1.0)
    assert backend.measured_choices().get("max_batch_tokens") is None


@pytest.fixture
def model_off_the_cpu(model, monkeypatch):
    """The tiny model on the meta device, which is not the CPU (as a GPU is not), with 40 GiB free."""
    free = []

    def fake_free_memory(device):
        free.append(device.type)
        return 40 * GiB

    monkeypatch.setattr(transformers_model, "free_memory", fake_free_memory)
    meta = copy.deepcopy(model).to("meta")
    meta.asked = free
    return meta


def test_an_accelerator_budget_is_chosen_once_and_a_resumed_job_reuses_it(model_off_the_cpu, tokenizer,
                                                                           monkeypatch):
    backend = TransformersBackend(model_off_the_cpu, tokenizer)
    expected = device_token_budget("meta", 40 * GiB, ModelShape.of(model_off_the_cpu))
    assert backend.batch_limits() == BatchLimits(None, expected, 1.0)
    assert backend.batch_limits(batch_size=8) == BatchLimits(8, expected, 1.0)
    assert model_off_the_cpu.asked == ["meta"]  # asked once
    assert backend.measured_choices() == {"max_batch_tokens": expected}
    monkeypatch.setattr(transformers_model, "free_memory", lambda device: 1 * GiB)  # a busier device on rerun
    resumed = TransformersBackend(model_off_the_cpu, tokenizer)
    resumed.reuse_measured_choices(backend.measured_choices())
    assert resumed.batch_limits().tokens == expected
    assert TransformersBackend(model_off_the_cpu, tokenizer, max_batch_tokens=512).batch_limits().tokens == 512


ITEMS = [([5 + i, 6, 7], list(range(10, 10 + n))) for i, n in enumerate((3, 9, 4, 12, 2, 7, 5))]


def test_a_batch_out_of_memory_is_split_until_it_fits_with_the_same_scores(model, tokenizer, monkeypatch, caplog):
    backend = TransformersBackend(model, tokenizer, batch_size=8, max_padding=1.0)
    expected = [score.nll for score in backend.score(ITEMS)]
    original, sizes = transformers_model._token_nlls, []

    def out_of_memory_above_two_rows(model, batch, *args, **kwargs):
        sizes.append(len(batch))
        if len(batch) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return original(model, batch, *args, **kwargs)

    monkeypatch.setattr(transformers_model, "_token_nlls", out_of_memory_above_two_rows)
    with caplog.at_level(logging.WARNING, logger="hf_adapters.backends.transformers.model"):
        scores = backend.score(ITEMS, token_losses=True)
    assert sizes == [7, 3, 1, 2, 4, 2, 2]
    assert "Out of memory on a batch of 7 rows" in caplog.text and "scoring it as 3 + 4 rows" in caplog.text
    assert_exact([score.nll for score in scores], lambda m: [naive_nll(m, c, t, tokenizer.bos_token_id)[0]
                                                             for c, t in ITEMS], model)
    assert [score.nll for score in scores] == pytest.approx(expected, rel=1e-6)


def test_a_single_row_out_of_memory_and_other_errors_are_raised(model, tokenizer, monkeypatch):
    def fails(error):
        def forward(*args, **kwargs):
            raise error
        return forward

    backend = TransformersBackend(model, tokenizer)
    monkeypatch.setattr(transformers_model, "_token_nlls", fails(torch.cuda.OutOfMemoryError("CUDA out of memory")))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        backend.score(ITEMS[:1])
    monkeypatch.setattr(transformers_model, "_token_nlls", fails(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        backend.score(ITEMS)


def test_attention_stays_off_cudnn_on_cuda_only_and_keeps_the_callers_choice():
    enabled = (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled())
    with attention.without_cudnn_attention(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    assert (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled()) == enabled
    with attention.without_cudnn_attention(torch.device("cpu")):
        assert (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled()) == enabled
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH), \
            attention.without_cudnn_attention(torch.device("cuda")):
        assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()


def test_scoring_and_embedding_run_their_forward_passes_off_cudnn(model, tokenizer, monkeypatch):
    devices, inside = [], []
    original = attention.without_cudnn_attention

    def recorded(device):
        devices.append(device.type)
        return original(torch.device("cuda"))  # as on a GPU

    for module in (transformers_model, embedding):
        monkeypatch.setattr(module, "without_cudnn_attention", recorded)
    hook = model.model.register_forward_pre_hook(
        lambda *_: inside.append(not torch.backends.cuda.cudnn_sdp_enabled()))
    try:
        backend = TransformersBackend(model, tokenizer)
        backend.score(ITEMS)
        backend.embed([items[1] for items in ITEMS])
    finally:
        hook.remove()
    assert devices and set(devices) == {"cpu"} and inside and all(inside)


def test_an_accelerator_times_candidate_budgets_on_the_first_batches_and_keeps_the_fastest(model, tokenizer,
                                                                                           monkeypatch):
    """On a fake accelerator (the model's device taken for one), of budgets of 64, 128 and 256 tokens, a
    clock makes the 128's batch the fastest: it batches the job, is recorded, and a resumed job reuses it."""
    monkeypatch.setattr(TransformersBackend, "_device_type", lambda self: "cuda")
    monkeypatch.setattr(transformers_model, "free_memory", lambda device: 40 * GiB)
    monkeypatch.setattr(budget_measurement, "CANDIDATE_BUDGETS", (64, 128, 256))
    monkeypatch.setenv("HF_ADAPTERS_COMPILE", "off")
    readings = iter([0.0, 1.0,  # the warm-up (64)
                     1.0, 2.0, 2.0, 3.0, 3.0, 13.0])  # 64 tokens in 1 s, 128 in 1 s, 256 in 10 s
    monkeypatch.setattr(transformers_model, "clock", lambda: next(readings))
    items = [([5 + i, 6, 7], list(range(10, 10 + 20 + i % 13))) for i in range(24)]  # 700 tokens
    seen = []
    original = transformers_model._token_nlls

    def recorded(model, batch, *args, **kwargs):
        seen.append(sum(len(item.input_ids) for item in batch))
        return original(model, batch, *args, **kwargs)

    monkeypatch.setattr(transformers_model, "_token_nlls", recorded)
    backend = TransformersBackend(model, tokenizer)
    scores = backend.score(items)
    assert backend.measured_choices()["max_batch_tokens"] == 128
    assert len(seen) > 4 and max(seen[4:]) <= 128 < max(seen[:4])  # four timed batches, then the job's
    assert_exact([score.nll for score in scores],
                 lambda m: [naive_nll(m, c, t, tokenizer.bos_token_id)[0] for c, t in items], model)
    resumed = TransformersBackend(model, tokenizer)
    resumed.reuse_measured_choices(backend.measured_choices())
    seen.clear()
    resumed.score(items)  # no clock left to read: nothing is timed again
    assert max(seen) <= 128 and resumed.measured_choices()["max_batch_tokens"] == 128
    capped = TransformersBackend(model, tokenizer, batch_size=4)
    capped.score(items)  # under a row cap the candidates' batches would be the same rows: nothing is timed
    assert capped.measured_choices()["max_batch_tokens"] == ACCELERATOR_MAX_BATCH_TOKENS


def test_the_candidate_budgets_are_timed_with_attention_off_cudnn_as_the_job_runs(model, tokenizer, monkeypatch):
    """The timed batches run off cuDNN's attention, as the job's do: their times leave out its re-planning."""
    monkeypatch.setattr(TransformersBackend, "_device_type", lambda self: "cuda")
    monkeypatch.setattr(transformers_model, "free_memory", lambda device: 40 * GiB)
    monkeypatch.setattr(budget_measurement, "CANDIDATE_BUDGETS", (64, 128, 256))
    monkeypatch.setenv("HF_ADAPTERS_COMPILE", "off")
    original = attention.without_cudnn_attention
    monkeypatch.setattr(transformers_model, "without_cudnn_attention", lambda device: original(torch.device("cuda")))
    timed = []
    measure = transformers_model.measure_budgets

    def recorded(run, *args, **kwargs):
        return measure(lambda batch: timed.append(not torch.backends.cuda.cudnn_sdp_enabled()) or run(batch),
                       *args, **kwargs)

    monkeypatch.setattr(transformers_model, "measure_budgets", recorded)
    items = [([5 + i, 6, 7], list(range(10, 10 + 20 + i % 13))) for i in range(24)]
    backend = TransformersBackend(model, tokenizer)
    backend.score(items)
    assert len(timed) == 4 and all(timed) and "max_batch_tokens" in backend.measured_choices()
