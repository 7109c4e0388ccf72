"""Diversity-aware selection against plain naive references kept here: DEITA's rule as a loop over
float64 cosines, facility location as plain greedy over a full float64 similarity matrix."""

from __future__ import annotations

import math

import numpy as np
import pytest
from datasets import Dataset, IterableDataset

from hf_adapters import cli, select
from hf_adapters.diversity import deita, diverse_selection, semantic_dedup, similarity
from hf_adapters.diversity.deita import deita_indices
from hf_adapters.diversity.facility_location import facility_location_order
from hf_adapters.diversity.semantic_dedup import semantic_dedup_indices, spherical_kmeans
from hf_adapters.selection import selection_indices
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
