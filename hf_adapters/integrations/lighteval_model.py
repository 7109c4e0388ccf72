"""Any of our backends as a lighteval model (needs ``pip install 'hf_adapters[lighteval]'``).

lighteval asks a model three things about its :class:`~lighteval.tasks.requests.Doc`\\ s: the
log-likelihood of each choice after the prompt (and whether it is the greedy one), the log-likelihood
of a whole text, and a greedy response cut at the task's stop sequences. Each is one call of our
core, through the request logic the lm-eval model uses too (:mod:`hf_adapters.integrations.harness_requests`).
Prompts, tokens, truncation and stop sequences follow lighteval's own ``transformers`` model
(``TransformersModel``), so the numbers and answers are its numbers and answers, computed exactly
whatever the batch:

- a prompt is lighteval's (:class:`~lighteval.tasks.prompt_manager.PromptManager`: the chat template
  when the tokenizer has one, system prompt, few-shot examples), encoded with ``add_special_tokens``;
- a choice is encoded apart from its prompt (trailing spaces moved to it), and the prompt loses tokens
  from the left so that both fit ``max_length``; an empty prompt is the start token (BOS, else EOS);
- a response keeps up to ``max_length`` prompt tokens and gets ``generation_size`` new tokens (None: as many
  as ``max_length`` leaves; below 1 is refused), fewer where the prompt leaves less room (at least one), cut at
  EOS and at the task's stop sequences (EOS only with a chat template), as lighteval cuts it;
- a perplexity text (the Doc's query) has every token scored once after the start token, in lm-eval's
  disjoint windows of ``max_length`` (lighteval 0.13's own ``transformers`` model fails on these Docs).

Run it with lighteval's command line, this file as the model's definition (``MODEL`` is a model id,
or ``key=value,...`` of :class:`HFAdaptersModelConfig`)::

    lighteval custom "model_name=HuggingFaceTB/SmolLM2-135M-Instruct,batch_size=16" \\
        "$(python -c 'import hf_adapters.integrations.lighteval_model as m; print(m.__file__)')" \\
        "my_task|0" --custom-tasks my_tasks.py

or from Python, with any backend: ``Pipeline(..., model=HFAdaptersLightevalModel(backend=my_backend))``.
lighteval 0.13 builds its task registry only where every module of its own task catalogue imports,
which needs the network and huggingface_hub < 1 (transformers 5 needs >= 1): :func:`custom_tasks_only`
runs a pipeline on the custom tasks alone.
"""

# No ``from __future__ import annotations``: lighteval runs this file as a module of its own, unknown to
# ``sys.modules``, where pydantic could not resolve the config's annotations written as strings.
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lighteval.models.abstract_model import LightevalModel, ModelConfig
from lighteval.models.custom.custom_model import CustomModelConfig
from lighteval.models.model_output import ModelResponse
from lighteval.models.utils import uses_chat_template
from lighteval.tasks.prompt_manager import PromptManager
from lighteval.tasks.requests import Doc
from pydantic import PositiveInt
from transformers import PreTrainedTokenizerBase

from hf_adapters.backends import LikelihoodBackend, resolve_backend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID
from hf_adapters.integrations.harness_requests import (
    GreedyRequest,
    fit_context,
    greedy_responses,
    loglikelihoods,
    rolling_loglikelihoods,
)

#: lighteval's window when neither the config nor the model gives one.
DEFAULT_MAX_LENGTH = 2048


@contextmanager
def custom_tasks_only() -> Iterator[None]:
    """lighteval 0.13's task registries, built while the context lasts, hold the custom tasks only
    (``custom_tasks_directory``, ``--custom-tasks``), not lighteval's own catalogue.

    lighteval builds any registry by importing every module of that catalogue, and some of them do not
    import with this package's dependencies: ``tiny_benchmarks`` downloads a pickle from GitHub as it is
    imported (offline: a ConnectionError), ``mt_bench`` and ``mix_eval`` call
    ``HfApi.list_models(model_name=...)``, an argument huggingface_hub 1.0 removed (a TypeError)."""
    from lighteval.tasks.registry import Registry

    saved = {name: Registry.__dict__[name] for name in ("_load_from_files", "_load_from_subdirs")}
    Registry._load_from_files = staticmethod(lambda files, module_prefix: {})
    Registry._load_from_subdirs = staticmethod(lambda subdirs: {})
    try:
        yield
    finally:
        for name, loader in saved.items():
            setattr(Registry, name, loader)


class HFAdaptersModelConfig(ModelConfig):
    """The model's settings, as lighteval's ``TransformersModelConfig`` names them.

    Attributes:
        model_name: the model the backend loads (hub id, folder or ``.gguf``; default: the embedded
            SmolLM2-135M-Instruct).
        backend: the name of a registered backend (``transformers``, the default, or ``vllm``).
        batch_size: most rows per forward pass (None: the backend's choice); it never changes a number.
        max_length: the longest sequence a request reads (default: the model's position limit, else 2048).
        dtype, device: as everywhere in this package (default: float32 on the CPU, bfloat16 on a GPU).
        add_special_tokens: add the tokenizer's special tokens when encoding a prompt (lighteval's default, True).
        override_chat_template: True or False to use the chat template or not (None: when the tokenizer has one).
        generation_parameters: lighteval's; greedy only (its defaults), anything else is refused.
    """

    model_name: str = DEFAULT_MODEL_ID
    backend: str = "transformers"
    batch_size: PositiveInt | None = None
    max_length: PositiveInt | None = None
    dtype: str | None = None
    device: str | None = None
    add_special_tokens: bool = True
    override_chat_template: bool | None = None


def hf_adapters_config(config: ModelConfig | None) -> HFAdaptersModelConfig:
    """The settings a config gives: ours as they are; from ``lighteval custom``'s ``CustomModelConfig``,
    its model name read as a model id, or as ``key=value,...`` of :class:`HFAdaptersModelConfig`.

        >>> hf_adapters_config(CustomModelConfig(model_name="model_name=some/model,batch_size=8",
        ...                                      model_definition_file_path=__file__)).batch_size
        8
    """
    if config is None:
        return HFAdaptersModelConfig()
    if isinstance(config, HFAdaptersModelConfig):
        return config
    if not isinstance(config, CustomModelConfig):
        raise TypeError(f"HFAdaptersLightevalModel takes an HFAdaptersModelConfig or lighteval's CustomModelConfig, "
                        f"not a {type(config).__name__}.")
    name = config.model_name
    ours = HFAdaptersModelConfig.from_args(name) if "=" in name else HFAdaptersModelConfig(model_name=name)
    shared = config.model_fields_set - {"model_name", "model_definition_file_path"}
    return ours.model_copy(update={field: getattr(config, field) for field in shared})


class HFAdaptersLightevalModel(LightevalModel):
    """lighteval's model interface over one of our likelihood backends.

    Args:
        config: :class:`HFAdaptersModelConfig`, or lighteval's ``CustomModelConfig`` (what ``lighteval
            custom`` passes: :func:`hf_adapters_config`); None: the defaults.
        backend: a :class:`~hf_adapters.backends.LikelihoodBackend` to run instead of the one the config
            names (its ``model_name`` then only labels the results).

    Responses are computed on every run: lighteval's sample cache is not used (in 0.13 it returns no
    result for a perplexity Doc).
    """

    def __init__(self, config: ModelConfig | None = None, backend: LikelihoodBackend | None = None):
        self.config = hf_adapters_config(config)
        if self.config.max_length is not None and self.config.max_length < 2:
            raise ValueError(f"max_length={self.config.max_length} leaves no room for a request: it needs a token of "
                             "context (the prompt, or the start token) and one to score or generate; give 2 or more.")
        if unsupported := self.config.generation_parameters.model_dump(exclude_defaults=True):
            raise ValueError(f"hf-adapters decodes greedily and does not apply the generation parameters "
                             f"{sorted(unsupported)}.")
        self.backend = backend or resolve_backend(self.config.backend, model_id=self.config.model_name,
                                                  dtype=self.config.dtype, device=self.config.device)
        self._max_length = self.config.max_length or self.backend.max_length or DEFAULT_MAX_LENGTH
        self.use_chat_template = uses_chat_template(tokenizer=self.tokenizer,
                                                    override_chat_template=self.config.override_chat_template)
        self.prompt_manager = PromptManager(use_chat_template=self.use_chat_template, tokenizer=self.tokenizer,
                                            system_prompt=self.config.system_prompt)
        self._sample_cache = None

    @property
    def _cache(self) -> Any:
        """lighteval's sample cache for this config, made when lighteval's pipeline asks for it (to hand
        it its task registry); no response is read from it or written to it."""
        if self._sample_cache is None:
            from lighteval.utils.cache_management import SampleCache

            self._sample_cache = SampleCache(self.config)
        return self._sample_cache

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.backend.tokenizer

    @property
    def add_special_tokens(self) -> bool:
        return self.config.add_special_tokens

    @property
    def max_length(self) -> int:
        return self._max_length

    def loglikelihood(self, docs: list[Doc]) -> list[ModelResponse]:
        """Each Doc's choices: their log-likelihoods after the prompt and whether each is the greedy
        continuation (lighteval's ``argmax_logits_eq_gold``)."""
        encoded, pairs = [], []
        for doc in docs:
            contexts, continuations = self.tok_encode_pair(self.prompt_manager.prepare_prompt(doc), doc.choices,
                                                           pairwise=True)
            encoded.append((contexts[0] if contexts else [], continuations))
            pairs += [(fit_context(context, continuation, self.max_length), continuation)
                      for context, continuation in zip(contexts, continuations, strict=True)]
        scores = iter(loglikelihoods(self.backend, pairs, batch_size=self.config.batch_size))
        responses = []
        for context, continuations in encoded:
            logprobs, greedy = zip(*[next(scores) for _ in continuations], strict=True) if continuations else ((), ())
            responses.append(ModelResponse(input_tokens=list(context), output_tokens=continuations,
                                           logprobs=list(logprobs), argmax_logits_eq_gold=list(greedy)))
        return responses

    def loglikelihood_rolling(self, docs: list[Doc]) -> list[ModelResponse]:
        """The log-likelihood of each Doc's query, every token scored once (the one number of ``logprobs``)."""
        texts = [self.tok_encode(doc.query, add_special_tokens=False) for doc in docs]
        totals = rolling_loglikelihoods(self.backend, texts, self.max_length, batch_size=self.config.batch_size)
        return [ModelResponse(output_tokens=[ids], logprobs=[total]) for ids, total in zip(texts, totals, strict=True)]

    def greedy_until(self, docs: list[Doc]) -> list[ModelResponse]:
        """Each Doc's greedy response, as lighteval's ``transformers`` model gives it one Doc at a time."""
        requests = [self._greedy_request(doc) for doc in docs]
        texts = greedy_responses(self.backend, requests, batch_size=self.config.batch_size)
        return [ModelResponse(input_tokens=list(request.prompt_ids), text=[text])
                for request, text in zip(requests, texts, strict=True)]

    def _greedy_request(self, doc: Doc) -> GreedyRequest:
        if doc.num_samples > 1 or doc.use_logits:
            raise ValueError(f"hf-adapters decodes one greedy response without logits; the task {doc.task_name!r} "
                             f"asks for {doc.num_samples} samples{' with logits' if doc.use_logits else ''}.")
        if doc.generation_size is not None and doc.generation_size < 1:
            raise ValueError(f"The task {doc.task_name!r} asks for generation_size={doc.generation_size} new tokens: "
                             f"give a positive number, or None for as many as max_length ({self.max_length}) leaves.")
        prompt = self.tok_encode(self.prompt_manager.prepare_prompt(doc))[-self.max_length:]
        room = self.max_length - len(prompt)
        budget = max(1, room if doc.generation_size is None else min(room, doc.generation_size))
        stops = [self.tokenizer.eos_token] + ([] if self.use_chat_template else list(doc.stop_sequences or []))
        return GreedyRequest(prompt, budget, tuple(stop for stop in stops if stop))
