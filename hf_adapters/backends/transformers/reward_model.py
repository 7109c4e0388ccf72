"""Reward models in this process (:class:`RewardModelBackend`): a ``transformers`` sequence classifier
whose linear ``score`` head reads a decoder's last token, as Llama, Qwen2, Mistral and Gemma reward
models do (Skywork-Reward among them).

Sequences are scored in length-sorted batches bounded by the device's token budget, right-padded with
an attention mask; the head runs on each sequence's own last token only, so a value does not depend on
the batch beyond float rounding. A model whose architecture needs its own code (``auto_map`` in its
config, or an architecture transformers does not ship) is refused, naming it: loading a model never runs
its code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_adapters.backends import loading as models
from hf_adapters.backends.base import LikelihoodBackend
from hf_adapters.backends.transformers.batching import batch_limits
from hf_adapters.backends.transformers.model_properties import model_max_length
from hf_adapters.core.likelihood import ContinuationScore, Item, make_batches


class RewardModelError(ValueError):
    """A model that cannot serve as a reward model here."""


def refuse_remote_code(model_id: str) -> None:
    """A :class:`RewardModelError` naming the architecture when a local model's config maps its classes
    to code of its own (``auto_map``), which hf_adapters never runs."""
    config = Path(model_id) / "config.json"
    if not config.is_file():
        return
    values = json.loads(config.read_text(encoding="utf-8"))
    if values.get("auto_map"):
        architecture = ", ".join(values.get("architectures") or []) or values.get("model_type", "?")
        raise RewardModelError(f"The reward model {model_id!r} ({architecture}) needs its own code (`auto_map` in its "
                               "config); hf_adapters never runs a model's code. Use a reward model of an architecture "
                               "transformers ships, such as LlamaForSequenceClassification.")


def score_head(model: PreTrainedModel) -> torch.nn.Linear:
    """The linear head a decoder sequence classifier applies to its last token's state (``score``)."""
    head = getattr(model, "score", None)
    if not isinstance(head, torch.nn.Linear):
        raise RewardModelError(f"{type(model).__name__} has no linear `score` head over a decoder's last token: "
                               "reward scores need a decoder sequence classifier (Llama, Qwen2, Mistral, Gemma...).")
    return head


@torch.inference_mode()
def last_token_values(model: PreTrainedModel, sequences: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """The head's values at each sequence's last token, one batch: (sequences, labels), float64."""
    head = score_head(model)
    device = head.weight.device
    width = max(len(sequence) for sequence in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        input_ids[row, :len(sequence)] = torch.tensor(list(sequence))
        attention_mask[row, :len(sequence)] = 1
    hidden = model.base_model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                              use_cache=False).last_hidden_state
    last = hidden[torch.arange(len(sequences), device=device),
                  torch.tensor([len(sequence) - 1 for sequence in sequences], device=device)]
    return head(last).double()


class RewardModelBackend(LikelihoodBackend):
    """A reward model (a decoder ``*ForSequenceClassification``) and its tokenizer, in this process.

    It answers :meth:`head_values`; it computes no likelihoods.
    """

    name = "reward-model"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, batch_size: int | None = None,
                 max_batch_tokens: int | None = None, source: tuple[str, Any, Any] | None = None):
        score_head(model)
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_batch_tokens, self.source = batch_size, max_batch_tokens, source

    @classmethod
    def from_pretrained(cls, model_id: str = models.DEFAULT_MODEL_ID, *, dtype: Any = None,
                        device: Any = None) -> RewardModelBackend:
        """The reward model of a local folder or hub id, loaded once per process (safetensors only, no remote code)."""
        refuse_remote_code(model_id)
        model, tokenizer = models.load_model(model_id, dtype=dtype, device=device, task="sequence-classification")
        declared = model.config.architectures or []
        if declared and type(model).__name__ not in declared:
            raise RewardModelError(f"The reward model {model_id!r} declares the architecture {', '.join(declared)}, "
                                   f"which transformers does not ship; read as {type(model).__name__}, its head would "
                                   "be new random weights. hf_adapters never runs a model's own code.")
        return cls(model, tokenizer, source=(model_id, dtype, device))

    @classmethod
    def identify(cls, model_id: str, *, dtype: Any = None, device: Any = None) -> dict[str, Any]:
        return models.model_identity(model_id, dtype, device)

    @property
    def max_length(self) -> int | None:
        return model_max_length(self.model)

    def identity(self) -> dict[str, Any] | None:
        if self.source is None:
            return None
        model_id, dtype, device = self.source
        return self.identify(model_id, dtype=dtype, device=device)

    def score(self, items: Sequence[Item], **settings: Any) -> list[ContinuationScore]:
        raise NotImplementedError("A reward model computes no likelihoods: it gives a value per sequence "
                                  "(`head_values`); score likelihoods with the transformers backend.")

    def head_values(self, sequences: Sequence[Sequence[int]], *, batch_size: int | None = None,
                    progress: bool | None = None) -> list[list[float]]:
        if any(not sequence for sequence in sequences):
            raise ValueError("A reward model reads at least one token per sequence.")
        device = score_head(self.model).weight.device
        limits = batch_limits(device.type, batch_size=self.batch_size if batch_size is None else batch_size,
                              max_batch_tokens=self.max_batch_tokens)
        batches = make_batches([len(sequence) for sequence in sequences], limits.rows, limits.tokens, limits.padding)
        pad_id = self.tokenizer.pad_token_id
        pad_id = pad_id if pad_id is not None else self.start_token_id
        values: list[list[float] | None] = [None] * len(sequences)
        show = progress if progress is not None else len(batches) > 8
        for batch in tqdm(batches, desc="Reward model", unit="batch", disable=not show):
            for index, row in zip(batch, last_token_values(self.model, [sequences[i] for i in batch], pad_id).tolist(),
                                  strict=True):
                values[index] = row
        return values  # type: ignore[return-value]
