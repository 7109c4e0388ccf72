"""Scoring beside busy processes: OpenMP's default wait policy against passive waiting and a short spin.

Each case is a fresh process (libgomp reads its settings when torch loads it) that loads the
default model, warms up on four texts and times the perplexity of ``--limit`` Alpaca texts, first on
the quiet machine, then beside ``--busy`` processes that spin on the same cores. The policies run in
turn, ``--rounds`` times, and each case keeps its median::

    python -m benchmarks.contention --data ../shared/data/alpaca_cherry_5pct.json \\
        --output benchmarks/CONTENTION.md

The "default" rows set nothing, as a Python process that imports torch itself does;
:mod:`hf_adapters.core.openmp` says which setting ``hf-adapters`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence

import torch

from hf_adapters.core.texts import ppl_text

from .common import instruction_records, log, machine_description, publish

BUSY_LOOP = "while True: pass"
#: The settings compared: the name in the report and the OpenMP variables of the case.
POLICIES = {"default (nothing set)": {}, "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
            "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"}}
#: The variables a case may set, removed from the environment first.
OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def child(texts: list[str]) -> None:
    """Time the perplexity of ``texts`` in this process and print the seconds."""
    import time

    from hf_adapters.backends import TransformersBackend
    from hf_adapters.formulas.perplexity import compute_perplexity

    backend = TransformersBackend.from_pretrained()
    compute_perplexity(texts[:4], backend=backend, progress=False)
    start = time.perf_counter()
    compute_perplexity(texts, backend=backend, progress=False)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def timed_case(args: argparse.Namespace, policy: dict[str, str]) -> float:
    environment = {name: value for name, value in os.environ.items() if name not in OPENMP_VARIABLES}
    environment.update(policy)
    command = [sys.executable, "-m", "benchmarks.contention", "--child", "--limit", str(args.limit)]
    if args.data:
        command += ["--data", args.data]
    output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])["seconds"]


def measure(args: argparse.Namespace, busy: int) -> dict[str, float]:
    """Each policy's median time with ``busy`` spinning processes beside it."""
    spinners = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        times: dict[str, list[float]] = {name: [] for name in POLICIES}
        for round_ in range(args.rounds):
            for name, policy in POLICIES.items():
                times[name].append(timed_case(args, policy))
                log(f"{busy} busy, round {round_ + 1}, {name}: {times[name][-1]:.1f} s")
        return {name: statistics.median(values) for name, values in times.items()}
    finally:
        for process in spinners:
            process.kill()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="Alpaca-style JSON or JSONL (default: the package's sample)")
    parser.add_argument("--limit", type=int, default=32, help="texts scored (default: 32)")
    parser.add_argument("--busy", type=int, default=4, help="spinning processes beside the busy rows (default: 4)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each case; the median is kept (default: 3)")
    parser.add_argument("--output", help="write the Markdown report here too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    records, source = instruction_records(args.data, args.limit)
    if args.child:
        child([ppl_text(r["instruction"], r["input"], r["output"]) for r in records])
        return
    quiet, busy = measure(args, 0), measure(args, args.busy)
    default = next(iter(POLICIES))
    lines = [
        "# Scoring beside busy processes",
        "",
        f"Machine: {machine_description(torch.device('cpu'))}. Perplexity of {len(records)} records of {source} "
        f"(instruction, input and output joined), SmolLM2-135M-Instruct, float32; each case a fresh process, the "
        f"median of {args.rounds} runs, the policies in turn. A fair share of the cores beside {args.busy} busy "
        f"processes would make a job with {torch.get_num_threads()} threads about "
        f"{(args.busy + torch.get_num_threads()) / torch.get_num_threads():.1f}x slower.",
        "",
        f"| OpenMP setting | quiet, s | beside {args.busy} busy processes, s | slowdown | time / default's, quiet "
        "| time / default's, busy |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in POLICIES:
        lines.append(f"| {name} | {quiet[name]:.1f} | {busy[name]:.1f} | {busy[name] / quiet[name]:.1f}x | "
                     f"{quiet[name] / quiet[default]:.2f} | {busy[name] / busy[default]:.2f} |")
    command = " ".join(["python -m benchmarks.contention", *(argv if argv is not None else sys.argv[1:])])
    lines += ["", f"Command: `{command}`"]
    publish("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
