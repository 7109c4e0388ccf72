"""What scaling out costs: rows per second for the same short rows scored in memory, streamed, and
on Ray with 1 and 2 local workers.

The tiny random model (loaded in milliseconds, scoring thousands of rows a second) makes each
engine's own overhead visible: ``add_perplexity_column`` on a ``Dataset`` (in memory), on the same
rows as an ``IterableDataset`` (streamed), and ``add_ray_score_columns`` over the Arrow blocks the
``score --engine ray`` job hands to Ray, with 1 and 2 actors. Ray's time is split into the wait
for the first scored batch (starting the workers, importing torch, loading the model) and the
rest. The real default model (SmolLM2-135M, from the embedded copy) then answers whether two
workers beat one when the model's work dominates. Every engine's scores are compared with the
in-memory ones. It prints a Markdown report and writes it to ``--output``.

    python -m benchmarks.scale.scaleout --output benchmarks/scale/SCALEOUT.md
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import datasets
import torch
from datasets import Dataset

from benchmarks.common import log, machine_description, publish, relative_differences, tiny_model_dir
from hf_adapters import add_perplexity_column
from hf_adapters.backends.loading import embedded_default_source
from hf_adapters.core.options import DEFAULT_MODEL_ID
from hf_adapters.engines.ray_columns import add_ray_score_columns, arrow_blocks, ordered_scores

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("the quick brown fox jumps over a lazy dog while seven small cats watch from the warm red roof "
         "and one old owl sings softly about rivers stars bread music gardens").split()
#: The goals the report checks: streaming's time over in-memory's.
STREAMING_GOAL = 1.10


@dataclass
class Timing:
    """One engine's run: its scores, wall time, and (Ray) the wait for its first scored batch."""

    engine: str
    scores: list[float]
    seconds: float
    first_batch: float = math.nan

    def rate(self) -> float:
        return len(self.scores) / self.seconds


def short_rows(count: int, seed: int = 0) -> list[dict]:
    """``count`` short instruction rows (4-8 words in, 5-16 words out), the same for a seed."""
    rng = random.Random(seed)
    return [{"id": f"row-{i}", "instruction": " ".join(rng.choices(WORDS, k=rng.randint(4, 8))).capitalize() + ".",
             "input": "", "output": " ".join(rng.choices(WORDS, k=rng.randint(5, 16))).capitalize() + "."}
            for i in range(count)]


def in_memory(rows: list[dict], model: str, batch_size: int) -> Timing:
    dataset = Dataset.from_list(rows)
    start = time.perf_counter()
    scores = add_perplexity_column(dataset, model_id=model, batch_size=batch_size)["perplexity"]
    return Timing("in memory (`Dataset`)", list(scores), time.perf_counter() - start)


def one_thread(run: Callable[[list[dict], str, int], Timing]) -> Callable[[list[dict], str, int], Timing]:
    """``run`` with 1 torch thread, as each Ray worker has: the same work per thread."""

    def run_on_one_thread(rows: list[dict], model: str, batch_size: int) -> Timing:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            timing = run(rows, model, batch_size)
        finally:
            torch.set_num_threads(threads)
        return Timing(f"{timing.engine}, 1 torch thread", timing.scores, timing.seconds)

    return run_on_one_thread


def streamed(rows: list[dict], model: str, batch_size: int) -> Timing:
    stream = Dataset.from_list(rows).to_iterable_dataset()
    start = time.perf_counter()
    scores = [row["perplexity"] for row in add_perplexity_column(stream, model_id=model, batch_size=batch_size)]
    return Timing("streamed (`IterableDataset`)", scores, time.perf_counter() - start)


def on_ray(rows: list[dict], model: str, batch_size: int, workers: int) -> Timing:
    """Score through ``add_ray_score_columns`` as the ``score --engine ray`` job does, timing the
    first scored batch's arrival apart."""
    dataset = Dataset.from_list(rows).select_columns(["id", "instruction", "input", "output"])
    import ray

    start = time.perf_counter()
    blocks = list(arrow_blocks(dataset, workers, batch_size))
    scored = add_ray_score_columns(ray.data.from_arrow(blocks), {"name": "PPLScorer", "model": model},
                                   num_workers=workers, batch_size=batch_size, names={"perplexity": "score"},
                                   keep_columns=False)
    scores, first = [], math.nan
    for score in ordered_scores(scored, len(rows)):
        if not scores:
            first = time.perf_counter() - start
        scores.append(math.nan if score is None else score)
    return Timing(f"Ray, {workers} worker{'s' if workers > 1 else ''}", scores, time.perf_counter() - start, first)


def fastest_interleaved(rounds: int, runs: dict[str, Callable[[], Timing]]) -> dict[str, Timing]:
    """Each run's fastest of ``rounds``, the runs taking turns: a machine that slows down midway
    (another job starting) meets them alike."""
    best: dict[str, Timing] = {}
    for _ in range(rounds):
        for name, run in runs.items():
            timing = run()
            if name not in best or timing.seconds < best[name].seconds:
                best[name] = timing
    return best


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan


def start_ray(cpus: int) -> float:
    """A local Ray cluster of ``cpus`` CPUs whose workers import this checkout; returns the seconds it took."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster: no token in ~/.ray
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    import ray

    start = time.perf_counter()
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return time.perf_counter() - start


def worker_threads() -> int:
    """The torch threads of a 1-CPU Ray worker (Ray sets OMP_NUM_THREADS=1 for it)."""
    import ray

    return ray.get(ray.remote(num_cpus=1)(lambda: __import__("torch").get_num_threads()).remote())


def table(timings: Sequence[Timing], reference: Timing) -> list[str]:
    lines = ["| engine | rows/s | wall s | first result s | rows/s after it | time vs in memory | "
             "extra ms per row | max rel. diff vs in memory |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for timing in timings:
        after = (len(timing.scores) / (timing.seconds - timing.first_batch)
                 if not math.isnan(timing.first_batch) else math.nan)
        extra = (timing.seconds - reference.seconds) / len(timing.scores) * 1000
        diff = relative_differences(timing.scores, reference.scores)
        lines.append(
            f"| {timing.engine} | {timing.rate():.0f} | {timing.seconds:.2f} | "
            f"{'' if math.isnan(timing.first_batch) else f'{timing.first_batch:.2f}'} | "
            f"{'' if math.isnan(after) else f'{after:.0f}'} | {timing.seconds / reference.seconds:.2f}x | "
            f"{'' if timing is reference else f'{extra:+.2f}'} | {max(diff, default=0.0):.1e} |")
    return lines


def verdicts(timings: dict[str, Timing]) -> list[str]:
    memory, memory_one = timings["memory"], timings["memory1"]
    one, two = timings["ray1"], timings["ray2"]
    ratios = [timings["streamed"].seconds / memory.seconds, timings["streamed1"].seconds / memory_one.seconds]

    def per_row(timing: Timing, reference: Timing) -> str:
        return f"{(timing.seconds - reference.seconds) / len(timing.scores) * 1000:+.2f} ms"

    return [
        f"- Streaming takes {ratios[0]:.2f}x the in-memory time, {ratios[1]:.2f}x on 1 thread (goal: within "
        f"{STREAMING_GOAL:.2f}x): {' and '.join('met' if ratio <= STREAMING_GOAL else 'NOT met' for ratio in ratios)}.",
        f"- Ray, per row, against in memory: {per_row(one, memory)} with one worker ({per_row(one, memory_one)} "
        f"against in memory on 1 thread, the worker's), {per_row(two, memory)} with two. Most of it is the wait for "
        f"the first result ({one.first_batch:.1f} s and {two.first_batch:.1f} s: starting the workers, importing "
        "torch and transformers, loading the model), paid once per job, not per row.",
        f"- Two workers {'beat' if two.seconds < one.seconds else 'do NOT beat'} one on the tiny model "
        f"({two.seconds:.2f} s against {one.seconds:.2f} s).",
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="short rows for the tiny model (default: 2000)")
    parser.add_argument("--real-rows", type=int, default=160,
                        help="rows for the real default model, in memory and on 1 and 2 Ray workers (0: skip)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3,
                        help="in-memory and streamed runs, taking turns: keep each one's fastest of this many")
    parser.add_argument("--output", help="also write the report as Markdown here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> str:
    args = parse_args(argv)
    started = time.perf_counter()
    datasets.disable_progress_bars()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    command = "python -m benchmarks.scale.scaleout " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = short_rows(args.rows)
    with tempfile.TemporaryDirectory(prefix="scaleout-") as folder:
        model = tiny_model_dir(folder, [f"{row['instruction']}\n{row['output']}" for row in rows])
        log(f"Tiny model in {folder}; warming up in memory ...")
        in_memory(rows[:32], model, args.batch_size)
        log("In memory and streamed ...")
        runs = {"memory": in_memory, "streamed": streamed, "memory1": one_thread(in_memory),
                "streamed1": one_thread(streamed)}
        timings = fastest_interleaved(args.rounds, {name: functools.partial(run, rows, model, args.batch_size)
                                                    for name, run in runs.items()})
        log("Starting a local Ray cluster ...")
        init_seconds = start_ray(os.cpu_count() or 1)
        threads = worker_threads()
        for workers in (1, 2):
            log(f"Ray, {workers} worker(s) ...")
            timings[f"ray{workers}"] = on_ray(rows, model, args.batch_size, workers)
        real = []
        if args.real_rows and embedded_default_source() is not None:
            log(f"The default model on {args.real_rows} rows: in memory, then Ray with 1 and 2 workers ...")
            few = rows[:args.real_rows]
            in_memory(few[:8], DEFAULT_MODEL_ID, args.batch_size)  # load it once, outside the timing
            real = [in_memory(few, DEFAULT_MODEL_ID, args.batch_size),
                    one_thread(in_memory)(few, DEFAULT_MODEL_ID, args.batch_size),
                    *(on_ray(few, DEFAULT_MODEL_ID, args.batch_size, workers) for workers in (1, 2))]
    import ray

    ray.shutdown()
    load_after = load_average()
    lines = [
        "# Scaling out: in memory, streamed, Ray",
        "",
        f"- Date: {date}",
        f"- Machine: {machine_description(torch.device('cpu'))}",
        f"- Command: `{command}` ({time.perf_counter() - started:.0f} s in all)",
        f"- Load average (1 min) before and after: {load_before:.2f}, {load_after:.2f} on {os.cpu_count()} CPUs"
        + (": other jobs were running, so timings are noisy" if max(load_before, load_after) > 0.5 else ""),
        f"- Rows: {len(rows)} short instruction rows (4-8 words in, 5-16 out), PPLScorer, batch size "
        f"{args.batch_size}, float32",
        f"- Ray {ray.__version__}: a local cluster of {os.cpu_count()} CPUs, started in {init_seconds:.1f} s "
        f"(not counted below); each worker is an actor with 1 CPU and {threads} torch thread(s); this process "
        f"scores in memory and streamed with {torch.get_num_threads()}.",
        "",
        "## The tiny model (2 layers, 64 wide): the engines' own costs",
        "",
        *table([timings[key] for key in ("memory", "streamed", "memory1", "streamed1", "ray1", "ray2")],
               timings["memory"]),
        "",
        f"First result: when the first block of rows ({block_rows(len(rows), args.batch_size, 1)} with one worker, "
        f"{block_rows(len(rows), args.batch_size, 2)} with two) comes back from Ray.",
        "",
        *verdicts(timings),
    ]
    if real:
        one, two = real[2], real[3]
        lines += [
            "",
            f"## The default model ({DEFAULT_MODEL_ID}, embedded GGUF copy) on {len(real[0].scores)} rows",
            "",
            *table(real, real[0]),
            "",
            f"- Two workers {'beat' if two.seconds < one.seconds else 'do NOT beat'} one ({two.seconds:.1f} s "
            f"against {one.seconds:.1f} s; after the first result {rate_after(two):.0f} against "
            f"{rate_after(one):.0f} rows/s).",
        ]
    lines += [
        "",
        "Ray pays off where one machine is not enough: many GPUs or nodes, each worker scoring for minutes. "
        "On one machine the default engine (one process, or `accelerate launch`) has none of its start-up cost.",
    ]
    report = "\n".join(lines) + "\n"
    publish(report, args.output)
    if args.output:
        log(f"Wrote {args.output}")
    return report


def block_rows(rows: int, batch_size: int, workers: int) -> int:
    """The rows in each block the scoring job hands to Ray."""
    return len(next(arrow_blocks(Dataset.from_dict({"i": list(range(rows))}), workers, batch_size)))


def rate_after(timing: Timing) -> float:
    """Rows per second once the first batch has arrived."""
    return len(timing.scores) / (timing.seconds - timing.first_batch)


if __name__ == "__main__":
    main()
