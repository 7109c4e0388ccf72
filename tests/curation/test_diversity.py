"""Diversity-aware selection against plain naive references kept here: DEITA's rule as a loop over
float64 cosines, facility location as plain greedy over a full float64 similarity matrix."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from datasets import Dataset, IterableDataset

from hf_adapters import cli, select
from hf_adapters.curation.diversity import deita, diverse_selection, semantic_dedup
from hf_adapters.curation.diversity.deita import deita_indices
from hf_adapters.curation.diversity.facility_location import facility_location_order
from hf_adapters.curation.diversity.semantic_dedup import semantic_dedup_indices, spherical_kmeans
from hf_adapters.curation.ranking import selection_indices
from hf_adapters.formulas import similarity
from tests.conftest import read_jsonl, write_jsonl


def clustered(rows: int, dimensions: int = 8, seed: int = 0) -> np.ndarray:
    """Vectors around a few centres, so that near-duplicates and clear choices both occur."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(6, dimensions))
    return (centres[rng.integers(0, 6, rows)] + 0.35 * rng.normal(size=(rows, dimensions))).astype(np.float32)


def naive_deita(vectors: np.ndarray, ranked: list[int], threshold: float, budget: int | None) -> list[int]:
    units = vectors.astype(np.float64) / np.linalg.norm(vectors.astype(np.float64), axis=1)[:, None]
    kept: list[int] = []
    for row in ranked:
        if budget is not None and len(kept) == budget:
            break
        if all(units[row] @ units[other] <= threshold for other in kept):
            kept.append(row)
    return kept


def naive_similarities(vectors: np.ndarray, kind: str) -> np.ndarray:
    x = vectors.astype(np.float64)
    if kind == "cosine":
        units = x / np.linalg.norm(x, axis=1)[:, None]
        return units @ units.T
    distances = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    return np.exp(-distances / x.shape[1])


def naive_facility_location(sims: np.ndarray, budget: int) -> list[int]:
    """Plain greedy: every gain every step, the first of the largest (gains within float64's
    rounding of a sum, 1e-9 of the largest, are ties)."""
    covered = np.zeros(len(sims))
    picked: list[int] = []
    for _ in range(min(budget, len(sims))):
        gains = [-math.inf if j in picked else np.maximum(sims[:, j] - covered, 0).sum() for j in range(len(sims))]
        largest = max(gains)
        best = next(j for j, gain in enumerate(gains) if gain >= largest - 1e-9 * max(abs(largest), 1.0))
        picked.append(best)
        covered = np.maximum(covered, sims[:, best])
    return picked


def knn_only(sims: np.ndarray, k: int) -> np.ndarray:
    """Each row keeps its k largest similarities (ties to the earlier column), the rest become 0."""
    kept = np.zeros_like(sims)
    for row in range(len(sims)):
        columns = sorted(range(len(sims)), key=lambda column: (-sims[row, column], column))[:k]
        kept[row, columns] = sims[row, columns]
    return kept


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9, 0.95])
@pytest.mark.parametrize("budget", [None, 1, 10, 40])
def test_deita_keeps_what_the_naive_rule_keeps(threshold, budget):
    vectors = clustered(300)
    ranked = list(np.random.default_rng(1).permutation(300))
    assert deita_indices(vectors, ranked, threshold=threshold, budget=budget) == \
        naive_deita(vectors, ranked, threshold, budget)


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_deita_rows_do_not_depend_on_the_block_size(block, monkeypatch):
    monkeypatch.setattr(similarity, "BLOCK_VALUES", 50)  # the kept rows are compared in small pieces too
    monkeypatch.setattr(deita, "BLOCK_VALUES", 50)
    vectors = clustered(200, seed=3)
    ranked = list(range(200))
    assert deita_indices(vectors, ranked, threshold=0.85, block=block) == naive_deita(vectors, ranked, 0.85, None)


def test_deita_keeps_a_row_exactly_at_the_threshold_and_drops_one_above():
    vectors = np.array([[2.0, 0.0], [1.0, 1.0], [1.0, 0.9]], dtype=np.float32)
    at = float(np.float64(2.0) / (2.0 * np.sqrt(2.0)))  # the float64 cosine of rows 0 and 1
    assert deita_indices(vectors, [0, 1, 2], threshold=at) == [0, 1]  # row 2 is above it to row 1
    assert deita_indices(vectors, [0, 1], threshold=np.nextafter(at, 0)) == [0]


def test_deita_refuses_a_zero_vector_and_a_threshold_outside_the_cosines():
    with pytest.raises(ValueError, match="Row 1 has an all-zero embedding"):
        deita_indices(np.array([[1.0, 0.0], [0.0, 0.0]]), [0, 1])
    with pytest.raises(ValueError, match="similarity_threshold"):
        deita_indices(np.eye(2), [0, 1], threshold=1.5)


@pytest.mark.parametrize("kind", ["cosine", "euclidean"])
@pytest.mark.parametrize("budget", [1, 5, 25, 80])
def test_dense_facility_location_picks_what_plain_greedy_picks(kind, budget):
    vectors = clustered(80, seed=budget)
    assert facility_location_order(vectors, budget, similarity=kind) == \
        naive_facility_location(naive_similarities(vectors, kind), budget)


def test_dense_facility_location_in_small_blocks_picks_the_same(monkeypatch):
    vectors = clustered(90, seed=5)
    expected = naive_facility_location(naive_similarities(vectors, "cosine"), 20)
    monkeypatch.setattr(similarity, "BLOCK_VALUES", 100)
    assert facility_location_order(vectors, 20) == expected


@pytest.mark.parametrize("kind", ["cosine", "euclidean"])
@pytest.mark.parametrize("neighbors", [1, 4, 15])
def test_sparse_facility_location_is_plain_greedy_on_the_nearest_neighbours(kind, neighbors):
    vectors = clustered(70, seed=neighbors)
    sims = knn_only(naive_similarities(vectors, kind), neighbors)
    assert facility_location_order(vectors, 12, similarity=kind, neighbors=neighbors) == \
        naive_facility_location(sims, 12)


def test_facility_location_ties_go_to_the_earlier_row():
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    assert facility_location_order(vectors, 4) == [0, 2, 1, 3]
    assert facility_location_order(vectors, 4, neighbors=2) == [0, 2, 1, 3]


def scored_rows(rows: int = 120, seed: int = 0) -> tuple[list[float | None], np.ndarray]:
    rng = np.random.default_rng(seed)
    scores = [float(round(value, 2)) for value in rng.uniform(0.3, 1.2, rows)]  # rounded: ties occur
    scores[3] = None
    return scores, clustered(rows, seed=seed)


def test_select_deita_with_top_n_is_deitas_walk_with_that_budget():
    scores, vectors = scored_rows()
    ds = Dataset.from_dict({"ifd": scores, "embedding": vectors})
    ranked, _ = selection_indices(scores, max_score=1.0, order="score")
    kept = select(ds.add_column("row", list(range(len(ds)))), "ifd", top_n=15, max_score=1.0, diversity="deita",
                  similarity_threshold=0.9, embedding_column="embedding")
    assert list(kept["row"]) == sorted(naive_deita(vectors, ranked, 0.9, 15))


def test_select_deita_with_a_budget_walks_only_the_top_rows():
    scores, vectors = scored_rows(seed=1)
    pool, _ = selection_indices(scores, top=0.2, order="score")
    indices, removed = diverse_selection(scores, vectors, "deita", top=0.2, budget=10, similarity_threshold=0.7,
                                         order="score")
    assert indices == naive_deita(vectors, pool, 0.7, 10)
    assert removed["outside the top"] == 120 - 1 - len(pool)


def test_select_facility_location_picks_from_the_top_rows_in_greedy_order():
    scores, vectors = scored_rows(seed=2)
    pool, _ = selection_indices(scores, top=0.5, order="score")
    greedy = naive_facility_location(naive_similarities(vectors[pool], "cosine"), 12)
    indices, removed = diverse_selection(scores, vectors, "facility_location", top=0.5, budget=12, order="score")
    assert indices == [pool[position] for position in greedy]
    assert removed["not picked by facility location"] == len(pool) - 12


def test_superfiltering_convention_uses_its_kernel_cut_off_and_order():
    """Superfiltering-D's do_fla.py: IFD below 1, the top rows, submodlib's Euclidean kernel, picks in order."""
    scores, vectors = scored_rows(seed=4)
    pool, _ = selection_indices(scores, top_n=40, convention="superfiltering")
    greedy = naive_facility_location(naive_similarities(vectors[pool], "euclidean"), 8)
    indices, _ = diverse_selection(scores, vectors, "facility_location", top_n=40, budget=8,
                                   convention="superfiltering")
    assert indices == [pool[position] for position in greedy]


def test_select_reads_a_given_or_memory_mapped_embedding_array(tmp_path):
    scores, vectors = scored_rows(seed=5)
    np.save(tmp_path / "vectors.npy", vectors)
    ds = Dataset.from_dict({"ifd": scores, "row": list(range(len(scores)))})
    mapped = select(ds, "ifd", top=0.3, diversity="facility_location", budget=5,
                    embeddings=np.load(tmp_path / "vectors.npy", mmap_mode="r"))
    column = select(ds.add_column("embedding", list(vectors)), "ifd", top=0.3, diversity="facility_location",
                    budget=5)
    assert list(mapped["row"]) == list(column["row"])
    assert len(mapped) == 5


@pytest.mark.parametrize(("call", "message"), [
    ({"diversity": "facility_location"}, "needs a `budget`"),
    ({"diversity": "kmeans"}, "must be one of"),
    ({"diversity": "deita", "neighbors": 5}, "does not take"),
    ({"diversity": "deita", "radius": 5}, "Unknown option"),
    ({"budget": 5}, "only apply with `diversity`"),
    ({"diversity": "deita", "embeddings": np.ones((3, 2))}, "3 embeddings for 4 rows"),
])
def test_bad_diversity_options_are_refused(call, message):
    ds = Dataset.from_dict({"ifd": [0.1, 0.2, 0.3, 0.4], "embedding": np.eye(4).tolist()})
    with pytest.raises(ValueError, match=message):
        select(ds, "ifd", top_n=2, **call)


def test_a_stream_is_refused_with_diversity():
    stream = IterableDataset.from_generator(lambda: iter([{"ifd": 0.5, "embedding": [1.0, 0.0]}]))
    with pytest.raises(ValueError, match="stream"):
        select(stream, "ifd", top_n=1, diversity="deita")


def test_select_command_with_deita_writes_the_rows_of_the_rule(tmp_path, capsys):
    scores, vectors = scored_rows(seed=6)
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": str(i)} for i in range(len(scores))])
    score_file = write_jsonl(tmp_path / "scores.jsonl", [{"id": f"r{i}", "score": s} for i, s in enumerate(scores)])
    np.save(tmp_path / "vectors.npy", vectors)
    output = tmp_path / "kept.jsonl"
    assert cli.main(["select", "--data", str(data), "--scores", str(score_file), "--top-n", "9", "--diversity",
                     "deita", "--similarity-threshold", "0.8", "--embeddings", str(tmp_path / "vectors.npy"),
                     "--output", str(output)]) == 0
    ranked, _ = selection_indices(scores, order="score")
    assert [row["id"] for row in read_jsonl(output)] == [f"r{i}" for i in sorted(naive_deita(vectors, ranked, 0.8, 9))]
    assert "too similar to a kept row" in capsys.readouterr().out


def test_select_command_needs_the_embeddings_for_diversity(tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}])
    score_file = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": 0.5}])
    assert cli.main(["select", "--data", str(data), "--scores", str(score_file), "--diversity", "deita",
                     "--top-n", "1", "--output", str(tmp_path / "kept.jsonl")]) == 2
    assert "--diversity needs --embeddings" in capsys.readouterr().err


def naive_semantic_dedup(vectors: np.ndarray, ranked: list[int], labels: list[int], threshold: float) -> list[int]:
    """SemDeDup's rule: a row goes when a better-ranked row of its cluster (kept or not) is above the threshold."""
    units = vectors.astype(np.float64) / np.linalg.norm(vectors.astype(np.float64), axis=1)[:, None]
    return [row for position, row in enumerate(ranked)
            if not any(labels[earlier] == labels[position] and units[row] @ units[ranked[earlier]] > threshold
                       for earlier in range(position))]


@pytest.mark.parametrize("threshold", [0.5, 0.9, 0.97])
def test_semantic_dedup_in_one_cluster_compares_every_pair(threshold):
    vectors = clustered(250, seed=7)
    ranked = list(np.random.default_rng(2).permutation(250))
    assert semantic_dedup_indices(vectors, ranked, threshold=threshold) == \
        naive_semantic_dedup(vectors, ranked, [0] * 250, threshold)


def test_semantic_dedup_compares_rows_only_inside_their_k_means_cluster(monkeypatch):
    vectors = clustered(300, seed=8)
    ranked = list(range(299, -1, -1))
    units = vectors[ranked] / np.linalg.norm(vectors[ranked], axis=1)[:, None]
    labels = spherical_kmeans(units.astype(np.float32), 6).tolist()
    expected = naive_semantic_dedup(vectors, ranked, labels, 0.8)
    assert semantic_dedup_indices(vectors, ranked, threshold=0.8, clusters=6) == expected
    monkeypatch.setattr(semantic_dedup, "BLOCK_VALUES", 64)  # in small blocks: the same rows
    assert semantic_dedup_indices(vectors, ranked, threshold=0.8, clusters=6) == expected


def test_semantic_dedup_in_select_keeps_the_better_of_two_near_duplicates():
    ds = Dataset.from_dict({"ifd": [0.2, 0.9, 0.5], "embedding": [[1.0, 0.0], [0.99, 0.05], [0.0, 1.0]]})
    indices, removed = diverse_selection(ds["ifd"], np.array(ds["embedding"]), "semantic_dedup")
    assert indices == [1, 2] and removed["near-duplicate of a better row"] == 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("settings", [{}, {"neighbors": 2}, {"similarity": "euclidean"}])
def test_facility_location_refuses_a_non_finite_embedding_by_row(bad, settings):
    """A NaN or infinite vector has no similarity: facility location picked row 0 twice. Refused,
    the row named by its index in the data (not its place in the pool of top rows).
    Round five, item 1."""
    vectors = clustered(6)
    vectors[4, 1] = bad
    with pytest.raises(ValueError, match="Row 4 has a non-finite embedding"):
        diverse_selection([0.1, 0.2, 0.3, 0.4, 0.9, 0.5], vectors, "facility_location", top_n=3, budget=2,
                          **settings)
    with pytest.raises(ValueError, match="Row 1 has a non-finite embedding"):
        facility_location_order(vectors[[0, 4, 5]], 2, **settings)


@pytest.mark.parametrize("rule", ["deita", "semantic_dedup"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_deita_and_semantic_dedup_refuse_a_non_finite_embedding_by_row(rule, bad):
    """Under DEITA and SemDeDup a NaN row was silently unlike every other row (its cosines NaN).
    Round five, item 1."""
    vectors = clustered(700)  # past DEITA's first block of candidates
    vectors[650, 0] = bad
    scores = [1.0 - row / 1000 for row in range(700)]
    with pytest.raises(ValueError, match="Row 650 has a non-finite embedding"):
        diverse_selection(scores, vectors, rule, top_n=680)
    with pytest.raises(ValueError, match="Row 650 has a non-finite embedding"):
        (deita_indices if rule == "deita" else semantic_dedup_indices)(vectors, list(range(700)), threshold=0.9)


def test_a_row_outside_the_rows_compared_may_hold_a_non_finite_embedding():
    """Only the rows a rule compares need a vector: a row without a score is never compared.
    Round five, item 1."""
    vectors = clustered(5)
    vectors[2] = math.nan
    pool = [0, 1, 3, 4]
    indices, _ = diverse_selection([0.9, 0.8, None, 0.7, 0.6], vectors, "facility_location", budget=2)
    assert indices == sorted(pool[position] for position in facility_location_order(vectors[pool], 2))


@pytest.mark.parametrize("block", [1, 7, 512])
def test_deita_refuses_a_non_finite_row_only_if_its_walk_gets_to_it(block):
    """DEITA stops at its budget: a row after that point is never compared, whatever the block size.
    Round five, item 1."""
    vectors = clustered(300, seed=2)
    kept = deita_indices(vectors, list(range(300)), threshold=0.5, budget=4, block=block)
    after = kept[-1] + 1
    vectors[after] = math.nan
    assert deita_indices(vectors, list(range(300)), threshold=0.5, budget=4, block=block) == kept
    with pytest.raises(ValueError, match=f"Row {after} has a non-finite embedding"):
        deita_indices(vectors, list(range(300)), threshold=0.5, budget=5, block=block)


def test_select_refuses_the_non_finite_rows_the_command_line_refuses():
    """`select` (an embedding column) and `select --embeddings` (a file) refuse the same rows:
    those the rule compares. Round five, item 1."""
    vectors = clustered(6)
    vectors[2] = math.inf
    ds = Dataset.from_dict({"ifd": [0.9, 0.8, None, 0.7, 0.6, 0.5], "embedding": vectors, "row": list(range(6))})
    kept = select(ds, "ifd", top_n=4, diversity="facility_location", budget=2)
    assert list(kept["row"]) == diverse_selection(ds["ifd"], vectors, "facility_location", top_n=4, budget=2)[0]
    scored = ds.map(lambda row: {"ifd": 0.1 if row["row"] == 2 else row["ifd"]})
    with pytest.raises(ValueError, match="Row 2 has a non-finite embedding"):
        select(scored, "ifd", diversity="facility_location", budget=2, embeddings=vectors)
    with pytest.raises(ValueError, match="Row 2 has a non-finite embedding"):
        select(scored, "ifd", diversity="semantic_dedup")


def test_an_all_zero_embedding_is_named_by_its_row_in_the_data():
    """The zero-vector refusal named the row's place in a block of candidates or in the pool.
    Round five, item 1."""
    vectors = clustered(700)
    vectors[600] = 0.0
    with pytest.raises(ValueError, match="Row 600 has an all-zero embedding"):
        deita_indices(vectors, list(range(700)))
    scores = [0.0] * 700
    scores[600] = 1.0
    with pytest.raises(ValueError, match="Row 600 has an all-zero embedding"):
        diverse_selection(scores, vectors, "facility_location", top_n=5, budget=2)


@pytest.mark.parametrize(("vectors", "neighbors"), [(np.ones((2, 3)), 1), (np.ones((5, 3)), 2), (np.ones((5, 3)), 4),
                                                    (clustered(10, seed=4)[np.arange(30) % 10], 2)])
def test_sparse_facility_location_picks_the_budget_when_rows_are_exact_duplicates(vectors, neighbors):
    """A row that is no row's nearest neighbour (the duplicate of an earlier row) crashed in
    add.reduceat; it has no gain, and is picked after every row that has one.
    Round five, item 8."""
    picked = facility_location_order(vectors, len(vectors), neighbors=neighbors)
    assert sorted(picked) == list(range(len(vectors)))
    assert picked == naive_facility_location(knn_only(naive_similarities(vectors, "cosine"), neighbors), len(vectors))


@pytest.mark.parametrize("seed", range(4))
def test_sparse_facility_location_keeps_the_earlier_of_duplicates_tied_at_the_kth_neighbour(seed):
    """Of rows tied at a row's k-th largest similarity (exact duplicates), the earlier ones are its
    neighbours, as documented: argpartition left the choice, and so the picks, to chance.
    Round five, item 8."""
    rng = np.random.default_rng(seed)
    vectors = clustered(5, seed=seed)[rng.integers(0, 5, 40)]
    for neighbors in (2, 7, 19):
        assert facility_location_order(vectors, 15, neighbors=neighbors) == \
            naive_facility_location(knn_only(naive_similarities(vectors, "cosine"), neighbors), 15)


def test_select_facility_location_with_neighbors_keeps_the_budget_of_duplicated_rows():
    """Round five, item 8."""
    vectors = np.repeat(clustered(10, seed=9), 2, axis=0)
    indices, removed = diverse_selection([0.5] * 20, vectors, "facility_location", budget=12, neighbors=3)
    assert len(indices) == len(set(indices)) == 12 and removed["not picked by facility location"] == 8


def test_semantic_dedup_refuses_zero_clusters():
    """`clusters=0` was read as 1. Round five, item 20."""
    with pytest.raises(ValueError, match="`clusters` must be a positive integer, got 0"):
        diverse_selection([0.5, 0.4], np.eye(2), "semantic_dedup", clusters=0)


def test_select_command_refuses_zero_clusters(tmp_path, capsys):
    """Round five, item 20."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}])
    score_file = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": 0.5}])
    with pytest.raises(SystemExit) as stopped:
        cli.main(["select", "--data", str(data), "--scores", str(score_file), "--diversity", "semantic_dedup",
                  "--clusters", "0", "--embeddings", "e.npy", "--output", str(tmp_path / "kept.jsonl")])
    assert stopped.value.code == 2
    assert "--clusters: must be at least 1, got 0" in capsys.readouterr().err


def test_deita_with_a_budget_of_zero_reports_no_row_as_too_similar():
    """`top_n=0` keeps no row because of the budget, not because any row is like a kept one.
    Round five, item 20."""
    scores, vectors = scored_rows(seed=3)
    for options in ({"top_n": 0}, {"top_n": 10, "budget": 0}):
        indices, removed = diverse_selection(scores, vectors, "deita", **options)
        assert indices == [] and removed["too similar to a kept row"] == 0
        assert removed["after the budget was reached"] + removed["outside the top"] == len(scores) - 1


def test_select_command_refuses_a_non_finite_embedding_naming_the_row(tmp_path, capsys):
    """Round five, item 1."""
    scores, vectors = scored_rows(rows=8, seed=6)
    vectors[5, 2] = math.nan
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": str(i)} for i in range(8)])
    score_file = write_jsonl(tmp_path / "scores.jsonl", [{"id": f"r{i}", "score": s} for i, s in enumerate(scores)])
    np.save(tmp_path / "vectors.npy", vectors)
    assert cli.main(["select", "--data", str(data), "--scores", str(score_file), "--diversity", "facility_location",
                     "--budget", "3", "--embeddings", str(tmp_path / "vectors.npy"),
                     "--output", str(tmp_path / "kept.jsonl")]) == 2
    error = capsys.readouterr().err
    assert [line for line in error.splitlines() if line.startswith("error:")] == [
        "error: Row 5 has a non-finite embedding (it holds NaN): embed that row again, or leave it out of the data."]
    assert "Traceback" not in error
    assert not (tmp_path / "kept.jsonl").exists()


# --- A similarity threshold from the data (issue 59) ----------------------------------------------------------------

def nearest_cosines(vectors: np.ndarray) -> np.ndarray:
    """Each row's largest cosine to another row, from the full float64 matrix."""
    units = vectors.astype(np.float64) / np.linalg.norm(vectors.astype(np.float64), axis=1)[:, None]
    cosines = units @ units.T
    np.fill_diagonal(cosines, -np.inf)
    return cosines.max(axis=1)


def test_a_quantile_threshold_is_that_share_of_the_rows_nearest_neighbour_cosines():
    from hf_adapters.curation.diversity.thresholds import quantile_threshold

    vectors = clustered(60, seed=4)
    nearest = nearest_cosines(vectors)
    for quantile in (0.5, 0.9, 0.99, 1.0):
        chosen = quantile_threshold(vectors, quantile)
        assert chosen.rows == 60 and chosen.threshold == pytest.approx(np.quantile(nearest, quantile,
                                                                                   method="inverted_cdf"), abs=1e-12)
        assert np.mean(nearest <= chosen.threshold + 1e-12) >= quantile


def test_deita_with_a_similarity_quantile_removes_at_most_the_share_above_it():
    """Issue 59: DEITA's 0.9 dropped 28 of 200 unrelated rows with the default model's vectors; a quantile
    of the data's own nearest-neighbour cosines bounds what goes, for any embedder."""
    scores, vectors = scored_rows(rows=200, seed=9)
    vectors = vectors + 3.0  # every cosine high, as a language model's last-token states are
    for quantile in (0.8, 0.95):
        _, removed = diverse_selection(scores, vectors, "deita", top_n=200, similarity_quantile=quantile)
        assert 0 < removed["too similar to a kept row"] <= (1 - quantile) * 200
        _, removed = diverse_selection(scores, vectors, "semantic_dedup", top_n=200, similarity_quantile=quantile)
        assert removed["near-duplicate of a better row"] <= (1 - quantile) * 200


def test_a_quantile_threshold_of_many_rows_is_read_from_a_seeded_sample_and_skips_unusable_rows():
    from hf_adapters.curation.diversity.thresholds import nearest_similarities, quantile_threshold

    vectors = clustered(300, seed=5)
    vectors[7] = 0.0
    vectors[8, 1] = math.nan
    sampled = quantile_threshold(vectors, 0.9, sample_rows=100)
    assert sampled == quantile_threshold(vectors, 0.9, sample_rows=100) and sampled.rows == 100
    usable = np.delete(vectors, [7, 8], axis=0)
    rows = np.array([0, 5, 150, 297])
    assert nearest_similarities(usable, rows) == pytest.approx(nearest_cosines(usable)[rows], abs=1e-12)
    assert abs(sampled.threshold - np.quantile(nearest_cosines(usable), 0.9)) < 0.05


def test_deita_with_a_similarity_quantile_keeps_what_that_threshold_keeps_and_says_it(caplog):
    from hf_adapters.curation.diversity.thresholds import quantile_threshold

    scores, vectors = scored_rows(seed=7)
    threshold = quantile_threshold(vectors, 0.95).threshold
    with caplog.at_level("INFO", logger="hf_adapters"):
        kept = diverse_selection(scores, vectors, "deita", top_n=20, similarity_quantile=0.95)
    assert kept == diverse_selection(scores, vectors, "deita", top_n=20, similarity_threshold=threshold)
    assert f"Similarity threshold {threshold:.4g}: the 0.95 quantile of the cosine similarity of each of" in caplog.text


@pytest.mark.parametrize(("options", "message"), [
    ({"similarity_quantile": 0.9, "similarity_threshold": 0.9}, "not both"),
    ({"similarity_quantile": 0.0}, "in (0, 1]"),
    ({"similarity_quantile": 1.5}, "in (0, 1]"),
])
def test_a_similarity_quantile_is_refused_with_a_threshold_or_outside_0_to_1(options, message):
    scores, vectors = scored_rows(seed=7)
    with pytest.raises(ValueError, match=re.escape(message)):
        diverse_selection(scores, vectors, "deita", top_n=5, **options)
    with pytest.raises(ValueError, match="does not take"):
        diverse_selection(scores, vectors, "facility_location", budget=3, similarity_quantile=0.9)


def test_select_command_takes_a_similarity_quantile_and_says_the_threshold(tmp_path, caplog):
    scores, vectors = scored_rows(rows=30, seed=8)
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": str(i)} for i in range(30)])
    score_file = write_jsonl(tmp_path / "scores.jsonl", [{"id": f"r{i}", "score": s} for i, s in enumerate(scores)])
    np.save(tmp_path / "vectors.npy", vectors)
    assert cli.main(["select", "--data", str(data), "--scores", str(score_file), "--diversity", "deita", "--top-n",
                     "10", "--similarity-quantile", "0.9", "--embeddings", str(tmp_path / "vectors.npy"),
                     "--output", str(tmp_path / "kept.jsonl")]) == 0
    assert "the 0.9 quantile of the cosine similarity of each of 30 rows to its most similar other row, so at most " \
           "about 10% of the rows can be removed as too similar" in caplog.text
    expected, _ = diverse_selection(scores, vectors, "deita", top_n=10, similarity_quantile=0.9)
    assert [row["id"] for row in read_jsonl(tmp_path / "kept.jsonl")] == [f"r{i}" for i in expected]


def test_select_takes_a_similarity_quantile_as_a_diversity_option():
    scores, vectors = scored_rows(rows=40, seed=10)
    ds = Dataset.from_dict({"ifd": scores, "embedding": vectors.tolist(), "row": list(range(40))})
    kept = select(ds, "ifd", top_n=10, diversity="deita", similarity_quantile=0.9)
    expected, _ = diverse_selection(scores, vectors, "deita", top_n=10, similarity_quantile=0.9)
    assert list(kept["row"]) == expected
