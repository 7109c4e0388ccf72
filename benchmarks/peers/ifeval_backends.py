"""An IFEval run of ``hf-adapters ifeval --backend vllm`` beside the transformers backend's: the four
accuracies of each, and how many of vLLM's responses are our greedy decoding.

A response is our greedy decoding when each of its tokens (and the end of turn after it, unless it
stopped at the token limit) is the most likely next token of our float32 model: one forward pass
per response (``score(..., greedy=True)``) checks that, where generating the 541 responses again
would take an hour. The response's tokens are its text encoded again; a response whose text does
not encode back to as many tokens as were generated is counted apart (its tokens are unknown).

    python -m benchmarks.peers.ifeval_backends --run out/ifeval_full_vllm \
        --reference benchmarks/peers/IFEVAL_FULL_RUN.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.common import machine_description, publish
from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID
from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts

ACCURACIES = ["prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"]


def greedy_counts(backend: TransformersBackend, samples: list[dict], max_new_tokens: int) -> dict[str, int]:
    """How many responses are our greedy decoding, are not, or could not be checked."""
    rows = {row["key"]: row for row in read_prompts()}
    prompts = prompt_token_ids(backend.tokenizer, [rows[sample["key"]] for sample in samples])
    stop = backend.model.generation_config.eos_token_id
    stop = stop[0] if isinstance(stop, list) else stop
    items, unknown = [], 0
    for prompt, sample in zip(prompts, samples, strict=True):
        tokens = backend.tokenizer(sample["response"], add_special_tokens=False).input_ids
        if len(tokens) != sample["generated_tokens"]:
            unknown += 1
            continue
        items.append((prompt, tokens + ([] if sample["generated_tokens"] >= max_new_tokens else [stop])))
    greedy = sum(score.greedy for score in backend.score_checked(items, greedy=True, truncate=False, progress=True))
    return {"greedy": greedy, "not greedy": len(items) - greedy, "tokens not recovered": unknown}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="the vLLM run's folder (results.json, samples.jsonl)")
    parser.add_argument("--reference", required=True, help="the transformers run's results (JSON)")
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)
    run = Path(args.run)
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    reference = json.loads(Path(args.reference).read_text(encoding="utf-8"))
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text(encoding="utf-8").splitlines() if line]
    backend = TransformersBackend.from_pretrained(DEFAULT_MODEL_ID, dtype="float32", device="cpu")
    counts = greedy_counts(backend, samples, results["settings"]["max_new_tokens"])
    lines = [
        "# IFEval, all prompts: the vllm backend beside the transformers backend",
        "",
        f"Checked on: {machine_description(torch.device('cpu'))}. Model {results['model']['model']}, float32, "
        f"greedy, at most {results['settings']['max_new_tokens']} new tokens.",
        "",
        "| | transformers | vllm |",
        "| --- | ---: | ---: |",
        *(f"| {name} | {reference[name]:.4f} | {results[name]:.4f} |" for name in ACCURACIES),
        f"| prompts | {reference['prompts']} | {results['prompts']} |",
        f"| generated tokens | {reference['generated_tokens']:,} | {results['generated_tokens']:,} |",
        f"| responses at the token limit | {reference['responses_at_max_new_tokens']} "
        f"| {results['responses_at_max_new_tokens']} |",
        f"| last run's part: prompts, tokens, seconds | {reference['this_run']['prompts_generated']}, "
        f"{reference['this_run']['tokens_generated']:,}, {reference['this_run']['seconds']} "
        f"| {results['this_run']['prompts_generated']}, {results['this_run']['tokens_generated']:,}, "
        f"{results['this_run']['seconds']} |",
        "",
        f"vLLM's responses that are our greedy decoding (every token, and the end of turn, the most likely "
        f"one of our float32 model, one forward pass each): {counts['greedy']} of {len(samples)}; not: "
        f"{counts['not greedy']}; text not encoding back to its tokens: {counts['tokens not recovered']}.",
        "",
        "Command: `" + " ".join(["python -m benchmarks.peers.ifeval_backends", *(argv or sys.argv[1:])]) + "`",
    ]
    publish("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
