"""``hf-adapters demo``: score the sample data shipped with the package and print a table."""

from __future__ import annotations

import argparse
import json
import math
import time
from importlib import resources
from pathlib import Path

from .models import DEFAULT_MODEL_ID, load_model
from .perplexity import compute_perplexity


def sample_rows() -> list[dict]:
    """The ~20 instruction/input/output records shipped with the package."""
    text = resources.files("hf_adapters").joinpath("data/sample.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ppl_text(row: dict) -> str:
    """The seed PPLScorer text: the non-empty instruction, input and output joined with newlines."""
    return "\n".join(part for part in (row["instruction"], row.get("input") or "", row["output"]) if part)


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:.3f}"


def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [[str(row[c]) if not isinstance(row[c], float) else _number(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    rows = sample_rows()
    model, tokenizer = load_model(args.model, dtype=args.dtype)
    print(f"Model: {args.model} ({type(model).__name__}, {model.num_parameters() / 1e6:.0f}M parameters)")
    ppl = compute_perplexity([ppl_text(row) for row in rows], model=model, tokenizer=tokenizer)
    results = [
        {"id": row["id"], "instruction": row["instruction"][:38], "perplexity": p}
        for row, p in zip(rows, ppl["perplexities"], strict=True)
    ]
    print(_table(results, ["id", "instruction", "perplexity"]))
    print(f"\nPerplexity: mean {_number(ppl['mean_perplexity'])}, corpus {_number(ppl['corpus_perplexity'])}")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as handle:
        for result in results:
            record = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in result.items()}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"\nScored {len(rows)} rows in {time.perf_counter() - start:.1f} s; scores written to {output}")
    return 0


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="Score the bundled sample data and print a table.")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID, help="model id, local directory or .gguf file")
    parser.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16")
    parser.add_argument("--output", default="out/demo_scores.jsonl", help="where to write the scores (JSONL)")
    parser.set_defaults(run=run)
