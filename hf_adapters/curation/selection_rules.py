"""The papers' selection rules by name: which score column each ranks, and which way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hf_adapters.core.options import check_choice
from hf_adapters.curation.selection import select


@dataclass(frozen=True)
class SelectionRule:
    """A paper's rule: rank rows by ``column``, highest first or lowest first."""

    column: str
    highest: bool
    description: str


#: The rules :func:`select_by_rule` knows, by name.
SELECTION_RULES = {
    "excess-loss": SelectionRule("excess_loss", True, "highest mean excess loss first (Rho-1's score per row)"),
    "rho-loss": SelectionRule("excess_loss_sum", True, "RHO-LOSS: highest reducible holdout loss first (training "
                                                       "model's loss minus the holdout model's)"),
    "color-filter": SelectionRule("excess_loss_sum", False, "CoLoR-Filter: lowest conditional loss reduction "
                                                            "first (model: conditioned on downstream data; "
                                                            "reference: the prior model)"),
    "ifd": SelectionRule("ifd", True, "Cherry_LLM: highest IFD first"),
    "perplexity": SelectionRule("perplexity", False, "lowest perplexity first"),
}


def select_by_rule(ds: Any, rule: str, *, column: str | None = None, **options: Any) -> Any:
    """:func:`~hf_adapters.curation.selection.select` with a paper's rule (:data:`SELECTION_RULES`): its column
    (``column`` names another) and its direction; ``options`` are ``select``'s (``top``, ``top_n``, ...).

    Example:
        >>> from datasets import Dataset
        >>> ds = Dataset.from_dict({"id": ["a", "b", "c"], "excess_loss_sum": [0.4, -1.2, 2.0]})
        >>> list(select_by_rule(ds, "color-filter", top_n=1)["id"])
        ['b']
    """
    check_choice("rule", rule, SELECTION_RULES)
    chosen = SELECTION_RULES[rule]
    return select(ds, column or chosen.column, highest=chosen.highest, **options)
