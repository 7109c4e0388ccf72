"""A score set against its members run one after another: time, forward passes, and equal columns.

For our own convention (IFD, the perplexity of the answer and the ``convention: exact`` UPD, HES and
NormLoss) and for the peers' (OpenDataArena's IFD and PPL, the peer UPD, HES and NormLoss), each of the
five configs is run as its own ``hf-adapters score`` process, one after another (the first of them is
IFD alone), then the set of the five as one process; every member's column of the set is compared with
the one of its own run. The passes of a third set, ours with the seed's ``PPLScorer`` (the joined row)
for the perplexity, are counted without timing it. Set ``HF_ADAPTERS_CPU_LINEAR`` to give every process
the same float32 kernel (the report says which)::

    HF_ADAPTERS_CPU_LINEAR=onednn python -m benchmarks.speed.score_sets \\
        --data ../shared/data/alpaca_cherry_5pct.json --limit 256 --output benchmarks/speed/SCORE_SETS.md
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from benchmarks.common import instruction_records, log, machine_description, publish
from hf_adapters.backends.shared_passes import SharedPasses
from hf_adapters.backends.transformers.cpu_kernels import CPU_LINEAR_ENV, cpu_linear_setting
from hf_adapters.scorers import ScoreSet

#: Our convention's answer-side members, which read IFD's conditional pass.
EXACT_ANSWER_SCORES = [{"name": "UPDScorer", "convention": "exact"}, {"name": "HESScorer", "convention": "exact"},
                       {"name": "NormLossScorer", "convention": "exact"}]
#: Each family's five members, IFD first.
FAMILIES = {
    "ours (`convention: exact`)": [
        {"name": "IFDScorer"}, {"name": "PerplexityScorer", "text_column": "output"}, *EXACT_ANSWER_SCORES],
    "the peers'": [
        {"name": "IFDScorer", "convention": "opendataarena"}, {"name": "PPLScorer", "convention": "opendataarena"},
        {"name": "UPDScorer"}, {"name": "HESScorer"}, {"name": "NormLossScorer"}],
}
#: Sets whose passes are counted but not timed.
COUNTED_ONLY = {"ours with the seed's `PPLScorer` (the joined row)": [
    {"name": "IFDScorer"}, {"name": "PPLScorer"}, *EXACT_ANSWER_SCORES]}
BATCH_SIZE = 16


def score(config: dict, data: Path, output: Path) -> float:
    """Seconds of one ``hf-adapters score`` process (model loading included, as a user pays it)."""
    path = output.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hf_adapters", "score", str(path), "--data", str(data), "--output",
                    str(output), "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def columns(path: Path) -> dict[str, list]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {key: [line[key] for line in lines] for key in lines[0] if key != "id"}


def agreement(together: list, alone: list) -> tuple[int, float]:
    """(values equal to the bit, largest relative difference) of two columns (null equal to null)."""
    equal, largest = 0, 0.0
    for a, b in zip(together, alone, strict=True):
        if a == b:
            equal += 1
        elif a is not None and b is not None:
            largest = max(largest, abs(a - b) / abs(b) if b else math.inf)
        else:
            largest = math.inf
    return equal, largest


def work(members: list[dict], records: list[dict]) -> tuple[int, int]:
    """(sequences the members ask the model for, sequences the set runs), counted without running the model."""
    score_set = ScoreSet(members)
    score_set.load()
    batch = {key: [record.get(key) or "" for record in records] for key in score_set.source_columns}
    passes = SharedPasses()
    with passes.recording():
        for member in score_set.members:
            member.score_batch(batch)
    return passes.count()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="Alpaca records (JSON list or JSONL); default: the package sample")
    parser.add_argument("--limit", type=int, default=256, help="rows to score (default 256)")
    parser.add_argument("--output", default=None, help="write the Markdown report here too")
    args = parser.parse_args(argv)

    records, source = instruction_records(args.data, args.limit)
    report = [f"Five scores of {len(records)} rows of {source}, batch_size {BATCH_SIZE}, the default model, each run a "
              f"fresh `hf-adapters score` process, on {machine_description(torch.device('cpu'))}, "
              f"{CPU_LINEAR_ENV}={cpu_linear_setting()}. Our perplexity is that of the answer "
              "(`PerplexityScorer` on `output`), the denominator of IFD.", "",
              "| convention | five configs one after another (s) | IFD alone (s) | the set (s) | set / IFD alone "
              "| speed-up over one after another | sequences asked | forward passes of the set |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    checks = ["", "Each member's column in the set against its own run (values equal to the bit; largest relative "
              "difference of the others):", ""]
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "rows.jsonl"
        data.write_text("".join(json.dumps({"id": i, **record}) + "\n" for i, record in enumerate(records)),
                        encoding="utf-8")
        for family, members in FAMILIES.items():
            alone, seconds = {}, []
            for number, member in enumerate(members):
                log(f"{family}: {member}")
                output = Path(folder) / f"alone-{number}.jsonl"
                seconds.append(score({**member, "batch_size": BATCH_SIZE}, data, output))
                alone[ScoreSet([member]).named_outputs[0]] = columns(output)["score"]
            log(f"{family}: the set")
            together_path = Path(folder) / "set.jsonl"
            together = score({"batch_size": BATCH_SIZE, "scores": members}, data, together_path)
            asked, passes = work(members, records)
            report.append(f"| {family} | {sum(seconds):.1f} | {seconds[0]:.1f} | {together:.1f} | "
                          f"{together / seconds[0]:.2f} | {sum(seconds) / together:.2f}x | {asked} | {passes} |")
            written = columns(together_path)
            for output, values in alone.items():
                equal, largest = agreement(written[output], values)
                checks.append(f"- {family}, `{output}`: {equal}/{len(values)} equal to the bit"
                              + (f", the others within {largest:.1e}" if equal < len(values) else ""))
    counted = [""] + [f"Not timed: {family}: {asked} sequences asked, {passes} forward passes of the set."
                      for family, members in COUNTED_ONLY.items() for asked, passes in [work(members, records)]]
    publish("\n".join(report + checks + counted), args.output)


if __name__ == "__main__":
    main()
