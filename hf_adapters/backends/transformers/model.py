"""The default backend: a ``transformers`` causal LM in this process (:class:`TransformersBackend`).

Items are scored in length-sorted batches bounded by a token budget: on an accelerator one chosen
from the device's free memory and the model's shape, and no row count unless the caller gives one
(:mod:`~hf_adapters.backends.transformers.batching`); a batch that runs out of memory is split in
two and scored again. The output layer runs only at scored positions, so no batch x length x
vocabulary tensor of unscored positions is built, on chunks of positions (on the CPU, chunks whose
logits fit in cache), and the softmax's sums run in float32 (float64 for entropies) whatever the
model's dtype, a slice of the vocabulary at a time, with no float32 copy of a chunk's logits
(:mod:`~hf_adapters.backends.transformers.output_layer`). On the CPU, float32 linear layers run on
the faster of the default BLAS and oneDNN, measured on the model
(:mod:`hf_adapters.backends.transformers.cpu_kernels`). An item whose whole sequence begins the
next item's (the turns of one conversation, a repeated row), or all of it but its last token (the
rating labels after one prompt), is scored within that item's forward pass. Scores do not depend on
batch size, order or padding beyond float rounding.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_adapters.backends import loading as models
from hf_adapters.backends.base import LikelihoodBackend, is_out_of_memory
from hf_adapters.backends.transformers.attention import without_cudnn_attention
from hf_adapters.backends.transformers.batching import (
    OUTPUT_CHUNK_POSITIONS,
    BatchLimits,
    ModelShape,
    batch_limits,
    device_token_budget,
    free_memory,
)
from hf_adapters.backends.transformers.budget_measurement import candidate_budgets, fastest_budget, measure_budgets
from hf_adapters.backends.transformers.compilation import (
    COMPILE_TIMED_BATCHES,
    compile_pays,
    compile_seconds,
    compile_setting,
    compiled,
    num_layers,
)
from hf_adapters.backends.transformers.cpu_kernels import (
    check_cpu_dtype,
    cpu_linear_kernel,
    linear_choices,
    reuse_linear_choices,
)
from hf_adapters.backends.transformers.embedding import fit_sequences, pooled_states
from hf_adapters.backends.transformers.fused_kernels import apply_fused_kernels, fused_kernels_setting
from hf_adapters.backends.transformers.generation import greedy_generate
from hf_adapters.backends.transformers.model_properties import model_max_length, unwrap_model
from hf_adapters.backends.transformers.output_layer import chunk_entropies, chunk_nlls
from hf_adapters.core.likelihood import (
    ContinuationScore,
    Item,
    PreparedItem,
    host_prefixes,
    make_batches,
    prepare_items,
)
from hf_adapters.core.options import check_batch_size, check_max_length

logger = logging.getLogger(__name__)

#: The clock that times batches (tests give their own).
clock = time.perf_counter

#: On the CPU, a chunk's float32 logits are kept within this many bytes, so that the log-softmax
#: reads them from cache, not memory (128 positions of a 49,152-token vocabulary).
CPU_OUTPUT_CHUNK_BYTES = 24 * 2**20


def uses_varlen_attention(model: PreTrainedModel) -> bool:
    """Whether the model's attention runs FlashAttention kernels, which take packed sequences as they are."""
    return str(getattr(model.config, "_attn_implementation", "")).startswith("flash_attention")


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


def _fed_tokens(item: PreparedItem, limit: int | None) -> list[int]:
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
def _token_nlls(model: PreTrainedModel, batch: list[PreparedItem], pad_id: int, packed: bool,
                entropies: bool = False, greedy: bool = False, body: Callable | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The NLL of every scored token of a batch (float64), the index of the unit (an item of
    the batch or one of its guests, in the order of ``units``) each belongs to, with
    ``entropies`` the entropy of the prediction at each scored token (float64; else None), from the
    same log-softmax as the NLL, and with ``greedy`` whether each is the most likely token (else None).
    ``body`` runs the model's body (default: the model's own; a compiled one where scoring is compiled)."""
    body, head = model.base_model if body is None else body, model.get_output_embeddings()
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
        targets.extend(item.targets)
    inputs = {name: None if value is None else value.to(device) for name, value in inputs.items()}
    targets_t = torch.tensor(targets, device=device)
    token_nll = torch.empty(len(targets), dtype=torch.float64, device=device)
    token_entropy = torch.empty(len(targets), dtype=torch.float64, device=device) if entropies else None
    token_top = torch.empty(len(targets), dtype=torch.bool, device=device) if greedy else None
    hidden = body(**inputs, use_cache=False).last_hidden_state
    hidden = hidden.reshape(-1, hidden.shape[-1])[torch.tensor(positions, device=device)]
    chunk = output_chunk_positions(head.weight)
    for start in range(0, len(targets), chunk):
        stop = start + chunk
        logits = postprocess(head(hidden[start:stop]))
        token_nll[start:stop] = chunk_nlls(logits, targets_t[start:stop])
        if token_entropy is not None:
            token_entropy[start:stop] = chunk_entropies(logits)
        if token_top is not None:
            token_top[start:stop] = logits.argmax(dim=-1) == targets_t[start:stop]
    return torch.tensor(items, device=device), token_nll, token_entropy, token_top


def _free_cached_memory(device: torch.device) -> None:
    """Give the memory PyTorch's allocator keeps cached on an accelerator back to the device."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _sums(items: torch.Tensor, token_nll: torch.Tensor, count: int) -> list[float]:
    sums = torch.zeros(count, dtype=torch.float64, device=token_nll.device)
    sums.index_add_(0, items, token_nll)
    return sums.tolist()


def _units(batch: list[PreparedItem]) -> list[PreparedItem]:
    return [unit for host in batch for unit in host.units]


def _score_batch(model: PreTrainedModel, batch: list[PreparedItem], pad_id: int,
                 packed: bool, body: Callable | None = None) -> list[tuple[PreparedItem, float]]:
    """Each unit (the batch's items and their guests) with its total NLL."""
    units = _units(batch)
    items, token_nll, _, _ = _token_nlls(model, batch, pad_id, packed, body=body)
    return list(zip(units, _sums(items, token_nll, len(units)), strict=True))


def _score_batch_with_tokens(model: PreTrainedModel, batch: list[PreparedItem], pad_id: int, packed: bool,
                             entropies: bool = False, greedy: bool = False, body: Callable | None = None
                             ) -> list[tuple[PreparedItem, float, tuple[float, ...], tuple[float, ...] | None,
                                             bool | None]]:
    """Each unit with its total NLL, the NLL of each of its scored tokens, with ``entropies`` the
    entropy at each (else None) and with ``greedy`` whether all are the most likely tokens (else None)."""
    items, token_nll, token_entropy, token_top = _token_nlls(model, batch, pad_id, packed, entropies, greedy, body)
    per_token = token_nll.tolist()
    per_token_entropy = None if token_entropy is None else token_entropy.tolist()
    per_token_top = None if token_top is None else token_top.tolist()
    units = _units(batch)
    counts = [len(item.input_ids) - item.first_scored for item in units]
    starts = list(itertools.accumulate(counts[:-1], initial=0))
    return [(unit, total, tuple(per_token[start:start + count]),
             None if per_token_entropy is None else tuple(per_token_entropy[start:start + count]),
             None if per_token_top is None else all(per_token_top[start:start + count]))
            for unit, total, start, count in zip(units, _sums(items, token_nll, len(units)), starts, counts,
                                                 strict=True)]


class TransformersBackend(LikelihoodBackend):
    """A ``transformers`` causal LM (or a PEFT model around one) and its tokenizer, scored in this process.

    Batches hold at most ``batch_size`` items (unless :meth:`score` is given another) and
    ``max_batch_tokens`` padded tokens; an item
    joins a batch only if padding it adds at most ``max_padding`` of the batch's length (1.0: any
    padding). Each defaults to the device's (:func:`~hf_adapters.backends.transformers.batching.batch_limits`):
    on the CPU, where batching pays only for short sequences, 16 items, 2048 tokens and 10% padding;
    on an accelerator no item count, any padding, and a token budget chosen once: bounded by the
    device's free memory and the model's shape (at most 65,536 tokens), and where the first call
    holds enough tokens, the fastest of a few budgets timed on its first batches
    (:mod:`~hf_adapters.backends.transformers.budget_measurement`); :meth:`measured_choices` records
    it, so that a resumed job batches as the first run did. With
    ``packing`` (default: when the model runs FlashAttention, whose varlen kernels need no mask)
    each batch is one row of items laid end to end, position ids restarting at each item.
    ``compile`` (``"auto"``, ``"on"``, ``"off"``; default ``HF_ADAPTERS_COMPILE``, else ``"auto"``)
    runs the body under ``torch.compile``; ``"auto"`` compiles on an accelerator where the job's
    tokens (``job_tokens``, which the local engine sets from the job, else the first call's) at the rate
    timed on the first call's first eager batches repay the compile time, decided once at that fixed
    point (:mod:`~hf_adapters.backends.transformers.compilation`) and recorded with the job.
    ``fused_kernels`` (likewise, default ``HF_ADAPTERS_FUSED_KERNELS``) fuses the body's norms, RoPE
    and gated MLP with Liger's kernels where installed, on CUDA in bfloat16/float16
    (:mod:`~hf_adapters.backends.transformers.fused_kernels`).

    Example:
        >>> from hf_adapters.backends import TransformersBackend
        >>> backend = TransformersBackend.from_pretrained()  # the embedded SmolLM2-135M-Instruct offline
        >>> question = backend.tokenizer("Capital of France?", add_special_tokens=False).input_ids
        >>> answer = backend.tokenizer(" Paris", add_special_tokens=False).input_ids
        >>> [score] = backend.score([(question, answer)])
        >>> score.num_tokens == len(answer)
        True
    """

    name = "transformers"
    computes_entropies = True
    computes_greedy = True

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *,
                 batch_size: int | None = None, max_batch_tokens: int | None = None,
                 max_padding: float | None = None, packing: bool | None = None,
                 source: tuple[str, Any, Any] | None = None, compile: str | None = None,
                 fused_kernels: str | None = None):
        compile_setting(compile)
        fused_kernels_setting(fused_kernels)
        self.model = unwrap_model(model)
        self.tokenizer = tokenizer
        #: Rows per batch when :meth:`score` is given none (None: the device's, 16 on the CPU, none on an accelerator).
        self.batch_size = batch_size
        self.max_batch_tokens, self.max_padding, self.packing = max_batch_tokens, max_padding, packing
        #: The token budget chosen on an accelerator, once (None: not yet, or on the CPU).
        self._planned_tokens: int | None = None
        #: ``"auto"``, ``"on"`` or ``"off"`` (None: ``HF_ADAPTERS_COMPILE``'s); see the class docstring.
        self.compile = compile
        #: The tokens the whole job sends through the model in this process, where the caller knows them
        #: (for ``compile="auto"``; the local engine sets them before the job's first call).
        self.job_tokens: int | None = None
        #: Whether ``"auto"`` compiles (None: not decided yet), and the eager batches timed to decide: their
        #: count, and the tokens and seconds of those after the first (of the first alone while it is the only one).
        self._compile_choice: bool | None = None
        self._timed_batches, self._timed_tokens, self._timed_seconds = 0, 0, 0.0
        self._compiled_body: Callable | None = None
        #: ``"auto"``, ``"on"`` or ``"off"`` (None: ``HF_ADAPTERS_FUSED_KERNELS``'s), and whether they were applied.
        self.fused_kernels = fused_kernels
        self._fused: bool | None = None
        #: (model id, dtype, device) when loaded by name: what :meth:`identity` describes.
        self.source = source
        self._identity: dict[str, Any] | None = None

    @classmethod
    def from_pretrained(cls, model_id: str = models.DEFAULT_MODEL_ID, *, dtype: Any = None, device: Any = None,
                        trust_remote_code: bool = False) -> TransformersBackend:
        """The model and tokenizer of a hub id, local folder or ``.gguf`` file, loaded once per process
        (:func:`hf_adapters.backends.loading.load_model`)."""
        model, tokenizer = models.load_model(model_id, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
        return cls(model, tokenizer, source=(model_id, dtype, device))

    @classmethod
    def identify(cls, model_id: str, *, dtype: Any = None, device: Any = None) -> dict[str, Any]:
        """The model's files or hub commit, with its dtype and device type, read without loading it
        (:func:`hf_adapters.backends.loading.model_identity`)."""
        return models.model_identity(model_id, dtype, device)

    @property
    def max_length(self) -> int | None:
        return model_max_length(self.model)

    def identity(self) -> dict[str, Any] | None:
        """What :meth:`identify` says of the model id it was loaded from; None for a model object."""
        if self._identity is None and self.source is not None:
            model_id, dtype, device = self.source
            self._identity = self.identify(model_id, dtype=dtype, device=device)
        return self._identity

    def measured_choices(self) -> dict[str, Any]:
        """The CPU kernels chosen for the model's float32 linear layers so far (:func:`linear_choices`),
        the token budget chosen on an accelerator (``max_batch_tokens``) and whether ``compile="auto"``
        compiled the body (``compile``)."""
        choices = linear_choices(self.model)
        return {**({"cpu_linear": choices} if choices else {}),
                **({"max_batch_tokens": self._planned_tokens} if self._planned_tokens else {}),
                **({"compile": self._compile_choice} if self._compile_choice is not None else {})}

    def reuse_measured_choices(self, choices: Mapping[str, Any]) -> None:
        reuse_linear_choices(self.model, choices.get("cpu_linear", {}))
        if isinstance(choices.get("max_batch_tokens"), int):
            self._planned_tokens = choices["max_batch_tokens"]
        if isinstance(choices.get("compile"), bool):
            self._compile_choice = choices["compile"]

    def _device_type(self) -> str:
        """The type of the device the model's output layer is on (``"cpu"``, ``"cuda"``...)."""
        return self.model.get_output_embeddings().weight.device.type

    def _compiles(self) -> bool | None:
        """Whether batches run the compiled body: the setting where forced, else (``"auto"``) never on the
        CPU, and on an accelerator the choice made (None: still timing eager batches)."""
        setting = compile_setting(self.compile)
        if setting != "auto":
            return setting == "on"
        return False if self._device_type() == "cpu" or self._fused else self._compile_choice

    def _body(self, compiles: bool | None) -> Callable | None:
        """The compiled body where ``compiles``, built once (None: the model's own)."""
        if not compiles:
            return None
        if self._compiled_body is None:
            self._compiled_body = compiled(self.model.base_model)
        return self._compiled_body

    def _time_eager_batch(self, tokens: int, seconds: float, call_tokens: int) -> None:
        """Time an eager batch of ``tokens`` tokens for ``compile="auto"``; once ``COMPILE_TIMED_BATCHES``
        have been timed after the first (which warms the device up), decide (:meth:`_decide_compile`)."""
        self._timed_batches += 1
        if self._timed_batches == 2:  # the first batch's time stands only while it is the only one
            self._timed_tokens, self._timed_seconds = 0, 0.0
        self._timed_tokens += tokens
        self._timed_seconds += seconds
        if self._timed_batches > COMPILE_TIMED_BATCHES:
            self._decide_compile(call_tokens)

    def _decide_compile(self, call_tokens: int) -> None:
        """Decide once, for the rest of the job, whether ``compile="auto"`` compiles: whether the job's tokens
        (``job_tokens`` where the caller set them, else the call's) at the rate timed so far repay the
        compile time. Taken after ``COMPILE_TIMED_BATCHES`` timed batches of the first call, or at its end
        where it has fewer, so a job makes it at the same batch every time, before its first rows are saved."""
        rate = self._timed_tokens / max(self._timed_seconds, 1e-9)
        job = self.job_tokens if self.job_tokens is not None else call_tokens
        cost = compile_seconds(num_layers(self.model))
        self._compile_choice = compile_pays(self._device_type(), job, rate, cost)
        logger.info("Scoring %s: %d tokens at the measured %.0f tokens/s against about %.0f s to compile "
                    "(set HF_ADAPTERS_COMPILE=on|off to choose).",
                    "compiles the model" if self._compile_choice else "runs eagerly", job, rate, cost)

    def batch_limits(self, batch_size: int | None = None, packing: bool = False) -> BatchLimits:
        """What bounds a batch on the model's device: ``batch_size`` (else the backend's, else the
        device's), the backend's token budget (else the device's, chosen once from its free memory)
        and padding share (:func:`~hf_adapters.backends.transformers.batching.batch_limits`)."""
        device = self.model.get_output_embeddings().weight.device
        device_type = self._device_type()
        tokens = self.max_batch_tokens
        if tokens is None and device_type != "cpu":
            if self._planned_tokens is None:
                self._planned_tokens = device_token_budget(device_type, free_memory(device), ModelShape.of(self.model))
            tokens = self._planned_tokens
        return batch_limits(device_type, batch_size=self.batch_size if batch_size is None else batch_size,
                            max_batch_tokens=tokens, max_padding=self.max_padding, packing=packing)

    def score(
        self,
        items: Sequence[Item],
        *,
        max_length: int | None = None,
        truncate: bool = True,
        batch_size: int | None = None,
        token_losses: bool = False,
        entropies: bool = False,
        greedy: bool = False,
        progress: bool | None = None,
        desc: str = "Scoring",
    ) -> list[ContinuationScore]:
        model = self.model
        start_id = self.start_token_id
        prepared = prepare_items(items, start_id, max_length=max_length, truncate=truncate,
                                 position_limit=model_max_length(model))
        results: list[ContinuationScore | None] = [None] * len(prepared)
        scorable = []
        for item in prepared:
            if len(item.input_ids) > item.first_scored:
                scorable.append(item)
            else:
                results[item.index] = item.unscored(token_losses, entropies, greedy)
        scorable = host_prefixes(scorable, siblings=True)
        packing = uses_varlen_attention(model) if self.packing is None else self.packing
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else start_id
        if self._fused is None:
            self._fused = apply_fused_kernels(model, fused_kernels_setting(self.fused_kernels))
        measurable = self.max_batch_tokens is None and self._planned_tokens is None and self._device_type() != "cpu"
        limits = self.batch_limits(batch_size, packing)
        check_cpu_dtype(model)
        device = model.get_output_embeddings().weight.device
        call_tokens = sum(len(item.input_ids) for item in scorable)
        with without_cudnn_attention(device):
            if measurable and limits.rows is None:  # a row cap would make the candidates' batches alike
                self._choose_budget(scorable, limits, packing, pad_id)
                limits = self.batch_limits(batch_size, packing)
            batches = make_batches([len(item.input_ids) for item in scorable], limits.rows, limits.tokens,
                                   limits.padding)
            self._score_batches(scorable, batches, results, pad_id, packing, token_losses, entropies, greedy,
                                progress, desc, call_tokens)
            if self._compiles() is None and self._timed_batches:  # a first call shorter than the timing
                self._decide_compile(call_tokens)
        return results  # type: ignore[return-value]

    def _score_batches(self, scorable: list[PreparedItem], batches: list[list[int]],
                       results: list[ContinuationScore | None], pad_id: int, packing: bool, token_losses: bool,
                       entropies: bool, greedy: bool, progress: bool | None, desc: str, call_tokens: int) -> None:
        """Score ``batches`` (indices into ``scorable``) into ``results``, eager batches timed while
        ``compile="auto"`` decides; a batch that runs out of memory is split in two and scored again."""
        show = progress if progress is not None else len(batches) > 8
        device = self.model.get_output_embeddings().weight.device
        pending = batches[::-1]  # a stack: a batch split after running out of memory goes on top
        with tqdm(total=sum(len(unit.targets) for item in scorable for unit in item.units), desc=desc,
                  unit="tok", disable=not show) as bar:
            while pending:
                indices = pending.pop()
                batch = [scorable[i] for i in indices]
                compiles = self._compiles()
                try:
                    started = clock() if compiles is None else 0.0  # timed only to decide on compiling
                    scored = self._scored_units(batch, pad_id, packing, token_losses, entropies, greedy,
                                                self._body(compiles))
                    if compiles is None:
                        self._time_eager_batch(sum(len(item.input_ids) for item in batch), clock() - started,
                                               call_tokens)
                except RuntimeError as error:
                    if len(batch) == 1 or not is_out_of_memory(error):
                        raise
                    message = str(error).splitlines()[0] if str(error) else type(error).__name__
                else:
                    for item, score in scored:
                        results[item.index] = score
                    bar.update(sum(len(unit.targets) for item in batch for unit in item.units))
                    continue
                # Outside the except block, so that the failed batch's tensors are freed first.
                _free_cached_memory(device)
                half = len(batch) // 2
                logger.warning("Out of memory on a batch of %d rows (%s); scoring it as %d + %d rows.",
                               len(batch), message, half, len(batch) - half)
                pending += [indices[half:], indices[:half]]

    def _choose_budget(self, scorable: list[PreparedItem], limits: BatchLimits, packing: bool, pad_id: int) -> None:
        """Where the call holds at least the largest candidate budget's tokens, time the first batch of each
        (:mod:`~hf_adapters.backends.transformers.budget_measurement`) and keep the fastest as the job's."""
        lengths = [len(item.input_ids) for item in scorable]
        candidates = candidate_budgets(limits.tokens)
        if len(candidates) < 2 or sum(lengths) < candidates[-1]:
            return

        def run(indices: list[int]) -> None:
            self._scored_units([scorable[i] for i in indices], pad_id, packing, False, False, False,
                               self._body(self._compiles()))

        rates = measure_budgets(run, lengths, candidates, limits.rows, limits.padding, clock, is_out_of_memory)
        _free_cached_memory(self.model.get_output_embeddings().weight.device)
        if rates:
            self._planned_tokens = fastest_budget(rates)
            logger.info("Token budget %d chosen by timing the first batches: %s tokens/s (budget: rate).",
                        self._planned_tokens, ", ".join(f"{budget}: {rate:.0f}" for budget, rate in rates.items()))

    def _scored_units(self, batch: list[PreparedItem], pad_id: int, packing: bool, token_losses: bool,
                     entropies: bool, greedy: bool, body: Callable | None = None
                     ) -> list[tuple[PreparedItem, ContinuationScore]]:
        """Each unit of a batch (its items and their guests) with its score; ``body``: a compiled body
        (which picks its own kernels), else the model's, on the chosen CPU kernel."""
        model = self.model
        positions = len(batch) * max(len(item.input_ids) for item in batch)
        with cpu_linear_kernel(model, positions) if body is None else contextlib.nullcontext():
            if token_losses or entropies or greedy:
                return [(item, ContinuationScore(nll, len(losses), item.truncated, losses if token_losses else None,
                                                 item_entropies, item_greedy))
                        for item, nll, losses, item_entropies, item_greedy in _score_batch_with_tokens(
                            model, batch, pad_id, packing, entropies, greedy, body)]
            return [(item, ContinuationScore(nll, len(item.targets), item.truncated))
                    for item, nll in _score_batch(model, batch, pad_id, packing, body)]

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
        """Greedy responses, each equal to decoding its prompt alone
        (:func:`~hf_adapters.backends.transformers.generation.greedy_generate`); ``batch_size``
        prompts decode together (default 16); the stop tokens default to the tokenizer's EOS and the
        model's end of turn; ``on_result(index, tokens)`` is called as each response ends."""
        return greedy_generate(self.model, self.tokenizer, prompts, max_new_tokens=max_new_tokens,
                               stop_token_ids=stop_token_ids, batch_size=batch_size, progress=progress, desc=desc,
                               on_result=on_result)

    def embed(
        self,
        sequences: Sequence[Sequence[int]],
        *,
        pooling: str = "mean",
        max_length: int | None = None,
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> Any:
        """Pooled final hidden states, batched as scoring is
        (:func:`~hf_adapters.backends.transformers.embedding.pooled_states`)."""

        fitted = fit_sequences(sequences, self.start_token_id, self.window(max_length))
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.start_token_id
        limits = self.batch_limits(batch_size)
        return pooled_states(self.model, fitted, pooling=pooling, pad_id=pad_id, batch_size=limits.rows,
                             max_batch_tokens=limits.tokens, max_padding=limits.padding, progress=progress)


def score_continuations(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[Item],
    *,
    max_length: int | None = None,
    batch_size: int | None = None,
    max_batch_tokens: int | None = None,
    max_padding: float | None = None,
    packing: bool | None = None,
    progress: bool | None = None,
    desc: str = "Scoring",
    truncate: bool = True,
    token_losses: bool = False,
    entropies: bool = False,
) -> list[ContinuationScore]:
    """Score each (context ids, continuation ids) pair with a loaded model; results come back in input order.

    :meth:`TransformersBackend.score` on ``TransformersBackend(model, tokenizer, batch_size=...,
    max_batch_tokens=..., max_padding=..., packing=...)`` (None: the device's default, see
    :func:`~hf_adapters.backends.transformers.batching.batch_limits`), with ``max_length`` and
    ``batch_size`` checked first.

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
    backend = TransformersBackend(model, tokenizer, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
                                  max_padding=max_padding, packing=packing)
    return backend.score(items, max_length=max_length, truncate=truncate, token_losses=token_losses,
                         entropies=entropies, progress=progress, desc=desc)
