"""Greedy generation in batches, token for token what generating each prompt alone gives.

``greedy_generate`` takes prompt token ids and returns the greedy new token ids of each, stopping
before the first stop token (the end of turn / EOS) or at ``max_new_tokens``. Up to ``batch_size``
prompts decode together, longest prompt first, over one KV cache: each prompt is first run alone
(its prompt in one forward pass, which gives its first token), then joins the batch as soon as a
row is free, its keys and values copied in, left-padded; a row leaves when its prompt ends, and
the padding all rows share is cut off. So responses of very different lengths (IFEval's run from a
few tokens to 1280) keep the batch full, and no padding is ever fed forward. The cache grows in
place rather than being copied at every token. For models whose cache rows cannot join (sliding-window
or recurrent layers) prompts run in fixed batches from one left-padded prefill instead.

Why a check is needed, and what it costs. Batched float32 logits are not bit-identical to those of
the prompt run alone: PyTorch's CPU matrix products sum in another order for one row (decoding a
single prompt) than for several (a batch), and attention over left padding shifts the keys against
the vector lanes. The differences are in the last bits (at most 1e-4 on SmolLM2-135M's logits,
measured in ``benchmarks/exactness/GENERATION_EXACTNESS.md``), but where the best two logits are closer than
that, the argmax can flip, and the rest of the response differs. No batching avoids it: even
batching only prompts of equal length leaves the matrix products of a batch. So every step checks
each row's margin, the best logit minus the second: where it is below ``tie_margin`` the row's
token is taken from the prompt run alone, exactly as ``model.generate`` runs one prompt (the prompt
in one forward pass, then one token per pass, only the last position's logits), fed the tokens the
row has so far. The row then continues in the batch with that token. A row whose margins all stay
above ``tie_margin`` gets the same argmax alone as in the batch as long as the batch moves each
logit by less than ``tie_margin / 2``; the default, 10 times the largest such move measured, keeps
that guarantee with room to spare. Near-ties are rare, so most rows never run alone.

With one prompt per batch (``batch_size=1``) every token comes from the prompt alone, and so does
each prompt's first token in any case. Half
precision models are not checked by default: their batched and alone logits differ by far more,
and neither is exact.

Greedy here is the plain argmax of the logits: no repetition penalty or other logits processor from
the model's ``generation_config`` is applied (``model.generate`` would apply them).

What each decoding step costs the host. On CUDA attention runs on any kernel but cuDNN's
(:mod:`~hf_adapters.backends.transformers.attention`: cuDNN plans its kernel again for every new
length of the cache, which cost most of the host's time). A step waits for the device once, to
read the new tokens (which rows stopped), and once more where the near-tie check is on, to read the
rows near a tie; the padding the rows share is looked for only when rows leave, and the surviving
rows' tokens are selected on the device.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from hf_adapters.backends.transformers.attention import without_cudnn_attention
from hf_adapters.backends.transformers.model_properties import model_max_length, unwrap_model
from hf_adapters.core.options import DEFAULT_GENERATION_BATCH_SIZE, check_batch_size

#: The default ``tie_margin`` of float32 and float64 models (logit units): ten times the largest
#: difference between batched and alone logits measured on SmolLM2-135M (about 1e-4).
FLOAT32_TIE_MARGIN = 1e-3


def default_stop_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokenizer's EOS and every EOS id of the model's generation config (the end of turn of chat models)."""
    config = getattr(model, "generation_config", None)
    ids: set[int] = set()
    for value in (tokenizer.eos_token_id, getattr(config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, Iterable):
            ids.update(int(item) for item in value)
    return sorted(ids)


def default_tie_margin(model: PreTrainedModel) -> float:
    """``FLOAT32_TIE_MARGIN`` for float32 and float64 models, 0 (no check) for half precision."""
    dtype = next(model.parameters()).dtype
    return FLOAT32_TIE_MARGIN if dtype in (torch.float32, torch.float64) else 0.0


def cache_argument(model: PreTrainedModel, cache: DynamicCache) -> dict[str, DynamicCache]:
    """The keyword a model's ``forward`` takes its KV cache by: ``cache`` in recent transformers,
    ``past_key_values`` before (5.19 and older), which would otherwise take ``cache=`` silently and ignore it."""
    return {_cache_keyword(type(model)): cache}


@functools.cache
def _cache_keyword(model_class: type) -> str:
    """:func:`cache_argument`'s keyword for a model class, read once (not at every decoding step)."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


class AloneDecoder:
    """One prompt decoded alone, as ``model.generate`` decodes a batch of one: the prompt in one
    forward pass, then one token per pass, the logits of the last position only.

    ``logits`` predict the token after the prompt and the ``fed`` tokens given to :meth:`feed`.
    """

    def __init__(self, model: PreTrainedModel, prompt: Sequence[int]):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.fed = 0
        self.logits = self._forward(list(prompt))

    def _forward(self, ids: list[int]) -> torch.Tensor:
        start = self.cache.get_seq_length()
        device = self.model.device
        output = self.model(
            input_ids=torch.tensor([ids], device=device),
            attention_mask=torch.ones(1, start + len(ids), dtype=torch.long, device=device),
            position_ids=torch.arange(start, start + len(ids), device=device)[None],
            **cache_argument(self.model, self.cache), use_cache=True, logits_to_keep=1,
        )
        return output.logits[0, -1].float()

    def feed(self, tokens: Sequence[int]) -> None:
        """Advance by these tokens, one forward pass each."""
        for token in tokens:
            self.logits = self._forward([int(token)])
            self.fed += 1

    def next_token(self) -> int:
        return int(self.logits.argmax())


def _check_prompts(prompts: Sequence[Sequence[int]], max_new_tokens: int, limit: int | None) -> list[list[int]]:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"`max_new_tokens` must be a non-negative integer, got {max_new_tokens!r}.")
    checked = []
    for number, prompt in enumerate(prompts):
        ids = [int(token) for token in prompt]
        if not ids:
            raise ValueError(f"Prompt {number} has no tokens; generation needs at least one.")
        if limit is not None and len(ids) + max_new_tokens > limit:
            raise ValueError(f"Prompt {number} has {len(ids)} tokens: with max_new_tokens={max_new_tokens} it needs "
                             f"{len(ids) + max_new_tokens} positions, and the model has {limit}.")
        checked.append(ids)
    return checked


def _alone(model: PreTrainedModel, prompt: list[int], max_new_tokens: int, stops: frozenset[int],
           on_token: Callable[[int], None]) -> list[int]:
    """Greedy tokens of one prompt decoded alone."""
    tokens: list[int] = []
    if max_new_tokens == 0:
        return tokens
    decoder = AloneDecoder(model, prompt)
    while True:
        token = decoder.next_token()
        if token in stops:
            return tokens
        tokens.append(token)
        on_token(1)
        if len(tokens) == max_new_tokens:
            return tokens
        decoder.feed([token])


class _GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values sit at the front of buffers with room to grow: a new
    token is written in place, where ``DynamicLayer`` copies the whole cache to append it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def _in_buffers(self) -> bool:
        return (self._buffers is not None and self.keys.data_ptr() == self._buffers[0].data_ptr()
                and self.keys.shape[0] == self._buffers[0].shape[0])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, added = self.get_seq_length(), key_states.shape[-2]
        if not (length and self._in_buffers()) or length + added > self._buffers[0].shape[-2]:
            shape = (*key_states.shape[:-2], 2 * (length + added) + 64, key_states.shape[-1])
            buffers = key_states.new_empty(shape), value_states.new_empty(shape)
            if length:
                buffers[0][..., :length, :] = self.keys
                buffers[1][..., :length, :] = self.values
            self._buffers = buffers
        keys, values = self._buffers
        keys[..., length:length + added, :] = key_states
        values[..., length:length + added, :] = value_states
        self.keys, self.values = keys[..., :length + added, :], values[..., :length + added, :]
        return self.keys, self.values


def _growing_cache(model: PreTrainedModel) -> tuple[DynamicCache, bool]:
    """A cache for a batch, and whether rows can join it at any step: true when every layer is a plain
    full-attention ``DynamicLayer`` (then each is replaced by a :class:`_GrowingLayer`); sliding-window
    and recurrent layers keep their own kind."""
    cache = DynamicCache(config=model.config)
    joinable = bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)
    if joinable:
        cache.layers = [_GrowingLayer() for _ in cache.layers]
    return cache, joinable


def _left_pad(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """``tensor`` with zeros added before its entries along ``dim`` up to ``width`` entries."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


class _Rows:
    """Prompts decoding together over one left-padded KV cache. A prompt joins once decoded alone up
    to its first token (its prompt's keys and values copied in), and leaves when it ends; the
    padding all rows share is cut off as rows leave."""

    def __init__(self, model: PreTrainedModel, cache: DynamicCache):
        self.model, self.cache = model, cache
        self.indices: list[int] = []  # the prompt of each row
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=model.device)
        self.positions = torch.zeros(0, 1, dtype=torch.long, device=model.device)
        self.tokens = torch.zeros(0, dtype=torch.long, device=model.device)  # each row's next input token

    def __len__(self) -> int:
        return len(self.indices)

    def join(self, joining: list[tuple[int, AloneDecoder, int]]) -> None:
        """Add rows: (prompt index, its decoder after the prompt, its first generated token)."""
        lengths = [decoder.cache.get_seq_length() for _, decoder, _ in joining]
        width = max(self.mask.shape[1], *lengths)
        for layer_index, layer in enumerate(self.cache.layers):
            parts = [[], []]
            for _, decoder, _ in joining:
                alone = decoder.cache.layers[layer_index]
                parts[0].append(_left_pad(alone.keys, width, -2))
                parts[1].append(_left_pad(alone.values, width, -2))
            if self.indices:
                parts[0].insert(0, _left_pad(layer.keys, width, -2))
                parts[1].insert(0, _left_pad(layer.values, width, -2))
            else:
                layer.lazy_initialization(parts[0][0], parts[1][0])
            layer.keys, layer.values = torch.cat(parts[0]), torch.cat(parts[1])
        device = self.mask.device
        self.mask = torch.cat([_left_pad(self.mask, width, 1),
                               *(_left_pad(torch.ones(1, n, dtype=torch.long, device=device), width, 1)
                                 for n in lengths)])
        self.positions = torch.cat([self.positions, torch.tensor([[n] for n in lengths], device=device)])
        self.tokens = torch.cat([self.tokens, torch.tensor([token for _, _, token in joining], device=device)])
        self.indices += [index for index, _, _ in joining]

    def step(self) -> torch.Tensor:
        """Feed each row its next token; the logits that follow, one row each."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self), 1)], dim=-1)
        logits = self.model(input_ids=self.tokens[:, None], attention_mask=self.mask, position_ids=self.positions,
                            **cache_argument(self.model, self.cache), use_cache=True).logits[:, -1].float()
        self.positions = self.positions + 1
        return logits

    def keep(self, rows: list[int], tokens: torch.Tensor) -> None:
        """Keep only these rows, whose next tokens are those of ``tokens`` (one per row before), and
        cut the padding they all share (which only rows leaving can add to)."""
        if len(rows) == len(self):
            self.tokens = tokens
            return
        selected = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        if rows:
            self.cache.batch_select_indices(selected)
        self.mask, self.positions, self.tokens = self.mask[selected], self.positions[selected], tokens[selected]
        self.indices = [self.indices[row] for row in rows]
        if not rows:
            self.mask = self.mask.new_zeros(0, 0)
        elif (shared := int(self.mask.argmax(-1).min())):  # leading zeros every row has
            self.mask = self.mask[:, shared:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[..., shared:, :], layer.values[..., shared:, :]


def _settle_near_ties(model: PreTrainedModel, logits: torch.Tensor, tokens: torch.Tensor, indices: list[int],
                      prompts: list[list[int]], outputs: list[list[int]], alone: dict[int, AloneDecoder],
                      tie_margin: float) -> None:
    """Where a row's best two logits are closer than ``tie_margin``, take its token from its prompt
    decoded alone (``alone``, made when first needed), fed the tokens the row has so far."""
    if tie_margin <= 0:
        return
    best_two = logits.topk(2, dim=-1).values
    for row in ((best_two[:, 0] - best_two[:, 1]) < tie_margin).nonzero().flatten().tolist():
        index = indices[row]
        decoder = alone.get(index) or alone.setdefault(index, AloneDecoder(model, prompts[index]))
        decoder.feed(outputs[index][decoder.fed:])
        tokens[row] = decoder.next_token()


def _record(tokens: list[int], indices: list[int], outputs: list[list[int]], stops: frozenset[int],
            max_new_tokens: int, on_token: Callable[[int], None]) -> list[int]:
    """Append each row's token to its prompt's output; the rows that go on (no stop, room left)."""
    going_on = []
    for row, token in enumerate(tokens):
        output = outputs[indices[row]]
        if token not in stops:
            output.append(token)
            on_token(1)
            if len(output) < max_new_tokens:
                going_on.append(row)
    return going_on


def _continuous(model: PreTrainedModel, prompts: list[list[int]], order: list[int], max_new_tokens: int,
                stops: frozenset[int], tie_margin: float, batch_size: int, cache: DynamicCache,
                on_token: Callable[[int], None], on_prompt: Callable[[int, list[int]], None]) -> list[list[int]]:
    """Greedy tokens of every prompt, at most ``batch_size`` decoding together: a prompt joins as soon
    as a row is free, after its prompt and first token were decoded alone (so both are exact)."""
    outputs: list[list[int]] = [[] for _ in prompts]
    alone: dict[int, AloneDecoder] = {}
    queue = list(reversed(order))
    rows = _Rows(model, cache)
    while queue or len(rows):
        joining = []
        while queue and len(rows) + len(joining) < batch_size:
            index = queue.pop()
            decoder = AloneDecoder(model, prompts[index])
            if _record([decoder.next_token()], [index], outputs, stops, max_new_tokens, on_token):
                alone[index] = decoder
                joining.append((index, decoder, outputs[index][-1]))
            else:
                on_prompt(index, outputs[index])
        if joining:
            rows.join(joining)
        if not len(rows):
            continue
        logits = rows.step()
        tokens = logits.argmax(-1)
        _settle_near_ties(model, logits, tokens, rows.indices, prompts, outputs, alone, tie_margin)
        going_on = _record(tokens.tolist(), rows.indices, outputs, stops, max_new_tokens, on_token)
        for row in sorted(set(range(len(rows))) - set(going_on)):
            alone.pop(rows.indices[row], None)
            on_prompt(rows.indices[row], outputs[rows.indices[row]])
        rows.keep(going_on, tokens)
    return outputs


def _static_batch(model: PreTrainedModel, prompts: list[list[int]], max_new_tokens: int, stops: frozenset[int],
                  tie_margin: float, pad_id: int, cache: DynamicCache,
                  on_token: Callable[[int], None]) -> list[list[int]]:
    """Greedy tokens of several prompts decoded together from one left-padded prefill, rows leaving as
    they end (for caches rows cannot join, such as sliding-window ones)."""
    device = model.device
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, **cache_argument(model, cache),
                   use_cache=True, logits_to_keep=1).logits[:, -1].float()
    positions = positions[:, -1:]
    indices = list(range(len(prompts)))  # the prompt of each batch row
    outputs: list[list[int]] = [[] for _ in prompts]
    alone: dict[int, AloneDecoder] = {}
    while True:
        tokens = logits.argmax(-1)
        _settle_near_ties(model, logits, tokens, indices, prompts, outputs, alone, tie_margin)
        going_on = _record(tokens.tolist(), indices, outputs, stops, max_new_tokens, on_token)
        if not going_on:
            return outputs
        if len(going_on) < len(indices):
            selected = torch.tensor(going_on, device=device)
            cache.batch_select_indices(selected)
            mask, positions, tokens = mask[selected], positions[selected], tokens[selected]
            indices = [indices[row] for row in going_on]
        mask = torch.cat([mask, mask.new_ones(len(indices), 1)], dim=-1)
        positions = positions + 1
        logits = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions,
                       **cache_argument(model, cache), use_cache=True).logits[:, -1].float()


@torch.inference_mode()
def greedy_generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_token_ids: Sequence[int] | None = None,
    batch_size: int | None = DEFAULT_GENERATION_BATCH_SIZE,
    progress: bool | None = None,
    desc: str = "Generating",
    tie_margin: float | None = None,
    on_result: Callable[[int, list[int]], None] | None = None,
) -> list[list[int]]:
    """The greedy new token ids of each prompt, in input order: each stops before its first stop
    token or at ``max_new_tokens``, and equals what decoding that prompt alone gives.

    ``prompts`` are token ids, already rendered and tokenized (special tokens included).
    ``stop_token_ids`` defaults to :func:`default_stop_token_ids`. Prompts run longest first in
    batches of ``batch_size`` (``None``: the default), left-padded; ``tie_margin`` (logit units;
    default :func:`default_tie_margin`, 0 turns the check off) is the margin below which a row's
    token is taken from the prompt decoded alone (see the module's docstring). The progress bar
    counts generated tokens; it is shown by default for more than one prompt. ``on_result(index,
    tokens)`` is called as each prompt's response is complete (in the order they end), so that a
    caller can keep them before the whole call returns.

    Example:
        >>> from hf_adapters import load_model
        >>> from hf_adapters.backends.transformers.generation import greedy_generate
        >>> model, tokenizer = load_model()
        >>> prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}],
        ...                                        add_generation_prompt=True)["input_ids"]
        >>> [tokens] = greedy_generate(model, tokenizer, [prompt], max_new_tokens=8, progress=False)
        >>> len(tokens) <= 8
        True
    """
    model = unwrap_model(model)
    batch_size = DEFAULT_GENERATION_BATCH_SIZE if batch_size is None else batch_size
    check_batch_size(batch_size)
    checked = _check_prompts(prompts, max_new_tokens, model_max_length(model))
    stops = frozenset(default_stop_token_ids(model, tokenizer) if stop_token_ids is None else map(int, stop_token_ids))
    tie_margin = default_tie_margin(model) if tie_margin is None else float(tie_margin)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stops, default=0)
    order = sorted(range(len(checked)), key=lambda index: -len(checked[index]))
    results: list[list[int]] = [[] for _ in checked]
    show = progress if progress is not None else len(checked) > 1
    with (tqdm(desc=desc, unit="tok", disable=not show, dynamic_ncols=True) as bar,
          without_cudnn_attention(model.device)):
        done = [0]

        def prompt_done(index: int, tokens: list[int]) -> None:
            done[0] += 1
            bar.set_postfix_str(f"{done[0]}/{len(checked)} prompts", refresh=False)
            if on_result is not None:
                on_result(index, tokens)

        cache, joinable = _growing_cache(model)
        if max_new_tokens == 0:
            for index in order:
                prompt_done(index, results[index])
        elif batch_size == 1 or len(checked) == 1:
            for index in order:
                results[index] = _alone(model, checked[index], max_new_tokens, stops, bar.update)
                prompt_done(index, results[index])
        elif joinable:
            results = _continuous(model, checked, order, max_new_tokens, stops, tie_margin, batch_size, cache,
                                  bar.update, prompt_done)
        else:
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                cache = _growing_cache(model)[0] if start else cache
                outputs = _static_batch(model, [checked[i] for i in batch], max_new_tokens, stops, tie_margin,
                                        pad_id, cache, bar.update)
                for index, tokens in zip(batch, outputs, strict=True):
                    results[index] = tokens
                    prompt_done(index, tokens)
    return results
