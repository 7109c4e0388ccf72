"""The de-quantized copy of a GGUF model: a standard transformers checkpoint that other tools (vLLM)
read as they read any other, kept once per file content rather than once per installation."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from hf_adapters.backends import loading as models
from hf_adapters.backends.loading import ModelSource


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def tied_model(vocab_size: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def test_the_dequantized_copy_names_its_architecture_and_keeps_tied_weights_under_the_embedding_name(
        tokenizer, tmp_path):
    model = tied_model(len(tokenizer))
    folder = tmp_path / "copy"
    models._save_dequantized(model, tokenizer, folder)
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        names = set(weights.keys())
        assert torch.equal(weights.get_tensor("model.embed_tokens.weight"), model.model.embed_tokens.weight)
    assert "lm_head.weight" not in names and names == set(models.standard_state_dict(model))
    reloaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([tokenizer("The quick brown fox").input_ids])
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, model(ids).logits)


def test_untied_weights_are_all_kept(model, tokenizer, tmp_path):
    models._save_dequantized(model, tokenizer, tmp_path / "copy")
    with safe_open(str(tmp_path / "copy" / "model.safetensors"), "pt") as weights:
        assert set(weights.keys()) == set(model.state_dict())


def _gguf(folder, content: bytes, mtime: int):
    folder.mkdir(parents=True)
    path = folder / "model.gguf"
    path.write_bytes(content)
    os.utime(path, (mtime, mtime))
    return ModelSource(str(folder), "model.gguf")


def test_copies_of_one_gguf_file_in_two_installations_share_one_dequantized_folder(cache, tmp_path):
    content = os.urandom(3 << 20)
    first = _gguf(tmp_path / "site-a", content, 1_000_000)
    second = _gguf(tmp_path / "site-b", content, 2_000_000)
    assert models.dequantized_folder(first) == models.dequantized_folder(second)
    changed = bytearray(content)
    changed[len(content) // 2] ^= 1  # a byte in the middle, which no head/tail fingerprint reads
    third = _gguf(tmp_path / "site-c", bytes(changed), 1_000_000)
    assert models.dequantized_folder(third) != models.dequantized_folder(first)


def test_a_gguf_file_is_read_whole_once_per_version(cache, tmp_path, monkeypatch):
    source = _gguf(tmp_path / "site", os.urandom(1 << 20), 1_000_000)
    folder = models.dequantized_folder(source)

    def refuse(*args, **kwargs):
        raise AssertionError("the digest was computed again")

    monkeypatch.setattr(models.hashlib, "file_digest", refuse)
    assert models.dequantized_folder(source) == folder
    os.utime(os.path.join(source.path, source.gguf_file), (2_000_000, 2_000_000))
    with pytest.raises(AssertionError, match="computed again"):
        models.dequantized_folder(source)


def test_another_engine_reads_a_local_folder_as_it_is(model_dir):
    assert models.checkpoint_path(model_dir) == model_dir


def test_another_engine_reads_a_gguf_file_from_its_dequantized_copy(cache, monkeypatch, tmp_path):
    source = _gguf(tmp_path / "site", os.urandom(1 << 10), 1_000_000)
    folder = models.dequantized_folder(source)
    written = []
    monkeypatch.setattr(models, "_load_gguf", lambda *args: (written.append(args[0]),
                                                             (folder.mkdir(parents=True),
                                                              (folder / "model.safetensors").write_bytes(b""))))
    assert models.checkpoint_path(os.path.join(source.path, source.gguf_file)) == str(folder)
    assert written == [source]
    assert models.checkpoint_path(os.path.join(source.path, source.gguf_file)) == str(folder) and len(written) == 1
