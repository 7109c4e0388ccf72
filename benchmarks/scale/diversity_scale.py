"""Seconds and peak memory of the diversity rules from 10 thousand to a million rows.

    python -m benchmarks.scale.diversity_scale --output benchmarks/scale/DIVERSITY_SCALE.md

Synthetic 576-dimensional float32 vectors (the default model's width): Gaussian rows, a fifth of
them near-duplicates of an earlier row (cosine about 0.95), written to a ``.npy`` file that each
case memory-maps, as ``hf-adapters select --embeddings`` does; uniform random scores. Each case
runs in a fresh process. Peak allocated memory is what the selection allocated (``tracemalloc``,
which sees NumPy's arrays); peak resident memory (``VmHWM``) also counts the pages of the mapped
file the process touched, and those around them that Linux maps on each fault, all of which the
kernel can drop again:

- ``deita``: the best rows, threshold 0.9, until a tenth of the rows are kept.
- ``superfiltering-d``: Superfiltering-D's recipe, the top 10% by score, then dense facility
  location picks a tenth of them (1% of the rows); ``superfiltering-d-knn``: the same on the 10
  nearest neighbours of each pool row.
- ``facility-location``: dense facility location over all rows, picking 1%;
  ``facility-location-knn``: the same on the 10 nearest neighbours of each row.

Dense facility location and the exact neighbour search compute rows^2 similarities, so they run
only up to the row counts in ``DEFAULT_LIMITS``. Wall time counts what other processes take of
the cores; CPU time is this process's own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

DIMENSIONS = 576
#: Each case and the largest row count it runs at: the rows^2 similarities of dense facility
#: location over a million rows are 1.2e15 multiply-adds, hours on two cores.
DEFAULT_LIMITS = {"deita": 10**6, "superfiltering-d": 10**5, "superfiltering-d-knn": 10**5,
                  "facility-location": 10**4, "facility-location-knn": 10**4}
CASES = tuple(DEFAULT_LIMITS)


def write_vectors(path: Path, rows: int, seed: int = 0, chunk: int = 100_000) -> None:
    """Gaussian rows, a fifth of them an earlier row plus noise, written a chunk at a time."""
    rng = np.random.default_rng(seed)
    output = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, DIMENSIONS))
    for start in range(0, rows, chunk):
        block = rng.normal(size=(min(chunk, rows - start), DIMENSIONS)).astype(np.float32)
        copies = np.flatnonzero(rng.random(len(block)) < 0.2)
        copies = copies[copies + start > 0]
        sources = rng.integers(0, copies + start)  # an earlier row of the file
        earlier = sources < start
        block[copies[earlier]] = output[sources[earlier]] + 0.33 * rng.normal(size=(earlier.sum(), DIMENSIONS))
        inside = copies[~earlier]
        block[inside] = block[sources[~earlier] - start] + 0.33 * rng.normal(size=(len(inside), DIMENSIONS))
        output[start:start + len(block)] = block
    output.flush()


def peak_resident_mib() -> float:
    """This process's peak resident memory: ``VmHWM`` (``ru_maxrss`` would count the parent's memory
    at the fork that started this process, which Linux carries across ``exec``)."""
    status = Path("/proc/self/status")
    if status.exists():
        line = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux; a bound elsewhere


def run_case(case: str, path: str) -> dict:
    from hf_adapters.curation.diversity import diverse_selection

    embeddings = np.load(path, mmap_mode="r")
    rows = len(embeddings)
    scores = np.random.default_rng(1).random(rows).tolist()
    tracemalloc.start()
    start, cpu_start = time.perf_counter(), time.process_time()
    if case == "deita":
        kept, _ = diverse_selection(scores, embeddings, "deita", top_n=rows // 10, similarity_threshold=0.9)
    elif case.startswith("superfiltering-d"):
        kept, _ = diverse_selection(scores, embeddings, "facility_location", top=0.1, budget=rows // 100,
                                    neighbors=10 if case.endswith("knn") else None)
    else:
        kept, _ = diverse_selection(scores, embeddings, "facility_location", budget=rows // 100,
                                    neighbors=10 if case == "facility-location-knn" else None)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    allocated_mib = tracemalloc.get_traced_memory()[1] / 2**20
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_mib": peak_resident_mib(),
            "allocated_mib": allocated_mib, "kept": len(kept)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--output", default="benchmarks/scale/DIVERSITY_SCALE.md")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # a child process: run one case on --embeddings
    parser.add_argument("--embeddings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.embeddings)))
        return
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for rows in args.rows:
            path = Path(folder) / f"{rows}.npy"
            write_vectors(path, rows)
            for case in args.cases:
                if rows > DEFAULT_LIMITS[case]:
                    continue
                child = subprocess.run([sys.executable, "-m", "benchmarks.scale.diversity_scale", "--case", case,
                                        "--embeddings", str(path)], check=True, capture_output=True, text=True)
                result = {"case": case, "rows": rows, **json.loads(child.stdout.strip().splitlines()[-1])}
                print(json.dumps(result), file=sys.stderr, flush=True)
                results.append(result)
            path.unlink()
    write_report(args.output, results)


def growth(results: list[dict], case: str) -> str:
    """How the CPU time grows: the exponent of rows between the smallest and the largest run."""
    runs = sorted((r["rows"], r["cpu_seconds"]) for r in results if r["case"] == case)
    if len(runs) < 2:
        return "-"
    (small, fast), (large, slow) = runs[0], runs[-1]
    return f"rows^{np.log(slow / fast) / np.log(large / small):.2f}"


def write_report(path: str, results: list[dict]) -> None:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    lines = [
        "# Diversity rules at scale",
        "",
        f"`python -m benchmarks.scale.diversity_scale` on {datetime.now(timezone.utc):%Y-%m-%d}, {cpu}, "
        f"{os.cpu_count()} logical CPUs, BLAS threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}, "
        f"NumPy {np.__version__}. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}",
        "",
        "| rule | rows | kept | seconds | CPU seconds | peak allocated, MiB | peak resident, MiB | CPU time grows as |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for result in results:
        lines.append(f"| {result['case']} | {result['rows']:,} | {result['kept']:,} | {result['seconds']:.1f} | "
                     f"{result['cpu_seconds']:.1f} | {result['allocated_mib']:.0f} | {result['peak_mib']:.0f} | "
                     f"{growth(results, result['case'])} |")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
