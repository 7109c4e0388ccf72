"""Exact, batched language-model scores for data curation, on one shared likelihood core.

Names are imported lazily, so that ``import hf_adapters.ifeval`` or the command line's ``--help``
do not pay for importing torch and transformers.
"""

from importlib import import_module

_EXPORTS = {
    "ContinuationScore": "likelihood",
    "score_continuations": "likelihood",
    "start_token_id": "likelihood",
    "DEFAULT_MODEL_ID": "models",
    "ModelLoadError": "models",
    "clear_model_cache": "models",
    "load_model": "models",
    "model_identity": "models",
    "compute_perplexity": "perplexity",
    "compute_ifd": "ifd",
    "compute_information_parity": "parity",
    "compute_ifeval": "ifeval",
    "evaluate_parallel": "parallel",
    "add_perplexity_column": "columns",
    "add_ifd_column": "columns",
    "add_information_parity_column": "columns",
    "add_ifeval_columns": "columns",
    "add_score_columns": "columns",
    "build_scorer": "scorers",
    "score_dataset": "jobs",
    "select": "selection",
    "to_messages": "conversations",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hf_adapters' has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
