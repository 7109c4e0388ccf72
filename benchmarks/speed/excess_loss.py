"""Two-model excess loss against the one-at-a-time two-model reference, and what predictive entropy
costs on top of plain scoring.

    python -m benchmarks.speed.excess_loss --data ../shared/data/alpaca_cherry_5pct.json \
        --output benchmarks/speed/EXCESS_LOSS.md

The model is the default SmolLM2-135M-Instruct; the reference model is a copy of it whose weights
carry seeded Gaussian noise (1% of each tensor's standard deviation): a second model of the same size
and tokenizer, which is all the timing needs (no second model of this tokenizer ships offline). The
reference implementation runs, per text, one unpadded forward pass of each model with logits at every
position. The entropy rows time the core on the same texts with and without ``entropies=True``; each
implementation runs ``--rounds`` times, interleaved, and keeps its fastest round.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import torch

from benchmarks.common import instruction_records, machine_description, publish, timed
from benchmarks.references import full_forward_nll, text_ids
from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.loading import load_model
from hf_adapters.core.texts import ppl_text, text_items
from hf_adapters.formulas.excess_loss import compute_excess_loss

NOISE = 0.01


def noisy_copy(model, seed: int = 0):
    """The model with seeded Gaussian noise of ``NOISE`` times each weight tensor's standard deviation."""
    generator = torch.Generator().manual_seed(seed)
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in reference.parameters():
            if parameter.numel() > 1:
                noise = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype)
                parameter.add_(noise * parameter.std() * NOISE)
    return reference.eval()


def one_at_a_time_excess(model, reference, tokenizer, texts: Sequence[str]) -> list[float]:
    """Per text, one forward pass of each model: mean NLL of the model minus that of the reference."""
    losses = []
    for text in texts:
        ids = text_ids(tokenizer, text)
        scored, baseline = full_forward_nll(model, ids, 1), full_forward_nll(reference, ids, 1)
        losses.append((scored.nll - baseline.nll) / scored.scored if scored.scored else math.nan)
    return losses


def fastest(functions: dict[str, Callable[[], object]], rounds: int) -> dict[str, tuple[object, float]]:
    """Each function's result and its fastest wall time over ``rounds`` interleaved rounds."""
    best: dict[str, tuple[object, float]] = {}
    for _ in range(rounds):
        for name, function in functions.items():
            result, seconds = timed(function)
            if name not in best or seconds < best[name][1]:
                best[name] = (result, seconds)
    return best


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="Alpaca records (JSON list or JSONL)")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)
    records, source = instruction_records(args.data, args.rows)
    texts = [ppl_text(r["instruction"], r["input"], r["output"]) for r in records]
    model, tokenizer = load_model()
    reference = noisy_copy(model)
    backend = TransformersBackend(model, tokenizer)
    items = text_items(tokenizer, texts)
    tokens = sum(len(continuation) for _, continuation in items)
    backend.score(items[:2])  # the core picks its CPU kernels once

    two_models = fastest({
        "reference": lambda: one_at_a_time_excess(model, reference, tokenizer, texts),
        "ours": lambda: compute_excess_loss(texts, model=model, tokenizer=tokenizer, reference_model=reference,
                                            reference_tokenizer=tokenizer)["excess_losses"],
    }, args.rounds)
    (naive, naive_seconds), (ours, our_seconds) = two_models["reference"], two_models["ours"]
    largest = max(abs(a - b) for a, b in zip(ours, naive, strict=True) if not math.isnan(b))
    spread = max(abs(b) for b in naive if not math.isnan(b))

    cost = fastest({"plain": lambda: backend.score(items),
                    "entropies": lambda: backend.score(items, entropies=True),
                    "token losses": lambda: backend.score(items, token_losses=True)}, args.rounds)
    plain = cost["plain"][1]
    lines = [
        f"# Excess loss and predictive entropy ({datetime.now(timezone.utc):%Y-%m-%d})",
        "",
        f"Machine: {machine_description(torch.device('cpu'))}. Model: SmolLM2-135M-Instruct, float32; reference: "
        f"its copy with {NOISE:.0%} seeded weight noise. Rows: the first {len(texts)} of {source} (instruction, "
        f"input and output joined), {tokens:,} scored tokens. Fastest of {args.rounds} interleaved rounds. Written by "
        "`python -m benchmarks.speed.excess_loss`.",
        "",
        "| job | implementation | seconds | speed-up | max abs. diff of excess losses vs reference (nats) |",
        "|---|---|---:|---:|---:|",
        f"| excess loss, two models | one text at a time, each model (reference) | {naive_seconds:.2f} | | "
        f"(reference; its values span ±{spread:.3f}) |",
        f"| | hf_adapters `compute_excess_loss` | {our_seconds:.2f} | {naive_seconds / our_seconds:.2f}x | "
        f"{largest:.1e} |",
        "",
        "| core call on the same items | seconds | cost over plain scoring |",
        "|---|---:|---:|",
    ]
    for name, (_, seconds) in cost.items():
        lines.append(f"| {name} | {seconds:.2f} | {'' if name == 'plain' else f'{seconds / plain - 1:+.1%}'} |")
    report = "\n".join(lines) + "\n"
    publish(report, args.output)
    return report


if __name__ == "__main__":
    main()
