"""The one primitive every score is built on: the NLL of continuation tokens given context tokens.

Items are scored in length-sorted batches bounded by a token budget. The output layer runs only
at scored positions, so no batch x length x vocabulary tensor of unscored positions is built, and
log-softmax runs in float32 whatever the model's dtype, on chunks of positions (on the CPU, chunks
whose logits fit in cache). On the CPU, float32 linear layers run on
the faster of the default BLAS and oneDNN, measured on the model (:mod:`hf_adapters.cpu_kernels`).
An item whose whole sequence begins the next item's (the turns of one conversation, a repeated
row) is scored within that item's forward pass. Scores do not depend on batch size, order or
padding beyond float rounding.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .cpu_kernels import check_cpu_dtype, cpu_linear_kernel
from .options import DEFAULT_BATCH_SIZE, check_batch_size, check_max_length

logger = logging.getLogger(__name__)

#: Largest number of scored positions sent through the output layer at once (bounds vocab memory).
OUTPUT_CHUNK_POSITIONS = 2048
#: On the CPU, a chunk's float32 logits are kept within this many bytes, so that the log-softmax
#: reads them from cache, not memory (128 positions of a 49,152-token vocabulary).
CPU_OUTPUT_CHUNK_BYTES = 24 * 2**20
#: Default token budget of one batch (rows x padded length) on accelerators, and on the CPU.
DEFAULT_MAX_BATCH_TOKENS = 16384
CPU_MAX_BATCH_TOKENS = 2048
#: On the CPU an item joins a batch only if padding adds at most this fraction of the batch's length:
#: one unpadded sequence of a few hundred tokens already keeps the cores busy, and padding is wasted work.
CPU_MAX_PADDING = 0.1


@dataclass(frozen=True)
class ContinuationScore:
    """Likelihood of one continuation.

    Attributes:
        nll: sum of negative log-likelihoods over the scored tokens, in nats (NaN if none was scored).
        num_tokens: number of continuation tokens scored (after truncation).
        truncated: whether the sequence was cut to ``max_length``.
        token_nlls: the NLL of each scored token, when they were asked for.
    """

    nll: float
    num_tokens: int
    truncated: bool
    token_nlls: tuple[float, ...] | None = None

    @property
    def mean_nll(self) -> float:
        """Mean NLL per scored token (NaN when nothing was scored)."""
        return self.nll / self.num_tokens if self.num_tokens else math.nan

    @property
    def perplexity(self) -> float:
        """exp of the mean NLL: NaN when nothing was scored, inf rather than an error past float range."""
        return float(np.exp(self.mean_nll))


def combined(scores: Sequence[ContinuationScore]) -> ContinuationScore:
    """Several continuations scored as one (a document's windows, a conversation's turns): the NLLs
    and token counts of those with a scored token added, their token NLLs (if all have them) in
    order; NaN when none has a scored token."""
    valid = [score for score in scores if score.num_tokens]
    with_tokens = all(score.token_nlls is not None for score in scores)
    token_nlls = tuple(nll for score in valid for nll in score.token_nlls) if with_tokens else None
    if not valid:
        return ContinuationScore(math.nan, 0, any(score.truncated for score in scores), token_nlls)
    return ContinuationScore(sum(score.nll for score in valid), sum(score.num_tokens for score in valid),
                             any(score.truncated for score in scores), token_nlls)


@dataclass(frozen=True)
class _Prepared:
    index: int
    input_ids: list[int]
    first_scored: int  # position of the first continuation token in input_ids
    truncated: bool
    #: Items whose whole sequence begins this one's: scored in its forward pass.
    guests: tuple[_Prepared, ...] = ()

    @property
    def units(self) -> tuple[_Prepared, ...]:
        """The items this sequence's forward pass scores: itself, then its guests."""
        return (self, *self.guests)


def host_prefixes(items: Sequence[_Prepared]) -> list[_Prepared]:
    """The items to run, each holding as guests the items before it (in order) whose whole sequence
    begins its own, such as the turns of one conversation: a causal model's output at a position
    depends only on the tokens up to it, so the guests' scores come from the host's pass, with no
    forward pass of their own."""
    hosts: list[_Prepared] = []
    for item in items:
        if hosts and len(hosts[-1].input_ids) <= len(item.input_ids) and \
                item.input_ids[: len(hosts[-1].input_ids)] == hosts[-1].input_ids:
            previous = hosts.pop()
            item = replace(item, guests=(*previous.guests, replace(previous, guests=())))
        hosts.append(item)
    return hosts


def start_token_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token that stands in for an empty context: BOS, or EOS when there is no BOS."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    raise ValueError("The tokenizer has neither a BOS nor an EOS token to start an empty context with.")


def model_max_length(model: PreTrainedModel) -> int | None:
    """The longest sequence the model's position embeddings allow, if it says."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def effective_max_length(model: PreTrainedModel, max_length: int | None) -> int | None:
    """``max_length`` capped at the model's position limit (the limit itself when None)."""
    limit = model_max_length(model)
    if limit is None or (max_length is not None and max_length <= limit):
        return max_length
    return limit


def _prepare(
    index: int, context: Sequence[int], continuation: Sequence[int], start_id: int, max_length: int | None
) -> _Prepared:
    context = list(context) or [start_id]
    input_ids = context + list(continuation)
    truncated = max_length is not None and len(input_ids) > max_length
    if truncated:
        input_ids = input_ids[:max_length]
    return _Prepared(index, input_ids, len(context), truncated)


def make_batches(
    lengths: Sequence[int], batch_size: int | None, max_batch_tokens: int | None, max_padding: float | None = None
) -> list[list[int]]:
    """Group item indices, longest first, so that each batch holds at most ``batch_size`` rows and
    ``max_batch_tokens`` padded tokens (always at least one row). With ``max_padding``, an item
    joins a batch only if padding it to the batch's longest adds at most that fraction of the
    longest length (0: only equal lengths share a batch)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            padded_tokens = lengths[batch[0]] * (len(batch) + 1)
            fits_rows = batch_size is None or len(batch) < batch_size
            fits_tokens = max_batch_tokens is None or padded_tokens <= max_batch_tokens
            fits_padding = max_padding is None or lengths[batch[0]] - lengths[i] <= max_padding * lengths[batch[0]]
            if fits_rows and fits_tokens and fits_padding:
                batch.append(i)
                continue
        batches.append([i])
    return batches


def output_chunk_positions(head_weight: torch.Tensor) -> int:
    """How many scored positions go through the output layer at once: ``OUTPUT_CHUNK_POSITIONS``
    on accelerators; on the CPU as many as keep the chunk's logits within ``CPU_OUTPUT_CHUNK_BYTES``."""
    if head_weight.device.type != "cpu":
        return OUTPUT_CHUNK_POSITIONS
    return max(1, min(OUTPUT_CHUNK_POSITIONS, CPU_OUTPUT_CHUNK_BYTES // (4 * head_weight.shape[0])))


def _logit_postprocessor(model: PreTrainedModel):
    """Scaling or soft-capping that some architectures apply after the output layer."""
    config = model.config
    softcap = getattr(config, "final_logit_softcapping", None)
    scale = getattr(config, "logit_scale", None)
    divisor = getattr(config, "logits_scaling", None)

    def postprocess(logits: torch.Tensor) -> torch.Tensor:
        if scale:
            logits = logits * scale
        if divisor:
            logits = logits / divisor
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        return logits

    return postprocess


def unwrap_model(model):
    """The transformers model inside a PEFT wrapper, or the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _fed_tokens(item: _Prepared, limit: int | None) -> list[int]:
    """The tokens the model reads for an item: all of them, but the last (whose own prediction is
    never scored) only where it fits the position limit."""
    return item.input_ids if limit is None or len(item.input_ids) <= limit else item.input_ids[:-1]


def _padded_inputs(sequences: list[list[int]], pad_id: int) -> tuple[dict[str, torch.Tensor | None], list[int]]:
    """Right-padded rows, with no attention mask: under causal attention a position sees only the
    positions before it, which right padding leaves untouched, so padding cannot change a scored
    position, and attention keeps its causal kernels (which skip the masked half) instead of a
    padding mask's. Returns the model inputs and each item's offset in the flattened (rows x width)
    positions."""
    width = max(len(sequence) for sequence in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
    return {"input_ids": input_ids, "attention_mask": None}, [row * width for row in range(len(sequences))]


def _packed_inputs(sequences: list[list[int]]) -> tuple[dict[str, torch.Tensor | None], list[int]]:
    """All items in one row, position ids restarting at each item and no mask: transformers then
    keeps attention within each item (FlashAttention's varlen kernels, or a block-diagonal mask)."""
    offsets = [0]
    for sequence in sequences:
        offsets.append(offsets[-1] + len(sequence))
    input_ids = torch.tensor([[token for sequence in sequences for token in sequence]])
    position_ids = torch.tensor([[p for sequence in sequences for p in range(len(sequence))]])
    return {"input_ids": input_ids, "position_ids": position_ids, "attention_mask": None}, offsets[:-1]


@torch.inference_mode()
def _token_nlls(model: PreTrainedModel, batch: list[_Prepared], pad_id: int,
                packed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The NLL of every scored token of a batch (float64), and the index of the unit (an item of
    the batch or one of its guests, in the order of ``units``) each belongs to."""
    body, head = model.base_model, model.get_output_embeddings()
    postprocess = _logit_postprocessor(model)
    device = head.weight.device
    limit = model_max_length(model)
    sequences = [_fed_tokens(item, limit) for item in batch]
    inputs, offsets = _packed_inputs(sequences) if packed else _padded_inputs(sequences, pad_id)
    items, positions, targets = [], [], []
    units = ((unit, offset) for host, offset in zip(batch, offsets, strict=True) for unit in host.units)
    for index, (item, offset) in enumerate(units):
        # The logits at position p predict the token at p + 1.
        scored = range(offset + item.first_scored - 1, offset + len(item.input_ids) - 1)
        items.extend([index] * len(scored))
        positions.extend(scored)
        targets.extend(item.input_ids[item.first_scored:])
    inputs = {name: None if value is None else value.to(device) for name, value in inputs.items()}
    targets_t = torch.tensor(targets, device=device)
    token_nll = torch.empty(len(targets), dtype=torch.float64, device=device)
    hidden = body(**inputs, use_cache=False).last_hidden_state
    hidden = hidden.reshape(-1, hidden.shape[-1])[torch.tensor(positions, device=device)]
    chunk = output_chunk_positions(head.weight)
    for start in range(0, len(targets), chunk):
        stop = start + chunk
        logits = postprocess(head(hidden[start:stop])).float()
        token_nll[start:stop] = torch.nn.functional.cross_entropy(logits, targets_t[start:stop], reduction="none")
    return torch.tensor(items, device=device), token_nll


def _sums(items: torch.Tensor, token_nll: torch.Tensor, count: int) -> list[float]:
    sums = torch.zeros(count, dtype=torch.float64, device=token_nll.device)
    sums.index_add_(0, items, token_nll)
    return sums.tolist()


def _units(batch: list[_Prepared]) -> list[_Prepared]:
    return [unit for host in batch for unit in host.units]


def _score_batch(model: PreTrainedModel, batch: list[_Prepared], pad_id: int,
                 packed: bool) -> list[tuple[_Prepared, float]]:
    """Each unit (the batch's items and their guests) with its total NLL."""
    units = _units(batch)
    return list(zip(units, _sums(*_token_nlls(model, batch, pad_id, packed), len(units)), strict=True))


def _score_batch_with_tokens(model: PreTrainedModel, batch: list[_Prepared], pad_id: int,
                             packed: bool) -> list[tuple[_Prepared, float, tuple[float, ...]]]:
    """Each unit with its total NLL and the NLL of each of its scored tokens."""
    items, token_nll = _token_nlls(model, batch, pad_id, packed)
    per_token = token_nll.tolist()
    units = _units(batch)
    counts = [len(item.input_ids) - item.first_scored for item in units]
    starts = list(itertools.accumulate(counts[:-1], initial=0))
    return [(unit, total, tuple(per_token[start:start + count])) for unit, total, start, count
            in zip(units, _sums(items, token_nll, len(units)), starts, counts, strict=True)]


def uses_varlen_attention(model: PreTrainedModel) -> bool:
    """Whether the model's attention runs FlashAttention kernels, which take packed sequences as they are."""
    return str(getattr(model.config, "_attn_implementation", "")).startswith("flash_attention")


def score_continuations(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    max_length: int | None = None,
    batch_size: int | None = DEFAULT_BATCH_SIZE,
    max_batch_tokens: int | None = None,
    max_padding: float | None = None,
    packing: bool | None = None,
    progress: bool | None = None,
    desc: str = "Scoring",
    truncate: bool = True,
    token_losses: bool = False,
) -> list[ContinuationScore]:
    """Score each (context ids, continuation ids) pair; results come back in input order.

    An empty context is replaced by the start token (BOS, else EOS), so the first continuation
    token is always scored. Sequences longer than ``max_length`` (capped at, and by default, the
    model's position limit) are right-truncated, keeping the context; an item left with no scored
    token gets NaN and a warning.

    Batches hold at most ``batch_size`` items and ``max_batch_tokens`` padded tokens; an item
    joins a batch only if padding it adds at most ``max_padding`` of the batch's length (1.0: any
    padding). Both default to the device's: 16384 tokens and any padding on accelerators;
    2048 tokens and 10% padding on the CPU, where batching pays only for short sequences.

    With ``token_losses`` each score also holds the NLL of each scored token (``token_nlls``).

    With ``truncate=False`` the items must fit as they are (rolling windows are built to): nothing
    is cut, ``max_length`` must be None, and an item whose tokens but the last pass the model's
    position limit raises a ValueError.

    With ``packing`` (default: when the model runs FlashAttention, whose varlen kernels need no
    mask) each batch is one row of items laid end to end, position ids restarting at each item:
    no padding at all.

    Example:
        >>> from hf_adapters import load_model, score_continuations
        >>> model, tokenizer = load_model()
        >>> question = tokenizer("Capital of France?", add_special_tokens=False).input_ids
        >>> answer = tokenizer(" Paris", add_special_tokens=False).input_ids
        >>> [score] = score_continuations(model, tokenizer, [(question, answer)])
        >>> score.num_tokens == len(answer)
        True
    """
    check_max_length(max_length)
    if batch_size is not None:
        check_batch_size(batch_size)
    model = unwrap_model(model)
    start_id = start_token_id(tokenizer)
    if truncate:
        max_length = effective_max_length(model, max_length)
    elif max_length is not None:
        raise ValueError("Pass `max_length=None` with `truncate=False`: the items are scored as they are.")
    prepared = [_prepare(i, ctx, cont, start_id, max_length) for i, (ctx, cont) in enumerate(items)]
    if not truncate and (limit := model_max_length(model)) is not None:
        if too_long := [item.index for item in prepared if len(item.input_ids) - 1 > limit]:
            raise ValueError(f"Item {too_long[0]} needs {len(prepared[too_long[0]].input_ids) - 1} positions; "
                             f"the model has {limit}.")
    results: list[ContinuationScore | None] = [None] * len(prepared)
    scorable = []
    for item in prepared:
        if len(item.input_ids) > item.first_scored:
            scorable.append(item)
            continue
        reason = "the context fills max_length" if item.truncated else "the continuation is empty"
        logger.warning("Item %d has no token to score (%s); its score is NaN.", item.index, reason)
        results[item.index] = ContinuationScore(math.nan, 0, item.truncated, () if token_losses else None)

    scorable = host_prefixes(scorable)
    on_cpu = model.get_output_embeddings().weight.device.type == "cpu"
    if max_batch_tokens is None:
        max_batch_tokens = CPU_MAX_BATCH_TOKENS if on_cpu else DEFAULT_MAX_BATCH_TOKENS
    if packing is None:
        packing = uses_varlen_attention(model)
    if max_padding is None:
        max_padding = 1.0 if packing or not on_cpu else CPU_MAX_PADDING
    batches = make_batches([len(item.input_ids) for item in scorable], batch_size, max_batch_tokens, max_padding)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start_id
    show = progress if progress is not None else len(batches) > 8
    check_cpu_dtype(model)
    with tqdm(total=sum(len(item.input_ids) for item in scorable), desc=desc, unit="tok",
              disable=not show) as bar:
        for batch_indices in batches:
            batch = [scorable[i] for i in batch_indices]
            positions = len(batch) * max(len(item.input_ids) for item in batch)
            with cpu_linear_kernel(model, positions):
                if token_losses:
                    for item, nll, losses in _score_batch_with_tokens(model, batch, pad_id, packing):
                        results[item.index] = ContinuationScore(nll, len(losses), item.truncated, losses)
                else:
                    for item, nll in _score_batch(model, batch, pad_id, packing):
                        results[item.index] = ContinuationScore(nll, len(item.input_ids) - item.first_scored,
                                                                item.truncated)
            bar.update(sum(len(item.input_ids) for item in batch))
    return results  # type: ignore[return-value]
