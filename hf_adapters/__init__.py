"""Exact, batched language-model scores for data curation, on one shared likelihood core.

The public names below are imported on first use, so that ``import hf_adapters.ifeval`` or the
command line's ``--help`` do not pay for importing torch and transformers; ``dir(hf_adapters)``
and type checkers see them all.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from hf_adapters._moved import install as _install_moved_modules

_install_moved_modules()

if TYPE_CHECKING:
    from hf_adapters.backends import (
        BackendOptions,
        LikelihoodBackend,
        TransformersBackend,
        register_backend,
        score_continuations,
    )
    from hf_adapters.backends.loading import (
        DEFAULT_MODEL_ID,
        ModelLoadError,
        clear_model_cache,
        load_model,
        model_identity,
    )
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
    from hf_adapters.core.conversations import to_messages
    from hf_adapters.core.likelihood import ContinuationScore, start_token_id
    from hf_adapters.curation.selection import select
    from hf_adapters.curation.selection_rules import select_by_rule
    from hf_adapters.engines.local import score_dataset
    from hf_adapters.formulas.embeddings import embed_texts
    from hf_adapters.formulas.excess_loss import compute_excess_loss
    from hf_adapters.formulas.ifd import IFDOptions, compute_ifd
    from hf_adapters.formulas.information_parity import InformationParityOptions, compute_information_parity
    from hf_adapters.formulas.miwv import compute_miwv
    from hf_adapters.formulas.parallel_corpus import evaluate_parallel
    from hf_adapters.formulas.perplexity import PerplexityOptions, compute_perplexity
    from hf_adapters.formulas.token_selection import rho1_labels
    from hf_adapters.ifeval import compute_ifeval
    from hf_adapters.integrations.metric_paths import metric_path
    from hf_adapters.scorers import ScoreSet, build_scorer

#: Each public name, and the module it comes from.
_EXPORTS = {
    "BackendOptions": "backends",
    "LikelihoodBackend": "backends",
    "TransformersBackend": "backends",
    "register_backend": "backends",
    "score_continuations": "backends",
    "ContinuationScore": "core.likelihood",
    "start_token_id": "core.likelihood",
    "DEFAULT_MODEL_ID": "backends.loading",
    "ModelLoadError": "backends.loading",
    "clear_model_cache": "backends.loading",
    "load_model": "backends.loading",
    "model_identity": "backends.loading",
    "PerplexityOptions": "formulas.perplexity",
    "compute_perplexity": "formulas.perplexity",
    "IFDOptions": "formulas.ifd",
    "compute_ifd": "formulas.ifd",
    "InformationParityOptions": "formulas.information_parity",
    "compute_information_parity": "formulas.information_parity",
    "compute_ifeval": "ifeval",
    "evaluate_parallel": "formulas.parallel_corpus",
    "add_perplexity_column": "columns.dataset_columns",
    "add_ifd_column": "columns.dataset_columns",
    "add_information_parity_column": "columns.dataset_columns",
    "add_ifeval_columns": "columns.dataset_columns",
    "ScoreSet": "scorers.score_set",
    "add_score_columns": "columns.dataset_columns",
    "add_embedding_column": "columns.embedding_columns",
    "embed_texts": "formulas.embeddings",
    "build_scorer": "scorers",
    "score_dataset": "engines.local",
    "select": "curation.selection",
    "select_by_rule": "curation.selection_rules",
    "to_messages": "core.conversations",
    "compute_excess_loss": "formulas.excess_loss",
    "add_excess_loss_column": "columns.excess_loss_columns",
    "add_rho1_labels_column": "columns.excess_loss_columns",
    "rho1_labels": "formulas.token_selection",
    "compute_miwv": "formulas.miwv",
    "add_miwv_column": "columns.miwv_columns",
    "metric_path": "integrations.metric_paths",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hf_adapters' has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
