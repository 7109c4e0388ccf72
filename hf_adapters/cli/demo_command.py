"""``hf-adapters demo``: score the sample data shipped with the package and print what came out.

One model load serves every score: perplexity and IFD of ~20 instruction records, Information
Parity of a few parallel sentences, and IFEval checks of a few hand-written responses; a second
model (by default the same one rounded to bfloat16) is the reference of an excess-loss example.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import resources
from pathlib import Path

from hf_adapters.cli.arguments import add_model_arguments, add_progress_argument, hide_library_progress, one_line
from hf_adapters.cli.parity_command import format_table as parity_table
from hf_adapters.cli.tables import format_number, format_table
from hf_adapters.files.data_io import read_records
from hf_adapters.files.json_values import json_safe
from hf_adapters.ifeval import demo_rows


def sample_rows() -> list[dict]:
    """The ~20 instruction/input/output records shipped with the package (``data/sample.jsonl``)."""
    with resources.as_file(resources.files("hf_adapters") / "data" / "sample.jsonl") as path:
        return read_records(path)


def _write_jsonl(records: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(json_safe(record), ensure_ascii=False) + "\n")


def _instruction_scores(rows: list[dict], backend, batch_size: int) -> list[dict]:
    from hf_adapters.scorers import IFDScorer, PPLScorer

    ppl = PPLScorer(backend=backend, batch_size=batch_size, progress=None).result_of_rows(rows)
    ifd = IFDScorer(backend=backend, batch_size=batch_size, progress=None).result_of_rows(rows)
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


def _excess_loss(rows: list[dict], backend, reference_model: str | None, args: argparse.Namespace) -> None:
    from hf_adapters.backends import TransformersBackend
    from hf_adapters.core.texts import ppl_text
    from hf_adapters.formulas.excess_loss import ExcessLossOptions, score_excess_loss
    from hf_adapters.formulas.token_selection import kept_tokens

    if reference_model is None:
        reference = TransformersBackend.from_pretrained(args.model, dtype="bfloat16", device=args.device)
        described = f"{args.model} rounded to bfloat16 (pass --reference-model to name another)"
    else:
        reference = TransformersBackend.from_pretrained(reference_model, dtype=args.dtype, device=args.device)
        described = reference_model
    shown = [row for row in rows if row["output"]][:5]
    texts = [ppl_text(row["instruction"], row["input"], row["output"]) for row in shown]
    result = score_excess_loss(backend, reference, texts, ExcessLossOptions(return_token_losses=True),
                               batch_size=args.batch_size)
    kept = kept_tokens(result["token_excess_losses"], top=0.6)
    print(f"\nExcess loss against a reference model ({described}): L_model - L_ref per token, mean per row, "
          "and Rho-1's kept tokens (top 60% by excess loss):")
    table = [[row["id"], row["instruction"][:38], loss, reference_loss, excess, f"{sum(keep)}/{len(keep)}"]
             for row, loss, reference_loss, excess, keep in zip(
                 shown, result["losses"], result["reference_losses"], result["excess_losses"], kept, strict=True)]
    print(format_table(["id", "instruction", "loss", "ref. loss", "excess loss", "kept"], table))


def _information_parity(backend, batch_size: int) -> None:
    from hf_adapters.formulas.parallel_corpus import evaluate_parallel, parallel_sample_rows

    result = evaluate_parallel(parallel_sample_rows(), "eng_Latn", backend=backend, batch_size=batch_size)
    print("\nInformation Parity of the bundled parallel sentences against English:")
    print(parity_table(result))


def _ifeval() -> None:
    from hf_adapters.scorers import IFEvalScorer

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
    from hf_adapters.backends import TransformersBackend
    from hf_adapters.backends.loading import ModelLoadError
    from hf_adapters.files.output_paths import output_location

    start = time.perf_counter()
    if not args.progress:
        hide_library_progress()
    rows = sample_rows()
    try:
        output = output_location(args.output)
        backend = TransformersBackend.from_pretrained(args.model, dtype=args.dtype, device=args.device)
    except (ValueError, ModelLoadError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    model = backend.model
    print(f"Model: {args.model} ({type(model).__name__}, {model.num_parameters() / 1e6:.0f}M parameters)\n")
    records = _instruction_scores(rows, backend, args.batch_size)
    _excess_loss(rows, backend, args.reference_model, args)
    _information_parity(backend, args.batch_size)
    _ifeval()
    _write_jsonl(records, output)
    print(f"\nDone in {time.perf_counter() - start:.1f} s; per-row scores written to {output}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="Score the bundled sample data and print the results.",
        description="Score the ~20 instruction rows shipped with the package (perplexity and IFD, and the excess loss "
        "of a few against a reference model), a few parallel sentences (Information Parity) and a few hand-written "
        "responses (IFEval).",
    )
    add_model_arguments(parser, backend=False, token_budget=False)
    parser.add_argument("--reference-model", default=None,
                        help="the reference model of the excess-loss example, sharing the model's tokenizer "
                             "(default: the model rounded to bfloat16)")
    parser.add_argument("--output", default="out/demo_scores.jsonl",
                        help="where to write the per-row scores (JSONL; default: out/demo_scores.jsonl)")
    add_progress_argument(parser)
    parser.set_defaults(run=run)
