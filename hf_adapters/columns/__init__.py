"""Scores as new columns of a ``datasets`` data set, through ``Dataset.map`` and its cache: one
``add_*_column`` per score, all thin wrappers of :func:`add_score_columns`."""

from hf_adapters.columns.dataset_columns import (
    add_ifd_column,
    add_ifeval_columns,
    add_information_parity_column,
    add_perplexity_column,
    add_score_columns,
)
from hf_adapters.columns.excess_loss_columns import add_excess_loss_column, add_rho1_labels_column

__all__ = [
    "add_excess_loss_column",
    "add_ifd_column",
    "add_ifeval_columns",
    "add_information_parity_column",
    "add_perplexity_column",
    "add_rho1_labels_column",
    "add_score_columns",
]
