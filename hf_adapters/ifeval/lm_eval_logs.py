"""An IFEval run's files in lm-evaluation-harness's format, as lm-eval 0.4.13 writes them with
``--log_samples --output_path DIR``: ``DIR/<model>/results_<time>.json`` and
``DIR/<model>/samples_ifeval_<time>.jsonl``, so that scripts written for lm-eval's output read a run
of ``hf-adapters ifeval --log-format lm-eval`` unchanged. lm-eval is not imported.

``<model>`` is the model as ``--model`` names it, sanitised as lm-eval sanitises ``pretrained=``
(``/`` becomes ``__``); ``<time>`` is the local time in ISO format with ``-`` for ``:``, the same in
both names. The keys, their order and the values follow lm-eval's: the four metrics with the
``none`` filter (``prompt_level_strict_acc,none``...), the standard error of the mean for the
prompt-level ones and ``"N/A"`` for the instruction-level ones, the per-sample fields with the
instruction-level metrics as lists of booleans, and lm-eval's SHA-256 hashes of each document,
prompt and target.

Where the files say something an lm-eval run would not:

* The prompt. This run gives the model each prompt as one user turn of its chat template (ChatML
  for a tokenizer without one) and the opening of the assistant's turn. lm-eval's ``ifeval`` task
  by default gives the bare prompt text (``doc_to_text: prompt``, no template; the model's
  tokenizer may add a BOS token) and applies the template only with ``--apply_chat_template``. So
  ``arguments.gen_args_0.arg_0``, and ``prompt_hash``, hold the text this run fed the model, as
  lm-eval records it with ``--apply_chat_template``; ``chat_template``, ``chat_template_sha`` and
  ``fewshot_as_multiturn`` are those of such a run too.
* ``doc`` is the prompt row as the prompt file holds it. The hub's ``google/IFEval`` gives every
  ``kwargs`` entry all 24 argument names (null when unused), so on the packaged prompts (the same
  541) ``doc`` and ``doc_hash`` differ from an lm-eval run on the hub's data set; ``doc_id`` and
  ``prompt_hash`` do not.
* The scores are this package's (:mod:`hf_adapters.ifeval.evaluation`, equal to the reference's on
  its 541 responses); ``process_results`` and the instruction-level ``aggregation`` in ``configs``
  name them instead of holding lm-eval's source code; ``config.model`` and ``model_source`` are
  ``hf-adapters:<backend>``; the seeds are null (greedy decoding, no seed set), as are
  ``lm_eval_version`` and ``git_hash``; the key ``hf_adapters`` holds this package's version and the
  run's manifest (model identity, settings, prompt file).
* With ``--strip-thinking``, ``resps`` holds the generated text and ``filtered_resps`` the text
  scored (without its thinking block).

Example:
    >>> from hf_adapters.ifeval.lm_eval_logs import hash_string, sanitize_model_name
    >>> sanitize_model_name("HuggingFaceTB/SmolLM2-135M-Instruct")
    'HuggingFaceTB__SmolLM2-135M-Instruct'
    >>> hash_string("0")[:16]  # every sample's target_hash
    '5feceb66ffc86f38'
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_adapters.files.json_values import write_atomically
from hf_adapters.ifeval.evaluation import score_rows
from hf_adapters.ifeval.prompts import PACKAGED_NAME, render_prompt

#: ``--log-format``: this package's ``results.json``, lm-eval's two files, or both.
LOG_FORMATS = ("hf-adapters", "lm-eval", "both")
TASK = "ifeval"
#: The lm-eval release whose files these mirror, and its ``ifeval`` task's version.
LM_EVAL_VERSION = "0.4.13"
TASK_VERSION = 4.0
#: The task's ``max_gen_toks``; another ``--max-new-tokens`` is recorded as lm-eval records ``--gen_kwargs``.
TASK_MAX_GEN_TOKS = 1280
#: lm-eval's metric names, in the order its ``process_results`` returns them, and its one filter.
METRICS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")
FILTER = "none"
#: lm-eval's default ``bootstrap_iters``: above 0, a mean's standard error is computed (in closed form).
BOOTSTRAP_ITERS = 100000
#: ``doc_to_target: 0``, as lm-eval logs and hashes it.
TARGET = "0"
#: The key of lm-eval's results file that holds what only this package says; it also marks the
#: files this package wrote (:func:`remove_logs` removes no other).
OWN_KEY = "hf_adapters"
#: The ChatML layout of :data:`hf_adapters.core.conversations.CHATML_TURN` as a Jinja chat template: the
#: ``chat_template`` recorded for a tokenizer without one.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class LmEvalRun:
    """What lm-eval's files record that the run itself cannot tell: ``--limit``, how many prompts
    the prompt file holds (``n-samples.original``; None: the run's) and ``--device``."""

    limit: int | None = None
    prompts_in_file: int | None = None
    device: str | None = None


def hash_string(text: str) -> str:
    """lm-eval's ``utils.hash_string``: the SHA-256 of the UTF-8 text, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sanitize_model_name(name: str) -> str:
    """lm-eval's ``utils.sanitize_model_name``: the folder its files go in."""
    return re.sub(r"[\"<>:/|\\?*\[\]]+", "__", name)


def generation_kwargs(max_new_tokens: int) -> dict[str, Any]:
    """The ``ifeval`` task's ``generation_kwargs``, ``max_gen_toks`` set to this run's."""
    return {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": max_new_tokens}


def chat_template(tokenizer: Any) -> str:
    """The chat template the prompts were rendered with: the tokenizer's (its ``default`` one when
    it has several), else :data:`CHATML_TEMPLATE`."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        template = template.get("default")
    return template or CHATML_TEMPLATE


def _dumps(value: Any, **options: Any) -> str:
    """JSON as lm-eval writes it: non-ASCII kept, anything else not serialisable as its ``str``."""
    return json.dumps(value, default=str, ensure_ascii=False, **options)


def sample_record(doc_id: int, row: Mapping[str, Any], sample: Mapping[str, Any], strict: Sequence[bool],
                  loose: Sequence[bool], prompt: str, max_new_tokens: int) -> dict[str, Any]:
    """One line of ``samples_ifeval_<time>.jsonl``: the row as ``doc``, the prompt fed to the model
    as ``arg_0``, the generated and scored text, the hashes, and the four per-sample metrics."""
    response = sample["response"]
    return {
        "doc_id": doc_id,
        "doc": dict(row),
        "target": TARGET,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": generation_kwargs(max_new_tokens)}},
        "resps": [[sample.get("raw_response", response)]],
        "filtered_resps": [response],
        "filter": FILTER,
        "metrics": list(METRICS),
        "doc_hash": hash_string(_dumps(dict(row), indent=2)),
        "prompt_hash": hash_string(prompt),
        "target_hash": hash_string(TARGET),
        "prompt_level_strict_acc": all(strict),
        "inst_level_strict_acc": list(strict),
        "prompt_level_loose_acc": all(loose),
        "inst_level_loose_acc": list(loose),
    }


def _mean(values: Sequence[bool]) -> float:
    return sum(values) / len(values)


def _mean_stderr(values: Sequence[bool]) -> float | str:
    """lm-eval's ``mean_stderr`` (sample standard deviation over the root of n); ``"N/A"`` below 2 values."""
    if len(values) < 2:
        return "N/A"
    mu = _mean(values)
    return math.sqrt(sum([(x - mu) ** 2 for x in values]) / (len(values) - 1)) / math.sqrt(len(values))


def task_scores(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``results.ifeval``: the four accuracies over the sample records, as lm-eval aggregates them."""
    scores: dict[str, Any] = {"name": TASK, "alias": TASK, "sample_len": len(records)}
    for metric in METRICS:
        values = [record[metric] for record in records]
        if metric.startswith("inst_level"):
            flat = [value for per_prompt in values for value in per_prompt]
            scores[f"{metric},{FILTER}"] = _mean(flat)
            scores[f"{metric}_stderr,{FILTER}"] = "N/A"  # lm-eval has no standard error for its aggregation
        else:
            scores[f"{metric},{FILTER}"] = _mean(values)
            scores[f"{metric}_stderr,{FILTER}"] = _mean_stderr(values)
    return scores


def task_config(data_path: str | None, max_new_tokens: int) -> dict[str, Any]:
    """``configs.ifeval``: lm-eval's ``ifeval`` task as it dumps its config, on ``google/IFEval``
    for the packaged prompts or on the JSON file ``data_path`` (as a local task config names it)."""
    if data_path is None:
        dataset: dict[str, Any] = {"dataset_path": "google/IFEval"}
    else:
        dataset = {"dataset_path": "json", "dataset_kwargs": {"data_files": {"train": str(Path(data_path).resolve())}}}
    inst_aggregation = "hf_adapters: the mean over all prompts' instructions (lm-eval's utils.agg_inst_level_acc)"
    return {
        "task": TASK, **dataset, "test_split": "train", "doc_to_text": "prompt", "doc_to_target": 0,
        "unsafe_code": False,
        "process_results": "hf_adapters.ifeval.evaluation.score_rows: strict and loose IFEval checks "
                           "(lm-eval's utils.process_results)",
        "description": "", "target_delimiter": " ", "fewshot_delimiter": "\n\n",
        "fewshot_config": {"sampler": "default", "split": None, "process_docs": None, "fewshot_indices": None,
                           "samples": None, "doc_to_text": "prompt", "doc_to_choice": None, "doc_to_target": 0,
                           "gen_prefix": None, "fewshot_delimiter": "\n\n", "target_delimiter": " "},
        "num_fewshot": 0,
        "metric_list": [{"metric": metric, "aggregation": inst_aggregation if metric.startswith("inst") else "mean",
                         "higher_is_better": True} for metric in METRICS],
        "output_type": "generate_until", "generation_kwargs": generation_kwargs(max_new_tokens), "repeats": 1,
        "should_decontaminate": False,
        "metadata": {"version": TASK_VERSION, "config_source": "hf_adapters.ifeval.lm_eval_logs"},
    }


@functools.cache
def _environment() -> dict[str, Any]:
    """lm-eval's environment fields: PyTorch's environment report and the transformers version."""
    try:
        from torch.utils.collect_env import get_pretty_env_info

        pretty = get_pretty_env_info()
    except Exception as error:  # noqa: BLE001 - recorded as lm-eval records it
        pretty = str(error)
    try:
        from transformers import __version__ as transformers_version
    except ImportError:
        transformers_version = "N/A"
    return {"pretty_env_info": pretty, "transformers_version": transformers_version, "lm_eval_version": None,
            "upper_git_hash": None}


def _tokenizer_fields(backend: Any) -> dict[str, Any]:
    """lm-eval's tokenizer fields (``add_tokenizer_info``)."""
    tokenizer = backend.tokenizer
    max_length = getattr(backend, "max_length", None)
    if max_length is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_length = limit if isinstance(limit, int) and limit < 10**12 else 2048  # HFLM's fallback
    return {
        "tokenizer_pad_token": [tokenizer.pad_token, str(tokenizer.pad_token_id)],
        "tokenizer_eos_token": [tokenizer.eos_token, str(tokenizer.eos_token_id)],
        "tokenizer_bos_token": [tokenizer.bos_token, str(tokenizer.bos_token_id)],
        "eot_token_id": tokenizer.eos_token_id,
        "max_length": max_length,
    }


def _model_fields(backend: Any, identity: Mapping[str, Any]) -> dict[str, Any]:
    """lm-eval's Hugging Face model fields (``HFLM.get_model_info``); -1 parameters when unknown."""
    model = getattr(backend, "model", None)
    return {
        "model_num_parameters": model.num_parameters() if hasattr(model, "num_parameters") else -1,
        "model_dtype": f"torch.{identity['dtype']}" if identity.get("dtype") else "",
        "model_revision": "main",
        "model_sha": identity.get("revision") or "",
    }


def results_record(
    backend: Any,
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any],
    run: LmEvalRun,
    *,
    max_new_tokens: int,
    batch_size: int | None,
    started: float,
    seconds: float,
    task_hash: str,
) -> dict[str, Any]:
    """``results_<time>.json``, keys in lm-eval's order. ``manifest``: the run's (model identity,
    settings, prompt file: :func:`hf_adapters.ifeval.end_to_end.run_manifest`); ``started``: the Unix
    time the run began; ``seconds``: how long it ran."""
    identity = dict(manifest.get("model") or {})
    model_name = str(identity.get("model") or type(getattr(backend, "model", backend)).__name__)
    if not model_name.strip("."):  # "." or "..": the folder's own name, not DIR itself or its parent
        model_name = str(Path(model_name).resolve())
    data_name = (manifest.get("data") or {}).get("name")
    data_path = None if data_name in (None, PACKAGED_NAME) else data_name
    source = f"hf-adapters:{getattr(backend, 'name', type(backend).__name__)}"
    template = chat_template(backend.tokenizer)
    model_args = {"pretrained": model_name, **({"dtype": identity["dtype"]} if identity.get("dtype") else {})}
    return {
        "results": {TASK: task_scores(records)},
        "group_subtasks": {},
        "configs": {TASK: task_config(data_path, max_new_tokens)},
        "versions": {TASK: TASK_VERSION},
        "n-shot": {TASK: 0},
        "higher_is_better": {TASK: dict.fromkeys(METRICS, True)},
        "n-samples": {TASK: {"original": run.prompts_in_file or len(rows), "effective": len(records)}},
        "config": {
            "model": source, "model_args": model_args, **_model_fields(backend, identity),
            "batch_size": batch_size, "batch_sizes": [], "device": run.device, "use_cache": None,
            "limit": run.limit, "bootstrap_iters": BOOTSTRAP_ITERS,
            "gen_kwargs": None if max_new_tokens == TASK_MAX_GEN_TOKS else {"max_gen_toks": max_new_tokens},
            "random_seed": None, "numpy_seed": None, "torch_seed": None, "fewshot_seed": None,
        },
        "git_hash": None,
        "date": started,
        **_environment(),
        **_tokenizer_fields(backend),
        "task_hashes": {TASK: task_hash},
        "model_source": source,
        "model_name": model_name,
        "model_name_sanitized": sanitize_model_name(model_name),
        "system_instruction": None,
        "system_instruction_sha": None,
        "fewshot_as_multiturn": True,
        "chat_template": template,
        "chat_template_sha": hash_string(template),
        "total_evaluation_time_seconds": str(seconds),
        OWN_KEY: {"version": _package_version(), "lm_eval_format": LM_EVAL_VERSION, **manifest},
    }


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hf_adapters")
    except PackageNotFoundError:
        return "unknown"


def write_logs(
    folder: str | Path,
    backend: Any,
    rows: Sequence[Mapping[str, Any]],
    samples: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any],
    run: LmEvalRun | None = None,
    *,
    max_new_tokens: int,
    batch_size: int | None = None,
    started: float,
    seconds: float,
) -> list[Path]:
    """Write lm-eval's two files for a finished run into ``folder/<model>/`` and return their paths
    (samples first, results last, each atomically), after removing the ones an earlier run of this
    folder wrote (:func:`remove_logs`). ``samples``: one per row, in row order, as ``samples.jsonl``
    holds them; their responses are scored again. ``backend`` gives the tokenizer the prompts were
    rendered with, and the model's facts lm-eval records."""
    run = run or LmEvalRun()
    if len(samples) != len(rows):
        raise ValueError(f"got {len(samples)} samples for {len(rows)} IFEval rows")
    scored = score_rows([sample["response"] for sample in samples], rows)
    records = [
        sample_record(doc_id, row, sample, result.strict, result.loose,
                      render_prompt(backend.tokenizer, row["prompt"]), max_new_tokens)
        for doc_id, (row, sample, result) in enumerate(zip(rows, samples, scored, strict=True))
    ]
    task_hash = hash_string("".join(r["doc_hash"] + r["prompt_hash"] + r["target_hash"] for r in records))
    results = results_record(backend, rows, records, manifest, run, max_new_tokens=max_new_tokens,
                             batch_size=batch_size, started=started, seconds=seconds, task_hash=task_hash)
    target = Path(folder) / results["model_name_sanitized"]
    target.mkdir(parents=True, exist_ok=True)
    date_id = datetime.datetime.now().isoformat().replace(":", "-")
    samples_path = target / f"samples_{TASK}_{date_id}.jsonl"
    results_path = target / f"results_{date_id}.json"
    write_atomically(samples_path, "".join(_dumps(record) + "\n" for record in records))
    write_atomically(results_path, _dumps(results, indent=2))
    remove_logs(folder, keep=(samples_path, results_path))
    return [results_path, samples_path]


def remove_logs(folder: str | Path, keep: Sequence[Path] = ()) -> None:
    """Remove the lm-eval files this package wrote in ``folder`` (a results file holding the key
    :data:`OWN_KEY`, and the samples file of the same time), except ``keep``; then their folder if
    it is left empty. Files lm-eval itself wrote there are kept."""
    kept = {Path(path) for path in keep}
    for results_path in sorted(Path(folder).glob("*/results_*.json")):
        if results_path in kept or not _is_own(results_path):
            continue
        date_id = results_path.stem.removeprefix("results_")
        for path in (results_path.with_name(f"samples_{TASK}_{date_id}.jsonl"), results_path):
            path.unlink(missing_ok=True)
        if not any(results_path.parent.iterdir()):
            results_path.parent.rmdir()


def _is_own(path: Path) -> bool:
    try:
        return OWN_KEY in json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False
