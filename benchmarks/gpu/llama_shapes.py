"""Section 5's models and rows: randomly initialised Llamas of Llama-3.2-1B's and Llama-3.1-8B's
shapes, rows of the Alpaca data's lengths, useful FLOPs and the measured matmul peak."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import regex
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from benchmarks.flops import matmul_peak
from benchmarks.gpu.random_model import whole_sequence
from hf_adapters.core.likelihood import Item
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT

#: Llama-3.2-1B's and Llama-3.1-8B's shapes (as their config.json give them), and a tiny one for a
#: smoke run on the CPU.
LLAMA_SHAPES = {
    "1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": True},
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": False},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 4096, "tie_word_embeddings": False},
}
#: Alpaca rows scored per shape (None: all), 2,048-token rows per shape, and what section 5 generates with.
ALPACA_ROWS = {"1b": None, "8b": 1024, "tiny": 48}
LONG_ROWS = {"1b": 64, "8b": 32, "tiny": 4}
GENERATION_SHAPES = ("1b", "tiny")
#: Shapes whose Alpaca rows are also scored under the ``--sweep`` budgets.
SWEEP_SHAPES = ("1b", "tiny")
#: Llama 3's pre-tokenizer split (tiktoken's cl100k pattern): on English text about one token a piece.
PIECES = regex.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                       r"|\s*[\r\n]+|\s+(?!\S)|\s+")
#: Where ``--alpaca`` is looked for by default, relative to the repository root.
ALPACA_PATHS = ("../shared/data/alpaca_cherry_5pct.json", "shared/data/alpaca_cherry_5pct.json")


def build_llama(shape: str, device: torch.device, dtype: torch.dtype, seed: int) -> LlamaForCausalLM:
    """A randomly initialised Llama of one of ``LLAMA_SHAPES`` (transformers' initialisation, std 0.02),
    made on ``device`` in ``dtype`` (no float32 copy on the CPU first), with SDPA attention."""
    config = LlamaConfig(**LLAMA_SHAPES[shape], rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=8192,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2, attn_implementation="sdpa")
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def pieces(text: str) -> int:
    """The pieces Llama 3's pre-tokenizer cuts ``text`` into: about its token count on English text."""
    return len(PIECES.findall(text))


def alpaca_lengths(path: str | None) -> tuple[list[tuple[int, int]] | None, str]:
    """(prompt length with the start token, output length) of each Alpaca record of ``path`` (a JSON
    list, read with plain json), in :func:`pieces`; None where no file is found. The prompt is the
    package's default IFD template."""
    candidates = [path] if path else list(ALPACA_PATHS)
    found = next((candidate for candidate in candidates if Path(candidate).is_file()), None)
    if found is None:
        return None, f"no Alpaca file ({', '.join(candidates)} not found)"
    records = json.loads(Path(found).read_text(encoding="utf-8"))
    lengths = []
    for record in records:
        template = DEFAULT_TEMPLATE if record.get("input") else DEFAULT_TEMPLATE_NO_INPUT
        prompt = template.format(instruction=record["instruction"], input=record.get("input") or "")
        lengths.append((1 + pieces(prompt), max(1, pieces(record["output"]))))
    return lengths, found


def items_of_lengths(rng: np.random.Generator, lengths: Sequence[tuple[int, int]], vocab: int,
                     start_id: int) -> list[Item]:
    """Random ordinary token ids of these (context, continuation) lengths, the context opening with the start token."""
    return [([start_id, *rng.integers(3, vocab, context - 1).tolist()], rng.integers(3, vocab, scored).tolist())
            for context, scored in lengths]


def body_parameters(model: PreTrainedModel) -> int:
    """The parameters every token multiplies: the decoder layers and the final norm (neither the
    input embeddings, a lookup, nor the output layer)."""
    body = model.base_model
    return sum(p.numel() for p in body.layers.parameters()) + sum(p.numel() for p in body.norm.parameters())


def useful_scoring_flops(model: PreTrainedModel, items: Sequence[Item], start_id: int) -> float:
    """2 x body parameters x every token, plus causal attention (``4 x layers x attention width x
    (j + 1)`` for the token at position j), plus the output layer (``2 x hidden x vocabulary``) at
    each scored token only."""
    config = model.config
    width = config.num_attention_heads * (getattr(config, "head_dim", None)
                                          or config.hidden_size // config.num_attention_heads)
    body, head = body_parameters(model), 2.0 * config.hidden_size * config.vocab_size
    total = 0.0
    for item in items:
        length, scored = len(whole_sequence(item, start_id)[0]), len(item[1])
        total += 2.0 * body * length + 4.0 * config.num_hidden_layers * width * length * (length + 1) / 2
        total += head * scored
    return total



def llama_dtype(device: torch.device) -> torch.dtype:
    """Section 5's dtype: bfloat16 on a GPU; float32 on the CPU (a smoke run), where many processors
    multiply bfloat16 far slower."""
    return torch.float32 if device.type == "cpu" else torch.bfloat16


class Peak:
    """The measured matmul peak of section 5's dtype, and shares of it."""

    def __init__(self, device: torch.device):
        size = 8192 if device.type == "cuda" else 512
        self.dtype, self.size = llama_dtype(device), size
        self.flops = matmul_peak(self.dtype, size=size, repeats=10, device=device.type)

    def share(self, flops: float, seconds: float) -> float:
        return flops / seconds / self.flops
