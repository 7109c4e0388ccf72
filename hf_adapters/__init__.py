"""Exact, batched language-model scores for data curation, on one shared likelihood core.

The public names below are imported on first use, so that ``import hf_adapters.ifeval`` or the
command line's ``--help`` do not pay for importing torch and transformers; ``dir(hf_adapters)``
and type checkers see them all.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backends import BackendOptions, LikelihoodBackend, TransformersBackend, register_backend, score_continuations
    from .columns import (
        add_ifd_column,
        add_ifeval_columns,
        add_information_parity_column,
        add_perplexity_column,
        add_score_columns,
    )
    from .conversations import to_messages
    from .embeddings import add_embedding_column, embed_texts
    from .excess_loss import compute_excess_loss
    from .excess_loss_columns import add_excess_loss_column, add_rho1_labels_column
    from .ifd import IFDOptions, compute_ifd
    from .ifeval import compute_ifeval
    from .information_parity import InformationParityOptions, compute_information_parity
    from .jobs import score_dataset
    from .likelihood import ContinuationScore, start_token_id
    from .miwv import add_miwv_column, compute_miwv
    from .models import DEFAULT_MODEL_ID, ModelLoadError, clear_model_cache, load_model, model_identity
    from .parallel_corpus import evaluate_parallel
    from .perplexity import PerplexityOptions, compute_perplexity
    from .scorers import build_scorer
    from .selection import select
    from .selection_rules import select_by_rule
    from .token_selection import rho1_labels

#: Each public name, and the module it comes from.
_EXPORTS = {
    "BackendOptions": "backends",
    "LikelihoodBackend": "backends",
    "TransformersBackend": "backends",
    "register_backend": "backends",
    "score_continuations": "backends",
    "ContinuationScore": "likelihood",
    "start_token_id": "likelihood",
    "DEFAULT_MODEL_ID": "models",
    "ModelLoadError": "models",
    "clear_model_cache": "models",
    "load_model": "models",
    "model_identity": "models",
    "PerplexityOptions": "perplexity",
    "compute_perplexity": "perplexity",
    "IFDOptions": "ifd",
    "compute_ifd": "ifd",
    "InformationParityOptions": "information_parity",
    "compute_information_parity": "information_parity",
    "compute_ifeval": "ifeval",
    "evaluate_parallel": "parallel_corpus",
    "add_perplexity_column": "columns",
    "add_ifd_column": "columns",
    "add_information_parity_column": "columns",
    "add_ifeval_columns": "columns",
    "add_score_columns": "columns",
    "add_embedding_column": "embeddings",
    "embed_texts": "embeddings",
    "build_scorer": "scorers",
    "score_dataset": "jobs",
    "select": "selection",
    "select_by_rule": "selection_rules",
    "to_messages": "conversations",
    "compute_excess_loss": "excess_loss",
    "add_excess_loss_column": "excess_loss_columns",
    "add_rho1_labels_column": "excess_loss_columns",
    "rho1_labels": "token_selection",
    "compute_miwv": "miwv",
    "add_miwv_column": "miwv",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hf_adapters' has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
