"""The step after scoring: keep the rows whose scores pass a cut-off and rank highest (or lowest)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from hf_adapters.curation.diversity import select_diverse
from hf_adapters.curation.ranking import check_scores, check_selection, cut_off, selection_indices
from hf_adapters.curation.score_bounds import Bound, bound_exclusions, parse_bound

if TYPE_CHECKING:  # the command line's help needs no datasets
    from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict

logger = logging.getLogger(__name__)


def select(
    ds: Dataset | DatasetDict | IterableDataset | IterableDatasetDict,
    column: str = "ifd",
    *,
    top: float | None = None,
    top_n: int | None = None,
    max_score: float | None = None,
    min_score: float | None = None,
    highest: bool = True,
    order: str | None = None,
    convention: str = "exact",
    where: Sequence[str] = (),
    diversity: str | None = None,
    **diversity_options: Any,
) -> Dataset | DatasetDict | IterableDataset | IterableDatasetDict:
    """The rows of ``ds`` to keep by their ``column`` score (see
    :func:`~hf_adapters.curation.ranking.selection_indices`); the log says how many rows each rule
    removed. A ``DatasetDict`` is selected split by split. ``where`` bounds other score columns first,
    e.g. ``["perplexity<50"]`` (:func:`~hf_adapters.curation.score_bounds.parse_bound`): a row without
    a score in such a column, or outside its bound, is not kept.

    ``diversity="deita"``, ``"facility_location"`` or ``"semantic_dedup"`` also looks at each row's embedding (the
    ``embedding_column``, default ``"embedding"``, or an ``embeddings`` array, memory-mapped if you
    like): DEITA's rule keeps the best rows whose cosine similarity to every kept row is at most
    ``similarity_threshold`` (0.9) until ``top_n`` (or ``budget``) rows are kept; facility location
    picks the ``budget`` most representative rows of the top ones; ``"semantic_dedup"`` drops the
    top rows that are near-duplicates of better ones (SemDeDup). See
    :func:`hf_adapters.curation.diversity.diverse_selection` for every option.

    A stream (an ``IterableDataset``) is filtered lazily by the cut-offs (``max_score``,
    ``min_score``, rows without a score) in input order; ``top`` and ``top_n`` rank the whole
    column, so they need an in-memory ``Dataset`` (``Dataset.from_generator`` or ``save_to_disk``
    the scored stream first).

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters import select
        >>> ds = Dataset.from_dict({"id": ["a", "b", "c", "d"], "ifd": [0.9, 1.2, None, 0.7]})
        >>> list(select(ds, "ifd", top=0.5, max_score=1.0)["id"])
        ['a', 'd']
    """
    from datasets import DatasetDict, IterableDataset, IterableDatasetDict

    options = {"top": top, "top_n": top_n, "max_score": max_score, "min_score": min_score, "highest": highest,
               "order": order, "convention": convention}
    if isinstance(ds, (DatasetDict, IterableDatasetDict)):
        return type(ds)({split: select(part, column, where=where, diversity=diversity, **options,
                                       **diversity_options) for split, part in ds.items()})
    bounds = [parse_bound(text) for text in ([where] if isinstance(where, str) else where)]
    for name in (column, *(bound.column for bound in bounds)):
        if ds.column_names is not None and name not in ds.column_names:
            raise ValueError(f"Column {name!r} not found; available: {ds.column_names}")
    if bounds and not isinstance(ds, IterableDataset):
        options["exclusions"] = bound_exclusions(
            {bound.column: check_scores(ds[bound.column], f"column {bound.column!r}") for bound in bounds}, bounds)
    if diversity is not None or diversity_options:
        indices, removed = select_diverse(ds, column, diversity, options, diversity_options)
    elif isinstance(ds, IterableDataset):
        within = ds.filter(partial(_within, bounds=bounds), batched=True) if bounds else ds
        return _select_stream(within, column, **options)
    else:
        indices, removed = selection_indices(check_scores(ds[column], f"column {column!r}"), **options)
    logger.info("Selected %d of %d rows (removed: %s).", len(indices), len(ds),
                ", ".join(f"{count} {rule}" for rule, count in removed.items()))
    return ds.select(indices)


def _within(batch: dict[str, list], bounds: Sequence[Bound]) -> list[bool]:
    """Whether each row of a stream's batch has a score within every bound."""
    exclusions = bound_exclusions({bound.column: check_scores(batch[bound.column], f"column {bound.column!r}")
                                   for bound in bounds}, bounds)
    return [not any(removes) for removes in zip(*exclusions.values(), strict=True)]


def _select_stream(ds: IterableDataset, column: str, *, top: float | None, top_n: int | None,
                   max_score: float | None, min_score: float | None, highest: bool, order: str | None,
                   convention: str) -> IterableDataset:
    """The rows of a stream that pass the cut-offs, lazily, in input order."""
    check_selection(top, top_n, order, convention, max_score, min_score)
    if top is not None or top_n is not None or order == "score":
        raise ValueError("`top`, `top_n` and `order='score'` rank the whole column, which a stream does not hold: "
                         "filter the stream by `max_score`/`min_score`, or select from an in-memory Dataset.")
    max_score, strictly_below = cut_off(convention, max_score)

    def keep(batch: dict[str, list]) -> list[bool]:
        return [not math.isnan(score)
                and (max_score is None or (score < max_score if strictly_below else score <= max_score))
                and (min_score is None or score >= min_score)
                for score in check_scores(batch[column], f"column {column!r}")]

    return ds.filter(keep, batched=True)
