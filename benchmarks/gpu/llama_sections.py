"""Section 5 of the GPU benchmark (issue 51): each way of scoring, and greedy generation against
``model.generate``, on Llama shapes, as tokens/s and the share of the matmul peak."""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerFast

from benchmarks.common import log, timed
from benchmarks.gpu.llama_shapes import (
    ALPACA_ROWS,
    GENERATION_SHAPES,
    LONG_ROWS,
    SWEEP_SHAPES,
    Peak,
    alpaca_lengths,
    body_parameters,
    build_llama,
    items_of_lengths,
    useful_scoring_flops,
)
from benchmarks.gpu.random_model import build_tokenizer, fed_tokens
from benchmarks.gpu.report import Report, length_summary
from benchmarks.gpu.scoring import core_nlls, pad_to_longest_nlls, timed_after_warm_up
from hf_adapters.backends.transformers import generation as transformers_generation
from hf_adapters.backends.transformers import model as transformers_model
from hf_adapters.backends.transformers.batching import DEFAULT_MAX_BATCH_TOKENS
from hf_adapters.backends.transformers.generation import greedy_generate
from hf_adapters.backends.transformers.model import TransformersBackend
from hf_adapters.core.likelihood import Item
from hf_adapters.core.options import DEFAULT_BATCH_SIZE

#: Row count of the plain loop's batches (issue 51's baseline).
PLAIN_LOOP_BATCH_SIZE = 8


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
