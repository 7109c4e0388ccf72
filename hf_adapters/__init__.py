"""Exact, batched language-model scores for data curation, on one shared likelihood core."""

from .likelihood import ContinuationScore, score_continuations, start_token_id
from .models import DEFAULT_MODEL_ID, ModelLoadError, clear_model_cache, load_model
from .perplexity import compute_perplexity

__all__ = [
    "DEFAULT_MODEL_ID",
    "ContinuationScore",
    "ModelLoadError",
    "clear_model_cache",
    "compute_perplexity",
    "load_model",
    "score_continuations",
    "start_token_id",
]
