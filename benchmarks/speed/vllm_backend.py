"""The vLLM backend beside ours: the same scores on the same tokens, timed in turn in one process.

Run in vLLM's environment (``make vllm``), from the repository root::

    OMP_WAIT_POLICY=PASSIVE .venv-vllm/bin/python -m benchmarks.speed.vllm_backend \\
        --data ../shared/data/alpaca_cherry_5pct.json \\
        --conversation-data ../shared/data/mtbench_gpt4_reference.jsonl --limit 64 --conversations 8 \\
        --output benchmarks/speed/VLLM.md

(``make bench`` runs it so). ``OMP_WAIT_POLICY=PASSIVE`` is what ``hf-adapters`` sets for itself
(:mod:`hf_adapters.core.openmp`); this script imports torch directly, so the command line sets it.

Each row times our transformers backend and the vLLM backend on the default model in float32, each
after a warm-up on two rows, and gives each one's largest relative difference from the float64
reference (our backend on the model cast to float64). Then greedy IFEval generation, and perplexity
again with busy processes beside it on the same cores (``--busy``): the contention row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

import torch

from benchmarks.common import (
    instruction_records,
    log,
    machine_description,
    parallel_rows,
    publish,
    relative_differences,
    timed,
)
from hf_adapters.backends import TransformersBackend, VLLMBackend
from hf_adapters.backends.loading import load_model
from hf_adapters.backends.vllm import ENGINE_ARGS_ENV
from hf_adapters.core.texts import ppl_text
from hf_adapters.files.data_io import read_records
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.information_parity import compute_information_parity
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts
from hf_adapters.scorers import ConversationIFDScorer

BUSY_LOOP = "while True: pass"


def _largest(scores: Sequence[float], reference: Sequence[float]) -> str:
    differences = relative_differences(scores, reference)
    return f"{differences.max():.1e}" if len(differences) else "n/a"


def row(name: str, job: str, runs: dict[str, Callable[[list], list[float]]], rows: list, warm: int = 2,
        warm_rows: list | None = None) -> str:
    """One table row: each backend warmed up on ``warm`` rows (or on ``warm_rows``), then timed on all;
    drift from float64."""
    times, scores = {}, {}
    for backend in ("float64", "transformers", "vllm"):
        runs[backend](rows[:warm] if warm_rows is None else warm_rows)
        scores[backend], times[backend] = timed(lambda backend=backend: runs[backend](rows))
        log(f"{name}: {backend} {times[backend]:.1f} s")
    ratio = times["vllm"] / times["transformers"]
    return (f"| {name} | {job} | {times['transformers']:.1f} | {times['vllm']:.1f} | {ratio:.2f}x | "
            f"{_largest(scores['transformers'], scores['float64'])} | {_largest(scores['vllm'], scores['float64'])} |")


def metric_rows(args: argparse.Namespace, backends: dict[str, object]) -> list[str]:
    records, _ = instruction_records(args.data, args.limit)
    texts = [ppl_text(record["instruction"], record["input"], record["output"]) for record in records]
    columns = {key: [record[key] for record in records] for key in ("instruction", "input", "output")}

    def perplexity(backend):
        return lambda rows: compute_perplexity(rows, backend=backend, progress=False)["perplexities"]

    def ifd(backend):
        def run(rows):
            n = len(rows)
            return compute_ifd(columns["instruction"][:n], columns["output"][:n], columns["input"][:n],
                               backend=backend, progress=False)["ifd_scores"]
        return run

    def conversations(backend):
        return lambda rows: ConversationIFDScorer(backend=backend, turns="all", max_length=None).result(rows)[
            "ifd_scores"]

    def parity(backend):
        def run(rows):
            english = [row["text"] for row in rows if row["lang"] == "eng_Latn"]
            other = [row["text"] for row in rows if row["lang"] != "eng_Latn"][:len(english)]
            return compute_information_parity(english, other, backend=backend, progress=False)["scores"]
        return run

    lines = [row("perplexity", f"{len(texts)} Alpaca texts", {k: perplexity(b) for k, b in backends.items()}, texts),
             row("IFD", f"{len(texts)} Alpaca records", {k: ifd(b) for k, b in backends.items()},
                 list(range(len(texts))))]
    if args.conversation_data and os.path.isfile(args.conversation_data):
        chats = [record["messages"] for record in read_records(args.conversation_data)[:args.conversations]]
        lines.append(row("conversation IFD", f"{len(chats)} MT-Bench conversations",
                         {k: conversations(b) for k, b in backends.items()}, chats, warm=1))
    parallel, _ = parallel_rows(args.parallel_data, 10)
    # Parity keeps each text's score: the warm-up takes the first sentence in every language, the
    # timed run the others, so that it finds none of its texts scored.
    first = parallel[0]["id"]
    lines.append(row("information parity", f"{sum(r['id'] != first for r in parallel)} FLORES-style rows",
                     {k: parity(b) for k, b in backends.items()}, [r for r in parallel if r["id"] != first],
                     warm_rows=[r for r in parallel if r["id"] == first]))
    return lines


def generation_row(args: argparse.Namespace, backends: dict[str, object]) -> str:
    tokenizer = backends["transformers"].tokenizer
    prompts = prompt_token_ids(tokenizer, read_prompts()[:args.prompts])
    responses, times = {}, {}
    for name in ("transformers", "vllm"):
        backends[name].generate(prompts[:2], max_new_tokens=8, progress=False)
        responses[name], times[name] = timed(lambda name=name: backends[name].generate(
            prompts, max_new_tokens=args.max_new_tokens, batch_size=args.prompts, progress=False))
        log(f"generation: {name} {times[name]:.1f} s")
    tokens = {name: sum(map(len, result)) for name, result in responses.items()}
    same = sum(a == b for a, b in zip(responses["transformers"], responses["vllm"], strict=True))
    return (f"| IFEval generation | {len(prompts)} prompts, greedy, at most {args.max_new_tokens} new tokens | "
            f"{times['transformers']:.1f} ({tokens['transformers'] / times['transformers']:.0f} tok/s) | "
            f"{times['vllm']:.1f} ({tokens['vllm'] / times['vllm']:.0f} tok/s) | "
            f"{times['vllm'] / times['transformers']:.2f}x | {same} of {len(prompts)} responses identical | |")


def contention_row(args: argparse.Namespace, backends: dict[str, object]) -> str:
    records, _ = instruction_records(args.data, args.limit)
    texts = [ppl_text(record["instruction"], record["input"], record["output"]) for record in records]
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(args.busy)]
    try:
        times = {}
        for name in ("transformers", "vllm"):
            _, times[name] = timed(lambda name=name: compute_perplexity(texts, backend=backends[name],
                                                                       progress=False))
            log(f"contention: {name} {times[name]:.1f} s")
    finally:
        for process in busy:
            process.kill()
    return (f"| perplexity beside {args.busy} busy processes | {len(texts)} Alpaca texts | "
            f"{times['transformers']:.1f} | {times['vllm']:.1f} | {times['vllm'] / times['transformers']:.2f}x | | |")


def _engine_settings(backend: VLLMBackend) -> str:
    if backend.engine_args:
        return f"with {ENGINE_ARGS_ENV}='{json.dumps(backend.engine_args)}'"
    return "with vLLM's own settings (on a CPU it compiles the model with torch.compile before the first score)"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="Alpaca-style JSON or JSONL (default: the package's sample)")
    parser.add_argument("--conversation-data", help="MT-Bench-style JSONL with a `messages` column")
    parser.add_argument("--parallel-data", help="FLORES-style {lang, id, text} rows (default: the package's sample)")
    parser.add_argument("--limit", type=int, default=128, help="instruction records")
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=32, help="IFEval prompts to generate for")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--busy", type=int, default=4, help="busy processes beside the contention row")
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)

    transformers = TransformersBackend.from_pretrained()
    vllm, start = timed(VLLMBackend.from_pretrained)
    log(f"vLLM engine started in {start:.1f} s")
    backends = {"float64": TransformersBackend(*load_model(dtype="float64")), "transformers": transformers,
                "vllm": vllm}
    header = ("| job | rows | ours (transformers), s | vLLM, s | vLLM / ours | ours: max rel. diff. from float64 "
              "| vLLM: max rel. diff. from float64 |\n|---|---|---|---|---|---|---|")
    lines = [*metric_rows(args, backends), generation_row(args, backends)]
    if args.busy:
        lines.append(contention_row(args, backends))
    identity = backends["vllm"].identity()
    report = "\n".join([
        "# The vLLM backend beside the transformers backend",
        "",
        f"Machine: {machine_description(torch.device('cpu'))}; vLLM {identity['vllm']}, default model "
        f"(SmolLM2-135M-Instruct), float32. Each time is one run after a warm-up, the two backends in turn in "
        f"one process; compare the ratios, not the seconds, across machines.",
        "",
        f"vLLM's engine started in {start:.1f} s, {_engine_settings(vllm)}.",
        "",
        header,
        *lines,
        "",
        "Command: `" + " ".join(["python -m benchmarks.speed.vllm_backend",
                                 *(argv if argv is not None else sys.argv[1:])]) + "`",
    ])
    publish(report, args.output)


if __name__ == "__main__":
    main()
