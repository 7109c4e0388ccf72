"""Scoring beside busy processes: OpenMP's default wait policy against passive waiting and a short spin.

Each case is a fresh process (libgomp reads its settings when torch loads it) that loads the
default model, warms up on four texts and times the perplexity of ``--limit`` Alpaca texts, first on
the quiet machine, then beside ``--busy`` processes that spin on the same cores. The policies run in
turn, ``--rounds`` times, and each case keeps its median::

    python -m benchmarks.speed.contention --data ../shared/data/alpaca_cherry_5pct.json \\
        --output benchmarks/speed/CONTENTION.md

The "default" rows set nothing, as a Python process that imports torch itself does;
:mod:`hf_adapters.core.openmp` says which setting ``hf-adapters`` uses.

With ``--against COMMIT`` it compares this checkout's code with an earlier commit's instead, as a
user's script runs it: IFD through the evaluate module (``evaluate.load("./metrics/ifd")``,
``batch_size=8``, ``HF_ADAPTERS_CPU_LINEAR=default``, nothing set for OpenMP), the commit checked
out into a temporary git worktree (removed at the end). Quiet, then beside the busy processes,
each checkout gets one process, both started at the same time; then they take turns scoring the
rows, the pair's order swapped each round (A B, B A, A B...) so that a load that rises or falls
during the run favours neither, and each pair gives one time ratio (and one of CPU seconds, which
spinning threads inflate). The report's section replaces the same section of ``--output``,
keeping the rest of the file::

    python -m benchmarks.speed.contention --against 68240b1 --limit 24 \\
        --data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/speed/CONTENTION.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from benchmarks.common import instruction_records, log, machine_description, publish
from hf_adapters.core.texts import ppl_text

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
    command = [sys.executable, "-m", "benchmarks.speed.contention", "--child", "--limit", str(args.limit)]
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


#: A checkout's worker for ``--against``, run by ``python -c`` in the checkout's root with the checkout
#: first on the path, so that it imports that checkout's package and metric. It loads the metric and
#: the model (a warm-up on two rows of the JSON file ``argv[1]``) and says how long that took; then
#: for each line it reads, it scores every row and says the call's seconds, its CPU seconds (torch's
#: threads included: spinning counts) and the scores (as ``repr``, to compare bit for bit).
IFD_MODULE_WORKER = """
import json, sys, time
start = time.perf_counter()
import evaluate
rows = json.load(open(sys.argv[1], encoding="utf-8"))
columns = {name: [row[key] for row in rows] for name, key in
           (("instructions", "instruction"), ("inputs", "input"), ("outputs", "output"))}
ifd = evaluate.load("./metrics/ifd")
ifd.compute(**{name: values[:2] for name, values in columns.items()}, batch_size=8)
print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
for _ in sys.stdin:
    start, cpu = time.perf_counter(), time.process_time()
    scores = ifd.compute(**columns, batch_size=8)["ifd_scores"]
    print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                      "scores": [repr(score) for score in scores]}), flush=True)
"""
#: The variables a case of ``--against`` runs with: the kernel the report used, nothing for OpenMP.
IFD_MODULE_ENVIRONMENT = {"HF_ADAPTERS_CPU_LINEAR": "default", "HF_HUB_OFFLINE": "1"}
#: Where the ``--against`` section of a report begins.
AGAINST_HEADING = "## This checkout against an earlier commit"


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """``commit`` checked out into a new temporary git worktree, removed (with its folder) on leaving."""
    folder = Path(tempfile.mkdtemp(prefix=f"wt-{commit}-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), commit], check=True, capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], check=False, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def pair_orders(rounds: int) -> list[tuple[int, int]]:
    """The order of the two checkouts (0 and 1) in each round: swapped every round, so that a load
    that changes steadily during the run adds as much to each.

    Example:
        >>> pair_orders(3)
        [(0, 1), (1, 0), (0, 1)]
    """
    return [(0, 1) if round_ % 2 == 0 else (1, 0) for round_ in range(rounds)]


class CheckoutWorker:
    """A process running :data:`IFD_MODULE_WORKER` in a checkout, its messages on stderr in ``log_file``."""

    def __init__(self, checkout: Path, rows_file: Path, log_file: Path):
        environment = {name: value for name, value in os.environ.items() if name not in OPENMP_VARIABLES}
        environment.update(IFD_MODULE_ENVIRONMENT, PYTHONPATH=str(checkout))
        self.checkout, self.log_file = checkout, log_file
        with open(log_file, "w", encoding="utf-8") as log_handle:
            self.process = subprocess.Popen([sys.executable, "-c", IFD_MODULE_WORKER, str(rows_file)], cwd=checkout,
                                            env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log_handle, text=True)

    def reply(self) -> dict:
        """The worker's next JSON line (other output skipped); a RuntimeError if it stopped."""
        for line in self.process.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                message = json.loads(line)
                if isinstance(message, dict) and "seconds" in message:
                    return message
        raise RuntimeError(f"The worker in {self.checkout} stopped; its messages are in {self.log_file}.")

    def score(self) -> dict:
        """One timed call on every row: its seconds, CPU seconds and scores."""
        self.process.stdin.write("score\n")
        self.process.stdin.flush()
        return self.reply()


def measure_checkouts(checkouts: Sequence[Path], rows_file: Path, rounds: int, busy: int, folder: Path
                      ) -> dict[str, list[tuple[float, float]] | set[tuple[str, ...]]]:
    """Beside ``busy`` spinning processes: each checkout's worker started at the same time
    (``start``: one pair of start-up and warm-up seconds), then per round the two timed calls
    (``seconds`` and ``cpu``: one pair each, checkout 0's first), the pair's order swapped each round;
    and the distinct score lists seen (``scores``)."""
    spinners = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    workers = []
    try:
        workers = [CheckoutWorker(checkout, rows_file, folder / f"worker{index}-busy{busy}.log")
                   for index, checkout in enumerate(checkouts)]
        starts = [worker.reply()["seconds"] for worker in workers]
        measured: dict = {"start": [tuple(starts)], "seconds": [], "cpu": [], "scores": set()}
        for round_, order in enumerate(pair_orders(rounds)):
            calls: dict[int, dict] = {}
            for index in order:
                calls[index] = workers[index].score()
                measured["scores"].add(tuple(calls[index]["scores"]))
                log(f"{busy} busy, round {round_ + 1}, {checkouts[index]}: {calls[index]['seconds']:.1f} s, "
                    f"{calls[index]['cpu']:.1f} CPU s (load {os.getloadavg()[0]:.1f})")
            for key in ("seconds", "cpu"):
                measured[key].append((calls[0][key], calls[1][key]))
        return measured
    finally:
        for process in [*spinners, *(worker.process for worker in workers)]:
            process.kill()
            process.wait()


def ratio_summary(pairs: Sequence[tuple[float, float]]) -> str:
    """The median of the pairs' ratios (first / second) and each ratio, e.g. ``0.98 (0.95, 0.98, 1.02)``."""
    ratios = [first / second for first, second in pairs]
    return f"{statistics.median(ratios):.2f} ({', '.join(f'{ratio:.2f}' for ratio in ratios)})"


def replace_section(text: str, section: str, heading: str = AGAINST_HEADING) -> str:
    """``text`` with its part from ``heading`` on replaced by ``section`` (added at the end if absent).

    Example:
        >>> replace_section("# Report\\n\\nold\\n", "## B\\nnew", heading="## B")
        '# Report\\n\\nold\\n\\n## B\\nnew\\n'
        >>> replace_section("# Report\\n\\n## B\\nold\\n", "## B\\nnew", heading="## B")
        '# Report\\n\\n## B\\nnew\\n'
    """
    before = text.split(heading, 1)[0].rstrip("\n")
    return f"{before}\n\n{section.rstrip()}\n"


def against(args: argparse.Namespace, records: list[dict], source: str) -> None:
    """Time this checkout against ``args.against``, quiet and beside busy processes, and report it."""
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                               check=True).stdout.strip())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    rows = [{key: record[key] for key in ("instruction", "input", "output")} for record in records]
    with worktree(args.against) as earlier, tempfile.TemporaryDirectory() as folder:
        rows_file = Path(folder) / "rows.json"
        rows_file.write_text(json.dumps(rows), encoding="utf-8")
        load_before = os.getloadavg()
        phases = {"quiet": measure_checkouts([root, earlier], rows_file, args.rounds, 0, Path(folder)),
                  f"beside {args.busy} busy processes": measure_checkouts([root, earlier], rows_file, args.rounds,
                                                                          args.busy, Path(folder))}
        load_after = os.getloadavg()
    scores = set().union(*(phase["scores"] for phase in phases.values()))
    lines = [
        AGAINST_HEADING,
        "",
        f"Machine: {machine_description(torch.device('cpu'))}; load average {load_before[0]:.1f} before the run "
        f"and {load_after[0]:.1f} after it (1 minute; other work on the machine counts in it). IFD of "
        f"{len(records)} records of {source} through the evaluate module, batch_size=8, "
        f"HF_ADAPTERS_CPU_LINEAR=default, no OpenMP variable set; this checkout (HEAD {head}) against "
        f"{args.against}. Per phase each checkout has one process, both started at the same time (start-up: "
        f"importing, loading the metric and the model, a warm-up on two rows), then {args.rounds} pairs of timed "
        f"calls, the pair's order swapped each round. Scores: "
        + ("bit-identical in every call." if len(scores) == 1 else f"{len(scores)} different score lists!"),
        "",
        f"| | this checkout / {args.against}: the timed call, median (each pair) | CPU seconds of the call "
        f"| start-up (one pair) | {args.against}'s timed call, median s |",
        "| --- | --- | --- | --- | ---: |",
    ]
    for name, phase in phases.items():
        lines.append(f"| {name} | {ratio_summary(phase['seconds'])} | {ratio_summary(phase['cpu'])} | "
                     f"{ratio_summary(phase['start'])} | {statistics.median(b for _, b in phase['seconds']):.1f} |")
    command = " ".join(["python -m benchmarks.speed.contention", *args.argv])
    lines += ["", f"Command: `{command}`"]
    section = "\n".join(lines)
    print(section)
    if args.output:
        path = Path(args.output)
        path.write_text(replace_section(path.read_text(encoding="utf-8") if path.is_file() else "", section),
                        encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="Alpaca-style JSON or JSONL (default: the package's sample)")
    parser.add_argument("--limit", type=int, default=32, help="texts scored (default: 32)")
    parser.add_argument("--busy", type=int, default=4, help="spinning processes beside the busy rows (default: 4)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each case; the median is kept (default: 3)")
    parser.add_argument("--output", help="write the Markdown report here too")
    parser.add_argument("--against", metavar="COMMIT",
                        help="compare this checkout with COMMIT (IFD through the evaluate module) instead")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    records, source = instruction_records(args.data, args.limit)
    if args.child:
        child([ppl_text(r["instruction"], r["input"], r["output"]) for r in records])
        return
    if args.against:
        against(args, records, source)
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
    command = " ".join(["python -m benchmarks.speed.contention", *args.argv])
    lines += ["", f"Command: `{command}`"]
    earlier = Path(args.output).read_text(encoding="utf-8") if args.output and Path(args.output).is_file() else ""
    if AGAINST_HEADING in earlier:  # the --against section stays
        lines += ["", earlier[earlier.index(AGAINST_HEADING):].rstrip()]
    publish("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
