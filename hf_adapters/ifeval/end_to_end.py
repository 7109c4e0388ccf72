"""IFEval end to end: generate a response to every prompt with a backend, score it, and keep the
samples and the results in an output folder (resumable: :mod:`hf_adapters.ifeval.run_folder`).

The settings follow lm-evaluation-harness's ``ifeval`` task: greedy decoding, at most 1280 new
tokens, no stop string but the end of turn / EOS; each prompt is one user turn of the model's chat
template. The results carry lm-eval's four names, and the table prints as lm-eval prints it.

Example:
    >>> from hf_adapters.backends import TransformersBackend
    >>> from hf_adapters.ifeval.end_to_end import run_ifeval
    >>> from hf_adapters.ifeval.prompts import read_prompts
    >>> backend = TransformersBackend.from_pretrained()  # doctest: +SKIP
    >>> results = run_ifeval(backend, read_prompts()[:6], "out/ifeval", max_new_tokens=48)  # doctest: +SKIP
    >>> results["prompts"], results["instructions"]  # doctest: +SKIP
    (6, 9)
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.core.wording import plural
from hf_adapters.ifeval import lm_eval_logs, run_folder
from hf_adapters.ifeval.evaluation import aggregate, score_rows
from hf_adapters.ifeval.prompts import prompt_token_ids
from hf_adapters.ifeval.responses import decode_response, response_fields

if TYPE_CHECKING:
    from hf_adapters.backends import LikelihoodBackend

#: lm-eval's ``ifeval`` task: greedy, ``max_gen_toks: 1280``, task version 4.0.
DEFAULT_MAX_NEW_TOKENS = 1280
LM_EVAL_TASK_VERSION = 4
#: lm-eval's names of the four accuracies, in the order its table prints them.
METRICS = ("inst_level_loose_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "prompt_level_strict_acc")


def run_settings(max_new_tokens: int, strip: bool) -> dict[str, Any]:
    """The settings that change responses or scores (batch size changes neither)."""
    return {"decoding": "greedy", "max_new_tokens": max_new_tokens, "stop": "end of turn / EOS",
            "prompt": "one user turn, the model's chat template (ChatML without one)", "strip_thinking": strip}


def run_manifest(identity: Mapping[str, Any] | None, settings: Mapping[str, Any],
                 data: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies a run: the model's identity, the settings and the prompt file."""
    return {"model": identity, "settings": dict(settings), "data": dict(data)}


def make_sample(row: Mapping[str, Any], text: str, tokens: int, max_new_tokens: int, strip: bool) -> dict[str, Any]:
    """One line of ``samples.jsonl``: the prompt's fields, the response and its per-instruction results."""
    sample = {"key": row["key"], "prompt": row["prompt"], **response_fields(text, strip)}
    [result] = score_rows([sample["response"]], [row])
    sample.update(
        instruction_id_list=list(row["instruction_id_list"]), kwargs=row.get("kwargs"),
        follow_instruction_list_strict=list(result.strict), follow_all_instructions_strict=all(result.strict),
        follow_instruction_list_loose=list(result.loose), follow_all_instructions_loose=all(result.loose),
        generated_tokens=tokens, reached_max_new_tokens=tokens >= max_new_tokens,
    )
    return sample


def _mean_stderr(values: Sequence[bool]) -> float:
    """lm-eval's standard error of a mean: sample standard deviation (n - 1) over the root of n."""
    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    return math.sqrt(sum((value - mean) ** 2 for value in values) / (n - 1)) / math.sqrt(n)


def score_samples(rows: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The four accuracies of the samples' responses (scored again), lm-eval's standard errors of
    the prompt-level ones, and counts."""
    results = score_rows([sample["response"] for sample in samples], rows)
    scores = aggregate(results)
    scores["prompt_level_strict_acc_stderr"] = _mean_stderr([all(r.strict) for r in results])
    scores["prompt_level_loose_acc_stderr"] = _mean_stderr([all(r.loose) for r in results])
    scores["prompts"] = len(results)
    scores["instructions"] = sum(len(r.strict) for r in results)
    return scores


def run_ifeval(
    backend: LikelihoodBackend,
    rows: Sequence[Mapping[str, Any]],
    output: str | Path,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    batch_size: int | None = None,
    strip: bool = False,
    data: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    log_format: str = "hf-adapters",
    lm_eval_run: lm_eval_logs.LmEvalRun | None = None,
) -> dict[str, Any]:
    """Generate, score and record every IFEval row (checked prompts: :mod:`hf_adapters.ifeval.prompts`).

    All prompts go to ``backend.generate`` at once (``batch_size`` decoding together; None: the
    backend's default), and each sample is appended to ``output/samples.jsonl`` as its response
    ends, so rerunning a killed run continues with the prompts not yet generated (a backend that
    does not report responses as they end has its samples saved when it returns). ``strip``
    removes a leading thinking block before scoring (the samples keep the raw text too). ``data``
    names the prompt file (:func:`~hf_adapters.ifeval.prompts.prompts_source`).
    ``log_format`` (:data:`~hf_adapters.ifeval.lm_eval_logs.LOG_FORMATS`) says which results a
    finished run writes: ``output/results.json`` (``hf-adapters``), lm-eval's results and samples
    files (``lm-eval``: :mod:`hf_adapters.ifeval.lm_eval_logs`, told ``lm_eval_run``), or both; the
    ones of another format left by an earlier run of the folder are removed.
    Returns what ``output/results.json`` holds: lm-eval's four accuracies, their counts, the model's
    identity, the settings, the data and the date (and, where written, lm-eval's files' paths
    under ``output``).
    """
    if log_format not in lm_eval_logs.LOG_FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(lm_eval_logs.LOG_FORMATS)}, got {log_format!r}")
    started = time.perf_counter()
    started_at = time.time()
    output = Path(output)
    settings = run_settings(max_new_tokens, strip)
    manifest = run_manifest(backend.identity(), settings, data or {})
    by_key = {row["key"]: row for row in rows}
    with run_folder.locked(output):
        done = {sample["key"]: sample for sample in run_folder.start(output, manifest, overwrite)}
        if stray := [key for key in done if key not in by_key]:
            raise run_folder.RunFolderError(
                f"{output} holds samples of {plural(len(stray), 'prompt')} this run does not include (key "
                f"{stray[0]!r}): it ran with more prompts (a larger --limit); rerun with them, or pass --overwrite.")
        todo = [row for row in rows if row["key"] not in done]
        ids = prompt_token_ids(backend.tokenizer, todo)
        generated = 0

        def keep(index: int, tokens: list[int]) -> None:
            nonlocal generated
            row = todo[index]
            if row["key"] in done:
                return
            sample = make_sample(row, decode_response(backend.tokenizer, tokens), len(tokens), max_new_tokens, strip)
            run_folder.append_samples(output, [sample])
            done[row["key"]] = sample
            generated += len(tokens)

        if todo:
            outputs = backend.generate(ids, max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress,
                                       on_result=keep)
            for index, tokens in enumerate(outputs):
                keep(index, tokens)
        ordered = [done[row["key"]] for row in rows]
        run_folder.rewrite_samples(output, ordered)
        seconds = time.perf_counter() - started
        results = {
            **score_samples(rows, ordered),
            "generated_tokens": sum(sample["generated_tokens"] for sample in ordered),
            "responses_at_max_new_tokens": sum(sample["reached_max_new_tokens"] for sample in ordered),
            "this_run": {"prompts_generated": len(todo), "tokens_generated": generated, "seconds": round(seconds, 1)},
            **manifest,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        if log_format == "hf-adapters":
            lm_eval_logs.remove_logs(output)
        else:
            written = lm_eval_logs.write_logs(output, backend, rows, ordered, manifest, lm_eval_run,
                                              max_new_tokens=max_new_tokens, batch_size=batch_size,
                                              started=started_at, seconds=time.perf_counter() - started)
            results["lm_eval_files"] = [str(path.relative_to(output)) for path in written]
        if log_format == "lm-eval":
            (output / run_folder.RESULTS).unlink(missing_ok=True)
        else:
            run_folder.write_results(output, results)
    return results


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "   N/A" if math.isnan(value) else f"{value:.4f}"
    return "" if value is None else str(value)


def results_table(results: Mapping[str, Any]) -> str:
    """The accuracies as lm-evaluation-harness prints them: a Markdown table, one row per metric."""
    header = ["Tasks", "Version", "Filter", "n-shot", "Metric", "", "Value", "", "Stderr"]
    right = [False, True, False, True, False, False, True, False, True]
    rows = []
    for number, metric in enumerate(METRICS):
        stderr = results.get(f"{metric}_stderr", math.nan)
        rows.append(["ifeval" if number == 0 else "", str(LM_EVAL_TASK_VERSION) if number == 0 else "", "none", "0",
                     metric, "↑", _cell(results[metric]), "±", _cell(stderr if stderr is not None else math.nan)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    widths = [max(w, 3) for w in widths]

    def line(cells: Sequence[str], header_line: bool = False) -> str:
        if header_line:
            return "|" + "|".join(c.center(w) for c, w in zip(cells, widths, strict=True)) + "|"
        return "|" + "|".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right,
                                                                                  strict=True)) + "|"

    rule = "|" + "|".join("-" * (w - 1) + ":" if r else "-" * w for w, r in zip(widths, right, strict=True)) + "|"
    return "\n".join([line(header, True), rule, *(line(r) for r in rows)])
