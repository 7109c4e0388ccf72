"""Scores as new columns of a ``datasets`` data set, through ``Dataset.map`` and its cache: one
``add_*_column`` per score, thin wrappers of :func:`add_score_columns`; and the columns that read more
than their own row: embeddings (:func:`add_embedding_column`) and MIWV (:func:`add_miwv_column`)."""

from hf_adapters.columns.dataset_columns import (
    add_ifd_column,
    add_ifeval_columns,
    add_information_parity_column,
    add_perplexity_column,
    add_score_columns,
)
from hf_adapters.columns.embedding_columns import add_embedding_column
from hf_adapters.columns.excess_loss_columns import add_excess_loss_column, add_rho1_labels_column
from hf_adapters.columns.miwv_columns import add_miwv_column

__all__ = [
    "add_embedding_column",
    "add_excess_loss_column",
    "add_ifd_column",
    "add_ifeval_columns",
    "add_information_parity_column",
    "add_miwv_column",
    "add_perplexity_column",
    "add_rho1_labels_column",
    "add_score_columns",
]
