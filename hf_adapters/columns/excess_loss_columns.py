"""Excess loss as ``datasets`` columns: :func:`add_excess_loss_column`, and Rho-1's training labels
(:func:`add_rho1_labels_column`), through ``Dataset.map`` and its cache like the other helpers."""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from hf_adapters.backends import BackendOptions
from hf_adapters.columns.dataset_columns import AnyDataset, add_score_columns, row_scorer, scorer_for
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.core.options import takes_options
from hf_adapters.core.texts import text_items
from hf_adapters.formulas.excess_loss import ExcessLossSpec
from hf_adapters.formulas.token_selection import rho1_labels
from hf_adapters.scorers import ConversationExcessLossScorer, ExcessLossScorer, TextExcessLossScorer


@takes_options(BackendOptions, ExcessLossSpec)
def add_excess_loss_column(
    ds: AnyDataset,
    *,
    text_column: str | None = None,
    messages_column: str | None = None,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    column: str = "excess_loss",
    **options: Any,
) -> AnyDataset:
    """Return ``ds`` with a ``column`` of per-row excess losses (mean of ``L_model - L_ref`` over the
    scored tokens, in nats), and ``excess_loss_sum``, ``loss`` and ``reference_loss`` columns.

    The text is ``text_column`` if given; with ``messages_column`` the assistant tokens of each
    conversation after their history; else the non-empty instruction, input and output joined with
    newlines. The reference is named by ``reference_model_id`` (or ``reference_model`` and
    ``reference_tokenizer``, or ``reference_backend``); ``return_token_losses`` adds per-token columns.
    The options are those of :class:`~hf_adapters.formulas.excess_loss.ExcessLossSpec` and
    :class:`~hf_adapters.backends.BackendOptions`; ``Dataset.map``'s keyword arguments go to it.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.columns.excess_loss_columns import add_excess_loss_column
        >>> ds = Dataset.from_dict({"text": ["The cat sat on the mat."]})
        >>> add_excess_loss_column(ds, text_column="text", reference_model_id="HuggingFaceTB/SmolLM2-135M-Instruct"
        ...                        ).column_names
        ['text', 'excess_loss', 'excess_loss_sum', 'loss', 'reference_loss']
    """
    cls, columns = row_scorer((ConversationExcessLossScorer, TextExcessLossScorer, ExcessLossScorer),
                              text_column=text_column, messages_column=messages_column,
                              instruction_column=instruction_column, input_column=input_column,
                              output_column=output_column)
    scorer, map_kwargs = scorer_for(cls, "add_excess_loss_column", options, **columns)
    return add_score_columns(ds, scorer, names={"excess_loss": column}, desc="Excess loss", **map_kwargs)


@takes_options(BackendOptions, ExcessLossSpec)
def add_rho1_labels_column(
    ds: Dataset,
    *,
    text_column: str = "text",
    top: float = 0.6,
    scope: str = "row",
    input_ids_column: str = "input_ids",
    labels_column: str = "labels",
    **options: Any,
) -> Dataset:
    """Return ``ds`` with the token ids the model reads for each text (``input_ids_column``: the start
    token, then the text's tokens) and Rho-1's training labels (``labels_column``): the token id where
    the token is among the ``top`` fraction by excess loss, per row or over the whole data set
    (``scope="dataset"``), ``-100`` elsewhere (:func:`~hf_adapters.formulas.token_selection.rho1_labels`).

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.columns.excess_loss_columns import add_rho1_labels_column
        >>> ds = Dataset.from_dict({"text": ["The cat sat on the mat."]})
        >>> row = add_rho1_labels_column(ds, reference_model_id="HuggingFaceTB/SmolLM2-135M-Instruct")[0]
        >>> len(row["labels"]) == len(row["input_ids"]) and row["labels"][0] == -100
        True
    """
    scorer, map_kwargs = scorer_for(TextExcessLossScorer, "add_rho1_labels_column",
                                    {**options, "return_token_losses": True}, text_column=text_column)
    losses = add_score_columns(ds, scorer, desc="Excess loss", **map_kwargs)["token_excess_losses"]
    tokenizer = scorer.load().tokenizer
    input_ids = [(context or [start_token_id(tokenizer)]) + continuation[: len(row)] for (context, continuation), row
                 in zip(text_items(tokenizer, ds[text_column], scorer.spec.add_start_token), losses, strict=True)]
    labels = rho1_labels(input_ids, losses, top=top, scope=scope)
    return ds.add_column(input_ids_column, input_ids).add_column(labels_column, labels)
