"""Any of our backends as an lm-evaluation-harness model, registered as ``hf-adapters``.

lm-eval asks a model three things: the log-likelihood of a continuation given a context (with
whether it is the greedy one), the log-likelihood of a whole text in rolling windows, and greedy
generation until stop sequences. Each is one call of our core: :meth:`LikelihoodBackend.score` for
the first two, :meth:`LikelihoodBackend.generate` for the third. Tokens, windows, truncation and stop
sequences follow lm-eval's ``hf`` model (``HFLM``), so the numbers are its numbers, computed exactly,
whatever the batch:

- a context and continuation longer than ``max_length + 1`` tokens lose context tokens from the left;
- an empty context is the prefix token (BOS, else EOS), as :func:`~hf_adapters.core.likelihood.start_token_id`;
- rolling windows are lm-eval's disjoint windows (:func:`~hf_adapters.core.texts.rolling_items`);
- generation is greedy only, cut at the first stop sequence (and EOS) as ``HFLM`` cuts it.

The backend calls are those of the lighteval model too (:mod:`hf_adapters.integrations.harness_requests`).

Run it with ``hf-adapters lm-eval --model hf-adapters --model_args backend=vllm,model_id=... --tasks ...``
(lm-eval's own command line, with this model registered), or from Python:

    >>> import lm_eval
    >>> from hf_adapters.integrations.lm_eval_harness import HFAdaptersLM
    >>> results = lm_eval.simple_evaluate(model=HFAdaptersLM(batch_size=16), tasks=["ifeval"])  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs
from lm_eval.utils import simple_parse_args_string

from hf_adapters.backends import LikelihoodBackend, resolve_backend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, resolve_device
from hf_adapters.integrations.harness_requests import (
    GreedyRequest,
    fit_context,
    greedy_responses,
    loglikelihoods,
    rolling_loglikelihoods,
)
from hf_adapters.integrations.lm_eval_harness.errors import ModelArgumentError

logger = logging.getLogger(__name__)

#: lm-eval's ``HFLM`` window when neither the caller nor the model gives one.
DEFAULT_MAX_LENGTH = 2048
#: The generation settings a greedy decoder honours; sampling settings are read only to refuse them.
GREEDY_SETTINGS = frozenset({"do_sample", "temperature", "top_p", "top_k", "until", "max_gen_toks"})
#: lm-eval's own settings, which it passes to every model beside ``--model_args`` (``--batch_size``...).
LM_EVAL_SETTINGS = ("batch_size", "max_batch_size", "device")
#: The device lm-eval 0.4.13's command line passes when none is named.
LM_EVAL_DEFAULT_DEVICE = "cuda:0"
#: This model's arguments, as an error lists them.
ARGUMENTS = ("backend", "model_id", "pretrained", "batch_size", "max_length", "max_gen_toks", "dtype", "device",
             "add_bos_token")


def one_value_each(model_args: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """``model_args`` with lm-eval's own ``settings`` (:data:`LM_EVAL_SETTINGS`; None: not given) added.

    As for lm-eval's ``hf`` model, a setting given in one place is used; given in both with one value,
    that value. Given with two values, it is a :class:`ModelArgumentError` saying so (where ``hf``
    stops with Python's "got multiple values for keyword argument")."""
    merged = dict(model_args)
    for name, value in settings.items():
        if value is None:
            continue
        if name in merged and str(merged[name]) != str(value):
            raise ModelArgumentError(f"{name} is given twice, {merged[name]} in --model_args and {value} as "
                                     f"lm-eval's --{name}: give it in one place.")
        merged[name] = value
    return merged


def _batch_size(value: int | str | None) -> int | None:
    """lm-eval's ``--batch_size`` as our rows per forward pass: ``auto`` or ``auto:N`` (or none) leaves it
    to the backend; else a whole number of at least 1."""
    if value is None or (isinstance(value, str) and re.fullmatch(r"auto(:\d+)?", value.strip())):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelArgumentError(f"batch_size must be a whole number of rows of at least 1, or 'auto' (the "
                                 f"backend's choice); got {value!r}.")
    return value


def _whole_number(name: str, value: Any, least: int) -> int:
    """``value`` if it is a whole number of at least ``least`` (lm-eval reads ``8`` in ``--model_args`` as one)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ModelArgumentError(f"{name} must be a whole number of at least {least}; got {value!r}.")
    return value


def _available(device: str | None) -> str | None:
    """``device`` (a :class:`ModelArgumentError` for a name torch does not know), or None (the default
    device) for a CUDA device on a machine without one, as ``HFLM`` falls back. lm-eval's command line
    passes ``cuda:0`` when no device is named: that fallback is said at debug level only (lm-eval's
    ``--verbosity DEBUG`` shows it); that of any other CUDA device, with a warning."""
    if device is None:
        return None
    try:
        resolve_device(device)
    except RuntimeError as error:
        raise ModelArgumentError(f"device={device!r} is not a device torch knows (cpu, cuda, cuda:1, mps...).") \
            from error
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        level = logging.DEBUG if device == LM_EVAL_DEFAULT_DEVICE else logging.WARNING
        logger.log(level, "Device %r is not available here (no CUDA); the model runs on the default device.", device)
        return None
    return device


@register_model("hf-adapters")
class HFAdaptersLM(TemplateLM):
    """lm-eval's model interface over one of our likelihood backends.

    Args:
        backend: a :class:`~hf_adapters.backends.LikelihoodBackend`, or the name of a registered one
            (``transformers``, the default, or ``vllm``).
        model_id: the model the backend loads (hub id, folder or ``.gguf``; default: the embedded
            SmolLM2-135M-Instruct). ``pretrained`` is accepted for it, as lm-eval's ``hf`` model names it.
        batch_size: most rows per forward pass, a whole number of at least 1 (``auto``: the backend's
            choice). It never changes a number. lm-eval's own ``--batch_size`` and ``--device`` are these
            arguments too: each may be given in one place, or in both with one value (:func:`one_value_each`).
        max_length: the longest sequence a request reads (default: the model's position limit, else 2048).
        max_gen_toks: new tokens per response when a task does not say (lm-eval's default, 256).
        dtype, device: as everywhere in this package (default: float32 on the CPU, bfloat16 on a GPU); a
            CUDA device on a machine without one is the default device, as in ``HFLM`` (said at debug level
            for lm-eval's unasked ``cuda:0``, with a warning for a CUDA device named).
        add_bos_token: add the tokenizer's special tokens when encoding (None: the tokenizer's default), as ``HFLM``.
    """

    def __init__(self, backend: LikelihoodBackend | str | None = None, model_id: str | None = None, *,
                 pretrained: str | None = None, batch_size: int | str | None = None, max_length: int | None = None,
                 max_gen_toks: int = 256, dtype: str | None = None, device: str | None = None,
                 add_bos_token: bool | None = None, **unused: Any):
        super().__init__()
        if model_id is not None and pretrained is not None and model_id != pretrained:
            raise ModelArgumentError(f"Pass the model as model_id or pretrained, not both ({model_id!r}, "
                                     f"{pretrained!r}).")
        unused.pop("max_batch_size", None)  # lm-eval's `auto` search bound: our batches need none
        if unused:
            raise ModelArgumentError(f"hf-adapters does not take {', '.join(sorted(unused))}: remove it from "
                                     f"--model_args (its arguments: {', '.join(ARGUMENTS)}).")
        self.rows_per_batch = _batch_size(batch_size)
        if max_length is not None:
            _whole_number("max_length", max_length, 2)
        self.max_gen_toks = _whole_number("max_gen_toks", max_gen_toks, 1)
        try:
            self.backend = resolve_backend(backend, model_id=model_id or pretrained or DEFAULT_MODEL_ID, dtype=dtype,
                                           device=_available(device))
        except ValueError as error:  # an unknown backend or dtype
            raise ModelArgumentError(str(error)) from error
        self.tokenizer = self.backend.tokenizer
        self._max_length = max_length or self.backend.max_length or DEFAULT_MAX_LENGTH
        self.add_bos_token = add_bos_token

    @classmethod
    def create_from_arg_obj(cls, arg_dict: Mapping[str, Any],
                            additional_config: Mapping[str, Any] | None = None) -> HFAdaptersLM:
        """The model from ``--model_args`` (a dict) and lm-eval's own settings (:func:`one_value_each`)."""
        return cls(**one_value_each(arg_dict, additional_config or {}))

    @classmethod
    def create_from_arg_string(cls, arg_string: str,
                               additional_config: Mapping[str, Any] | None = None) -> HFAdaptersLM:
        """The model from ``--model_args`` (``key=value,...``) and lm-eval's own settings (:func:`one_value_each`)."""
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        return self.backend.start_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """``string``'s tokens, special tokens as ``HFLM`` adds them (none again after a leading BOS)."""
        if add_special_tokens is None:
            add_special_tokens = self.add_bos_token
            bos = self.tokenizer.decode(self.prefix_token_id)
            if bos and string.startswith(bos):
                add_special_tokens = False
        settings = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return self.tokenizer.encode(string, **settings)

    def _loglikelihood_tokens(self, requests: Sequence[tuple[tuple[str, str], list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """(log-likelihood, is greedy) of each continuation; the context is cut from the left to fit
        ``max_length`` model inputs (the last continuation token is not read), as ``HFLM`` cuts it."""
        pairs = [(fit_context(context_ids, continuation_ids, self.max_length + 1), list(continuation_ids))
                 for _, context_ids, continuation_ids in requests]
        return loglikelihoods(self.backend, pairs, batch_size=self.rows_per_batch,
                              progress=False if disable_tqdm else None)

    def loglikelihood_rolling(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[float]:
        """The log-likelihood of each whole text, every token scored once in lm-eval's disjoint windows
        of ``max_length`` (0 for a text with no token, as lm-eval has it; NaN where the backend could not
        compute a token's, as its score says)."""
        return rolling_loglikelihoods(self.backend, [self.tok_encode(request.args[0]) for request in requests],
                                      self.max_length, batch_size=self.rows_per_batch,
                                      progress=False if disable_tqdm else None)

    def generate_until(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[str]:
        """Each request's greedy response, cut at its first stop sequence (and EOS); the prompt loses
        tokens from the left to leave room for ``max_gen_toks``, as ``HFLM`` does (an empty one is the prefix token)."""
        eos = self.tokenizer.decode([self.eot_token_id])
        greedy = []
        for request in requests:
            settings = normalize_gen_kwargs(dict(request.args[1]), self.max_gen_toks)
            if settings.get("do_sample") or settings.get("temperature", 0.0) > 0.0:
                raise ValueError("hf-adapters decodes greedily; this task samples (do_sample=True or temperature > 0).")
            if unknown := set(settings) - GREEDY_SETTINGS:
                raise ValueError(f"hf-adapters decodes greedily and does not apply {sorted(unknown)}.")
            max_gen_toks = settings["max_gen_toks"]
            room = self.max_length - max_gen_toks
            if room <= 0:
                raise ValueError(f"max_gen_toks={max_gen_toks} leaves no room for a prompt in "
                                 f"max_length={self.max_length}.")
            greedy.append(GreedyRequest(self.tok_encode(request.args[0])[-room:], max_gen_toks,
                                        tuple(handle_stop_sequences(settings.get("until"), eos=eos))))
        return greedy_responses(self.backend, greedy, batch_size=self.rows_per_batch,
                                progress=False if disable_tqdm else None)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The conversation as the model's chat template writes it (lm-eval's ``--apply_chat_template``)."""
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)
