"""The curator's recipe of docs/getting_started.md, timed step by step: score, look, compare, embed, select.

Each step is the command the page prints, run as its own process (model loading included, as a
user pays it) on the first ``--limit`` Alpaca records, and its time is given per 1,000 rows::

    .venv/bin/python -m benchmarks.speed.recipe --data ../shared/data/alpaca_cherry_5pct.json --limit 200 \\
        --output benchmarks/speed/RECIPE.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import instruction_records, log, machine_description, publish

CONFIGS = Path(__file__).resolve().parents[2] / "hf_adapters" / "configs"


def steps(folder: Path, data: Path) -> list[tuple[str, list[str]]]:
    """Each step of the recipe: its name and its ``hf-adapters`` arguments."""
    out = folder / "out"
    return [
        ("score IFD, perplexity and entropy (a score set)",
         ["score", str(CONFIGS / "ifd_perplexity_entropy.yaml"), "--data", str(data),
          "--output", str(out / "scores.jsonl")]),
        ("look: summary of every column", ["summary", str(out / "scores.jsonl")]),
        ("look: summary of IFD, plotted", ["summary", str(out / "scores.jsonl"), "--column", "ifd",
                                           "--plot", str(out / "ifd.png")]),
        ("compare IFD with perplexity", ["compare", str(out / "scores.jsonl"), "--columns", "perplexity", "ifd",
                                         "--top-k", "50", "--plot", str(out / "ppl_vs_ifd.png")]),
        ("embed", ["embed", "--data", str(data), "--output", str(out / "embeddings.npy")]),
        ("select with diversity", ["select", "--data", str(data), "--scores", str(out / "scores.jsonl"),
                                   "--score-column", "ifd", "--max-score", "1", "--top", "10%",
                                   "--diversity", "deita", "--similarity-quantile", "0.95",
                                   "--embeddings", str(out / "embeddings.npy"),
                                   "--output", str(out / "selected.jsonl")]),
        ("select on two scores", ["select", "--data", str(data), "--scores", str(out / "scores.jsonl"),
                                  "--rank-product", "ifd", "answer_entropy:lowest", "--where", "ifd<1",
                                  "--where", "perplexity<1000", "--top", "10%",
                                  "--output", str(out / "by_two_scores.jsonl")]),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="Alpaca records (JSON list or JSONL); default: the package sample")
    parser.add_argument("--limit", type=int, default=200, help="rows to run the recipe on (default 200)")
    parser.add_argument("--output", default=None, help="write the Markdown report here too")
    args = parser.parse_args(argv)

    records, source = instruction_records(args.data, args.limit)
    rows = len(records)
    report = [f"The recipe of docs/getting_started.md on {rows} rows of {source}, each step a fresh "
              f"`hf-adapters` process, on {machine_description(torch.device('cpu'))}.", "",
              "| step | seconds | seconds per 1,000 rows |", "| --- | ---: | ---: |"]
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "rows.jsonl"
        data.write_text("".join(json.dumps({"id": i, **record}) + "\n" for i, record in enumerate(records)),
                        encoding="utf-8")
        total = 0.0
        for name, arguments in steps(Path(folder), data):
            log(f"{name}: hf-adapters {' '.join(arguments)}")
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hf_adapters", *arguments, *(
                ["--no-progress"] if arguments[0] in ("score", "embed") else [])], check=True,
                stdout=subprocess.DEVNULL)
            seconds = time.perf_counter() - start
            total += seconds
            report.append(f"| {name} | {seconds:.1f} | {seconds * 1000 / rows:.0f} |")
        report.append(f"| **all steps** | **{total:.1f}** | **{total * 1000 / rows:.0f}** |")
    publish("\n".join(report), args.output)


if __name__ == "__main__":
    main()
