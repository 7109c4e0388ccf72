"""Diversity rules against the peers' own code, row for row, on the same embeddings and scores.

- DEITA: ``Combined_Filter`` (``src/deita/selection/filter``) of a DEITA checkout, imported
  unmodified (its package ``__init__`` files, which import the training and scoring pipelines, are
  skipped), with the defaults of ``examples/pipelines/combined_filter.py`` (threshold 0.9, one row
  per step, cosine, CPU), against ``diverse_selection(..., "deita", top_n=budget)``.
- Superfiltering-D: ``do_ifd`` and ``do_fla`` of Superfiltering's ``code_diversity_fla/do_fla.py``
  (submodlib's lazy greedy on its Euclidean kernel), against ``diverse_selection(...,
  "facility_location", top_n=ifd_num, budget=fla_num, convention="superfiltering")``.
- apricot: ``FacilityLocationSelection(metric="precomputed", optimizer="lazy")`` on the cosine
  matrix clipped at 0 (apricot refuses negative similarities; facility location counts only a
  row's best similarity above 0, so the function is the same), against ``facility_location_order``.

The embeddings are the default model's (DEITA's last-token pooling for DEITA, mean pooling for the
facility-location rows) of the first Alpaca records, plus synthetic clustered vectors; the scores
are seeded uniform draws (the rules compare embeddings; any distinct scores rank them). apricot and
submodlib run in a separate environment (``--peer-python``) that needs no torch:

    python3 -m venv ../peer-venv && ../peer-venv/bin/pip install apricot-select submodlib-py
    git clone https://github.com/hkust-nlp/deita ../peers/deita
    git clone https://github.com/tianyi-lab/Superfiltering ../peers/Superfiltering
    python -m benchmarks.peers.diversity_peers --peers ../peers --peer-python ../peer-venv/bin/python \\
        --data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/peers/DIVERSITY_PEERS.md
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import types
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from benchmarks.common import instruction_records, log
from hf_adapters.core.texts import ppl_text
from hf_adapters.curation.diversity import diverse_selection, facility_location_order
from hf_adapters.curation.ranking import selection_indices
from hf_adapters.formulas.embeddings import embed_texts

DRIVER = Path(__file__).resolve().parent / "diversity_peer_driver.py"


def deita_filter_class(checkout: Path) -> type:
    """DEITA's ``Combined_Filter``, its modules loaded from their files as they are."""
    source = checkout / "src" / "deita"
    for name in ("deita", "deita.pipeline", "deita.selection", "deita.selection.filter"):
        package = types.ModuleType(name)
        package.__path__ = []
        sys.modules[name] = package
    for name, path in (("deita.pipeline.utils", "pipeline/utils.py"),
                       ("deita.selection.filter.base", "selection/filter/base.py"),
                       ("deita.selection.filter.combined_filter", "selection/filter/combined_filter.py")):
        spec = importlib.util.spec_from_file_location(name, source / path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules["deita.selection.filter.combined_filter"].Combined_Filter


def deita_peer(checkout: Path, embeddings: np.ndarray, scores: list[float], budget: int,
               threshold: float) -> tuple[list[int], float]:
    import pandas as pd

    # DEITA's scores are lists (one per turn) that its _sort sums; one turn each here.
    frame = pd.DataFrame({"embedding": list(embeddings), "idx": range(len(scores)), "score": [[s] for s in scores]})
    selector = deita_filter_class(checkout)(threshold=threshold, data_size=budget, sort_key=["score"],
                                             chunk_size=100000, distance_metric="cosine", device="cpu")
    start = time.perf_counter()
    kept = selector.filter(frame)
    return [int(row) for row in kept["idx"]], time.perf_counter() - start


def model_embeddings(texts: list[str], pooling: str, max_length: int, cache: str | None) -> np.ndarray:
    """The default model's embeddings of ``texts``, kept in ``cache`` (when given) for the next run."""
    path = Path(cache or ".") / f"embeddings-{pooling}-{len(texts)}-{max_length}.npy"
    if cache and path.exists():
        return np.load(path)
    embeddings = embed_texts(texts, pooling=pooling, max_length=max_length)
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
        np.save(path, embeddings)
    return embeddings


def driver(peer_python: str, job: dict) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        job_path, result_path = Path(folder) / "job.json", Path(folder) / "result.json"
        job_path.write_text(json.dumps(job))
        subprocess.run([peer_python, str(DRIVER), str(job_path), str(result_path)], check=True)
        return json.loads(result_path.read_text())


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def tied_steps(similarities: np.ndarray, picks: list[int], tolerance: float = 1e-9) -> int | None:
    """How many of a greedy sequence's picks were one of several rows of equal largest gain (in
    float64, within ``tolerance`` of it); None if a pick's gain was below the largest (not greedy)."""
    covered = np.zeros(len(similarities))
    ties = 0
    available = np.ones(len(similarities), dtype=bool)
    for row in picks:
        gains = np.where(available, np.maximum(similarities - covered[:, None], 0).sum(axis=0), -np.inf)
        best = gains.max()
        tied = gains >= best - tolerance * max(abs(best), 1.0)
        if not tied[row]:
            return None
        ties += int(tied.sum() > 1)
        available[row] = False
        covered = np.maximum(covered, similarities[:, row])
    return ties


def facility_location_value(similarities: np.ndarray, picks: list[int]) -> float:
    """The facility-location value of a selection: each row's largest similarity to a pick (at least 0), summed."""
    return float(np.maximum(similarities[:, picks], 0).max(axis=1).sum()) if picks else 0.0


def greedy_note(similarities: np.ndarray, sequences: list[list[int]]) -> str:
    """Whether our picks and the peer's are each a largest-gain row at every step, at how many steps
    several rows had that gain (where the peers' choice follows their float rounding), and how far
    apart the two selections' facility-location values are."""
    ours, theirs = (tied_steps(similarities, picks) for picks in sequences)
    described = ["not greedy" if ties is None else f"{ties} tied steps" for ties in (ours, theirs)]
    values = [facility_location_value(similarities, picks) for picks in sequences]
    gap = abs(values[0] - values[1]) / max(abs(values[1]), 1e-300)
    return (f"every pick a largest gain: ours {described[0]}, peer's {described[1]}; values {values[0]:.6f} "
            f"and {values[1]:.6f} (relative difference {gap:.1e})")


def euclidean_kernel(embeddings: np.ndarray) -> np.ndarray:
    """submodlib's dense Euclidean kernel, in float64: exp(-distance / dimensions), each distance from
    the coordinates' differences (|a|^2 + |b|^2 - 2 a.b would leave a row some 1e-7 from itself)."""
    from scipy.spatial.distance import cdist

    x = embeddings.astype(np.float64)
    return np.exp(-cdist(x, x) / x.shape[1])


def clustered(rows: int, dimensions: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dimensions))
    return (centres[rng.integers(0, 20, rows)] + 0.5 * rng.normal(size=(rows, dimensions))).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peers", required=True, help="folder with checkouts of deita and Superfiltering")
    parser.add_argument("--peer-python", required=True, help="a Python with apricot-select and submodlib-py")
    parser.add_argument("--data", help="Alpaca-style JSON records (default: the package's sample)")
    parser.add_argument("--limit", type=int, default=200, help="records embedded with the model")
    parser.add_argument("--max-length", type=int, default=128, help="tokens of each record embedded")
    parser.add_argument("--output", default="benchmarks/peers/DIVERSITY_PEERS.md")
    parser.add_argument("--cache", help="folder keeping the model's embeddings between runs")
    args = parser.parse_args()
    peers = Path(args.peers)
    records, source = instruction_records(args.data, args.limit)
    texts = [ppl_text(r["instruction"], r["input"], r["output"]) for r in records]
    log(f"embedding {len(texts)} records twice (last-token and mean pooling)")
    data = {pooling: model_embeddings(texts, pooling, args.max_length, args.cache) for pooling in ("last", "mean")}
    data["synthetic"] = clustered(3000, 64, seed=0)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, embeddings in data.items():
            scores = np.random.default_rng(len(embeddings)).uniform(0.5, 1.2, len(embeddings)).tolist()
            budget = len(embeddings) // 4
            for threshold in (0.9, 0.95, 0.99) if name != "mean" else ():
                theirs, peer_seconds = deita_peer(peers / "deita", embeddings, scores, budget, threshold)
                (ours, removed), seconds = timed(diverse_selection, scores, embeddings, "deita", top_n=budget,
                                                 similarity_threshold=threshold, order="score")
                rows.append((f"DEITA `Combined_Filter`, threshold {threshold}", name, len(scores), budget, ours,
                             theirs, peer_seconds, seconds,
                             f"{removed['too similar to a kept row']} rows skipped as too similar"))
            if name == "last":
                continue
            path = str(Path(folder) / f"{name}.npy")
            np.save(path, embeddings)
            ifd_num = len(embeddings) // 2
            result = driver(args.peer_python, {
                "peer": "superfiltering_d", "superfiltering": str(peers / "Superfiltering"), "embeddings": path,
                "scores": scores, "ifd_num": ifd_num, "fla_num": ifd_num // 5})
            (ours, _), seconds = timed(diverse_selection, scores, embeddings, "facility_location", top_n=ifd_num,
                                       budget=ifd_num // 5, convention="superfiltering")
            pool, _ = selection_indices(scores, top_n=ifd_num, convention="superfiltering", order="score")
            position = {row: index for index, row in enumerate(pool)}
            kernel = euclidean_kernel(embeddings[pool])
            note = greedy_note(kernel, [[position[row] for row in picks] for picks in (ours, result["rows"])])
            rows.append(("Superfiltering-D `do_ifd` + `do_fla` (submodlib)", name, len(scores), ifd_num // 5, ours,
                         result["rows"], result["seconds"], seconds, note))
            units = embeddings.astype(np.float64) / np.linalg.norm(embeddings.astype(np.float64), axis=1)[:, None]
            similarities = str(Path(folder) / f"{name}-cosine.npy")
            clipped = np.maximum(units @ units.T, 0)  # apricot refuses negatives; ours counts none
            np.save(similarities, clipped)
            result = driver(args.peer_python, {"peer": "apricot", "similarities": similarities, "budget": budget})
            ours, seconds = timed(facility_location_order, embeddings, budget)
            rows.append(("apricot `FacilityLocationSelection`, lazy, cosine", name, len(scores), budget, ours,
                         result["rows"], result["seconds"], seconds, greedy_note(clipped, [ours, result["rows"]])))
    write_report(args.output, rows, source)


def write_report(path: str, rows: list[tuple], source: str) -> None:
    lines = [
        "# Diversity rules against the peers' own code",
        "",
        f"`python -m benchmarks.peers.diversity_peers` on {datetime.now(timezone.utc):%Y-%m-%d}: {source}; embeddings "
        "`last` and `mean` are the default model's (SmolLM2-135M-Instruct, float32) of those records, "
        "`synthetic` are 3,000 clustered 64-dimensional vectors. Peer times include the peers' own overheads "
        "(pandas, numba compilation on first use); compare the selections, not the times.",
        "",
        "| peer code | embeddings | rows | kept | same rows, same order | first difference | notes "
        "| peer s | ours s |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for peer, name, count, budget, ours, theirs, peer_seconds, seconds, note in rows:
        same = ours == theirs
        pairs = enumerate(zip(ours, theirs, strict=False))
        first = "-" if same else next((f"position {i}: {a} vs {b}" for i, (a, b) in pairs if a != b),
                                      f"lengths {len(ours)} vs {len(theirs)}")
        lines.append(f"| {peer} | {name} | {count} | {len(ours)} of {budget} | {'yes' if same else 'no'} | {first} "
                     f"| {note} | {peer_seconds:.2f} | {seconds:.2f} |")
        log(lines[-1])
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
