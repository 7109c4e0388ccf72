"""How far the core's float32 scores are from float64, next to how far the naive one-at-a-time
float32 computation is: the measurement behind the tests' exactness criterion and its floor.

For each float32 CPU kernel (the default BLAS and oneDNN) it scores perplexity and IFD on real
records with the real model, computes the same scores one at a time in float32 and with the model
cast to float64, and prints, per score, the largest relative distances from float64 and the
floor the criterion ``|ours - f64| <= 2 |naive_f32 - f64| + floor * |f64|`` would need.

    python -m benchmarks.exactness.scores --data ../shared/data/alpaca_cherry_5pct.json --limit 32
"""

from __future__ import annotations

import argparse
import copy
import os
from collections.abc import Sequence

import numpy as np
import torch

from benchmarks.common import cpu_name, instruction_records
from benchmarks.references import one_at_a_time_ifd, one_at_a_time_perplexity
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, load_model
from hf_adapters.backends.transformers.cpu_kernels import CPU_LINEAR_ENV, onednn_linear_available
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT, compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity


def naive_scores(model, tokenizer, records: list[dict]) -> dict[str, np.ndarray]:
    columns = {key: [record[key] for record in records] for key in ("instruction", "input", "output")}
    ifd = one_at_a_time_ifd(model, tokenizer, columns["instruction"], columns["input"], columns["output"],
                            DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT)
    return {
        "perplexity": np.array([s.perplexity for s in one_at_a_time_perplexity(model, tokenizer, columns["output"])]),
        "IFD": np.array([record.ifd for record in ifd]),
    }


def core_scores(model, tokenizer, records: list[dict], batch_size: int) -> dict[str, np.ndarray]:
    outputs = [record["output"] for record in records]
    ifd = compute_ifd([r["instruction"] for r in records], outputs, [r["input"] for r in records], model=model,
                      tokenizer=tokenizer, batch_size=batch_size, progress=False)
    return {
        "perplexity": np.array(compute_perplexity(outputs, model=model, tokenizer=tokenizer, batch_size=batch_size,
                                                  progress=False)["perplexities"]),
        "IFD": np.array(ifd["ifd_scores"]),
    }


def report(name: str, ours: np.ndarray, naive32: np.ndarray, naive64: np.ndarray) -> str:
    scale = np.abs(naive64)
    ours_error, naive_error = np.abs(ours - naive64) / scale, np.abs(naive32 - naive64) / scale
    needed = np.maximum(ours_error - 2 * naive_error, 0.0)
    return (f"| {name} | {len(ours)} | {np.median(naive_error):.1e} | {naive_error.max():.1e} | "
            f"{np.median(ours_error):.1e} | {ours_error.max():.1e} | {(needed > 0).mean():.0%} | {needed.max():.1e} |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="Alpaca-style JSON/JSONL records; falls back to the package's sample")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--model", default=DEFAULT_MODEL_ID)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)

    records, source = instruction_records(args.data, args.limit)
    model, tokenizer = load_model(args.model, dtype="float32", device="cpu")
    naive32 = naive_scores(model, tokenizer, records)
    naive64 = naive_scores(copy.deepcopy(model).to(torch.float64), tokenizer, records)
    print(f"Machine: {cpu_name()}, torch {torch.__version__}; model {args.model}; {len(records)} records of "
          f"{source}; batch size {args.batch_size}\n")
    print("| kernel, score | rows | naive f32 vs f64: median | max | ours vs f64: median | max | "
          "rows 2x naive misses | floor needed (rel.) |")
    print("| --- |" + " ---: |" * 7)
    kernels = ["default", "onednn"] if onednn_linear_available() else ["default"]
    for kernel in kernels:
        os.environ[CPU_LINEAR_ENV] = kernel
        ours = core_scores(model, tokenizer, records, args.batch_size)
        for name in ours:
            print(report(f"{kernel}, {name}", ours[name], naive32[name], naive64[name]))


if __name__ == "__main__":
    main()
