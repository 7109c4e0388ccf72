"""Scores as new columns of a ``datasets.Dataset``, through ``Dataset.map`` and its cache.

:func:`add_score_columns` maps any scorer over a data set; the named helpers build the scorer of
one metric from ``datasets``-style arguments. The model is loaded on the first batch, so a cache
hit loads none. The result's fingerprint comes from the input's, the scorer's configuration and
the model's identity (its files' sizes, times and first and last MiB, or its hub commit; see
:func:`hf_adapters.backends.loading.model_identity`), never from hashing a whole model: re-running the same
call reads the cache, and new weights at the same path do not. With your own ``model`` object the
library cannot tell two models apart, so the result is not cached across calls unless you name it
with ``new_fingerprint=``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import logging
from collections.abc import Mapping
from typing import Any

from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict
from datasets.fingerprint import Hasher, generate_random_fingerprint

from hf_adapters.backends import BackendOptions
from hf_adapters.core.options import partition_options, takes_options
from hf_adapters.formulas.ifd import IFDOptions
from hf_adapters.formulas.information_parity import InformationParityOptions
from hf_adapters.formulas.perplexity import PerplexityOptions
from hf_adapters.scorers import (
    ConversationIFDScorer,
    ConversationPerplexityScorer,
    IFDScorer,
    IFEvalScorer,
    InformationParityScorer,
    PerplexityScorer,
    PPLScorer,
    RowScorer,
)
from hf_adapters.scorers.base import ModelRowScorer

logger = logging.getLogger(__name__)

#: What the helpers take and return: a data set in memory or a stream, whole or split by split.
AnyDataset = Dataset | DatasetDict | IterableDataset | IterableDatasetDict
#: Seconds a pass over a scored stream runs before its progress bar shows: a short stream draws none.
STREAM_BAR_DELAY = 5.0
#: The batch size of ``IterableDataset.map`` when none is given.
STREAM_BATCH_SIZE = 1000


class StreamProgress:
    """The progress bar of a scored stream, which has no length: rows scored so far and their rate.

    It appears once a pass over the stream has scored for :data:`STREAM_BAR_DELAY` seconds, starts
    again when the stream is read again from its first row, and closes on a batch shorter than
    ``batch_size`` (the stream's last). It follows ``datasets``' switch for progress bars, as the
    bar of ``Dataset.map`` does.
    """

    def __init__(self, desc: str, batch_size: int):
        self.desc, self.batch_size = desc, batch_size
        self.bar: Any = None

    def start(self, first_row: int) -> None:
        """Before a batch beginning at ``first_row`` is scored: a bar for a new pass if there is none."""
        from datasets.utils.tqdm import tqdm

        if first_row == 0:
            self.close()
        if self.bar is None:
            self.bar = tqdm(desc=self.desc, unit="row", delay=STREAM_BAR_DELAY)

    def update(self, count: int) -> None:
        """After a batch of ``count`` rows is scored."""
        self.bar.update(count)
        if count < self.batch_size:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def check_columns(ds: Dataset | IterableDataset, columns: list[str]) -> None:
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
    identity = scorer.model_identity()
    if scorer.runs_model and identity is None:
        logger.info("A `model` object (or a backend that cannot say what it runs) was passed: the result is not "
                    "cached across calls; pass `new_fingerprint=` to name it yourself.")
        return generate_random_fingerprint()
    return Hasher.hash([*parts, identity])


def output_names(scorer: RowScorer, names: Mapping[str, str] | None) -> dict[str, str]:
    """The column each of the scorer's outputs goes to (``names``: output -> column, default its own
    name); a ValueError if two outputs share a column or one would replace a column the scorer reads."""
    names = {output: (names or {}).get(output, output) for output in scorer.outputs}
    columns = list(names.values())
    if shared := sorted({column for column in columns if columns.count(column) > 1}):
        raise ValueError(f"Two outputs would go to the column(s) {shared}: "
                         f"{ {output: column for output, column in names.items() if column in shared} }; "
                         "give each its own name.")
    if read := sorted(set(columns) & set(scorer.source_columns)):
        raise ValueError(f"The output column(s) {read} would replace the input the scores are computed from; "
                         "choose other names.")
    return names


def add_score_columns(
    ds: AnyDataset,
    scorer: RowScorer,
    *,
    names: Mapping[str, str] | None = None,
    desc: str | None = None,
    **map_kwargs: Any,
) -> AnyDataset:
    """Return ``ds`` with ``scorer``'s output columns added (renamed by ``names``: output -> column).

    ``map_kwargs`` go to ``Dataset.map`` (``load_from_cache_file``, ``new_fingerprint`` ...);
    ``num_proc`` above 1 is ignored with a warning (forked copies of a process that has run torch
    can deadlock). A 0-row data set gets the columns, empty. A stream (``IterableDataset``, e.g.
    ``load_dataset(..., streaming=True)``) gets its columns lazily: each batch is scored as it is
    read, with the same values as in memory, and nothing is cached; a pass over it that scores for
    more than a few seconds shows a bar of the rows scored (:class:`StreamProgress`).

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_score_columns
        >>> from hf_adapters.scorers import IFEvalScorer
        >>> ds = Dataset.from_dict({"response": ["hello world"], "instruction_id_list": [["punctuation:no_comma"]],
        ...                         "kwargs": [[{}]]})
        >>> list(add_score_columns(ds, IFEvalScorer(), names={"prompt_strict": "ok"})["ok"])
        [True]
    """
    names = output_names(scorer, names)
    if isinstance(ds, (DatasetDict, IterableDatasetDict)):
        return type(ds)({split: add_score_columns(part, scorer, names=names, desc=desc, **map_kwargs)
                         for split, part in ds.items()})
    if ds.column_names is not None:  # a stream whose first file has not been read may not know its columns
        scorer.use_columns(ds.column_names)
        check_columns(ds, scorer.source_columns)
    features = None
    if ds.features is not None:
        features = ds.features.copy()
        features.update({names[output]: feature for output, feature in scorer.output_features().items()})

    def score(batch: Mapping[str, list], indices: list[int]) -> dict[str, list]:
        if ds.column_names is None:
            scorer.use_columns(list(batch))
        return {names[output]: values for output, values in scorer(batch, indices).items()}

    if isinstance(ds, IterableDataset):
        if unknown := sorted(set(map_kwargs) - STREAM_MAP_KEYWORDS):
            raise ValueError(f"{unknown} do not apply to a stream (IterableDataset.map takes "
                             f"{sorted(STREAM_MAP_KEYWORDS)}): nothing of a stream is cached.")
        progress = StreamProgress(desc or scorer.name, map_kwargs.get("batch_size") or STREAM_BATCH_SIZE)

        def score_shown(batch: Mapping[str, list], indices: list[int]) -> dict[str, list]:
            progress.start(indices[0] if indices else 0)
            scores = score(batch, indices)
            progress.update(len(indices))
            return scores

        return ds.map(score_shown, batched=True, with_indices=True, features=features, **map_kwargs)
    if ds.num_rows == 0:  # map calls the scorer on no batch: add its columns, empty
        ds = ds.remove_columns([column for column in names.values() if column in ds.column_names])
        for column in names.values():
            ds = ds.add_column(column, [], feature=features[column])
        return ds
    # The output types are declared, not taken from the first batch (whose lists may all be empty).
    kwargs = {"desc": desc or scorer.name, "features": features, **map_kwargs}
    if (kwargs.get("num_proc") or 1) > 1:
        logger.warning("num_proc=%s is ignored: model columns are scored in this process, in batches (forked copies "
                       "of a process that has run torch can deadlock).", kwargs["num_proc"])
        kwargs.pop("num_proc")
    kwargs.setdefault("new_fingerprint", result_fingerprint(ds, scorer, names))
    return ds.map(score, batched=True, with_indices=True, **kwargs)


#: The keyword arguments of ``IterableDataset.map`` a helper passes on to a stream.
STREAM_MAP_KEYWORDS = frozenset({"batch_size", "drop_last_batch", "remove_columns"})


@functools.cache
def map_keywords() -> frozenset[str]:
    """The keyword arguments of ``Dataset.map`` a helper passes on (not those it sets itself)."""
    own = {"self", "function", "batched", "with_indices", "fn_kwargs"}
    return frozenset(set(inspect.signature(Dataset.map).parameters) - own)


def scorer_for(cls: type[ModelRowScorer], caller: str, options: Mapping[str, Any],
               **config: Any) -> tuple[ModelRowScorer, dict[str, Any]]:
    """The scorer a helper's keyword ``options`` build (the metric's options and
    :class:`~hf_adapters.backends.BackendOptions`), and the rest for ``Dataset.map``; a name that
    is neither is a ValueError naming ``caller`` and its valid options."""
    run, metric, map_kwargs = partition_options(options, BackendOptions.names(), cls.option_spec.names(),
                                                caller=caller, others=map_keywords())
    return cls.from_options({**run, **metric}, caller=caller, **config), map_kwargs


def row_scorer(classes: tuple[type[ModelRowScorer], type[ModelRowScorer], type[ModelRowScorer]], *,
               text_column: str | None, messages_column: str | None, instruction_column: str,
               input_column: str | None, output_column: str) -> tuple[type[ModelRowScorer], dict[str, Any]]:
    """Which of ``classes`` (conversations, texts, instruction rows) scores the rows, and the columns it
    reads: ``messages_column`` if given, else ``text_column``, else the instruction, input and output."""
    conversations, texts, instruction_rows = classes
    if messages_column is not None:
        return conversations, {"messages_column": messages_column}
    if text_column is not None:
        return texts, {"text_column": text_column}
    return instruction_rows, {"instruction_column": instruction_column, "input_column": input_column,
                              "output_column": output_column}


@takes_options(BackendOptions, PerplexityOptions)
def add_perplexity_column(
    ds: AnyDataset,
    *,
    text_column: str | None = None,
    messages_column: str | None = None,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    column: str = "perplexity",
    **options: Any,
) -> AnyDataset:
    """Return ``ds`` with a ``column`` of per-row perplexities (with ``stride``: of every token, in
    rolling windows of at most ``max_length`` tokens).

    The text is ``text_column`` if given (:class:`~hf_adapters.scorers.PerplexityScorer`); with
    ``messages_column`` (a conversation per row, OpenAI or ShareGPT form) the perplexity is that of
    the assistant tokens after their history (:class:`~hf_adapters.scorers.ConversationPerplexityScorer`);
    else the text is the non-empty instruction, input and output joined with newlines
    (:class:`~hf_adapters.scorers.PPLScorer`; ``input_column=None``: no input).
    ``return_token_losses`` adds ``tokens`` and ``token_losses`` columns: per row, the scored
    tokens and their NLLs. The options are those of
    :class:`~hf_adapters.formulas.perplexity.PerplexityOptions` and :class:`~hf_adapters.backends.BackendOptions`;
    ``Dataset.map``'s keyword arguments go to it.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_perplexity_column
        >>> ds = Dataset.from_dict({"text": ["The cat sat on the mat.", "Colourless green ideas."]})
        >>> add_perplexity_column(ds, text_column="text").column_names
        ['text', 'perplexity']
    """
    cls, columns = row_scorer((ConversationPerplexityScorer, PerplexityScorer, PPLScorer), text_column=text_column,
                              messages_column=messages_column, instruction_column=instruction_column,
                              input_column=input_column, output_column=output_column)
    scorer, map_kwargs = scorer_for(cls, "add_perplexity_column", options, **columns)
    return add_score_columns(ds, scorer, names={"perplexity": column}, desc="Perplexity", **map_kwargs)


@takes_options(BackendOptions, IFDOptions)
def add_ifd_column(
    ds: AnyDataset,
    *,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    messages_column: str | None = None,
    ifd_column: str = "ifd",
    conditional_column: str = "ppl_conditional",
    direct_column: str = "ppl_direct",
    **options: Any,
) -> AnyDataset:
    """Return ``ds`` with IFD columns: ``ifd``, ``ppl_conditional`` (PPL(A|Q)) and ``ppl_direct`` (PPL(A)).

    Same definition and numbers as :func:`hf_adapters.formulas.ifd.compute_ifd`; ``input_column=None`` for
    data without inputs. With ``messages_column`` each row is a conversation (OpenAI or ShareGPT
    form): the IFD of its last assistant turn (``turns="last"``) or of all of them (``"all"``), with
    a ``turn_ifd`` column of per-turn scores, as :func:`hf_adapters.formulas.ifd.score_conversation_ifd`
    computes them (``turn_template``: the turn layout, default the tokenizer's chat template).
    ``direction="reverse"`` adds r-IFD instead, PPL(Q|A) / PPL(Q), in an ``r_ifd`` column unless
    ``ifd_column`` names another. ``return_token_losses`` adds ``tokens``,
    ``conditional_token_losses`` and ``direct_token_losses`` columns. ``convention`` (``"cherry"``,
    ``"superfiltering"`` or ``"opendataarena"``) reproduces that peer's numbers, as in
    :func:`~hf_adapters.formulas.ifd.compute_ifd`. The options are those of
    :class:`~hf_adapters.formulas.ifd.IFDOptions` and :class:`~hf_adapters.backends.BackendOptions`;
    ``Dataset.map``'s keyword arguments go to it.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_ifd_column
        >>> ds = Dataset.from_dict({"instruction": ["Name a primary colour."], "input": [""], "output": ["Red."]})
        >>> add_ifd_column(ds).column_names
        ['instruction', 'input', 'output', 'ifd', 'ppl_conditional', 'ppl_direct']
    """
    if messages_column is not None:
        scorer, map_kwargs = scorer_for(ConversationIFDScorer, "add_ifd_column", options,
                                        messages_column=messages_column)
    else:
        scorer, map_kwargs = scorer_for(IFDScorer, "add_ifd_column", options, instruction_column=instruction_column,
                                        input_column=input_column, output_column=output_column)
    if scorer.setting("direction") == "reverse" and ifd_column == "ifd":
        ifd_column = "r_ifd"
    names = {"ifd": ifd_column, "ppl_conditional": conditional_column, "ppl_direct": direct_column}
    return add_score_columns(ds, scorer, names=names, desc="IFD", **map_kwargs)


@takes_options(BackendOptions, InformationParityOptions)
def add_information_parity_column(
    ds: AnyDataset,
    *,
    prediction_column: str,
    reference_column: str,
    column: str = "information_parity",
    **options: Any,
) -> AnyDataset:
    """Return ``ds`` with a ``column`` of per-row Information Parity NLL(``reference_column``) /
    NLL(``prediction_column``), NaN where either text is empty. The options are those of
    :class:`~hf_adapters.formulas.information_parity.InformationParityOptions` and
    :class:`~hf_adapters.backends.BackendOptions`; ``Dataset.map``'s keyword arguments go to it.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import add_information_parity_column
        >>> ds = Dataset.from_dict({"fr": ["Le chat dort."], "en": ["The cat is sleeping."]})
        >>> add_information_parity_column(ds, prediction_column="fr", reference_column="en").column_names
        ['fr', 'en', 'information_parity']
    """
    scorer, map_kwargs = scorer_for(InformationParityScorer, "add_information_parity_column", options,
                                    prediction_column=prediction_column, reference_column=reference_column)
    return add_score_columns(ds, scorer, names={"information_parity": column}, desc="Information parity",
                             **map_kwargs)


def add_ifeval_columns(
    ds: AnyDataset,
    *,
    response_column: str = "response",
    instruction_ids_column: str = "instruction_id_list",
    kwargs_column: str = "kwargs",
    prefix: str = "ifeval_",
    **map_kwargs: Any,
) -> AnyDataset:
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
    splits = [split for split in (ds.values() if isinstance(ds, (DatasetDict, IterableDatasetDict)) else [ds])
              if split.column_names is not None]
    for column in scorer.source_columns:
        if any(column not in split.column_names for split in splits):
            raise ValueError(f"column {column!r} not found; available: {sorted(next(iter(splits)).column_names)}")
    names = {output: prefix + output for output in ("strict", "loose", "prompt_strict", "prompt_loose")}
    return add_score_columns(ds, scorer, names=names, desc="IFEval", **map_kwargs)
