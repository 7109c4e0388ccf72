"""Scoring beside busy processes: OpenMP's default wait policy against passive waiting and a short spin.

Each case is a fresh process (libgomp reads its settings when torch loads it) that loads the
default model, warms up on four texts and times the perplexity of ``--limit`` Alpaca texts, first on
the quiet machine, then beside ``--busy`` processes that spin on the same cores. The policies run in
turn, ``--rounds`` times, and each case keeps its median::

    python -m benchmarks.contention --data ../shared/data/alpaca_cherry_5pct.json \\
        --output benchmarks/CONTENTION.md

The "default" rows set nothing, as a Python process that imports torch itself does;
:mod:`hf_adapters.core.openmp` says which setting ``hf-adapters`` uses.

With ``--against COMMIT`` it compares this checkout's code with an earlier commit's instead, as a
user's script runs it: IFD through the evaluate module (``evaluate.load("./metrics/ifd")``,
``batch_size=8``, ``HF_ADAPTERS_CPU_LINEAR=default``, nothing set for OpenMP), the commit checked
out into a temporary git worktree (removed at the end). Each case is a fresh process in its
checkout; the two run in pairs, quiet and then beside the busy processes, the pair's order swapped
each round (A B, B A, A B...) so that a load that rises or falls during the run favours neither,
and each pair gives one time ratio. The report's section replaces the same section of
``--output``, keeping the rest of the file::

    python -m benchmarks.contention --against 68240b1 --limit 24 \\
        --data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/CONTENTION.md
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
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

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


#: A case of ``--against``, run by ``python -c`` in a checkout's root with the checkout first on the
#: path, so that it imports that checkout's package and metric: a warm-up on two rows loads the
#: model, then IFD of every row of the JSON file ``argv[1]`` is timed.
IFD_MODULE_CASE = """
import json, sys, time
import evaluate
rows = json.load(open(sys.argv[1], encoding="utf-8"))
columns = {name: [row[key] for row in rows] for name, key in
           (("instructions", "instruction"), ("inputs", "input"), ("outputs", "output"))}
ifd = evaluate.load("./metrics/ifd")
ifd.compute(**{name: values[:2] for name, values in columns.items()}, batch_size=8)
start = time.perf_counter()
scores = ifd.compute(**columns, batch_size=8)["ifd_scores"]
print(json.dumps({"seconds": time.perf_counter() - start, "scores": [repr(score) for score in scores]}))
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


def ifd_module_case(checkout: Path, rows_file: Path) -> tuple[float, float, list[str]]:
    """One fresh process scoring the rows in ``checkout``: the timed IFD call's seconds, the whole
    process's seconds and the scores (as ``repr`` strings, to compare bit for bit)."""
    environment = {name: value for name, value in os.environ.items() if name not in OPENMP_VARIABLES}
    environment.update(IFD_MODULE_ENVIRONMENT, PYTHONPATH=str(checkout))
    start = time.perf_counter()
    output = subprocess.run([sys.executable, "-c", IFD_MODULE_CASE, str(rows_file)], cwd=checkout, env=environment,
                            capture_output=True, text=True, check=True).stdout
    whole = time.perf_counter() - start
    case = json.loads(output.strip().splitlines()[-1])
    return case["seconds"], whole, case["scores"]


def measure_checkouts(checkouts: Sequence[Path], rows_file: Path, rounds: int, busy: int
                      ) -> tuple[list[tuple[float, float]], list[tuple[float, float]], set[tuple[str, ...]]]:
    """Per round, (checkout 0's seconds, checkout 1's seconds) of the timed call and of the whole
    process, beside ``busy`` spinning processes; and the distinct score lists seen."""
    spinners = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    calls, processes, scores = [], [], set()
    try:
        for round_, order in enumerate(pair_orders(rounds)):
            call, whole = [0.0, 0.0], [0.0, 0.0]
            for index in order:
                call[index], whole[index], case_scores = ifd_module_case(checkouts[index], rows_file)
                scores.add(tuple(case_scores))
                log(f"{busy} busy, round {round_ + 1}, {checkouts[index]}: {call[index]:.1f} s "
                    f"({whole[index]:.1f} s the whole process; load {os.getloadavg()[0]:.1f})")
            calls.append((call[0], call[1]))
            processes.append((whole[0], whole[1]))
    finally:
        for process in spinners:
            process.kill()
    return calls, processes, scores


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
        quiet = measure_checkouts([root, earlier], rows_file, args.rounds, 0)
        busy = measure_checkouts([root, earlier], rows_file, args.rounds, args.busy)
        load_after = os.getloadavg()
    identical = len(quiet[2] | busy[2]) == 1
    lines = [
        AGAINST_HEADING,
        "",
        f"Machine: {machine_description(torch.device('cpu'))}; load average {load_before[0]:.1f} before the run "
        f"and {load_after[0]:.1f} after it (1 minute; other work on the machine counts in it). IFD of "
        f"{len(records)} records of {source} through the evaluate module, batch_size=8, "
        f"HF_ADAPTERS_CPU_LINEAR=default, no OpenMP variable set; this checkout (HEAD {head}) against "
        f"{args.against}, each case a fresh process, {args.rounds} pairs quiet and {args.rounds} beside "
        f"{args.busy} busy processes, the pair's order swapped each round. Scores: "
        + ("bit-identical in every case." if identical else f"{len(quiet[2] | busy[2])} different score lists!"),
        "",
        f"| | this checkout / {args.against}: the timed call, median (each pair) | the whole process | "
        f"{args.against}'s timed call, median s |",
        "| --- | --- | --- | ---: |",
    ]
    for name, (calls, processes, _) in (("quiet", quiet), (f"beside {args.busy} busy processes", busy)):
        lines.append(f"| {name} | {ratio_summary(calls)} | {ratio_summary(processes)} | "
                     f"{statistics.median(second for _, second in calls):.1f} |")
    command = " ".join(["python -m benchmarks.contention", *args.argv])
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
    command = " ".join(["python -m benchmarks.contention", *args.argv])
    lines += ["", f"Command: `{command}`"]
    earlier = Path(args.output).read_text(encoding="utf-8") if args.output and Path(args.output).is_file() else ""
    if AGAINST_HEADING in earlier:  # the --against section stays
        lines += ["", earlier[earlier.index(AGAINST_HEADING):].rstrip()]
    publish("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
