"""Section 4 of the GPU benchmark: batched greedy generation against each prompt decoded alone,
and the near ties the check settles."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from benchmarks.common import log, timed
from hf_adapters.backends.transformers import generation as transformers_generation
from hf_adapters.backends.transformers.generation import FLOAT32_TIE_MARGIN, greedy_generate


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
