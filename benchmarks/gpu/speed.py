"""Section 3 of the GPU benchmark: tokens per second of each way of scoring the same items."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from benchmarks.common import log
from benchmarks.gpu.random_model import fed_tokens, scored_tokens
from benchmarks.gpu.report import length_summary
from benchmarks.gpu.scoring import EVALUATE_BATCH_SIZE, core_nlls, naive_nlls, pad_to_longest_nlls, timed_after_warm_up
from hf_adapters.core.likelihood import Item


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
