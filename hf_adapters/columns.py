"""Perplexity, IFD and Information Parity as new columns of a ``datasets.Dataset``, with datasets' cache.

The mappers are plain callables for ``ds.map(mapper, batched=True, with_indices=True)``; they load
their model on the first batch, so a cache hit loads none. The ``add_*_column`` functions
fingerprint the result from the input's fingerprint and the configuration (model id, columns,
template, ...), never from hashing a model: re-running the same call reads the cache. With your
own ``model`` object the library cannot tell two models apart, so the result is not cached across
calls unless you name it with ``new_fingerprint=``.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from datasets import Dataset, DatasetDict, Value
from datasets.fingerprint import Hasher, generate_random_fingerprint
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .ifd import (
    DEFAULT_TEMPLATE,
    DEFAULT_TEMPLATE_NO_INPUT,
    check_options,
    check_templates,
    score_ifd,
)
from .models import DEFAULT_MODEL_ID, model_and_tokenizer, resolve_device, resolve_dtype
from .options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH, check_lengths
from .parity import check_pairs, score_texts, summarize_information_parity
from .perplexity import compute_perplexity

logger = logging.getLogger(__name__)


def ppl_text(instruction: str, input: str | None, output: str) -> str:
    """The seed PPLScorer's text: the non-empty instruction, input and output joined with newlines."""
    return "\n".join(part for part in (instruction, input, output) if part)


def column_texts(
    batch: Mapping[str, list], column: str | None, rows: Sequence[int], optional: bool = False
) -> list[str]:
    """The strings of one column of a batch; ``optional`` columns read None (or no column) as ""."""
    if column is None:
        return [""] * len(rows)
    if not isinstance(batch[column], list):
        raise TypeError("Mappers score whole batches: call `ds.map(mapper, batched=True)`.")
    texts = []
    for row, value in zip(rows, batch[column], strict=True):
        if value is None and optional:
            value = ""
        if not isinstance(value, str):
            raise TypeError(f"Row {row}: column {column!r} must hold a string, got {type(value).__name__}: "
                            f"{value!r:.80}")
        texts.append(value)
    return texts


class _ModelMapper:
    """Holds how to get the model; gets it only when a batch is scored."""

    def __init__(self, model_id: str, dtype: Any, device: Any, model: Any, tokenizer: Any):
        if (model is None) != (tokenizer is None):
            raise ValueError("Pass both `model` and `tokenizer`, or neither (then `model_id` is loaded).")
        self.model_id, self.dtype, self.device = model_id, dtype, device
        self.model, self.tokenizer = model, tokenizer

    def loaded(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """The caller's model, else the process-wide cached `model_id` (loaded on first use)."""
        return model_and_tokenizer(self.model_id, self.model, self.tokenizer, self.dtype, self.device)


class PerplexityMapper(_ModelMapper):
    """``ds.map(PerplexityMapper(), batched=True, with_indices=True)`` adds a ``perplexity`` column.

    The text is ``text_column`` if given, else the seed PPLScorer's text (:func:`ppl_text`) of the
    instruction, input and output columns (``input_column=None``: no input). Numbers are those of
    the perplexity metric (start token prepended).
    """

    def __init__(
        self,
        *,
        text_column: str | None = None,
        instruction_column: str = "instruction",
        input_column: str | None = "input",
        output_column: str = "output",
        column: str = "perplexity",
        model_id: str = DEFAULT_MODEL_ID,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ):
        check_lengths(max_length, batch_size)
        super().__init__(model_id, dtype, device, model, tokenizer)
        self.text_column = text_column
        self.instruction_column, self.input_column, self.output_column = instruction_column, input_column, output_column
        self.column, self.batch_size, self.max_length = column, batch_size, max_length

    @property
    def source_columns(self) -> list[str]:
        if self.text_column is not None:
            return [self.text_column]
        return [c for c in (self.instruction_column, self.input_column, self.output_column) if c is not None]

    @property
    def output_columns(self) -> list[str]:
        return [self.column]

    def texts(self, batch: Mapping[str, list], rows: Sequence[int]) -> list[str]:
        if self.text_column is not None:
            return column_texts(batch, self.text_column, rows)
        parts = zip(
            column_texts(batch, self.instruction_column, rows),
            column_texts(batch, self.input_column, rows, optional=True),
            column_texts(batch, self.output_column, rows),
            strict=True,
        )
        return [ppl_text(*row) for row in parts]

    def __call__(self, batch: Mapping[str, list], indices: Sequence[int] | None = None) -> dict[str, list[float]]:
        rows = indices if indices is not None else range(len(batch[self.source_columns[0]]))
        texts = self.texts(batch, rows)
        model, tokenizer = self.loaded()
        result = compute_perplexity(
            texts, batch_size=self.batch_size, max_length=self.max_length, model=model, tokenizer=tokenizer,
            progress=False,
        )
        return {self.column: result["perplexities"]}


class IFDMapper(_ModelMapper):
    """``ds.map(IFDMapper(), batched=True, with_indices=True)`` adds ``ifd``, ``ppl_conditional``
    and ``ppl_direct`` columns, the numbers of :func:`hf_adapters.ifd.compute_ifd`."""

    def __init__(
        self,
        *,
        instruction_column: str = "instruction",
        input_column: str | None = "input",
        output_column: str = "output",
        ifd_column: str = "ifd",
        conditional_column: str = "ppl_conditional",
        direct_column: str = "ppl_direct",
        model_id: str = DEFAULT_MODEL_ID,
        template: str = DEFAULT_TEMPLATE,
        template_no_input: str = DEFAULT_TEMPLATE_NO_INPUT,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        mode: str = "ppl_ratio",
        batch_size: int = DEFAULT_BATCH_SIZE,
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ):
        check_templates(template, template_no_input)
        check_options(max_length, batch_size, mode)
        super().__init__(model_id, dtype, device, model, tokenizer)
        self.instruction_column, self.input_column, self.output_column = instruction_column, input_column, output_column
        self.ifd_column, self.conditional_column, self.direct_column = ifd_column, conditional_column, direct_column
        self.template, self.template_no_input = template, template_no_input
        self.max_length, self.mode, self.batch_size = max_length, mode, batch_size

    @property
    def source_columns(self) -> list[str]:
        return [c for c in (self.instruction_column, self.input_column, self.output_column) if c is not None]

    @property
    def output_columns(self) -> list[str]:
        return [self.ifd_column, self.conditional_column, self.direct_column]

    def __call__(self, batch: Mapping[str, list], indices: Sequence[int] | None = None) -> dict[str, list[float]]:
        rows = indices if indices is not None else range(len(batch[self.instruction_column]))
        instructions = column_texts(batch, self.instruction_column, rows)
        inputs = column_texts(batch, self.input_column, rows, optional=True)
        outputs = column_texts(batch, self.output_column, rows)
        model, tokenizer = self.loaded()
        result = score_ifd(
            model, tokenizer, instructions, outputs, inputs,
            template=self.template, template_no_input=self.template_no_input, max_length=self.max_length,
            batch_size=self.batch_size, mode=self.mode, progress=False, first_row=rows[0] if len(rows) else 0,
        )
        return {
            self.ifd_column: result["ifd_scores"],
            self.conditional_column: result["conditional_perplexities"],
            self.direct_column: result["direct_perplexities"],
        }


class InformationParityMapper(_ModelMapper):
    """``ds.map(InformationParityMapper(text_column=..., reference_column=...), batched=True, with_indices=True)``
    adds a column of per-row NLL(reference) / NLL(text), the numbers of
    :func:`hf_adapters.parity.compute_information_parity`."""

    def __init__(
        self,
        *,
        text_column: str,
        reference_column: str,
        column: str = "information_parity",
        model_id: str = DEFAULT_MODEL_ID,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ):
        check_lengths(max_length, batch_size)
        super().__init__(model_id, dtype, device, model, tokenizer)
        self.text_column, self.reference_column, self.column = text_column, reference_column, column
        self.batch_size, self.max_length = batch_size, max_length

    @property
    def source_columns(self) -> list[str]:
        return [self.text_column, self.reference_column]

    @property
    def output_columns(self) -> list[str]:
        return [self.column]

    def __call__(self, batch: Mapping[str, list], indices: Sequence[int] | None = None) -> dict[str, list[float]]:
        rows = indices if indices is not None else range(len(batch[self.text_column]))
        texts = column_texts(batch, self.text_column, rows)
        references = column_texts(batch, self.reference_column, rows)
        check_pairs(texts, references)
        model, tokenizer = self.loaded()
        scores = score_texts(
            model, tokenizer, [*texts, *references], max_length=self.max_length, batch_size=self.batch_size,
            progress=False,
        )
        return {self.column: summarize_information_parity(texts, references, scores)["scores"]}


def check_columns(ds: Dataset, columns: Sequence[str]) -> None:
    """Raise a ValueError naming the first of ``columns`` that ``ds`` lacks."""
    for column in columns:
        if column not in ds.column_names:
            hint = " (pass input_column=None for data without inputs)" if column == "input" else ""
            raise ValueError(f"Column {column!r} not found{hint}; available: {ds.column_names}")


def result_fingerprint(ds: Dataset, mapper: _ModelMapper, config: dict[str, Any]) -> str:
    """The new dataset's fingerprint: the input's, plus the configuration and the resolved dtype.

    Batch size and device are left out: scores do not depend on them. A caller-supplied model
    object cannot be named, so it gets a fresh random fingerprint (no reuse of stale results).
    """
    if mapper.model is not None:
        logger.info("A `model` object was passed: the result is not cached across calls; "
                    "pass `new_fingerprint=` to name it yourself.")
        return generate_random_fingerprint()
    dtype = resolve_dtype(mapper.dtype, resolve_device(mapper.device))
    version = importlib.metadata.version("hf_adapters")
    return Hasher.hash([ds._fingerprint, version, mapper.model_id, str(dtype), config])


def _apply(ds: Dataset | DatasetDict, mapper, config: dict[str, Any], desc: str, map_kwargs: dict) -> Any:
    if isinstance(ds, DatasetDict):
        return DatasetDict({split: _apply(part, mapper, config, desc, map_kwargs) for split, part in ds.items()})
    check_columns(ds, mapper.source_columns)
    if ds.num_rows == 0:  # map calls the mapper on no batch: add its columns, empty
        ds = ds.remove_columns([column for column in mapper.output_columns if column in ds.column_names])
        for column in mapper.output_columns:
            ds = ds.add_column(column, [], feature=Value("float64"))
        return ds
    kwargs = {"desc": desc, **map_kwargs}
    if (kwargs.get("num_proc") or 1) > 1:
        logger.warning("num_proc=%s is ignored: model columns are scored in this process, in batches (forked copies "
                       "of a process that has run torch can deadlock).", kwargs["num_proc"])
        kwargs.pop("num_proc")
    kwargs.setdefault("new_fingerprint", result_fingerprint(ds, mapper, config))
    return ds.map(mapper, batched=True, with_indices=True, **kwargs)


def add_perplexity_column(
    ds: Dataset | DatasetDict,
    *,
    text_column: str | None = None,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    column: str = "perplexity",
    model_id: str = DEFAULT_MODEL_ID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    **map_kwargs: Any,
) -> Dataset | DatasetDict:
    """Return ``ds`` with a ``column`` of per-row perplexities.

    The text is ``text_column`` if given, else the non-empty instruction, input and output joined
    with newlines (``input_column=None``: no input). ``map_kwargs`` go to ``Dataset.map``
    (``num_proc``, ``load_from_cache_file``, ``new_fingerprint`` ...).

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.columns import add_perplexity_column
        >>> ds = Dataset.from_dict({"text": ["The cat sat on the mat.", "Colourless green ideas."]})
        >>> add_perplexity_column(ds, text_column="text").column_names
        ['text', 'perplexity']
    """
    mapper = PerplexityMapper(
        text_column=text_column, instruction_column=instruction_column, input_column=input_column,
        output_column=output_column, column=column, model_id=model_id, batch_size=batch_size,
        max_length=max_length, dtype=dtype, device=device, model=model, tokenizer=tokenizer,
    )
    config = {"kind": "perplexity", "columns": mapper.source_columns, "text_column": text_column,
              "column": column, "max_length": max_length}
    return _apply(ds, mapper, config, "Perplexity", map_kwargs)


def add_ifd_column(
    ds: Dataset | DatasetDict,
    *,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    ifd_column: str = "ifd",
    conditional_column: str = "ppl_conditional",
    direct_column: str = "ppl_direct",
    model_id: str = DEFAULT_MODEL_ID,
    template: str = DEFAULT_TEMPLATE,
    template_no_input: str = DEFAULT_TEMPLATE_NO_INPUT,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    mode: str = "ppl_ratio",
    batch_size: int = DEFAULT_BATCH_SIZE,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    **map_kwargs: Any,
) -> Dataset | DatasetDict:
    """Return ``ds`` with IFD columns: ``ifd``, ``ppl_conditional`` (PPL(A|Q)) and ``ppl_direct`` (PPL(A)).

    Same definition and numbers as :func:`hf_adapters.ifd.compute_ifd`; ``input_column=None`` for
    data without inputs. ``map_kwargs`` go to ``Dataset.map``.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.columns import add_ifd_column
        >>> ds = Dataset.from_dict({"instruction": ["Name a primary colour."], "input": [""], "output": ["Red."]})
        >>> add_ifd_column(ds).column_names
        ['instruction', 'input', 'output', 'ifd', 'ppl_conditional', 'ppl_direct']
    """
    mapper = IFDMapper(
        instruction_column=instruction_column, input_column=input_column, output_column=output_column,
        ifd_column=ifd_column, conditional_column=conditional_column, direct_column=direct_column,
        model_id=model_id, template=template, template_no_input=template_no_input, max_length=max_length,
        mode=mode, batch_size=batch_size, dtype=dtype, device=device, model=model, tokenizer=tokenizer,
    )
    config = {"kind": "ifd", "columns": mapper.source_columns,
              "outputs": [ifd_column, conditional_column, direct_column], "template": template,
              "template_no_input": template_no_input, "max_length": max_length, "mode": mode}
    return _apply(ds, mapper, config, "IFD", map_kwargs)


def add_information_parity_column(
    ds: Dataset | DatasetDict,
    text_column: str,
    reference_column: str,
    *,
    column: str = "information_parity",
    model_id: str = DEFAULT_MODEL_ID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    **map_kwargs: Any,
) -> Dataset | DatasetDict:
    """Return ``ds`` with a ``column`` of per-row Information Parity NLL(``reference_column``) /
    NLL(``text_column``), NaN where either text is empty. ``map_kwargs`` go to ``Dataset.map``.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.columns import add_information_parity_column
        >>> ds = Dataset.from_dict({"text": ["Le chat dort."], "reference": ["The cat is sleeping."]})
        >>> add_information_parity_column(ds, "text", "reference").column_names
        ['text', 'reference', 'information_parity']
    """
    mapper = InformationParityMapper(
        text_column=text_column, reference_column=reference_column, column=column, model_id=model_id,
        batch_size=batch_size, max_length=max_length, dtype=dtype, device=device, model=model, tokenizer=tokenizer,
    )
    config = {"kind": "information_parity", "columns": mapper.source_columns, "column": column,
              "max_length": max_length}
    return _apply(ds, mapper, config, "Information parity", map_kwargs)
