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

    python -m benchmarks.gpu.run --output benchmarks/gpu/GPU.md
    python -m benchmarks.gpu.run --quick --alpaca ../shared/data/alpaca_cherry_5pct.json --output GPU_QUICK.md
    python -m benchmarks.gpu.run --device cpu --layers 2 --items 8 --speed-items 8 --prompts 4 --new-tokens 4 \
        --generation-batch-size 2 --max-len 64 --warm-up 2 --shapes tiny   # smoke test

``--quick`` (sized for under 8 minutes on an H100) keeps sections 1 and 4 small, skips 2 and 3, and
times section 5 as by default: 3,111 (1B) and 1,024 (8B) Alpaca rows, 64 (1B) and 32 (8B) rows of
2,048 tokens, and 64 prompts x 256 generated tokens (1B).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Sequence

import numpy as np
import torch

from benchmarks.common import log, publish
from benchmarks.gpu.exactness import distribution_section, drift_section, exactness_section
from benchmarks.gpu.generation import generation_section
from benchmarks.gpu.llama_sections import llama_sections
from benchmarks.gpu.llama_shapes import ALPACA_PATHS, LLAMA_SHAPES
from benchmarks.gpu.random_model import build_model, build_tokenizer, random_ids, random_items, random_lengths
from benchmarks.gpu.report import Report, header
from benchmarks.gpu.speed import speed_section

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
