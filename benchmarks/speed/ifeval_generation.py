"""IFEval generation: our batched greedy generation against lm-evaluation-harness 0.4.13's HF backend.

Both generate for the same IFEval prompts with the same already-loaded model (float32, CPU), greedy,
with the same most new tokens: ours through ``greedy_generate`` (the generation of ``hf-adapters
ifeval``), lm-eval's through ``HFLM(pretrained=model).generate_until`` with the ``ifeval`` task's
generation settings (``until: []``, ``do_sample: false``, ``temperature: 0``), at its default batch
size of 1 and, with ``--lm-eval-batch-size``, at another. Each prompt is rendered once with the
model's chat template and given to both as text (lm-eval's ``--apply_chat_template`` renders the same
way). Reported: generated tokens per second, how many responses are identical, and the four IFEval
accuracies of each set of responses, all scored by ``hf_adapters.ifeval`` (lm-eval's own ifeval
scorer needs NLTK's ``punkt_tab`` download; our checks give the reference's results, instruction by
instruction).

Tokens per second count the tokens of each response as ``greedy_generate`` produced them (for a
response that differs from ours, its re-tokenized length), plus nothing for padding or for the rows
of a batch kept running after they ended.

    pip install lm-eval==0.4.13
    python -m benchmarks.speed.ifeval_generation --limit 32 --max-new-tokens 1280 \
        --output benchmarks/speed/IFEVAL_GENERATION.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
from collections.abc import Sequence

import torch

from benchmarks.common import cpu_name, publish
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, load_model
from hf_adapters.backends.transformers.cpu_kernels import cpu_flags
from hf_adapters.backends.transformers.generation import greedy_generate
from hf_adapters.core.options import DEFAULT_GENERATION_BATCH_SIZE
from hf_adapters.ifeval import compute_ifeval
from hf_adapters.ifeval.end_to_end import METRICS
from hf_adapters.ifeval.prompts import read_prompts, render_prompt
from hf_adapters.ifeval.responses import decode_response


def lm_eval_responses(model, tokenizer, texts: list[str], rows: list[dict], max_new_tokens: int,
                      batch_size: int) -> list[str]:
    """lm-eval 0.4.13's ``HFLM.generate_until`` on the rendered prompts, with the ifeval task's settings."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(model.device))
    settings = {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": max_new_tokens}
    requests = [Instance(request_type="generate_until", doc=row, arguments=(text, dict(settings)), idx=0)
                for text, row in zip(texts, rows, strict=True)]
    return lm.generate_until(requests, disable_tqdm=True)


def token_count(tokenizer, response: str, ours: str, our_tokens: int) -> int:
    return our_tokens if response == ours else len(tokenizer(response, add_special_tokens=False).input_ids)


def accuracy_cells(responses: Sequence[str], rows: Sequence[dict]) -> str:
    scores = compute_ifeval(list(responses), list(rows))
    return " | ".join(f"{scores[name]:.4f}" for name in METRICS)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=32, help="the first N IFEval prompts")
    parser.add_argument("--max-new-tokens", type=int, default=1280)
    parser.add_argument("--batch-size", type=int, default=DEFAULT_GENERATION_BATCH_SIZE, help="ours")
    parser.add_argument("--lm-eval-batch-size", type=int, default=None,
                        help="also time lm-eval at this batch size (its default, 1, is always timed)")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID)
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)

    import lm_eval

    model, tokenizer = load_model(args.model, dtype="float32", device="cpu")
    rows = read_prompts()[: args.limit]
    texts = [render_prompt(tokenizer, row["prompt"]) for row in rows]
    ids = [tokenizer(text, add_special_tokens=False).input_ids for text in texts]

    runs = []  # (name, seconds, responses, load averages before and after)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    tokens = greedy_generate(model, tokenizer, ids, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                             progress=True, desc="hf_adapters")
    ours = [decode_response(tokenizer, t) for t in tokens]
    runs.append((f"hf_adapters `greedy_generate`, batch size {args.batch_size}", time.perf_counter() - start, ours,
                 (load, os.getloadavg()[0])))
    our_tokens = [len(t) for t in tokens]
    for batch_size in [1] + ([args.lm_eval_batch_size] if args.lm_eval_batch_size else []):
        load = os.getloadavg()[0]
        start = time.perf_counter()
        responses = lm_eval_responses(model, tokenizer, texts, rows, args.max_new_tokens, batch_size)
        runs.append((f"lm-eval {lm_eval.__version__} `HFLM.generate_until`, batch size {batch_size}",
                     time.perf_counter() - start, responses, (load, os.getloadavg()[0])))

    flags = cpu_flags()
    lines = [
        "# IFEval generation: hf_adapters against lm-evaluation-harness",
        "",
        f"Command: `python -m benchmarks.speed.ifeval_generation --limit {args.limit} "
        f"--max-new-tokens {args.max_new_tokens}"
        f" --batch-size {args.batch_size}" + (f" --lm-eval-batch-size {args.lm_eval_batch_size}"
                                              if args.lm_eval_batch_size else "") + "`",
        "",
        f"{datetime.date.today().isoformat()}; {cpu_name()} ({os.cpu_count()} logical CPUs, {torch.get_num_threads()} "
        f"torch threads; avx512f {'yes' if 'avx512f' in flags else 'no'}, avx512_bf16 "
        f"{'yes' if 'avx512_bf16' in flags else 'no'}); torch {torch.__version__}; {args.model}, float32, CPU; "
        f"the first {len(rows)} IFEval prompts, one user turn of the chat template, greedy, at most "
        f"{args.max_new_tokens} new tokens, stop at the end of turn.",
        "",
        "| implementation | seconds | generated tokens | tokens/s | responses identical to ours | "
        + " | ".join(METRICS) + " | load average before / after |",
        "| --- | ---: | ---: | ---: | ---: |" + " ---: |" * len(METRICS) + " --- |",
    ]
    for name, seconds, responses, (before, after) in runs:
        count = sum(token_count(tokenizer, r, o, n) for r, o, n in zip(responses, ours, our_tokens, strict=True))
        same = sum(r == o for r, o in zip(responses, ours, strict=True))
        lines.append(f"| {name} | {seconds:.1f} | {count} | {count / seconds:.1f} | {same} of {len(rows)} | "
                     f"{accuracy_cells(responses, rows)} | {before:.1f} / {after:.1f} |")
    base = runs[1][1]
    lines += [
        "",
        f"Speed-up of ours over lm-eval at its default batch size: {base / runs[0][1]:.2f}x"
        + (f"; over lm-eval at batch size {args.lm_eval_batch_size}: {runs[2][1] / runs[0][1]:.2f}x"
           if len(runs) > 2 else "") + ".",
        f"Responses reaching the limit of {args.max_new_tokens} tokens (ours): "
        f"{sum(n >= args.max_new_tokens for n in our_tokens)} of {len(rows)}.",
        "Accuracies are over these prompts only, scored by hf_adapters.ifeval. The machine is shared: the load "
        "average column says how busy it was; compare the ratios.",
    ]
    report = "\n".join(lines) + "\n"
    publish(report, args.output)


if __name__ == "__main__":
    main()
