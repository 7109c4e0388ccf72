"""Shared fixtures: tiny randomly initialised causal LMs and tokenizers built in-process, and the
naive one-at-a-time float32 reference that every batched score is compared against."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from hf_adapters import models as hf_models

SHARED = Path(__file__).resolve().parents[2] / "shared"
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Write a short poem about the sea.",
    "Instruction: summarise the text below.\nInput: Cats are small mammals.\nOutput: Cats are mammals.",
    "Le renard brun saute par-dessus le chien paresseux. 敏捷的棕色狐狸跳过了懒狗。🦊🐶",
] * 20


def build_tokenizer(bos: bool = True, pad: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on a few sentences; any text, emoji included, encodes."""
    specials = ["<eos>"] + (["<bos>"] if bos else []) + (["<pad>"] if pad else [])
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<eos>",
        bos_token="<bos>" if bos else None,
        pad_token="<pad>" if pad else None,
    )


def build_model(vocab_size: int, seed: int = 0, max_position_embeddings: int = 512) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer()


@pytest.fixture(scope="session")
def model(tokenizer) -> LlamaForCausalLM:
    return build_model(len(tokenizer))


@pytest.fixture
def load_calls(model, tokenizer, monkeypatch):
    """Every model id loaded by name; ``load_model`` returns the tiny model instead."""
    calls = []

    def fake_load_model(model_id=hf_models.DEFAULT_MODEL_ID, dtype=None, device=None, trust_remote_code=False):
        calls.append(model_id)
        return model, tokenizer

    monkeypatch.setattr(hf_models, "load_model", fake_load_model)
    return calls


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ../shared data folder beside the repo; tests that need it skip when it is absent."""
    if not SHARED.is_dir():
        pytest.skip("../shared is not present beside the repository")
    return SHARED


def naive_nll(model, context: Sequence[int], continuation: Sequence[int], start_id: int,
              max_length: int | None = None) -> tuple[float, int]:
    """Reference: one unpadded float32 forward pass of the whole model for one item.

    Returns (sum of NLL over the scored continuation tokens, number of scored tokens).
    """
    context = list(context) or [start_id]
    ids = (context + list(continuation))[:max_length]
    if len(ids) <= len(context):
        return math.nan, 0
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    total = -sum(logprobs[p - 1, ids[p]].item() for p in range(len(context), len(ids)))
    return total, len(ids) - len(context)
