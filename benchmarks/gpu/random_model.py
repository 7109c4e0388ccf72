"""The random model of sections 1-4 (a Llama of SmolLM2-135M's architecture), its tokenizer of
special tokens only, and random items of token ids."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tokenizers import models as tokenizer_models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from hf_adapters.core.likelihood import Item

#: SmolLM2's special tokens: ``<|endoftext|>`` 0, ``<|im_start|>`` 1 (BOS), ``<|im_end|>`` 2 (EOS, pad).
SPECIAL_TOKENS = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
VOCAB_SIZE = 49152


def build_model(layers: int, init_std: float, seed: int, final_norm_gain: float = 1.0) -> LlamaForCausalLM:
    """A float32 Llama with SmolLM2-135M's architecture (``layers`` of its 30), weights drawn from
    N(0, ``init_std``) on the CPU (the same weights on any device), the final norm's gain set to
    ``final_norm_gain``: logits spread as a trained model's, without a larger std that would make
    the body amplify rounding."""
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100000,
                         initializer_range=init_std, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.norm.weight.fill_(final_norm_gain)
    return model


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer holding only SmolLM2's special tokens at their ids: what the backend reads (start,
    end and pad ids); the benchmark feeds token ids, never text."""
    backend = Tokenizer(tokenizer_models.WordLevel(SPECIAL_TOKENS, unk_token="<|endoftext|>"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", unk_token="<|endoftext|>")


def random_lengths(rng: np.random.Generator, count: int, low: int, high: int) -> list[int]:
    """``count`` lengths in [low, high], log-uniform."""
    lengths = np.exp(rng.uniform(math.log(low), math.log(high + 1), count)).astype(int)
    return np.clip(lengths, low, high).tolist()


def random_ids(rng: np.random.Generator, count: int) -> list[int]:
    """``count`` random ordinary token ids (no special token)."""
    return rng.integers(len(SPECIAL_TOKENS), VOCAB_SIZE, count).tolist()


def random_items(rng: np.random.Generator, count: int, low: int, high: int, start_id: int,
                 follow_share: float = 0.0) -> list[Item]:
    """Items whose whole sequence (context, or the start token, then continuation) has a length in
    [low, high]; the context takes a uniform share of it, sometimes none. With ``follow_share``,
    that share of the items instead extends the previous item's whole sequence by such a length
    (the next turn of a conversation), which the core scores within one forward pass."""
    items: list[Item] = []
    for length in random_lengths(rng, count, low, high):
        if items and rng.random() < follow_share:
            context, continuation = items[-1]
            previous = [*(list(context) or [start_id]), *continuation]
            extra = max(1, length // 2)
            items.append(([*previous, *random_ids(rng, extra)], random_ids(rng, max(1, length - extra))))
            continue
        context_length = int(rng.integers(0, length))
        items.append((random_ids(rng, context_length), random_ids(rng, length - context_length)))
    return items


def whole_sequence(item: Item, start_id: int) -> tuple[list[int], int]:
    """The tokens the model reads for an item and the position of its first scored token."""
    context = list(item[0]) or [start_id]
    return [*context, *item[1]], len(context)


def fed_tokens(items: Sequence[Item], start_id: int) -> int:
    return sum(len(whole_sequence(item, start_id)[0]) for item in items)


def scored_tokens(items: Sequence[Item]) -> int:
    return sum(len(continuation) for _, continuation in items)
