"""The same instruction rows scored with one config by ``hf-adapters score``, by a datatrove pipeline (reader,
``LikelihoodScores``, writer; the local executor, one task) and by a NeMo Curator pipeline (reader,
``LikelihoodScoreStage``, Parquet writer; the Ray actor pool executor, in .venv-nemo: ``make nemo``), each in a
fresh process (:mod:`benchmarks.pipelines.runners`): wall time (start to exit, imports, model load and Ray's start
included, as a user pays them), peak memory (the summed proportional set size of the run's processes, Ray's
included, sampled every half second) and how many scores equal the command's to the bit. Every process gets the
same float32 CPU kernel (``--kernel``, default onednn), so the scores compare to the bit; the NeMo Curator
workers get this process's thread count with it. Where .venv-nemo is missing, its row says so. It prints a
Markdown report and writes it to ``--output``::

    .venv/bin/python -m benchmarks.pipelines.side_by_side --data ../shared/data/alpaca_cherry_5pct.json \\
        --limit 1000 --output benchmarks/pipelines/PIPELINES.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import psutil
import torch

from benchmarks.common import instruction_records, log, machine_description, publish
from benchmarks.pipelines.runners import read_scores
from hf_adapters.backends.transformers.cpu_kernels import CPU_LINEAR_ENV

ROOT = Path(__file__).resolve().parents[2]
#: Seconds between two samples of the run's memory.
SAMPLE_SECONDS = 0.5
#: The runs, in order: their name in the report, and the runner's kind.
RUNS = {"`hf-adapters score`": "command", "datatrove (`LikelihoodScores`)": "datatrove",
        "NeMo Curator (`LikelihoodScoreStage`)": "nemo"}


@dataclass
class Run:
    """What one run cost and gave."""

    seconds: float
    peak_mib: float
    scores: dict[str, float]


class MemoryPeak:
    """The peak of the summed proportional set size of a process, its descendants and the processes whose
    command line names ``marker`` (Ray's daemons, which are not its children), sampled in a thread."""

    def __init__(self, process: psutil.Process, marker: str):
        self.process, self.marker, self.peak = process, marker, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def processes(self) -> dict[int, psutil.Process]:
        found = {}
        with contextlib.suppress(psutil.NoSuchProcess):
            found = {child.pid: child for child in [self.process, *self.process.children(recursive=True)]}
        for process in psutil.process_iter(["cmdline"]):
            if self.marker in " ".join(process.info["cmdline"] or ()):
                found[process.pid] = process
        return found

    def _sample(self) -> None:
        while not self.done.wait(SAMPLE_SECONDS):
            total = 0
            for process in self.processes().values():
                with contextlib.suppress(psutil.Error):
                    total += process.memory_full_info().pss
            self.peak = max(self.peak, total)

    def stop(self) -> float:
        """The peak in MiB; the sampling ends."""
        self.done.set()
        self.thread.join()
        return self.peak / 2**20


def stop_leftovers(marker: str) -> None:
    """End, by process id, the processes a run left behind whose command line names ``marker``."""
    left = [process for process in psutil.process_iter(["cmdline"])
            if marker in " ".join(process.info["cmdline"] or ())]
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    for process in psutil.wait_procs(left, timeout=10)[1]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def run(kind: str, python: str, config: str, rows: Path, work: Path, kernel: str) -> Run:
    """One run in a fresh process of ``python``, timed and measured."""
    output = work / kind
    output.mkdir()
    ray_folder = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    env = {**os.environ, CPU_LINEAR_ENV: kernel, "RAY_TMPDIR": ray_folder, "RAY_USAGE_STATS_ENABLED": "0",
           "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    log(f"{kind}: scoring ...")
    start = time.perf_counter()
    child = subprocess.Popen([python, "-m", "benchmarks.pipelines.runners", kind, config, str(rows), str(output)],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = MemoryPeak(psutil.Process(child.pid), ray_folder)
    _, errors = child.communicate()
    seconds = time.perf_counter() - start
    peak_mib = peak.stop()
    stop_leftovers(ray_folder)
    shutil.rmtree(ray_folder, ignore_errors=True)
    if child.returncode:
        raise RuntimeError(f"The {kind} run failed (exit {child.returncode}):\n{errors[-3000:]}")
    return Run(seconds, peak_mib, read_scores(output))


def agreement(scores: dict[str, float], reference: dict[str, float]) -> str:
    """How many of ``scores`` equal the command's to the bit (NaN equal to NaN), and the largest relative
    difference of the others; rows missing on either side are named."""
    same = [key for key in reference if key in scores and (scores[key] == reference[key]
                                                          or (math.isnan(scores[key]) and math.isnan(reference[key])))]
    others = [abs(scores[key] - reference[key]) / abs(reference[key]) for key in reference
              if key in scores and key not in same and reference[key]]
    text = f"{len(same)}/{len(reference)} equal to the bit"
    if others:
        text += f", the others within {max(others):.1e}"
    if missing := len(set(reference) - set(scores)):
        text += f", {missing} missing"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data/alpaca_cherry_5pct.json")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--config", default="hf_adapters/configs/ifd.yaml")
    parser.add_argument("--nemo-python", default=".venv-nemo/bin/python",
                        help="a Python with NeMo Curator (make nemo)")
    parser.add_argument("--kernel", default="onednn", choices=["default", "onednn"],
                        help="the float32 CPU kernel of every run (HF_ADAPTERS_CPU_LINEAR)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    records, source = instruction_records(args.data, args.limit)
    pythons = {"command": sys.executable, "datatrove": sys.executable, "nemo": args.nemo_python}
    with tempfile.TemporaryDirectory() as folder:
        rows = Path(folder) / "rows"
        rows.mkdir()
        lines = [json.dumps({"id": f"row-{i}", **record}, ensure_ascii=False) for i, record in enumerate(records)]
        (rows / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        results: dict[str, Run | str] = {}
        for name, kind in RUNS.items():
            if not Path(pythons[kind]).is_file():
                results[name] = f"not run: {pythons[kind]} does not exist (make nemo)"
                continue
            results[name] = run(kind, pythons[kind], str(Path(args.config).resolve()), rows, Path(folder), args.kernel)
    reference = results["`hf-adapters score`"]
    table = ["| run | wall time (s) | peak memory (MiB) | scores against the command's |",
             "| --- | ---: | ---: | --- |"]
    for name, result in results.items():
        if isinstance(result, str):
            table.append(f"| {name} | | | {result} |")
        else:
            compared = "(the reference)" if result is reference else agreement(result.scores, reference.scores)
            table.append(f"| {name} | {result.seconds:.1f} | {result.peak_mib:.0f} | {compared} |")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    report = (f"# Scoring inside pipelines: {len(records)} rows\n\n{len(records)} rows of {source}, "
              f"{args.config}, {CPU_LINEAR_ENV}={args.kernel}, on {machine_description(torch.device('cpu'))}, "
              f"{date}. Each run is a fresh process (the NeMo Curator run starts and stops its own Ray); "
              "memory is the peak of the run's processes' summed proportional set size, Ray's included.\n\n"
              + "\n".join(table) + "\n")
    publish(report, args.output)


if __name__ == "__main__":
    main()
