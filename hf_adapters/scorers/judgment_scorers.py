"""Scores from a model's judgment of each instruction row, under OpenDataArena-Tool's scorer names:
``DeitaCScorer`` and ``DeitaQScorer`` (DEITA's complexity and quality), ``AskLlmScorer``,
``SelectitTokenScorer`` and the reward models (``RewardModelScorer``, and ``SkyworkRewardScorer``,
``AtheneScorer``, ``InfOrmScorer`` with their models as defaults). Their configs run as
OpenDataArena-Tool's do (``model``, ``max_length``, ``batch_size`` and each scorer's own keys)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from hf_adapters.backends import LikelihoodBackend, RewardModelBackend
from hf_adapters.backends.transformers.reward_model import refuse_remote_code
from hf_adapters.formulas.ask_llm import AskLlmOptions, score_ask_llm
from hf_adapters.formulas.deita import DeitaOptions, score_deita
from hf_adapters.formulas.reward import RewardOptions, score_reward
from hf_adapters.formulas.selectit import SelectitOptions, score_selectit
from hf_adapters.scorers.base import ModelRowScorer, register_scorer


class InstructionRowScorer(ModelRowScorer):
    """Base of the scorers that read instruction rows (``instruction``, an optional ``input``, ``output``)
    and pass them, with the row labels, to a formula ``score(backend, instructions, inputs, outputs,
    options, ...)``."""

    roles = {"instruction": "instruction", "input": "input", "output": "output"}
    optional_roles = ("input",)
    text_roles = ("instruction", "input", "output")
    formula: ClassVar[Any]

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        return type(self).formula(self.load(), texts["instruction"], texts["input"], texts["output"], self.spec,
                                  batch_size=self.run.batch_size, progress=self.progress, labels=labels)


@register_scorer
class DeitaCScorer(InstructionRowScorer):
    """DEITA's complexity of each row's instruction: the expected rating 1-6 of the scorer model
    (``hkust-nlp/deita-complexity-scorer``; any causal LM with the vocabulary entries "1".."6");
    see :mod:`hf_adapters.formulas.deita`. The output is not read.

    Example config::

        name: DeitaCScorer
        model: hkust-nlp/deita-complexity-scorer
        max_length: 2048
    """

    name = "DeitaCScorer"
    option_spec = DeitaOptions
    option_defaults = {"aspect": "complexity"}
    roles = {"instruction": "instruction", "input": "input"}
    text_roles = ("instruction", "input")
    outputs = ("deita_complexity",)
    result_keys = ("deita_scores",)
    formula = staticmethod(score_deita)

    def check_spec(self) -> None:
        if self.spec.aspect != "complexity":
            raise ValueError("DeitaCScorer rates complexity; DeitaQScorer rates quality.")

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        return super().result({**texts, "output": [""] * len(texts["instruction"])}, labels)


@register_scorer
class DeitaQScorer(InstructionRowScorer):
    """DEITA's quality of each row's output given its instruction: the expected rating 1-6 of the
    scorer model (``hkust-nlp/deita-quality-scorer``); see :mod:`hf_adapters.formulas.deita`.

    Example config::

        name: DeitaQScorer
        model: hkust-nlp/deita-quality-scorer
        max_length: 2048
    """

    name = "DeitaQScorer"
    option_spec = DeitaOptions
    option_defaults = {"aspect": "quality"}
    outputs = ("deita_quality",)
    result_keys = ("deita_scores",)
    formula = staticmethod(score_deita)

    def check_spec(self) -> None:
        if self.spec.aspect != "quality":
            raise ValueError("DeitaQScorer rates quality; DeitaCScorer rates complexity.")


@register_scorer
class AskLlmScorer(InstructionRowScorer):
    """Ask-LLM: the mean log-probability of ``yes_token`` after ``prompt`` and the row (higher: the
    model judges the row better); see :mod:`hf_adapters.formulas.ask_llm`.

    Example config::

        name: AskLlmScorer
        model: HuggingFaceTB/SmolLM2-135M-Instruct
        max_length: 2048
        prompt: "Is the following data high quality? Please answer yes or no.\\n\\n"
        yes_token: "yes"
    """

    name = "AskLlmScorer"
    option_spec = AskLlmOptions
    seed_keys = ("max_length", "prompt", "yes_token")
    outputs = ("ask_llm",)
    result_keys = ("ask_llm_scores",)
    formula = staticmethod(score_ask_llm)


@register_scorer
class SelectitTokenScorer(InstructionRowScorer):
    """SelectIT's token-level score: the mean expected rating 1-5 over ``k`` rating prompts (the lines of
    ``rp_file``), divided by ``1 + alpha * std``; see :mod:`hf_adapters.formulas.selectit`.

    Example config::

        name: SelectitTokenScorer
        model: HuggingFaceTB/SmolLM2-135M-Instruct
        max_length: 512
        rp_file: rating_prompts.txt
        k: 5
        alpha: 0.2
    """

    name = "SelectitTokenScorer"
    option_spec = SelectitOptions
    seed_keys = ("max_length", "k", "alpha")
    outputs = ("selectit",)
    result_keys = ("selectit_scores",)
    formula = staticmethod(score_selectit)


@register_scorer
class RewardModelScorer(InstructionRowScorer):
    """A reward model's score of each row: the scalar head of a decoder sequence classifier at the last token
    of the chat-templated row; see :mod:`hf_adapters.formulas.reward`. The model loads on the
    ``reward-model`` backend (:class:`~hf_adapters.backends.RewardModelBackend`). Each named subclass
    defaults to the model OpenDataArena-Tool's scorer of that name reads.

    Example config::

        name: RewardModelScorer
        model: path/to/Skywork-Reward-V2-Llama-3.1-8B-40M
        max_length: 4096
    """

    name = "RewardModelScorer"
    joins_score_sets = False
    option_spec = RewardOptions
    outputs = ("reward",)
    result_keys = ("rewards",)
    formula = staticmethod(score_reward)
    #: The model a config without ``model`` reads.
    default_model: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.default_model:
            cls.options = {**cls.options, "model": cls.default_model}

    def load(self) -> LikelihoodBackend:
        """The reward model: the caller's backend, one around the caller's model, else ``model`` loaded by
        the ``reward-model`` backend (or the one named, such as ``vllm``), a model that needs its own code
        refused whichever backend would load it."""
        if self._backend is None:
            if self.run.model is not None:
                self._backend = RewardModelBackend(self.run.model, self.run.tokenizer)
            else:
                backend = self.run.backend if self.run.backend is not None else RewardModelBackend.name
                if isinstance(backend, str):
                    refuse_remote_code(self.run.model_id)
                self._backend = replace(self.run, backend=backend).load()
        return self._backend


@register_scorer
class SkyworkRewardScorer(RewardModelScorer):
    """Skywork-Reward's score of each row (``Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M`` by default)."""

    name = "SkyworkRewardScorer"
    default_model = "Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M"


@register_scorer
class AtheneScorer(RewardModelScorer):
    """Athene-RM's score of each row (``Nexusflow/Athene-RM-8B`` by default; its architecture needs its own
    code, so that model is refused with a line naming it)."""

    name = "AtheneScorer"
    default_model = "Nexusflow/Athene-RM-8B"


@register_scorer
class InfOrmScorer(RewardModelScorer):
    """INF-ORM's score of each row (``infly/INF-ORM-Llama3.1-70B`` by default)."""

    name = "InfOrmScorer"
    default_model = "infly/INF-ORM-Llama3.1-70B"
