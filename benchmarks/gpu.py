"""The likelihood core and greedy generation on a GPU: exactness, bfloat16 drift, speed, batched generation,
and the share of the bfloat16 peak on Llama-1B and -8B shapes.

Self-contained (no hub, no network; needs torch, transformers and accelerate, not datasets or
evaluate): the models are randomly initialised, seeded, and the items are random token ids. Sections
1-4 run a Llama with SmolLM2-135M's architecture (30 layers, 576 wide, 49,152 tokens, tied
embeddings) on items whose sequence lengths are drawn log-uniformly (short ones more often, as in
instruction data):

1. exactness: ``TransformersBackend.score`` in float32 at several batch sizes against the naive
   one-at-a-time float32 computation and the float64 model (one at a time), with the tests'
   criterion ``|ours - f64| <= 2 |naive_f32 - f64| + EXACT_FLOOR |f64|`` per item;
2. bfloat16 drift: the backend on the model in bfloat16, against float64;
3. speed: tokens per second of the core (float32, bfloat16) against the naive loop and evaluate's
   perplexity loop (fixed batches of 16 padded to the data set's longest, logits everywhere);
4. generation: ``greedy_generate`` in batches against one prompt at a time, responses compared.

Section 5 (issue 51) runs bfloat16 Llamas of Llama-3.2-1B's and Llama-3.1-8B's shapes on rows of
the Alpaca data's lengths (``--alpaca``, a JSON list of instruction/input/output records, read with
plain ``json``; skipped when the file is absent): each row's prompt, in the package's default IFD
template, and its output, counted in the pieces of Llama 3's pre-tokenizer (on English text about
one token each: on the Cherry_LLM Alpaca subset a median of 149 pieces a row against 150 tokens of
SmolLM2's tokenizer), become random token ids of those lengths; the output is scored. Then rows of
2,048 tokens. Each way of scoring is timed after a warm-up: the package's defaults, the defaults
before issue 51 (batch size 16, a 16,384-token budget, cuDNN's attention allowed), token budgets
without a row count, and a plain loop (batches of 8 in input order, padded, full logits), each as
tokens/s and as the share of the measured bfloat16 matmul peak in useful FLOPs (2 x body parameters
x every token + causal attention + the output layer on scored tokens only). Greedy generation on the
1B shape is timed against ``model.generate`` on the same left-padded batch. On the CPU (a smoke
run, ``--shapes tiny``) section 5 runs in float32 and against the float32 peak.

The report is rewritten to ``--output`` after each section, so a run cut short keeps what it measured.

    python -m benchmarks.gpu --output benchmarks/GPU.md
    python -m benchmarks.gpu --quick --alpaca ../shared/data/alpaca_cherry_5pct.json --output GPU_QUICK.md
    python -m benchmarks.gpu --device cpu --layers 2 --items 8 --speed-items 8 --prompts 4 --new-tokens 4 \
        --generation-batch-size 2 --max-len 64 --warm-up 2 --shapes tiny   # smoke test

``--quick`` (sized for under 8 minutes on an H100) keeps sections 1 and 4 small, skips 2 and 3, and
times section 5 as by default: 3,111 (1B) and 1,024 (8B) Alpaca rows, 64 (1B) and 32 (8B) rows of
2,048 tokens, and 64 prompts x 256 generated tokens (1B).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import json
import math
import os
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import regex
import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer
from tokenizers import models as tokenizer_models
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

from benchmarks.common import log, machine_description, publish, relative_differences, timed
from benchmarks.flops import matmul_peak
from benchmarks.references import full_forward_nll
from hf_adapters.backends.transformers import generation as transformers_generation
from hf_adapters.backends.transformers import model as transformers_model
from hf_adapters.backends.transformers.batching import DEFAULT_MAX_BATCH_TOKENS
from hf_adapters.backends.transformers.generation import FLOAT32_TIE_MARGIN, greedy_generate
from hf_adapters.backends.transformers.model import TransformersBackend
from hf_adapters.core.likelihood import Item
from hf_adapters.core.options import DEFAULT_BATCH_SIZE
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT

#: The tests' exactness floor, relative to the float64 value (``EXACT_FLOOR`` in tests/conftest.py).
EXACT_FLOOR = 2e-5
#: SmolLM2's special tokens: ``<|endoftext|>`` 0, ``<|im_start|>`` 1 (BOS), ``<|im_end|>`` 2 (EOS, pad).
SPECIAL_TOKENS = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
VOCAB_SIZE = 49152
#: Batch size of evaluate's perplexity metric.
EVALUATE_BATCH_SIZE = 16


# --- model, tokenizer, data -------------------------------------------------------------------------


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


# --- the ways of scoring ----------------------------------------------------------------------------


def naive_nlls(model: PreTrainedModel, items: Sequence[Item], start_id: int) -> list[float]:
    """Each item alone, one unpadded forward pass with logits everywhere, in the model's dtype."""
    return [full_forward_nll(model, *whole_sequence(item, start_id)).nll for item in items]


def core_nlls(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, items: Sequence[Item],
              batch_size: int | None, max_batch_tokens: int | None = None) -> list[float]:
    """``TransformersBackend.score`` with its default token budget and padding (``batch_size`` None:
    the device's default; ``max_batch_tokens`` another budget)."""
    backend = TransformersBackend(model, tokenizer, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
    return [score.nll for score in backend.score(items, progress=False)]


@torch.inference_mode()
def pad_to_longest_nlls(model: PreTrainedModel, items: Sequence[Item], start_id: int, pad_id: int,
                        batch_size: int = EVALUATE_BATCH_SIZE, longest_of_batch: bool = False) -> list[float]:
    """evaluate's perplexity loop on token ids: fixed batches in input order, every row padded to the
    data set's longest sequence (``longest_of_batch``: the batch's) with an attention mask, logits at
    every position, the loss masked afterwards (here to each item's scored tokens)."""
    sequences = [whole_sequence(item, start_id) for item in items]
    longest = max(len(ids) for ids, _ in sequences)
    device = model.device
    results: list[float] = []
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start:start + batch_size]
        width = max(len(ids) for ids, _ in chunk) if longest_of_batch else longest
        input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        labels = torch.full((len(chunk), width), -100, dtype=torch.long)
        for row, (ids, first) in enumerate(chunk):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            mask[row, :len(ids)] = 1
            labels[row, first:len(ids)] = torch.tensor(ids[first:])
        logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device), use_cache=False).logits
        token_nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), labels[:, 1:].to(device),
                                    reduction="none", ignore_index=-100)
        results.extend(token_nll.double().sum(-1).tolist())
    return results


# --- report -----------------------------------------------------------------------------------------


class Report:
    """Markdown lines, rewritten to ``output`` as sections are added."""

    def __init__(self, output: str | None):
        self.output, self.lines = output, []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)
        if self.output:
            Path(self.output).parent.mkdir(parents=True, exist_ok=True)
            Path(self.output).write_text("\n".join(self.lines) + "\n", encoding="utf-8")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def tf32_settings() -> str:
    """The float32 matmul settings in force (TF32 off is what makes float32 exact on a GPU)."""
    matmul = torch.backends.cuda.matmul
    settings = {"torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
                "torch.backends.cuda.matmul.allow_tf32": lambda: matmul.allow_tf32,
                "torch.backends.cuda.matmul.fp32_precision": lambda: matmul.fp32_precision,
                "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
                    lambda: matmul.allow_bf16_reduced_precision_reduction}
    parts = []
    for name, read in settings.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                parts.append(f"`{name}` = {read()!r}")
            except (AttributeError, RuntimeError) as error:
                parts.append(f"`{name}` unreadable ({error})")
    override = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
    return ", ".join(parts) + (f"; TORCH_ALLOW_TF32_CUBLAS_OVERRIDE={override}" if override else "")


def length_summary(items: Sequence[Item], start_id: int) -> str:
    lengths = np.array([len(whole_sequence(item, start_id)[0]) for item in items])
    return (f"{len(items)} items, {lengths.sum()} tokens (median length {np.median(lengths):.0f}, "
            f"{lengths.min()}..{lengths.max()}), {scored_tokens(items)} scored")


def header(args: argparse.Namespace, argv: Sequence[str], model: PreTrainedModel, device: torch.device) -> list[str]:
    parameters = sum(parameter.numel() for parameter in model.parameters())
    return [
        "# The likelihood core and greedy generation on a GPU",
        "",
        f"Command: `{shlex.join(['python', '-m', 'benchmarks.gpu', *argv])}`",
        "",
        f"{datetime.date.today().isoformat()}; {machine_description(device)}, transformers {transformers.__version__}.",
        "",
        f"Model: a randomly initialised Llama with SmolLM2-135M's architecture ({args.layers} layers, 576 wide, "
        f"9/3 heads, {VOCAB_SIZE} tokens, tied embeddings; {parameters / 1e6:.1f}M parameters), weights from "
        f"N(0, {args.init_std}) (seed {args.seed}), the final norm's gain set to {args.final_norm_gain}; attention "
        f"`{model.config._attn_implementation}`, RoPE `{getattr(model.config, 'rope_parameters', None)}`. "
        f"Items: random token ids, sequence lengths log-uniform in {args.min_len}..{args.max_len}.",
        "",
        f"Float32 matmuls: {tf32_settings()}.",
        "",
    ]


def relative_summary(scores: Sequence[float], reference: Sequence[float]) -> tuple[float, float]:
    """Median and max relative difference."""
    differences = relative_differences(scores, reference)
    return float(np.median(differences)), float(differences.max())


def criterion_misses(ours: Sequence[float], naive: Sequence[float], double: Sequence[float]) -> tuple[int, float]:
    """Items outside ``|ours - f64| <= 2 |naive - f64| + EXACT_FLOOR |f64|``, and the largest relative
    floor the criterion would need."""
    a, b, c = (np.asarray(values, dtype=np.float64) for values in (ours, naive, double))
    excess = (np.abs(a - c) - 2 * np.abs(b - c)) / np.abs(c)
    return int((excess > EXACT_FLOOR).sum()), float(max(excess.max(), 0.0))


# --- sections ---------------------------------------------------------------------------------------


def distribution_section(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                         items: Sequence[Item]) -> list[str]:
    """Mean NLL and predictive entropy, against ln V (a uniform prediction's value of both)."""
    backend = TransformersBackend(model, tokenizer, batch_size=64)
    scores = backend.score(items, entropies=True, progress=False)
    tokens = sum(score.num_tokens for score in scores)
    nll = math.fsum(score.nll for score in scores) / tokens
    entropy = math.fsum(h for score in scores for h in score.token_entropies) / tokens
    return [
        "## The random model's predictions",
        "",
        f"Mean NLL of the (random) scored tokens {nll:.3f} nats, mean predictive entropy {entropy:.3f} nats; "
        f"ln V = {math.log(VOCAB_SIZE):.3f} (a uniform prediction has both equal to ln V; an NLL above ln V "
        "and an entropy below it mean peaked, non-uniform predictions).",
        "",
    ]


def exactness_section(model: PreTrainedModel, double: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                      items: Sequence[Item], batch_sizes: Sequence[int], device: torch.device,
                      ) -> tuple[list[str], list[float]]:
    """Rows per batch size: relative distance from float64, the criterion, and the distance from batch size 1."""
    start_id = tokenizer.bos_token_id
    (naive, naive_s), (reference, double_s) = (timed(lambda m=m: naive_nlls(m, items, start_id), device)
                                               for m in (model, double))
    naive_median, naive_max = relative_summary(naive, reference)
    lines = [
        "## 1. Exactness of float32 scores",
        "",
        f"{length_summary(items, start_id)}; scores are each item's summed NLL. Reference: the model cast to "
        f"float64, each item alone ({double_s:.1f} s); naive: float32, each item alone ({naive_s:.1f} s). "
        f"Criterion (tests/conftest.py): |ours - f64| <= 2 |naive f32 - f64| + {EXACT_FLOOR:g} |f64|.",
        "",
        "| float32 scores | rel. diff. from f64: median | max | items missing the criterion | floor needed "
        f"| max rel. diff. from batch size {batch_sizes[0]} |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| naive, one at a time | {naive_median:.1e} | {naive_max:.1e} | | | |",
    ]
    runs = {f"`TransformersBackend.score`, batch size {size}": core_nlls(model, tokenizer, items, size)
            for size in batch_sizes}
    with sdpa_kernel(SDPBackend.MATH):
        runs[f"the same, batch size {batch_sizes[-1]}, attention on SDPA's math kernel"] = core_nlls(
            model, tokenizer, items, batch_sizes[-1])
    first = next(iter(runs.values()))
    for name, ours in runs.items():
        median, largest = relative_summary(ours, reference)
        misses, floor = criterion_misses(ours, naive, reference)
        lines.append(f"| {name} | {median:.1e} | {largest:.1e} | {misses} of {len(items)} | {floor:.1e} | "
                     f"{relative_summary(ours, first)[1]:.1e} |")
    return [*lines, ""], reference


def drift_section(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, items: Sequence[Item],
                  reference: Sequence[float], batch_size: int) -> list[str]:
    """bfloat16 scores against float64, summed NLL and perplexity: ours, and the naive loop's."""
    half = copy.deepcopy(model).to(torch.bfloat16)
    runs = {f"`TransformersBackend.score`, batch size {batch_size}": core_nlls(half, tokenizer, items, batch_size),
            "naive, one at a time, full logits": naive_nlls(half, items, tokenizer.bos_token_id)}
    del half
    counts = [len(continuation) for _, continuation in items]
    reference_perplexities = [math.exp(nll / n) for nll, n in zip(reference, counts, strict=True)]
    lines = [
        "## 2. bfloat16 drift",
        "",
        "The model cast to bfloat16 (log-softmax in float32), the same items, against float64. A random model's "
        "drift depends on its weights' scale (`--init-std`, `--final-norm-gain`); it is not the trained model's.",
        "",
        "| bfloat16 scores | summed NLL, rel. diff. from f64: median | max | perplexity: median | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, nlls in runs.items():
        perplexities = [math.exp(nll / n) for nll, n in zip(nlls, counts, strict=True)]
        nll_median, nll_max = relative_summary(nlls, reference)
        ppl_median, ppl_max = relative_summary(perplexities, reference_perplexities)
        lines.append(f"| {name} | {nll_median:.1e} | {nll_max:.1e} | {ppl_median:.1e} | {ppl_max:.1e} |")
    return [*lines, ""]


def timed_after_warm_up(function: Callable[[Sequence[Item]], object], items: Sequence[Item], warm_up: int,
                        device: torch.device) -> float:
    """Seconds of ``function(items)`` after one untimed run on the first ``warm_up`` items."""
    function(items[:warm_up])
    return timed(lambda: function(items), device)[1]


def speed_section(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, items: Sequence[Item],
                  batch_size: int, warm_up: int, device: torch.device) -> list[str]:
    """Tokens per second of each way of scoring the same items."""
    start_id, pad_id = tokenizer.bos_token_id, tokenizer.pad_token_id
    half = copy.deepcopy(model).to(torch.bfloat16)
    runs: list[tuple[str, Callable[[Sequence[Item]], object]]] = [
        ("naive, one at a time, full logits, float32", lambda batch: naive_nlls(model, batch, start_id)),
        (f"evaluate's loop: batches of {EVALUATE_BATCH_SIZE} padded to the longest, float32",
         lambda batch: pad_to_longest_nlls(model, batch, start_id, pad_id)),
        (f"evaluate's loop: batches of {EVALUATE_BATCH_SIZE} padded to the longest, bfloat16",
         lambda batch: pad_to_longest_nlls(half, batch, start_id, pad_id)),
        ("ours, float32, package defaults (no row count on a GPU)",
         lambda batch: core_nlls(model, tokenizer, batch, None)),
        (f"ours, float32, batch size {batch_size}", lambda batch: core_nlls(model, tokenizer, batch, batch_size)),
        (f"ours, bfloat16, batch size {batch_size}", lambda batch: core_nlls(half, tokenizer, batch, batch_size)),
    ]
    fed, scored = fed_tokens(items, start_id), scored_tokens(items)
    lines = [
        "## 3. Speed",
        "",
        f"{length_summary(items, start_id)}. Each way runs once untimed on the first {warm_up} items, then once "
        "timed on all (synchronized on a GPU); ours with the device's token budget (chosen from its free "
        "memory) unless a batch size is named. Tokens/s counts every sequence token (context and "
        "continuation); the speed-up is against the naive float32 loop.",
        "",
        "| way of scoring | seconds | tokens/s | scored tokens/s | speed-up |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    baseline = None
    for name, function in runs:
        seconds = timed_after_warm_up(function, items, warm_up, device)
        baseline = baseline or seconds
        log(f"  {name}: {seconds:.2f} s")
        lines.append(f"| {name} | {seconds:.2f} | {fed / seconds:,.0f} | {scored / seconds:,.0f} | "
                     f"{baseline / seconds:.1f}x |")
    return [*lines, ""]


@contextlib.contextmanager
def near_tie_counts() -> Iterator[dict[str, int]]:
    """Count, during ``greedy_generate``, the rows whose best two logits were closer than the tie
    margin (each settled by its prompt decoded alone) and the tokens that settling changed."""
    original = transformers_generation._settle_near_ties
    counts = {"near ties": 0, "changed": 0}

    def settle(model, logits, tokens, *rest) -> None:
        before = tokens.clone()
        original(model, logits, tokens, *rest)
        if rest[-1] > 0:
            best = logits.topk(2, dim=-1).values
            counts["near ties"] += int(((best[:, 0] - best[:, 1]) < rest[-1]).sum())
            counts["changed"] += int((tokens != before).sum())

    transformers_generation._settle_near_ties = settle
    try:
        yield counts
    finally:
        transformers_generation._settle_near_ties = original


def until_stop(tokens: Sequence[int], stops: set[int]) -> list[int]:
    """A response decoded with no stop token, cut before its first stop token: the same prompt decoded
    with those stop tokens (greedy decoding is the same up to there)."""
    for step, token in enumerate(tokens):
        if token in stops:
            return list(tokens[:step])
    return list(tokens)


def first_differences(responses: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> str:
    """``prompt: step`` of the first differing token, for the first few differing responses."""
    found = []
    for index, (response, expected) in enumerate(zip(responses, reference, strict=True)):
        if response != expected:
            step = next((s for s, (a, b) in enumerate(zip(response, expected, strict=False)) if a != b),
                        min(len(response), len(expected)))
            found.append(f"{index}: {step}")
    return ", ".join(found[:6]) + (", ..." if len(found) > 6 else "") or "-"


def generation_section(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, prompts: list[list[int]],
                       new_tokens: int, batch_size: int, rng: np.random.Generator,
                       device: torch.device) -> list[str]:
    """Batched greedy generation against each prompt decoded alone, with and without stop tokens."""
    def generate(batch: int, stops: Sequence[int] | None, tie_margin: float | None = None) -> list[list[int]]:
        return greedy_generate(model, tokenizer, prompts, max_new_tokens=new_tokens, stop_token_ids=stops,
                               batch_size=batch, tie_margin=tie_margin, progress=False)

    greedy_generate(model, tokenizer, prompts[:2], max_new_tokens=2, batch_size=1, progress=False)  # warm-up
    greedy_generate(model, tokenizer, prompts[:2], max_new_tokens=2, batch_size=2, progress=False)
    alone, alone_s = timed(lambda: generate(1, []), device)
    log(f"  alone: {alone_s:.1f} s")
    # A random model seldom emits EOS: tokens drawn from half the responses end them at varied steps.
    stops = {tokenizer.eos_token_id, *(int(response[rng.integers(len(response))])
                                       for response in alone[: max(1, len(alone) // 2)] if response)}
    runs = [("no stop tokens (`stop_token_ids=[]`)", [], None),
            (f"no stop tokens, check off (`tie_margin=0`; default {FLOAT32_TIE_MARGIN:g})", [], 0.0),
            (f"stop tokens: EOS and {len(stops) - 1} drawn from half the responses", sorted(stops), None)]
    lines = [
        "## 4. Batched greedy generation",
        "",
        f"{len(prompts)} prompts of random ids (lengths log-uniform, {min(map(len, prompts))}..{max(map(len, prompts))}"
        f"), {new_tokens} new tokens, float32. Reference: each prompt decoded alone (`greedy_generate(..., "
        f"batch_size=1, stop_token_ids=[])`, {alone_s:.1f} s); with stop tokens, that response cut before its "
        f"first stop token. Batched: `greedy_generate(..., batch_size={batch_size})`.",
        "",
        "| batched run | seconds | time ratio (alone / batched) | responses identical to alone | response lengths "
        "| near ties settled alone | tokens the check changed | first differing step (prompt: step) |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for name, run_stops, tie_margin in runs:
        with near_tie_counts() as counts:
            responses, seconds = timed(lambda s=run_stops, t=tie_margin: generate(batch_size, s, t), device)
        log(f"  {name}: {seconds:.1f} s")
        reference = [until_stop(response, set(run_stops)) for response in alone]
        lengths = [len(response) for response in responses]
        same = sum(response == expected for response, expected in zip(responses, reference, strict=True))
        lines.append(f"| {name} | {seconds:.1f} | {alone_s / seconds:.1f}x | {same} of {len(prompts)} | "
                     f"{min(lengths)}..{max(lengths)} (median {np.median(lengths):.0f}) | {counts['near ties']} | "
                     f"{counts['changed']} | {first_differences(responses, reference)} |")
    return [*lines, ""]


# --- 5. Llama shapes on Alpaca-length rows: the share of the bfloat16 peak (issue 51) ----------------


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
#: Row count of the plain loop's batches (issue 51's baseline).
PLAIN_LOOP_BATCH_SIZE = 8
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


@contextlib.contextmanager
def cudnn_attention_allowed() -> Iterator[None]:
    """As before issue 51: the backend leaves PyTorch's choice of attention kernel (cuDNN's included) alone."""
    saved = transformers_model.without_cudnn_attention, transformers_generation.without_cudnn_attention

    def leave_alone(device: torch.device) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    transformers_model.without_cudnn_attention = transformers_generation.without_cudnn_attention = leave_alone
    try:
        yield
    finally:
        transformers_model.without_cudnn_attention, transformers_generation.without_cudnn_attention = saved


def before_issue_51_nlls(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                         items: Sequence[Item]) -> list[float]:
    """The backend's defaults before issue 51: 16 rows, a 16,384-token budget, cuDNN attention allowed."""
    with cudnn_attention_allowed():
        return core_nlls(model, tokenizer, items, DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS)


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


def scoring_table(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, items: Sequence[Item], title: str,
                  sweep: Sequence[int], peak: Peak, warm_up: int, device: torch.device
                  ) -> tuple[list[str], dict[str, tuple[float, float]]]:
    """One table: each way of scoring ``items``, its seconds, tokens/s, useful TFLOP/s and share of the
    peak; and ``{way: (tokens/s, share)}`` for the summary."""
    start_id, pad_id = tokenizer.bos_token_id, tokenizer.pad_token_id
    chosen = TransformersBackend(model, tokenizer).batch_limits()
    runs: list[tuple[str, str, Callable[[Sequence[Item]], object]]] = [
        ("defaults", f"{chosen.tokens:,} tokens (chosen), no row count",
         lambda batch: core_nlls(model, tokenizer, batch, None)),
        ("before", f"{DEFAULT_BATCH_SIZE} rows, {DEFAULT_MAX_BATCH_TOKENS:,} tokens, cuDNN attention allowed",
         lambda batch: before_issue_51_nlls(model, tokenizer, batch)),
        ("defaults, cuDNN attention allowed", f"{chosen.tokens:,} tokens, no row count",
         lambda batch: cudnn_attention_allowed_nlls(model, tokenizer, batch)),
        *((f"{budget:,}-token budget", f"{budget:,} tokens, no row count",
           lambda batch, budget=budget: core_nlls(model, tokenizer, batch, None, budget)) for budget in sweep),
        ("plain loop", f"{PLAIN_LOOP_BATCH_SIZE} rows in input order, padded, full logits",
         lambda batch: pad_to_longest_nlls(model, batch, start_id, pad_id, PLAIN_LOOP_BATCH_SIZE, True)),
    ]
    fed, flops = fed_tokens(items, start_id), useful_scoring_flops(model, items, start_id)
    lines = [f"### {title}", "", f"{length_summary(items, start_id)}; {flops / 1e12:,.1f} useful TFLOP.", "",
             "| way of scoring | batches | seconds | tokens/s | useful TFLOP/s | share of the peak |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    summary = {}
    for name, limits, function in runs:
        seconds = timed_after_warm_up(function, items, warm_up, device)
        rate, share = fed / seconds, peak.share(flops, seconds)
        summary[name] = (rate, share)
        log(f"  {title}, {name}: {seconds:.2f} s, {share:.1%} of the peak")
        lines.append(f"| {name} | {limits} | {seconds:.2f} | {rate:,.0f} | {flops / seconds / 1e12:,.1f} | "
                     f"{share:.1%} |")
    return [*lines, ""], summary


def cudnn_attention_allowed_nlls(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                                 items: Sequence[Item]) -> list[float]:
    """The defaults, with cuDNN's attention allowed as before issue 51."""
    with cudnn_attention_allowed():
        return core_nlls(model, tokenizer, items, None)


@torch.inference_mode()
def model_generate(model: PreTrainedModel, prompts: Sequence[Sequence[int]], new_tokens: int,
                   pad_id: int) -> list[list[int]]:
    """transformers' ``model.generate`` on the prompts as one left-padded batch, greedy, no stop token."""
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=0, do_sample=False, eos_token_id=None,
                              pad_token_id=pad_id)
    saved, model.generation_config = model.generation_config, copy.deepcopy(config)  # no EOS to fill in from it
    try:
        outputs = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)[:, width:]
    finally:
        model.generation_config = saved
    if outputs.shape[1] != new_tokens:
        raise RuntimeError(f"model.generate stopped after {outputs.shape[1]} of {new_tokens} new tokens")
    return outputs.tolist()


def generation_table(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, prompts: list[list[int]],
                     new_tokens: int, title: str, before: bool, device: torch.device
                     ) -> tuple[list[str], dict[str, float]]:
    """Greedy generation of ``new_tokens`` for every prompt at once: ours against ``model.generate``."""
    def ours(batch: list[list[int]], tokens: int) -> list[list[int]]:
        return greedy_generate(model, tokenizer, batch, max_new_tokens=tokens, stop_token_ids=[],
                               batch_size=len(batch), progress=False)

    def ours_before(batch: list[list[int]], tokens: int) -> list[list[int]]:
        with cudnn_attention_allowed():
            return ours(batch, tokens)

    def theirs(batch: list[list[int]], tokens: int) -> list[list[int]]:
        return model_generate(model, batch, tokens, tokenizer.pad_token_id)

    runs = [("`greedy_generate`", ours),
            *([("`greedy_generate`, cuDNN attention allowed (before issue 51)", ours_before)] if before else []),
            ("`model.generate`", theirs)]
    measured = {}
    for name, run in runs:
        run(prompts[:4], 8)
        measured[name] = timed(lambda run=run: run(prompts, new_tokens), device)
        log(f"  {title}, {name}: {measured[name][1]:.2f} s")
    reference = measured["`model.generate`"][0]
    rates = {name: len(prompts) * new_tokens / seconds for name, (_, seconds) in measured.items()}
    lines = [f"### {title}", "",
             f"{len(prompts)} prompts ({min(map(len, prompts))}..{max(map(len, prompts))} tokens), {new_tokens} new "
             "tokens each, no stop token, all prompts in one batch (`batch_size` = the prompt count); each run "
             "once untimed on 4 prompts x 8 tokens first. In bfloat16 the two need not agree (nothing checks "
             "near ties there).", "",
             "| generation | seconds | new tokens/s | responses identical to `model.generate`'s |",
             "| --- | ---: | ---: | ---: |"]
    for name, (outputs, seconds) in measured.items():
        same = sum(a == b for a, b in zip(outputs, reference, strict=True))
        lines.append(f"| {name} | {seconds:.2f} | {rates[name]:,.0f} | {same} of {len(prompts)} |")
    return [*lines, ""], rates


def llama_sections(args: argparse.Namespace, shapes: Sequence[str], device: torch.device, report: Report,
                   started: float) -> None:
    """Section 5: for each shape, the Alpaca-length rows, the long rows, and (1B) generation; then a summary."""
    lengths, source = alpaca_lengths(args.alpaca)
    log(f"peak ({time.perf_counter() - started:.0f} s)")
    peak = Peak(device)
    report.add("## 5. Llama shapes: the share of the matmul peak (issue 51)", "",
               f"Measured {str(peak.dtype).removeprefix('torch.')} matmul peak: {peak.flops / 1e12:,.1f} TFLOP/s "
               f"({peak.size} x {peak.size} x "
               f"{peak.size}, the best of 10). Rows: {source}. Useful FLOPs: 2 x body parameters x every token "
               "+ causal attention + the output layer on scored tokens only. Tokens/s counts every token.", "")
    summary_lines = ["### Summary", "", "| model, rows | defaults | before: batch size 16, 16,384 tokens | "
                     "plain loop: batches of 8, padded, full logits |", "| --- | ---: | ---: | ---: |"]
    tokenizer = build_tokenizer()
    for shape in shapes:
        log(f"{shape} ({time.perf_counter() - started:.0f} s)")
        model = build_llama(shape, device, peak.dtype, args.seed)
        vocab, name = model.config.vocab_size, shape.upper()
        params = body_parameters(model)
        rng = np.random.default_rng(args.seed)
        tables = []
        if lengths is not None:
            count = args.alpaca_rows or ALPACA_ROWS[shape] or len(lengths)
            tables.append((f"{name}, {min(count, len(lengths)):,} Alpaca rows",
                           items_of_lengths(rng, lengths[:count], vocab, tokenizer.bos_token_id)))
        long_length = min(args.long_length, model.config.max_position_embeddings)
        tables.append((f"{name}, {LONG_ROWS[shape]} rows of {long_length:,} tokens",
                       items_of_lengths(rng, [(1, long_length - 1)] * LONG_ROWS[shape], vocab, tokenizer.bos_token_id)))
        report.add(f"Model {name}: {params / 1e9:.2f}B body parameters, {model.config.num_hidden_layers} layers, "
                   f"{model.config.hidden_size} wide, vocabulary {vocab:,}, attention "
                   f"`{model.config._attn_implementation}`.", "")
        for title, items in tables:
            sweep = args.sweep if "Alpaca" in title and shape in SWEEP_SHAPES else ()
            lines, rates = scoring_table(model, tokenizer, items, title, sweep, peak, args.warm_up, device)
            report.add(*lines)
            summary_lines.append(f"| {title} | " + " | ".join(
                f"{rates[way][0]:,.0f} tok/s, {rates[way][1]:.1%}" for way in ("defaults", "before", "plain loop"))
                + " |")
        if shape in GENERATION_SHAPES and lengths is not None:
            prompts = [context for context, _ in tables[0][1][:args.generation_prompts]]
            lines, rates = generation_table(model, tokenizer, prompts, args.generation_new_tokens,
                                            f"{name}, greedy generation", not args.quick, device)
            report.add(*lines)
            ratio = rates["`greedy_generate`"] / rates["`model.generate`"]
            summary_lines.append(f"| {name}, {len(prompts)} prompts x {args.generation_new_tokens} new tokens | "
                                 f"{rates['`greedy_generate`']:,.0f} tok/s ({ratio:.2f}x `model.generate`) | | "
                                 f"`model.generate`: {rates['`model.generate`']:,.0f} tok/s |")
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report.add(*summary_lines, "")


# --- main -------------------------------------------------------------------------------------------


#: What ``--quick`` sets, where the command line does not: sections 1 and 4 small, 2 and 3 skipped.
QUICK = {"items": 64, "exact_batch_sizes": "1,none", "prompts": 16, "new_tokens": 32, "generation_batch_size": 8}


def batch_size_list(text: str) -> list[int | None]:
    """Comma-separated batch sizes; ``none`` is the device's default."""
    return [None if size.strip().lower() == "none" else int(size) for size in text.split(",")]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true",
                        help="sections 1 and 4 small, 2 and 3 skipped, section 5 as by default (sized for under 8 "
                             "minutes on an H100)")
    parser.add_argument("--layers", type=int, default=30, help="of SmolLM2-135M's 30")
    parser.add_argument("--init-std", type=float, default=0.05,
                        help="std of the random weights (transformers' default, 0.02, alone gives near-uniform "
                             "predictions)")
    parser.add_argument("--final-norm-gain", type=float, default=2.0,
                        help="the final RMSNorm's weight: scales the logits (1: as initialised)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-len", type=int, default=16, help="shortest sequence (and prompt)")
    parser.add_argument("--max-len", type=int, default=1024, help="longest sequence (and prompt)")
    parser.add_argument("--items", type=int, default=None, help="items of the exactness and drift sections (256)")
    parser.add_argument("--exact-batch-sizes", default=None,
                        help="comma-separated, for the exactness section; none: the device's default (1,16,64,none)")
    parser.add_argument("--follow-share", type=float, default=0.125,
                        help="share of exactness items extending the previous one (scored in its forward pass)")
    parser.add_argument("--batch-size", type=int, default=64, help="of the core in the drift and speed sections")
    parser.add_argument("--speed-items", type=int, default=512)
    parser.add_argument("--warm-up", type=int, default=32, help="items of each untimed warm-up run")
    parser.add_argument("--prompts", type=int, default=None, help="of section 4 (32)")
    parser.add_argument("--new-tokens", type=int, default=None, help="of section 4 (128)")
    parser.add_argument("--generation-batch-size", type=int, default=None, help="of section 4 (32)")
    parser.add_argument("--shapes", default="1b,8b",
                        help=f"section 5's Llama shapes, comma-separated, of {', '.join(LLAMA_SHAPES)}; none: skip it")
    parser.add_argument("--alpaca", default=None,
                        help=f"the Alpaca records (a JSON list) whose lengths section 5 scores (default: the first of "
                             f"{', '.join(ALPACA_PATHS)} found; none found: those tables are skipped)")
    parser.add_argument("--alpaca-rows", type=int, default=None,
                        help="Alpaca rows per shape (default: all for 1B, 1024 for 8B)")
    parser.add_argument("--long-length", type=int, default=2048, help="tokens of section 5's long rows")
    parser.add_argument("--sweep", default="32768,131072",
                        help="token budgets (no row count) also timed on the Alpaca rows of 1B, comma-separated")
    parser.add_argument("--generation-prompts", type=int, default=64, help="prompts of section 5's generation")
    parser.add_argument("--generation-new-tokens", type=int, default=256, help="new tokens of section 5's generation")
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)
    defaults = {**{"items": 256, "exact_batch_sizes": "1,16,64,none", "prompts": 32, "new_tokens": 128,
                   "generation_batch_size": 32}, **(QUICK if args.quick else {})}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.sweep = [int(budget) for budget in args.sweep.split(",") if budget.strip()]
    args.shapes = [] if args.shapes == "none" else [shape.strip() for shape in args.shapes.split(",")]
    if unknown := [shape for shape in args.shapes if shape not in LLAMA_SHAPES]:
        parser.error(f"--shapes: unknown {unknown}; choose among {list(LLAMA_SHAPES)}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = time.perf_counter()
    device = torch.device(args.device)
    torch.set_float32_matmul_precision("highest")  # no TF32: float32 matmuls in float32
    model = build_model(args.layers, args.init_std, args.seed, args.final_norm_gain).to(device)
    double = copy.deepcopy(model).to(torch.float64)
    tokenizer = build_tokenizer()
    start_id = tokenizer.bos_token_id
    rng = np.random.default_rng(args.seed)
    items = random_items(rng, args.items, args.min_len, args.max_len, start_id, args.follow_share)
    speed_items = random_items(rng, args.speed_items, args.min_len, args.max_len, start_id)
    prompts = [random_ids(rng, n) for n in random_lengths(rng, args.prompts, args.min_len, args.max_len)]

    report = Report(args.output)
    report.add(*header(args, argv, model, device))
    if not args.quick:
        log(f"predictions ({time.perf_counter() - started:.0f} s)")
        report.add(*distribution_section(model, tokenizer, items))
    log(f"exactness ({time.perf_counter() - started:.0f} s)")
    lines, reference = exactness_section(model, double, tokenizer, items, batch_size_list(args.exact_batch_sizes),
                                         device)
    del double
    report.add(*lines)
    if not args.quick:
        log(f"drift ({time.perf_counter() - started:.0f} s)")
        report.add(*drift_section(model, tokenizer, items, reference, args.batch_size))
        log(f"speed ({time.perf_counter() - started:.0f} s)")
        report.add(*speed_section(model, tokenizer, speed_items, args.batch_size, args.warm_up, device))
    log(f"generation ({time.perf_counter() - started:.0f} s)")
    report.add(*generation_section(model, tokenizer, prompts, args.new_tokens, args.generation_batch_size, rng,
                                   device))
    del model
    if args.shapes:
        llama_sections(args, args.shapes, device, report, started)
    report.lines.append(f"Total {time.perf_counter() - started:.0f} s, model building included.")
    publish(report.text(), args.output)


if __name__ == "__main__":
    main()
