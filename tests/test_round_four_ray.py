"""Regressions of issue "round four", Ray cases: ``hf-adapters score --engine ray`` writes the
single-process file byte for byte when the CPU kernel is pinned, and a failure in a worker is told
by the worker's own exception, at once. A real local Ray cluster (2 CPUs) and the tiny model."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from hf_adapters import cli
from tests.conftest import build_model, build_tokenizer, write_jsonl
from tests.test_ray import ray_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("ray_cluster")

WORDS = ("the quick brown fox jumps over a lazy dog write short poem about sea summarise text below cats are "
         "small mammals explain why sky is blue list three colours").split()


def instruction_rows(count: int, seed: int = 0) -> list[dict]:
    """``count`` Alpaca-like rows of varied length: an instruction, an input in every third, an output.
    Short texts, so that many are scored alone in products of a few positions, whose sums MKL orders
    by its thread count."""
    generator = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(generator.choice(WORDS) for _ in range(generator.randint(low, high)))

    return [{"id": f"row-{i}", "instruction": text(1, 6), "input": text(0, 20) if i % 3 == 0 else "",
             "output": text(1, 10)} for i in range(count)]


def write_config(folder: Path, name: str, model: str) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\nmodel: {model}\nbatch_size: 8\nmax_length: 128\n", encoding="utf-8")
    return str(path)


def score(config: str, rows: Path, output: Path, *flags: str) -> int:
    return cli.main(["score", config, "--data", str(rows), "--output", str(output), "--no-progress", *flags])


@pytest.mark.parametrize("scorer", ["PPLScorer", "IFDScorer"])
def test_with_the_cpu_kernel_pinned_two_workers_write_the_single_process_file_byte_for_byte(
        model_dir, tmp_path, monkeypatch, scorer):
    # Set after the cluster started: the workers see it only if the job hands it to them.
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")
    rows = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(160))
    config = write_config(tmp_path, scorer, model_dir)
    assert score(config, rows, tmp_path / "plain.jsonl") == 0
    assert score(config, rows, tmp_path / "ray.jsonl", "--engine", "ray", "--num-workers", "2") == 0
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()


@pytest.fixture(scope="module")
def small_vocabulary_model_dir(tmp_path_factory) -> str:
    """A model folder that loads, with 100 embeddings where its tokenizer makes ids up to 400: every
    forward pass fails in the worker (IndexError), after the driver's checks passed."""
    folder = tmp_path_factory.mktemp("small-vocabulary-model")
    build_model(100).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return str(folder)


def test_a_failure_in_a_worker_is_told_by_its_own_exception_at_once(small_vocabulary_model_dir, tmp_path, capsys):
    rows = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(40))
    config = write_config(tmp_path, "PPLScorer", small_vocabulary_model_dir)
    started = time.perf_counter()
    result = score(config, rows, tmp_path / "ray.jsonl", "--engine", "ray", "--num-workers", "1")
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert result == 1
    assert err.strip().splitlines() == ["error: Scoring failed in a Ray worker: IndexError: index out of range in self"]
    assert elapsed < 60, f"{elapsed:.0f} s to stop"
    assert not any(path.name.startswith("ray.jsonl") for path in tmp_path.iterdir())
