"""Selection for quality and diversity: the best rows by a score, of which only rows unlike each
other (DEITA's rule), most representative of the pool (facility location) or not near-duplicates
of better ones (SemDeDup) are kept.

:func:`diverse_selection` runs the rules on a score list and an embedding matrix;
:func:`hf_adapters.select` takes them as ``diversity="deita"``, ``"facility_location"`` or
``"semantic_dedup"``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from hf_adapters.core.conventions import SELECTION_CONVENTIONS
from hf_adapters.curation.diversity.deita import DEFAULT_THRESHOLD, check_threshold, deita_indices
from hf_adapters.curation.diversity.facility_location import check_budget, facility_location_order
from hf_adapters.curation.diversity.semantic_dedup import semantic_dedup_indices
from hf_adapters.curation.diversity.thresholds import quantile_threshold
from hf_adapters.curation.ranking import check_scores, selection_indices
from hf_adapters.formulas.similarity import SIMILARITIES, check_embeddings, check_shape, check_similarity

#: ``deita``: best first, skip a row too similar to one kept. ``facility_location``: greedy
#: facility location over the pool of best rows. ``semantic_dedup``: SemDeDup's near-duplicate removal.
DIVERSITY_RULES = ("deita", "facility_location", "semantic_dedup")
#: The options of the rules, as ``select`` takes them.
DIVERSITY_OPTIONS = ("budget", "similarity_threshold", "similarity_quantile", "similarity", "neighbors", "clusters",
                     "embedding_column", "embeddings")

logger = logging.getLogger(__name__)

__all__ = ["DIVERSITY_OPTIONS", "DIVERSITY_RULES", "SIMILARITIES", "deita_indices", "diverse_selection",
           "facility_location_order", "semantic_dedup_indices"]


def check_diversity_options(diversity: str, options: dict[str, Any]) -> None:
    """Raise a ValueError for an unknown rule or option, or an option the rule does not take."""
    if diversity not in DIVERSITY_RULES:
        raise ValueError(f"`diversity` must be one of {list(DIVERSITY_RULES)}, got {diversity!r}.")
    unknown = sorted(set(options) - set(DIVERSITY_OPTIONS))
    if unknown:
        raise ValueError(f"Unknown option(s) {unknown} of `select`; with `diversity` it also takes "
                         f"{list(DIVERSITY_OPTIONS)}.")
    foreign = {"deita": ("similarity", "neighbors", "clusters"),
               "facility_location": ("similarity_threshold", "similarity_quantile", "clusters"),
               "semantic_dedup": ("budget", "similarity", "neighbors")}[diversity]
    given = [name for name in foreign if options.get(name) is not None]
    if given:
        raise ValueError(f"`diversity={diversity!r}` does not take {given}.")


def diverse_selection(
    scores: Sequence[float | None],
    embeddings: np.ndarray,
    diversity: str,
    *,
    top: float | None = None,
    top_n: int | None = None,
    budget: int | None = None,
    similarity_threshold: float | None = None,
    similarity_quantile: float | None = None,
    similarity: str | None = None,
    neighbors: int | None = None,
    clusters: int | None = None,
    order: str | None = None,
    convention: str = "exact",
    **cut_offs: Any,
) -> tuple[list[int], dict[str, int]]:
    """The indices of the rows a diversity rule keeps, and how many rows each step removed.

    The pool is what :func:`~hf_adapters.curation.ranking.selection_indices` keeps (cut-offs, then the
    ``top`` fraction or ``top_n`` best, under ``convention``), best first. Then:

    - ``"deita"``: walk the rows best first and keep each whose cosine similarity to every kept row
      is at most ``similarity_threshold`` (0.9), until ``budget`` rows are kept. Without
      ``budget``, DEITA's own use: ``top``/``top_n`` is the budget and the walk goes on past the top
      rows, through every row that passes the cut-offs.
    - ``"facility_location"``: greedy facility location picks ``budget`` rows of the pool
      (Superfiltering-D: ``top=0.1``, then a budget). ``similarity``: ``"cosine"`` (default) or
      submodlib's ``"euclidean"`` kernel (the default under ``convention="superfiltering"``, as
      its ``do_fla.py``); ``neighbors=k``: the sparse k-nearest-neighbour version.
    - ``"semantic_dedup"``: SemDeDup's rule on the pool: spherical k-means into ``clusters``
      (default 1: one cluster, every pair compared), then a row goes when its cosine similarity to
      a better-ranked row of its cluster is above ``similarity_threshold`` (0.9).

    ``similarity_quantile=q`` (DEITA and SemDeDup, instead of ``similarity_threshold``) takes the
    threshold from the data: the q quantile of the cosine similarities between pairs of its rows
    (:func:`~hf_adapters.curation.diversity.thresholds.quantile_threshold`; the log says its value), so
    0.99 removes a row only if it is more similar to a better one than 99% of the pairs of rows are.

    The indices come in input order, or with ``order="score"`` in the order the rule picked them
    (the default under ``"superfiltering"``). ``cut_offs`` are ``max_score``, ``min_score`` and ``highest``.
    A ValueError names the first row the rule compares (DEITA: the first its walk gets to) whose
    embedding holds NaN or infinity (or, for cosines, is all zero): it has no similarity to any row.

    Example:
        >>> vectors = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [0.7, 0.7]])
        >>> diverse_selection([0.9, 0.8, 0.7, 0.6], vectors, "deita", top_n=2)[0]
        [0, 2]
    """
    check_diversity_options(diversity, {"budget": budget, "similarity_threshold": similarity_threshold,
                                        "similarity_quantile": similarity_quantile, "similarity": similarity,
                                        "neighbors": neighbors, "clusters": clusters})
    check_shape(embeddings)
    if len(embeddings) != len(scores):
        raise ValueError(f"{len(embeddings)} embeddings for {len(scores)} rows: give one embedding per row.")
    if budget is not None:
        check_budget(budget)
    if similarity_quantile is not None:
        if similarity_threshold is not None:
            raise ValueError("Give `similarity_threshold` or `similarity_quantile` (a threshold from the data), "
                             "not both.")
        chosen = quantile_threshold(embeddings, similarity_quantile)
        logger.info("%s.", chosen.describe())
        similarity_threshold = chosen.threshold
    threshold = DEFAULT_THRESHOLD if similarity_threshold is None else similarity_threshold
    check_threshold(threshold)
    similarity = similarity or ("euclidean" if convention == "superfiltering" else "cosine")
    check_similarity(similarity)
    pool, removed = selection_indices(scores, top=top, top_n=top_n, order="score", convention=convention, **cut_offs)
    if diversity == "deita":
        walk = pool
        if budget is None:  # DEITA's own use: the top count is the budget, the walk goes on past it
            budget = len(pool)
            walk, removed = selection_indices(scores, order="score", convention=convention, **cut_offs)
        picked = deita_indices(embeddings, walk, threshold=threshold, budget=budget)
        if len(picked) == budget:  # the walk stopped at the last row kept (before any row, for a budget of 0)
            walked = walk.index(picked[-1]) + 1 if picked else 0
        else:
            walked = len(walk)
        removed["too similar to a kept row"] = walked - len(picked)
        removed["after the budget was reached"] = len(walk) - walked
    elif diversity == "semantic_dedup":
        picked = semantic_dedup_indices(embeddings, pool, threshold=threshold,
                                        clusters=1 if clusters is None else clusters)
        removed["near-duplicate of a better row"] = len(pool) - len(picked)
    else:
        if budget is None:
            raise ValueError("`diversity='facility_location'` needs a `budget`: how many rows of the pool to keep.")
        check_embeddings(embeddings, pool, directions=similarity == "cosine")  # names rows of the data, not the pool
        chosen = facility_location_order(embeddings[np.asarray(pool, dtype=np.int64)], budget, similarity=similarity,
                                         neighbors=neighbors)
        picked = [pool[position] for position in chosen]
        removed["not picked by facility location"] = len(pool) - len(picked)
    order = order or SELECTION_CONVENTIONS[convention].order
    return (picked if order == "score" else sorted(picked)), removed


def select_diverse(ds: Any, column: str, diversity: str | None, options: dict[str, Any],
                   diversity_options: dict[str, Any]) -> tuple[list[int], dict[str, int]]:
    """What :func:`hf_adapters.select` runs for ``diversity=``: the kept indices of an in-memory
    ``Dataset`` (its ``column`` scores, and its ``embedding_column`` or the given ``embeddings``)
    and how many rows each step removed."""
    from datasets import IterableDataset

    from hf_adapters.formulas.embeddings import embedding_matrix

    if diversity is None:
        raise ValueError(f"{sorted(diversity_options)} only apply with `diversity` "
                         f"(one of {list(DIVERSITY_RULES)}).")
    check_diversity_options(diversity, diversity_options)
    if isinstance(ds, IterableDataset):
        raise ValueError("`diversity` compares rows across the whole data set, which a stream does not hold: "
                         "select from an in-memory Dataset.")
    settings = dict(diversity_options)
    embeddings = settings.pop("embeddings", None)
    embeddings = embedding_matrix(ds if embeddings is None else np.asarray(embeddings),
                                  settings.pop("embedding_column", None) or "embedding")
    return diverse_selection(check_scores(ds[column], f"column {column!r}"), embeddings, diversity, **options,
                             **settings)
