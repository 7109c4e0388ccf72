"""Scores as new columns of a ``datasets.Dataset``, through ``Dataset.map`` and its cache.

:func:`add_score_columns` maps any scorer over a data set; the named helpers build the scorer of
one metric from ``datasets``-style arguments. The model is loaded on the first batch, so a cache
hit loads none. The result's fingerprint comes from the input's, the scorer's configuration and
the model's identity (its files' sizes, times and first and last MiB, or its hub commit; see
:func:`hf_adapters.models.model_identity`), never from hashing a whole model: re-running the same
call reads the cache, and new weights at the same path do not. With your own ``model`` object the
library cannot tell two models apart, so the result is not cached across calls unless you name it
with ``new_fingerprint=``.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping
from typing import Any

import torch
from datasets import Dataset, DatasetDict, Value
from datasets.fingerprint import Hasher, generate_random_fingerprint
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .ifd import DEFAULT_REVERSE_TEMPLATE, convention_settings
from .models import DEFAULT_MODEL_ID
from .options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH
from .scorers import (
    ConversationIFDScorer,
    ConversationPerplexityScorer,
    IFDScorer,
    IFEvalScorer,
    InformationParityScorer,
    PerplexityScorer,
    PPLScorer,
    RowScorer,
)
from .scorers.base import ModelRowScorer

logger = logging.getLogger(__name__)


def check_columns(ds: Dataset, columns: list[str]) -> None:
    """Raise a ValueError naming the first of ``columns`` that ``ds`` lacks."""
    for column in columns:
        if column not in ds.column_names:
            hint = " (pass input_column=None for data without inputs)" if column == "input" else ""
            raise ValueError(f"Column {column!r} not found{hint}; available: {ds.column_names}")


def result_fingerprint(ds: Dataset, scorer: RowScorer, names: Mapping[str, str]) -> str:
    """The new dataset's fingerprint: the input's, the scorer's configuration and output names, and
    the model's identity with the effective dtype and device type.

    Batch size and device number are left out: scores do not depend on them. A caller-supplied
    model object cannot be named, so it gets a fresh random fingerprint (no reuse of stale results).
    """
    fingerprint = {key: value for key, value in scorer.fingerprint().items() if key != "batch_size"}
    parts = [ds._fingerprint, importlib.metadata.version("hf_adapters"), fingerprint, dict(names)]
    if isinstance(scorer, ModelRowScorer) and scorer.model_object is not None:
        logger.info("A `model` object was passed: the result is not cached across calls; "
                    "pass `new_fingerprint=` to name it yourself.")
        return generate_random_fingerprint()
    return Hasher.hash([*parts, scorer.model_identity()])


def add_score_columns(
    ds: Dataset | DatasetDict,
    scorer: RowScorer,
    *,
    names: Mapping[str, str] | None = None,
    desc: str | None = None,
    **map_kwargs: Any,
) -> Dataset | DatasetDict:
    """Return ``ds`` with ``scorer``'s output columns added (renamed by ``names``: output -> column).

    ``map_kwargs`` go to ``Dataset.map`` (``load_from_cache_file``, ``new_fingerprint`` ...);
    ``num_proc`` above 1 is ignored with a warning (forked copies of a process that has run torch
    can deadlock). A 0-row data set gets the columns, empty.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_score_columns
        >>> from hf_adapters.scorers import IFEvalScorer
        >>> ds = Dataset.from_dict({"response": ["hello world"], "instruction_id_list": [["punctuation:no_comma"]],
        ...                         "kwargs": [[{}]]})
        >>> list(add_score_columns(ds, IFEvalScorer(), names={"prompt_strict": "ok"})["ok"])
        [True]
    """
    names = {output: (names or {}).get(output, output) for output in scorer.outputs}
    scorer.use_columns(ds.column_names if isinstance(ds, Dataset) else next(iter(ds.values())).column_names)
    if isinstance(ds, DatasetDict):
        return DatasetDict({split: add_score_columns(part, scorer, names=names, desc=desc, **map_kwargs)
                            for split, part in ds.items()})
    check_columns(ds, scorer.source_columns)
    if ds.num_rows == 0:  # map calls the scorer on no batch: add its columns, empty
        ds = ds.remove_columns([column for column in names.values() if column in ds.column_names])
        for column in names.values():
            ds = ds.add_column(column, [], feature=Value("float64"))
        return ds
    kwargs = {"desc": desc or scorer.name, **map_kwargs}
    if (kwargs.get("num_proc") or 1) > 1:
        logger.warning("num_proc=%s is ignored: model columns are scored in this process, in batches (forked copies "
                       "of a process that has run torch can deadlock).", kwargs["num_proc"])
        kwargs.pop("num_proc")
    kwargs.setdefault("new_fingerprint", result_fingerprint(ds, scorer, names))

    def score(batch: Mapping[str, list], indices: list[int]) -> dict[str, list]:
        return {names[output]: values for output, values in scorer(batch, indices).items()}

    return ds.map(score, batched=True, with_indices=True, **kwargs)


def _model(model_id: str, model: PreTrainedModel | None) -> Any:
    return model_id if model is None else model


def add_perplexity_column(
    ds: Dataset | DatasetDict,
    *,
    text_column: str | None = None,
    messages_column: str | None = None,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    column: str = "perplexity",
    model_id: str = DEFAULT_MODEL_ID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    stride: int | None = None,
    return_token_losses: bool = False,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    **map_kwargs: Any,
) -> Dataset | DatasetDict:
    """Return ``ds`` with a ``column`` of per-row perplexities (with ``stride``: of every token, in
    rolling windows of at most ``max_length`` tokens).

    The text is ``text_column`` if given (:class:`~hf_adapters.scorers.PerplexityScorer`); with
    ``messages_column`` (a conversation per row, OpenAI or ShareGPT form) the perplexity is that of
    the assistant tokens after their history (:class:`~hf_adapters.scorers.ConversationPerplexityScorer`);
    else the text is the non-empty instruction, input and output joined with newlines
    (:class:`~hf_adapters.scorers.PPLScorer`; ``input_column=None``: no input). ``map_kwargs`` go
    to ``Dataset.map``. ``return_token_losses`` adds ``tokens`` and ``token_losses`` columns: per
    row, the scored tokens and their NLLs.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_perplexity_column
        >>> ds = Dataset.from_dict({"text": ["The cat sat on the mat.", "Colourless green ideas."]})
        >>> add_perplexity_column(ds, text_column="text").column_names
        ['text', 'perplexity']
    """
    options = {"model": _model(model_id, model), "tokenizer": tokenizer, "batch_size": batch_size,
               "max_length": max_length, "stride": stride, "return_token_losses": return_token_losses,
               "dtype": dtype, "device": device}
    if messages_column is not None:
        if stride is not None or return_token_losses:
            raise ValueError("`stride` and `return_token_losses` score texts; conversations take neither.")
        options.pop("stride")
        options.pop("return_token_losses")
        scorer = ConversationPerplexityScorer(messages_column=messages_column, **options)
    elif text_column is not None:
        scorer = PerplexityScorer(text_column=text_column, **options)
    else:
        scorer = PPLScorer(instruction_column=instruction_column, input_column=input_column,
                           output_column=output_column, **options)
    return add_score_columns(ds, scorer, names={"perplexity": column}, desc="Perplexity", **map_kwargs)


def add_ifd_column(
    ds: Dataset | DatasetDict,
    *,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    messages_column: str | None = None,
    turns: str = "last",
    turn_template: str | None = None,
    ifd_column: str = "ifd",
    conditional_column: str = "ppl_conditional",
    direct_column: str = "ppl_direct",
    model_id: str = DEFAULT_MODEL_ID,
    template: str | None = None,
    template_no_input: str | None = None,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    mode: str | None = None,
    convention: str = "exact",
    direction: str = "forward",
    reverse_template: str = DEFAULT_REVERSE_TEMPLATE,
    return_token_losses: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    **map_kwargs: Any,
) -> Dataset | DatasetDict:
    """Return ``ds`` with IFD columns: ``ifd``, ``ppl_conditional`` (PPL(A|Q)) and ``ppl_direct`` (PPL(A)).

    Same definition and numbers as :func:`hf_adapters.ifd.compute_ifd`; ``input_column=None`` for
    data without inputs. With ``messages_column`` each row is a conversation (OpenAI or ShareGPT
    form): the IFD of its last assistant turn (``turns="last"``) or of all of them (``"all"``), with
    a ``turn_ifd`` column of per-turn scores, as :func:`hf_adapters.ifd.score_conversation_ifd`
    computes them (``turn_template``: the turn layout, default the tokenizer's chat template).
    ``direction="reverse"`` adds r-IFD instead, PPL(Q|A) / PPL(Q), in an ``r_ifd`` column unless
    ``ifd_column`` names another. ``return_token_losses`` adds ``tokens``,
    ``conditional_token_losses`` and ``direct_token_losses`` columns. ``convention`` (``"cherry"``,
    ``"superfiltering"`` or ``"opendataarena"``) reproduces that peer's numbers, as in
    :func:`~hf_adapters.ifd.compute_ifd`: ``template``, ``template_no_input`` and ``mode`` then
    default to the peer's (else to the seed's ChatML prompts and ``ppl_ratio``). ``map_kwargs`` go
    to ``Dataset.map``.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_ifd_column
        >>> ds = Dataset.from_dict({"instruction": ["Name a primary colour."], "input": [""], "output": ["Red."]})
        >>> add_ifd_column(ds).column_names
        ['instruction', 'input', 'output', 'ifd', 'ppl_conditional', 'ppl_direct']
    """
    template, template_no_input, mode = convention_settings(convention, template, template_no_input, mode)
    options = {"model": _model(model_id, model), "tokenizer": tokenizer, "max_length": max_length, "mode": mode,
               "batch_size": batch_size, "dtype": dtype, "device": device}
    if messages_column is not None:
        if direction != "forward" or return_token_losses or convention != "exact":
            raise ValueError("Conversations are scored forward, without token losses, with convention='exact'.")
        scorer = ConversationIFDScorer(messages_column=messages_column, turns=turns, template=turn_template,
                                       **options)
    else:
        if convention != "exact":  # only then: an exact call keeps its fingerprint
            options["convention"] = convention
        scorer = IFDScorer(instruction_column=instruction_column, input_column=input_column,
                           output_column=output_column, template=template, template_no_input=template_no_input,
                           direction=direction, reverse_template=reverse_template,
                           return_token_losses=return_token_losses, **options)
    if direction == "reverse" and ifd_column == "ifd":
        ifd_column = "r_ifd"
    names = {"ifd": ifd_column, "ppl_conditional": conditional_column, "ppl_direct": direct_column}
    return add_score_columns(ds, scorer, names=names, desc="IFD", **map_kwargs)


def add_information_parity_column(
    ds: Dataset | DatasetDict,
    *,
    prediction_column: str,
    reference_column: str,
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
    NLL(``prediction_column``), NaN where either text is empty. ``map_kwargs`` go to ``Dataset.map``.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_information_parity_column
        >>> ds = Dataset.from_dict({"fr": ["Le chat dort."], "en": ["The cat is sleeping."]})
        >>> add_information_parity_column(ds, prediction_column="fr", reference_column="en").column_names
        ['fr', 'en', 'information_parity']
    """
    scorer = InformationParityScorer(
        prediction_column=prediction_column, reference_column=reference_column, model=_model(model_id, model),
        tokenizer=tokenizer, batch_size=batch_size, max_length=max_length, dtype=dtype, device=device,
    )
    return add_score_columns(ds, scorer, names={"information_parity": column}, desc="Information parity",
                             **map_kwargs)


def add_ifeval_columns(
    ds: Dataset | DatasetDict,
    *,
    response_column: str = "response",
    instruction_ids_column: str = "instruction_id_list",
    kwargs_column: str = "kwargs",
    prefix: str = "ifeval_",
    **map_kwargs: Any,
) -> Dataset | DatasetDict:
    """Return ``ds`` with four IFEval columns: ``{prefix}strict`` and ``{prefix}loose`` (one bool per
    instruction), ``{prefix}prompt_strict`` and ``{prefix}prompt_loose`` (all instructions of the row
    followed). Arrow turns each kwargs dict into a struct with every key present, absent ones
    ``None``; those are ignored. Errors name the row index and, when there is a ``key`` column, the key.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_ifeval_columns
        >>> ds = Dataset.from_dict({"response": ["a, b"], "instruction_id_list": [["punctuation:no_comma"]],
        ...                         "kwargs": [[{}]]})
        >>> list(add_ifeval_columns(ds)["ifeval_prompt_strict"])
        [False]
    """
    scorer = IFEvalScorer(response_column=response_column, instruction_ids_column=instruction_ids_column,
                          kwargs_column=kwargs_column)
    splits = ds.values() if isinstance(ds, DatasetDict) else [ds]
    for column in scorer.source_columns:
        if any(column not in split.column_names for split in splits):
            raise ValueError(f"column {column!r} not found; available: {sorted(next(iter(splits)).column_names)}")
    names = {output: prefix + output for output in ("strict", "loose", "prompt_strict", "prompt_loose")}
    return add_score_columns(ds, scorer, names=names, desc="IFEval", **map_kwargs)
