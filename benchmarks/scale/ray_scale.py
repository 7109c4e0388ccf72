"""What the command's own process costs as the rows grow: the local engine against the Ray engine
(whose workers read the rows and write the parts), on short synthetic rows and a tiny random model.

Each run is ``hf-adapters score`` in a process of its own: the report gives its wall time (start to
exit, imports included) and its peak resident memory (``ru_maxrss`` of that process alone, as it
reports it at its end). Ray runs with 2 workers on a local cluster this script starts first (its
start is not counted; the command connects to it with ``--ray-address``), on the 50,000 first rows
and on all 200,000: the driver's memory should not grow with the rows. The local engine scores the
200,000 rows in one process. The scores of the two 200,000-row files are compared. It prints a
Markdown report and writes it to ``--output``.

    python -m benchmarks.scale.ray_scale --output benchmarks/scale/RAY_SCALE.md
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.common import log, machine_description, publish, relative_differences, tiny_model_dir
from benchmarks.scale.scaleout import short_rows

ROOT = Path(__file__).resolve().parents[2]
#: Run in the child: the command, then its own wall time and peak resident memory as a JSON line.
RUNNER = """
import json, resource, sys, time
from hf_adapters import cli
started = time.perf_counter()
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "seconds": time.perf_counter() - started,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


@dataclass
class Run:
    """One command: what it ran, its wall time from start to exit, and its peak resident memory."""

    engine: str
    rows: int
    seconds: float
    peak_mib: float
    output: Path

    def rate(self) -> float:
        return self.rows / self.seconds


def run_command(engine: str, rows: int, arguments: list[str], output: Path, env: dict[str, str]) -> Run:
    """``hf-adapters score ARGUMENTS`` in a new process, timed and measured."""
    log(f"{engine} on {rows:,} rows ...")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUNNER, "score", *arguments, "--output", str(output),
                           "--no-progress"], capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{engine} failed: {done.stderr[-2000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    log(f"  {seconds:.1f} s, peak {measured['peak_kib'] / 1024:.0f} MiB")
    return Run(engine, rows, seconds, measured["peak_kib"] / 1024, output)


def scores(path: Path) -> list[float]:
    with open(path, encoding="utf-8") as handle:
        return [math.nan if (score := json.loads(line)["score"]) is None else score for line in handle]


def report(runs: list[Run], machine: str, command: str, total: float, load: tuple[float, float],
           difference: float, identical: bool) -> str:
    small, large = (run for run in runs if run.engine.startswith("Ray"))
    local = next(run for run in runs if run.engine.startswith("local"))
    lines = [
        "# The command's process as the rows grow: local engine and Ray engine",
        "",
        f"- Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine}",
        f"- Command: `{command}` ({total:.0f} s in all)",
        f"- Load average (1 min) before and after: {load[0]:.2f}, {load[1]:.2f} on {os.cpu_count()} CPUs"
        + (": other jobs were running, so timings are noisy" if max(load) > (os.cpu_count() or 1) / 2 else ""),
        "- Rows: short synthetic instruction rows (4-8 words in, 5-16 out) in one JSONL file, PPLScorer on a tiny "
        "random Llama (2 layers, 64 wide), float32 on the CPU",
        "- Ray: a local cluster of 2 CPUs started before the runs (not counted), `--num-workers 2` (one torch thread "
        "each), default blocks (8 per worker, at most 4,096 rows); the local engine runs in one process with "
        f"{torch.get_num_threads()} torch threads",
        "",
        "| engine | rows | wall s | rows/s | peak RSS of the command's process, MiB |",
        "|---|---:|---:|---:|---:|",
        *(f"| {run.engine} | {run.rows:,} | {run.seconds:.1f} | {run.rate():.0f} | {run.peak_mib:.0f} |"
          for run in runs),
        "",
        f"- Ray's driver at {large.rows:,} rows against {small.rows:,}: {large.peak_mib - small.peak_mib:+.0f} MiB "
        f"({large.peak_mib / small.peak_mib:.2f}x) for {large.rows / small.rows:.0f}x the rows.",
        f"- The local engine's process at {local.rows:,} rows: {local.peak_mib:.0f} MiB, "
        f"{local.peak_mib / large.peak_mib:.2f}x Ray's driver.",
        f"- The {large.rows:,} scores of both engines: largest relative difference {difference:.1e}"
        + ("; the files are byte-identical." if identical else " (each Ray worker chooses its CPU kernels itself)."),
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the large runs (default: 200,000)")
    parser.add_argument("--small-rows", type=int, default=50_000, help="rows of Ray's small run (default: 50,000)")
    parser.add_argument("--output", help="also write the report as Markdown here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> str:
    args = parse_args(argv)
    os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"})
    import ray

    started, load = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        records = short_rows(args.rows)
        model = tiny_model_dir(folder / "model", [f"{row['instruction']} {row['output']}" for row in records[:2000]])
        for name, count in (("rows.jsonl", args.rows), ("first.jsonl", args.small_rows)):
            (folder / name).write_text("".join(json.dumps(row) + "\n" for row in records[:count]), encoding="utf-8")
        config = folder / "ppl.yaml"
        config.write_text(f"name: PPLScorer\nmodel: {model}\nbatch_size: 16\nmax_length: 64\n", encoding="utf-8")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(folder / "datasets-cache"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # for the cluster's workers
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
        try:
            on_ray = ["--engine", "ray", "--num-workers", "2", "--ray-address",
                      ray.get_runtime_context().gcs_address]
            data = [str(config), "--data", str(folder / "rows.jsonl")]
            runs = [run_command("local engine (one process)", args.rows, data, folder / "local.jsonl", env),
                    run_command("Ray, 2 workers", args.small_rows, [str(config), "--data", str(folder / "first.jsonl"),
                                                                    *on_ray], folder / "ray-small.jsonl", env),
                    run_command("Ray, 2 workers", args.rows, [*data, *on_ray], folder / "ray.jsonl", env)]
        finally:
            ray.shutdown()
        differences = relative_differences(scores(runs[2].output), scores(runs[0].output))
        identical = runs[2].output.read_bytes() == runs[0].output.read_bytes()
        text = report(runs, machine_description(torch.device("cpu")),
                      "python -m benchmarks.scale.ray_scale" + (f" --output {args.output}" if args.output else ""),
                      time.perf_counter() - started, (load, os.getloadavg()[0]), float(differences.max()), identical)
    publish(text, args.output)
    return text


if __name__ == "__main__":
    main()
