"""``hf-adapters demo``: score the sample data shipped with the package and print what came out.

One model load serves every score: perplexity and IFD of ~20 instruction records, Information
Parity of a few parallel sentences, and IFEval checks of a few hand-written responses.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from pathlib import Path

from ..data_io import read_records
from ..ifeval import demo_rows
from ..json_values import json_safe
from ..models import DEFAULT_MODEL_ID, load_model
from ..parallel_corpus import evaluate_parallel, parallel_sample_rows
from ..scorers import IFDScorer, IFEvalScorer, PPLScorer
from .parity_command import format_table as parity_table
from .tables import format_number, format_table


def sample_rows() -> list[dict]:
    """The ~20 instruction/input/output records shipped with the package (``data/sample.jsonl``)."""
    with resources.as_file(resources.files("hf_adapters") / "data" / "sample.jsonl") as path:
        return read_records(path)


def _write_jsonl(records: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(json_safe(record), ensure_ascii=False) + "\n")


def _instruction_scores(rows: list[dict], model, tokenizer) -> list[dict]:
    ppl = PPLScorer(model=model, tokenizer=tokenizer, progress=None).result_of_rows(rows)
    ifd = IFDScorer(model=model, tokenizer=tokenizer, progress=None).result_of_rows(rows)
    records = [
        {"id": row["id"], "perplexity": p, "ifd": i, "ppl_conditional": c, "ppl_direct": d}
        for row, p, i, c, d in zip(
            rows, ppl["perplexities"], ifd["ifd_scores"], ifd["conditional_perplexities"],
            ifd["direct_perplexities"], strict=True,
        )
    ]
    table = [
        [record["id"], row["instruction"][:38], record["perplexity"], record["ifd"]]
        for record, row in zip(records, rows, strict=True)
    ]
    print(format_table(["id", "instruction", "perplexity", "ifd"], table))
    print(
        f"\nPerplexity: mean {format_number(ppl['mean_perplexity'])}, corpus {format_number(ppl['corpus_perplexity'])}"
        f"\nIFD: mean {format_number(ifd['mean_ifd'])} over {ifd['num_valid']} valid of {len(rows)} rows"
        " (an empty output has no IFD)"
    )
    return records


def _information_parity(model, tokenizer) -> None:
    result = evaluate_parallel(parallel_sample_rows(), "eng_Latn", model=model, tokenizer=tokenizer)
    print("\nInformation Parity of the bundled parallel sentences against English:")
    print(parity_table(result))


def _ifeval() -> None:
    print("\nIFEval on a few hand-written responses:")
    rows = demo_rows()
    scorer = IFEvalScorer()
    results = scorer.score_batch(scorer.rows_to_batch(rows))
    table = [
        [row["key"], ", ".join(row["instruction_id_list"]), f"{sum(strict)}/{len(strict)}",
         f"{sum(loose)}/{len(loose)}"]
        for row, strict, loose in zip(rows, results["strict"], results["loose"], strict=True)
    ]
    print(format_table(["key", "instructions", "followed (strict)", "followed (loose)"], table))


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    rows = sample_rows()
    model, tokenizer = load_model(args.model, dtype=args.dtype)
    print(f"Model: {args.model} ({type(model).__name__}, {model.num_parameters() / 1e6:.0f}M parameters)\n")
    records = _instruction_scores(rows, model, tokenizer)
    _information_parity(model, tokenizer)
    _ifeval()
    output = Path(args.output)
    _write_jsonl(records, output)
    print(f"\nDone in {time.perf_counter() - start:.1f} s; per-row scores written to {output}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="Score the bundled sample data and print the results.")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID, help="model id, local directory or .gguf file")
    parser.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16")
    parser.add_argument("--output", default="out/demo_scores.jsonl", help="where to write the scores (JSONL)")
    parser.set_defaults(run=run)
