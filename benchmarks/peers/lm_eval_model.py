"""lm-evaluation-harness tasks run by its own ``hf`` model (``HFLM``) and by our model ``hf-adapters``,
same loaded model, same batch size, in turn: the time of each and how far apart their numbers are.

Three tasks are written to a temporary folder from the data given: rolling perplexity of text chunks
(in windows of ``--max-length``), a multiple choice over instruction rows (each row's own output
against two others) and greedy generation on IFEval prompts. Both models see the same requests.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import lm_eval
import torch
import yaml
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from benchmarks.common import (
    instruction_records,
    log,
    machine_description,
    package_data,
    publish,
    relative_differences,
    timed,
)
from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, load_model
from hf_adapters.integrations.lm_eval_harness import HFAdaptersLM


def write_tasks(folder: Path, records: list[dict], chunks: list[str], prompts: list[str],
                max_gen_toks: int) -> dict[str, str]:
    """The three task files and their data in ``folder``; the task names by kind."""
    def data(name: str, rows: list[dict]) -> dict:
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
        return {"task": f"bench_{name}", "dataset_path": "json", "dataset_kwargs": {"data_files": str(path)},
                "test_split": "train"}

    def mean(metric: str) -> dict:
        return {"metric": metric, "aggregation": "mean", "higher_is_better": True}

    choice_rows = [{"question": row["instruction"], "label": 0,
                    "choices": [row["output"]] + [records[(i + k) % len(records)]["output"] for k in (1, 2)]}
                   for i, row in enumerate(records)]
    tasks = {
        "rolling": {**data("rolling", [{"text": chunk} for chunk in chunks]),
                    "output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
                    "metric_list": [{"metric": "word_perplexity"}, {"metric": "bits_per_byte"}]},
        "choice": {**data("choice", choice_rows), "output_type": "multiple_choice",
                   "doc_to_text": "{{question}}\nAnswer:", "doc_to_choice": "choices", "doc_to_target": "label",
                   "metric_list": [mean("acc")]},
        "generation": {**data("generation", [{"prompt": prompt} for prompt in prompts]),
                       "output_type": "generate_until", "doc_to_text": "prompt", "doc_to_target": "",
                       "generation_kwargs": {"until": [], "do_sample": False, "max_gen_toks": max_gen_toks},
                       "metric_list": [mean("exact_match")]},
    }
    for kind, config in tasks.items():
        (folder / f"{kind}.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return {kind: config["task"] for kind, config in tasks.items()}


def evaluate(lm: object, task: str, manager: TaskManager, limit: int | None = None) -> tuple[dict, float]:
    """lm-eval's results for one task (samples kept), and the seconds they took."""
    return timed(lambda: lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=manager, log_samples=True,
                                                 verbosity="ERROR", limit=limit))


def responses(result: dict, task: str) -> list:
    """Each sample's responses: logprobs for likelihood tasks, texts for generation."""
    values = []
    for sample in result["samples"][task]:
        for response in sample["resps"]:
            value = response[0]
            values.append(value[0] if isinstance(value, (tuple, list)) else value)
    return values


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="Alpaca-style JSON or JSONL for the multiple choice (default: the sample)")
    parser.add_argument("--rolling-data", help="a long text for the rolling task (default: the rows' outputs)")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID)
    parser.add_argument("--limit", type=int, default=64, help="rows of the multiple choice (default: 64)")
    parser.add_argument("--chunks", type=int, default=16, help="text chunks of 4,000 characters (default: 16)")
    parser.add_argument("--prompts", type=int, default=16, help="IFEval prompts generated for (default: 16)")
    parser.add_argument("--max-gen-toks", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=512, help="both models' window (default: 512)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)
    records, source = instruction_records(args.data, args.limit)
    text = Path(args.rolling_data).read_text(encoding="utf-8") if args.rolling_data and \
        Path(args.rolling_data).is_file() else "\n".join(row["output"] for row in records)
    chunks = [text[i:i + 4000] for i in range(0, len(text), 4000)][:args.chunks]
    prompts = [row["prompt"] for row in package_data("ifeval_input_data.jsonl")[:args.prompts]]
    model, tokenizer = load_model(args.model, dtype="float32", device="cpu")
    lines = [
        "# lm-evaluation-harness: its `hf` model and ours",
        "",
        f"Machine: {machine_description(torch.device('cpu'))}; lm-eval {lm_eval.__version__}. {args.model}, float32, "
        f"one loaded model for both, batch size {args.batch_size}, window {args.max_length} tokens; each task run by "
        f"`lm_eval.simple_evaluate` with one model and then the other, after a warm-up of both on 2 documents. "
        f"Rows: {source}.",
        "",
        "| task | requests | lm-eval `hf`, s | `hf-adapters`, s | our time / theirs | max relative difference |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    with tempfile.TemporaryDirectory() as folder:
        names = write_tasks(Path(folder), records, chunks, prompts, args.max_gen_toks)
        manager = TaskManager(include_path=folder)
        theirs = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=args.batch_size, max_length=args.max_length)
        ours = HFAdaptersLM(TransformersBackend(model, tokenizer), batch_size=args.batch_size,
                            max_length=args.max_length)
        for kind, task in names.items():
            log(f"{task}: a warm-up on 2 documents each, then lm-eval's hf and hf-adapters")
            for lm in (theirs, ours):  # our backend times its CPU kernels on first use: not in the timed run
                evaluate(lm, task, manager, limit=2)
            (their_result, their_time), (our_result, our_time) = evaluate(theirs, task, manager), \
                evaluate(ours, task, manager)
            mine, reference = responses(our_result, task), responses(their_result, task)
            if kind == "generation":
                same = sum(a == b for a, b in zip(mine, reference, strict=True))
                difference = f"{same} of {len(mine)} responses identical"
            else:
                difference = f"{relative_differences(mine, reference).max(initial=0.0):.1e} (log-likelihoods)"
            lines.append(f"| {kind} | {len(mine)} | {their_time:.1f} | {our_time:.1f} | {our_time / their_time:.2f} "
                         f"| {difference} |")
    lines += ["", "Command: `" + " ".join(["python -m benchmarks.peers.lm_eval_model",
                                             *(argv if argv is not None else sys.argv[1:])]) + "`"]
    publish("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
