"""How far batched greedy generation moves the logits from those of each prompt decoded alone, how
often that flips a token, and what ``greedy_generate``'s near-tie check costs: the measurement
behind ``hf_adapters.backends.transformers.generation.FLOAT32_TIE_MARGIN``.

For the first ``--limit`` IFEval prompts, rendered with the model's chat template:

1. each prompt is decoded alone (``AloneDecoder``, as ``model.generate`` decodes a batch of one),
   keeping every step's logits;
2. the same token sequences are fed, from the second token on, through ``greedy_generate``'s batch
   (``--batch-size`` prompts, longest first, joining together after their prompts ran alone; rows
   leave as their sequences end), and each step's logits are compared with the alone ones:
   the largest difference of the alone run's 64 best logits, and of the best-minus-second margin;
3. ``greedy_generate`` runs free with the check off (``tie_margin=0``) and on (the default), and
   each response is compared with the alone one.

    python -m benchmarks.exactness.generation_exactness --limit 32 --max-new-tokens 256 \
        --output benchmarks/exactness/GENERATION_EXACTNESS.md
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks.common import cpu_name, publish
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, load_model
from hf_adapters.backends.transformers.cpu_kernels import cpu_flags
from hf_adapters.backends.transformers.generation import (
    FLOAT32_TIE_MARGIN,
    AloneDecoder,
    _growing_cache,
    _Rows,
    default_stop_token_ids,
    greedy_generate,
)
from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts

THRESHOLDS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)


#: Logits kept per step: the alone run's best ones, and the batched logits at the same tokens.
KEPT = 64


@dataclass
class Steps:
    """Per step: the alone run's best ``KEPT`` logits and their tokens, and (once batched) the batched
    logits at those tokens, the batched best-minus-second margin and the batched argmax."""

    values: torch.Tensor
    indices: torch.Tensor
    batched_values: torch.Tensor | None = None
    batched_margin: torch.Tensor | None = None
    batched_argmax: torch.Tensor | None = None


@torch.inference_mode()
def alone_run(model, prompt: list[int], max_new_tokens: int, stops: frozenset[int]) -> tuple[list[int], Steps]:
    """The greedy tokens of one prompt decoded alone and the best logits of every step (a stop step included)."""
    decoder, tokens, values, indices = AloneDecoder(model, prompt), [], [], []
    while True:
        best = decoder.logits.topk(KEPT)
        values.append(best.values)
        indices.append(best.indices)
        token = decoder.next_token()
        if token in stops:
            break
        tokens.append(token)
        if len(tokens) == max_new_tokens:
            break
        decoder.feed([token])
    return tokens, Steps(torch.stack(values), torch.stack(indices))


@torch.inference_mode()
def batched_along(model, prompts: list[list[int]], paths: list[list[int]], steps: list[Steps]) -> None:
    """Feed the prompts, as rows of ``greedy_generate``'s batch (each joined after its prompt was run
    alone), their alone tokens, rows leaving as their paths end; fill in each row's batched logits at
    the alone run's best tokens, batched margins and argmaxes, from the second step on (the first
    token comes from the prompt run alone, in the batch too)."""
    cache, joinable = _growing_cache(model)
    if not joinable:
        raise SystemExit("this model's cache cannot take rows joining a batch; the measurement needs it")
    rows = _Rows(model, cache)
    rows.join([(i, AloneDecoder(model, prompts[i]), paths[i][0]) for i in range(len(prompts))
               if len(steps[i].values) > 1])
    collected: list[list[tuple]] = [[] for _ in prompts]
    step = 1
    while len(rows):
        logits = rows.step()
        best_two = logits.topk(2, dim=-1).values
        going_on, tokens = [], []
        for row, index in enumerate(rows.indices):
            collected[index].append((logits[row, steps[index].indices[step]], best_two[row, 0] - best_two[row, 1],
                                     logits[row].argmax()))
            if step + 1 < len(steps[index].values):
                going_on.append(row)
                tokens.append(paths[index][step])
        rows.keep(going_on, torch.tensor(tokens, dtype=torch.long))
        step += 1
    for row_steps, values in zip(steps, collected, strict=True):
        if values:
            row_steps.batched_values = torch.stack([v for v, _, _ in values])
            row_steps.batched_margin = torch.stack([m for _, m, _ in values])
            row_steps.batched_argmax = torch.stack([a for _, _, a in values])


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for step, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return step
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=32, help="the first N IFEval prompts")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--model", default=DEFAULT_MODEL_ID)
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    model, tokenizer = load_model(args.model, dtype="float32", device="cpu")
    prompts = prompt_token_ids(tokenizer, read_prompts()[: args.limit])
    stops = frozenset(default_stop_token_ids(model, tokenizer))

    t0 = time.perf_counter()
    alone = [alone_run(model, prompt, args.max_new_tokens, stops) for prompt in prompts]
    alone_seconds = time.perf_counter() - t0
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    for start in range(0, len(order), args.batch_size):
        batch = order[start:start + args.batch_size]
        batched_along(model, [prompts[i] for i in batch], [alone[i][0] for i in batch], [alone[i][1] for i in batch])

    moves, margin_moves, margins, batched_margins, flips = [], [], [], [], 0
    for _, steps in alone:
        if steps.batched_values is None:
            continue
        values, indices = steps.values[1:], steps.indices[1:]  # the batch decodes from the second token on
        moves.append((steps.batched_values - values).abs().amax(-1))
        margin = values[:, 0] - values[:, 1]
        margin_moves.append((margin - (steps.batched_values[:, 0] - steps.batched_values[:, 1])).abs())
        margins.append(margin)
        batched_margins.append(steps.batched_margin)
        flips += int((steps.batched_argmax != indices[:, 0]).sum())
    moves, margin_moves = torch.cat(moves).numpy(), torch.cat(margin_moves).numpy()
    margins, batched_margins = torch.cat(margins).numpy(), torch.cat(batched_margins).numpy()

    t0 = time.perf_counter()
    unchecked = greedy_generate(model, tokenizer, prompts, max_new_tokens=args.max_new_tokens,
                                batch_size=args.batch_size, tie_margin=0, progress=False)
    unchecked_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    checked = greedy_generate(model, tokenizer, prompts, max_new_tokens=args.max_new_tokens,
                              batch_size=args.batch_size, progress=False)
    checked_seconds = time.perf_counter() - t0
    reference = [tokens for tokens, _ in alone]
    unchecked_diffs = [(i, first_difference(u, r)) for i, (u, r) in enumerate(zip(unchecked, reference, strict=True))
                       if u != r]
    checked_diffs = [i for i, (c, r) in enumerate(zip(checked, reference, strict=True)) if c != r]
    tokens = sum(len(r) for r in reference)

    flags = cpu_flags()
    lines = [
        "# Batched greedy generation against each prompt decoded alone",
        "",
        f"Command: `python -m benchmarks.exactness.generation_exactness --limit {args.limit} --max-new-tokens "
        f"{args.max_new_tokens} --batch-size {args.batch_size}`",
        f"({datetime.date.today().isoformat()}, {cpu_name()}, {torch.get_num_threads()} threads, avx512f "
        f"{'yes' if 'avx512f' in flags else 'no'}, avx512_bf16 {'yes' if 'avx512_bf16' in flags else 'no'}; "
        f"torch {torch.__version__}; {args.model}, float32, CPU)",
        "",
        f"{len(prompts)} prompts, {tokens} generated tokens decoded alone, then fed through batches of "
        f"{args.batch_size} ({len(margins)} batched steps, stop steps included; each prompt's first token comes "
        "from its prompt run alone, in the batch too).",
        "",
        "| batched vs alone, per step | median | 99th percentile | max |",
        "| --- | ---: | ---: | ---: |",
        f"| largest move of the {KEPT} best logits | {np.median(moves):.1e} | {np.quantile(moves, 0.99):.1e} | "
        f"{moves.max():.1e} |",
        f"| move of the best-minus-second margin | {np.median(margin_moves):.1e} | "
        f"{np.quantile(margin_moves, 0.99):.1e} | {margin_moves.max():.1e} |",
        "",
        f"Steps whose argmax the batch flipped (same tokens fed): {flips} of {len(margins)}.",
        "",
        "| margin below | steps (alone margin) | share | steps (batched margin): settled alone at this tie_margin |",
        "| ---: | ---: | ---: | ---: |",
        *(f"| {t:.0e} | {(margins < t).sum()} | {(margins < t).mean():.2%} | {(batched_margins < t).sum()} |"
          for t in THRESHOLDS),
        "",
        "| free-running `greedy_generate` | seconds | responses equal to alone | first differing step |",
        "| --- | ---: | ---: | --- |",
        f"| decoded alone (reference) | {alone_seconds:.1f} | {len(prompts)} of {len(prompts)} | |",
        f"| batched, check off (`tie_margin=0`) | {unchecked_seconds:.1f} | "
        f"{len(prompts) - len(unchecked_diffs)} of {len(prompts)} | "
        f"{', '.join(f'prompt {i}: step {s}' for i, s in unchecked_diffs) or '-'} |",
        f"| batched, check on (`tie_margin={FLOAT32_TIE_MARGIN:g}`) | {checked_seconds:.1f} | "
        f"{len(prompts) - len(checked_diffs)} of {len(prompts)} | {checked_diffs or '-'} |",
        "",
        f"Total {time.perf_counter() - started:.0f} s on a shared machine: compare the seconds within this run only.",
    ]
    report = "\n".join(lines) + "\n"
    publish(report, args.output)


if __name__ == "__main__":
    main()
