"""IFEval: the 25 instruction checks, strict and loose scoring, and their aggregates."""

from hf_adapters.ifeval.evaluation import (
    RowResult,
    aggregate,
    compute_ifeval,
    ifeval_row_score,
    loose_variants,
    score_row,
    score_rows,
)
from hf_adapters.ifeval.examples import demo_rows
from hf_adapters.ifeval.registry import INSTRUCTIONS, IFEvalInputError, build_check, build_checks

__all__ = [
    "INSTRUCTIONS",
    "IFEvalInputError",
    "RowResult",
    "aggregate",
    "build_check",
    "build_checks",
    "compute_ifeval",
    "demo_rows",
    "ifeval_row_score",
    "loose_variants",
    "score_row",
    "score_rows",
]
