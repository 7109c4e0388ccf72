"""Model resolution, loading and the process-wide cache."""

import evaluate
import pytest
import torch

from hf_adapters import models
from hf_adapters.models import (
    DEFAULT_MODEL_ID,
    ModelLoadError,
    ModelSource,
    attention_implementation,
    candidate_sources,
    load_model,
    resolve_device,
    resolve_dtype,
)
from tests.conftest import build_model


@pytest.fixture
def saved_model_dir(tmp_path, tokenizer):
    build_model(len(tokenizer)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


@pytest.fixture
def count_loads(monkeypatch):
    calls = []
    original = models._load_from

    def counting(source, dtype, trust_remote_code, attn_implementation=None):
        calls.append(source)
        return original(source, dtype, trust_remote_code, attn_implementation)

    monkeypatch.setattr(models, "_load_from", counting)
    models.clear_model_cache()
    yield calls
    models.clear_model_cache()


def test_model_is_loaded_once_and_reused_across_calls_and_metrics(saved_model_dir, count_loads):
    first = evaluate.load("./metrics/perplexity")
    second = evaluate.load("./metrics/perplexity")
    first.compute(predictions=["one text"], model_id=str(saved_model_dir))
    second.compute(predictions=["another text"], model_id=str(saved_model_dir))
    first.compute(predictions=["a third"], model_id=str(saved_model_dir))
    assert len(count_loads) == 1
    assert load_model(str(saved_model_dir))[0] is load_model(str(saved_model_dir))[0]


def test_each_dtype_is_a_separate_cache_entry(saved_model_dir, count_loads):
    float32_model, _ = load_model(str(saved_model_dir), dtype="float32")
    bf16_model, _ = load_model(str(saved_model_dir), dtype="bf16")
    assert float32_model.dtype == torch.float32 and bf16_model.dtype == torch.bfloat16
    assert len(count_loads) == 2


def test_missing_model_raises_an_error_naming_what_was_tried(tmp_path):
    missing = "no-such-org/no-such-model-anywhere"
    with pytest.raises(ModelLoadError, match="no-such-org/no-such-model-anywhere"):
        load_model(missing)


def test_directory_without_safetensors_weights_is_not_unpickled(tmp_path, tokenizer):
    model = build_model(len(tokenizer))
    model.config.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match=str(tmp_path)):
        load_model(str(tmp_path))


def test_local_gguf_file_resolves_to_its_folder(tmp_path):
    gguf = tmp_path / "tiny.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert candidate_sources(str(gguf)) == [ModelSource(str(tmp_path), "tiny.Q8_0.gguf")]


def test_default_id_offline_resolves_only_to_the_embedded_gguf(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sources = candidate_sources(DEFAULT_MODEL_ID)
    assert [s.gguf_file for s in sources] == [models.EMBEDDED_GGUF_FILE]


def test_default_id_online_tries_the_hub_first_then_the_embedded_copy(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    sources = candidate_sources(DEFAULT_MODEL_ID)
    assert sources[0] == ModelSource(DEFAULT_MODEL_ID)
    assert sources[-1].gguf_file == models.EMBEDDED_GGUF_FILE


def test_other_hub_ids_never_fall_back_to_another_model(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert candidate_sources("gpt2") == [ModelSource("gpt2")]


@pytest.mark.parametrize(
    ("name", "expected"), [("bfloat16", torch.bfloat16), ("bf16", torch.bfloat16), ("fp32", torch.float32)]
)
def test_dtype_names_resolve(name, expected):
    assert resolve_dtype(name, torch.device("cpu")) is expected


def test_dtype_defaults_to_float32_on_cpu_and_bfloat16_on_cuda():
    assert resolve_dtype(None, torch.device("cpu")) is torch.float32
    assert resolve_dtype(None, torch.device("cuda")) is torch.bfloat16


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn", torch.float8_e4m3fn, torch.int64, "no_such_type"])
def test_unknown_or_unscorable_dtype_is_refused(dtype):
    with pytest.raises(ValueError, match="Unknown dtype"):
        resolve_dtype(dtype, torch.device("cpu"))


def test_flash_attention_is_asked_for_only_on_cuda_in_half_precision_when_installed(monkeypatch):
    monkeypatch.setattr("transformers.utils.is_flash_attn_2_available", lambda: True)
    assert attention_implementation(torch.device("cuda"), torch.bfloat16) == "flash_attention_2"
    assert attention_implementation(torch.device("cuda"), torch.float32) is None
    assert attention_implementation(torch.device("cpu"), torch.bfloat16) is None
    monkeypatch.setattr("transformers.utils.is_flash_attn_2_available", lambda: False)
    assert attention_implementation(torch.device("cuda"), torch.bfloat16) is None



@pytest.mark.parametrize(("name", "expected"), [("gpu", "cuda"), ("GPU:1", "cuda:1"), ("cuda:0", "cuda:0"),
                                                ("cpu", "cpu"), (2, "cuda:2")])
def test_devices_resolve_gpu_meaning_cuda_as_evaluate_does(name, expected):
    assert resolve_device(name) == torch.device(expected)


@pytest.mark.parametrize(("model_id", "message"), [("", "model id is empty"), ("  ", "model id is empty"),
                                                    ("./no/such/folder", "no such file or folder"),
                                                    ("/no/such/model", "no such file or folder")])
def test_empty_ids_and_missing_paths_are_named_as_such(model_id, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(model_id)


def test_an_empty_folder_is_named_as_holding_no_model(tmp_path):
    with pytest.raises(ModelLoadError, match="holds no model"):
        load_model(str(tmp_path))
