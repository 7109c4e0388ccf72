"""The competitors, written from their documented behaviour: what a user would otherwise run.

* one-at-a-time float32 perplexity: one unpadded forward pass per text, full logits (the exact reference);
* pad-to-longest perplexity: evaluate's canonical metric, which pads every batch to the data set's
  longest text and computes logits at every position, padding included;
* one-at-a-time two-pass IFD: Cherry_LLM's and Superfiltering's scripts, a full forward pass over
  prompt + answer and another over the answer alone per record, loss over the answer tokens;
* one-window-at-a-time rolling perplexity: transformers' strided perplexity guide, one full forward
  pass per window of lm-evaluation-harness's rolling windows, loss over the window's new tokens;
* lm-evaluation-harness's own ``HFLM.loglikelihood_rolling``, when ``lm-eval`` is installed;
* one-turn-at-a-time conversation IFD: per assistant turn, a full forward pass over history + answer
  and one over the answer alone (data-juicer's and Cherry_LLM's way, applied to every turn).

Each uses the same tokens as hf_adapters (text tokens without special tokens after the start
token; the prompt with the tokenizer's default special tokens), so scores are directly comparable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_adapters.core.conversations import turn_pairs
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.core.texts import rolling_items


@dataclass(frozen=True)
class ScoredSequence:
    """One forward pass's sequence: its length and the NLL (nats) of its last ``scored`` tokens."""

    nll: float
    scored: int
    length: int

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.scored) if self.scored else math.nan


@torch.inference_mode()
def full_forward_nll(model: PreTrainedModel, ids: Sequence[int], first_scored: int) -> ScoredSequence:
    """NLL of ``ids[first_scored:]`` from one unpadded forward pass with logits at every position
    (log-softmax in float32, or float64 for a float64 model)."""
    if len(ids) <= first_scored:
        return ScoredSequence(math.nan, 0, len(ids))
    logits = model(torch.tensor([list(ids)], device=model.device), use_cache=False).logits[0]
    targets = torch.tensor(list(ids[first_scored:]), device=logits.device)
    logits = logits[first_scored - 1 : -1].to(torch.promote_types(logits.dtype, torch.float32))
    nll = F.cross_entropy(logits, targets, reduction="sum")
    return ScoredSequence(nll.item(), len(targets), len(ids))


def text_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """The start token, then the text's tokens without special tokens: every text token is scored."""
    return [start_token_id(tokenizer), *tokenizer(text, add_special_tokens=False).input_ids]


def one_at_a_time_perplexity(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]
) -> list[ScoredSequence]:
    """The exact reference: each text alone, its own forward pass, every token after the start token scored."""
    return [full_forward_nll(model, text_ids(tokenizer, text), 1) for text in texts]


@torch.inference_mode()
def pad_to_longest_perplexity(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], batch_size: int = 16
) -> list[ScoredSequence]:
    """evaluate's canonical perplexity: the whole data set is tokenized with padding to its longest
    text, so every batch has that width; logits are computed at every position and the loss is
    masked afterwards. Right padding, the start token prepended to every row."""
    encoded = [text_ids(tokenizer, text) for text in texts]
    width = max(len(ids) for ids in encoded)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start_token_id(tokenizer)
    results = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start : start + batch_size]
        input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, ids in enumerate(chunk):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
        logits = model(input_ids=input_ids.to(model.device), attention_mask=attention_mask.to(model.device),
                       use_cache=False).logits
        labels, mask = input_ids[:, 1:].to(logits.device), attention_mask[:, 1:].to(logits.device)
        token_nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), labels, reduction="none") * mask
        for row, ids in enumerate(chunk):
            results.append(ScoredSequence(token_nll[row].double().sum().item(), len(ids) - 1, len(ids)))
    return results


@dataclass(frozen=True)
class IFDRecord:
    """One record's IFD from its conditional and direct passes."""

    ifd: float
    conditional: ScoredSequence
    direct: ScoredSequence


def one_at_a_time_ifd(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    instructions: Sequence[str],
    inputs: Sequence[str],
    outputs: Sequence[str],
    template: str,
    template_no_input: str,
    max_length: int = 2048,
) -> list[IFDRecord]:
    """Cherry_LLM-style IFD, PPL(A|Q) / PPL(A): per record, a full forward pass over prompt + answer
    (loss over the answer tokens) and one over the start token + answer, the answer cut so that
    prompt + answer fit ``max_length``."""
    start = start_token_id(tokenizer)
    records = []
    for instruction, input_text, output in zip(instructions, inputs, outputs, strict=True):
        prompt_text = template.format(instruction=instruction, input=input_text) if input_text else (
            template_no_input.format(instruction=instruction))
        prompt = tokenizer(prompt_text).input_ids
        answer = tokenizer(output, add_special_tokens=False).input_ids[: max_length - len(prompt)]
        conditional = full_forward_nll(model, prompt + answer, len(prompt))
        direct = full_forward_nll(model, [start, *answer], 1)
        records.append(IFDRecord(conditional.perplexity / direct.perplexity, conditional, direct))
    return records


def one_window_at_a_time_rolling(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, text: str, max_length: int, stride: int
) -> list[ScoredSequence]:
    """Every token of ``text`` scored once: per rolling window, one full forward pass, the loss taken
    over the window's new tokens."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    start = start_token_id(tokenizer)
    return [full_forward_nll(model, (context or [start]) + continuation, len(context or [start]))
            for context, continuation in rolling_items(ids, max_length, stride)]


def lm_eval_rolling_nll(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                        max_length: int, batch_size: int) -> list[float]:
    """Total NLL of each text from lm-evaluation-harness's ``HFLM.loglikelihood_rolling`` on the same
    model object (its disjoint windows of ``max_length`` tokens). Raises ImportError without ``lm-eval``."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, max_length=max_length, batch_size=batch_size)
    requests = [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=index)
                for index, text in enumerate(texts)]
    return [-loglikelihood for loglikelihood in lm.loglikelihood_rolling(requests, disable_tqdm=True)]


def one_at_a_time_conversation_ifd(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                                   conversations: Sequence[Sequence[dict]]) -> list[tuple[float, list[ScoredSequence]]]:
    """Per conversation, its IFD over all assistant turns and the turns' passes: a loop over turns, each
    turn a full forward pass over history + answer and another over the start token + answer."""
    start = start_token_id(tokenizer)
    results = []
    for messages in conversations:
        passes, conditional, direct, tokens = [], 0.0, 0.0, 0
        for history, answer in turn_pairs(tokenizer, messages, "all"):
            with_history = full_forward_nll(model, (history or [start]) + answer, len(history or [start]))
            alone = full_forward_nll(model, [start, *answer], 1)
            passes += [with_history, alone]
            conditional, direct, tokens = conditional + with_history.nll, direct + alone.nll, tokens + alone.scored
        results.append((math.exp(conditional / tokens) / math.exp(direct / tokens), passes))
    return results
