"""Information Parity: hf_adapters against the published `information-parity` 0.1.1 package.

Both run in one process on the same float32 model and the same FLORES-style sentences: every
language of the file against the reference language. A third row runs hf_adapters' core on the
package's own work (both texts of every pair, one text per forward pass), which separates the gain
of the core's kernels from that of scoring each text once, in batches. The package is a benchmark
dependency only (`pip install information-parity==0.1.1`).

    python -m benchmarks.peers.parity_vs_package --data ../shared/data/flores200_dev10.jsonl [--output RESULTS.md]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch
from information_parity import InformationParity

from benchmarks.common import publish
from hf_adapters.backends import score_continuations
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, load_model
from hf_adapters.core.texts import text_items
from hf_adapters.files.data_io import read_records
from hf_adapters.formulas.parallel_corpus import evaluate_parallel, group_by_language


def parallel_pairs(grouped: dict, reference: str) -> dict[str, list[tuple[str, str]]]:
    """Per language under test, its (reference text, text) pairs over the ids both have."""
    return {
        lang: [(grouped[reference][i], texts[i]) for i in grouped[reference] if i in texts]
        for lang, texts in grouped.items()
        if lang != reference
    }


def run_package(model, tokenizer, grouped: dict, reference: str) -> dict[str, float]:
    """Mean parity per language from the package: one `compute_information_parity` call per language."""
    package = InformationParity(model, tokenizer, is_sentence_piece_tokenizer=False, device=model.device)
    means = {}
    for lang, pairs in parallel_pairs(grouped, reference).items():
        mean, _ = package.compute_information_parity(*zip(*pairs, strict=True))
        means[lang] = float(mean)
    return means


def run_core_one_at_a_time(model, tokenizer, grouped: dict, reference: str) -> dict[str, float]:
    """Mean parity per language from hf_adapters' core doing the package's work: both texts of
    every pair, the reference text again for every language, one text per forward pass."""
    means = {}
    for lang, pairs in parallel_pairs(grouped, reference).items():
        ratios = []
        for pair in pairs:
            reference_score, score = score_continuations(model, tokenizer, text_items(tokenizer, pair), batch_size=1)
            ratios.append(reference_score.nll / score.nll)
        means[lang] = float(np.mean(ratios))
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="JSONL of {lang, id, text} rows")
    parser.add_argument("--reference", default="eng_Latn")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--output", help="also write the results as Markdown here")
    args = parser.parse_args()

    rows = read_records(args.data)
    grouped = group_by_language(rows)
    model, tokenizer = load_model(args.model, dtype="float32", device="cpu")
    warmup = [row for row in rows if row["id"] == rows[0]["id"]]
    evaluate_parallel(warmup, args.reference, model=model, tokenizer=tokenizer)
    run_package(model, tokenizer, group_by_language(warmup), args.reference)

    start = time.perf_counter()
    package_means = run_package(model, tokenizer, grouped, args.reference)
    package_seconds = time.perf_counter() - start
    start = time.perf_counter()
    core_means = run_core_one_at_a_time(model, tokenizer, grouped, args.reference)
    core_seconds = time.perf_counter() - start
    start = time.perf_counter()
    ours = evaluate_parallel(rows, args.reference, model=model, tokenizer=tokenizer, batch_size=args.batch_size)
    ours_seconds = time.perf_counter() - start
    ours_means = {lang: stats["information_parity"] for lang, stats in ours["languages"].items()}

    def max_relative(means: dict[str, float]) -> str:
        return f"{max(abs(means[lang] - mean) / abs(mean) for lang, mean in package_means.items()):.1e}"

    texts = len(rows)
    lines = [
        f"Information parity, {len(package_means)} languages against {args.reference}, {texts} sentences, "
        f"{args.model} in float32 on {platform.machine()} CPU ({torch.get_num_threads()} threads)",
        "",
        "| implementation | seconds | speed-up | max rel. diff of a language's mean parity |",
        "| --- | ---: | ---: | ---: |",
        f"| information-parity 0.1.1 | {package_seconds:.2f} | 1.00x | (reference) |",
        f"| hf_adapters core, the package's work: every pair, one text at a time | {core_seconds:.2f} | "
        f"{package_seconds / core_seconds:.2f}x | {max_relative(core_means)} |",
        f"| hf_adapters (each text once, batch {args.batch_size}) | {ours_seconds:.2f} | "
        f"{package_seconds / ours_seconds:.2f}x | {max_relative(ours_means)} |",
    ]
    report = "\n".join(lines)
    publish(report, args.output)


if __name__ == "__main__":
    main()
