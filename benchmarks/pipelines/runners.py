"""One scoring run per process, as the benchmark starts them: ``python -m benchmarks.pipelines.runners KIND CONFIG
ROWS_FOLDER OUTPUT_FOLDER``, KIND one of ``command`` (``hf-adapters score`` on the folder's JSONL file),
``datatrove`` (reader, :class:`~hf_adapters.integrations.datatrove_steps.LikelihoodScores`, writer, on the local
executor: one task, in this process) and ``nemo`` (reader,
:class:`~hf_adapters.integrations.nemo_curator_stage.LikelihoodScoreStage`, Parquet writer, on NeMo Curator's Ray
actor pool; run it with .venv-nemo's Python). Each writes its scores into OUTPUT_FOLDER in its tool's own format;
:func:`read_scores` reads any of them back as ``{id: score}``."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path


def run_command(config: str, rows: Path, output: Path) -> None:
    """``hf-adapters score``, in place of this process (the same process id, as the benchmark measures it)."""
    data = str(next(rows.glob("*.jsonl")))
    os.execv(sys.executable, [sys.executable, "-m", "hf_adapters", "score", config, "--data", data, "--output",
                              str(output / "scores.jsonl"), "--no-progress"])


def run_datatrove(config: str, rows: Path, output: Path) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    from hf_adapters.integrations.datatrove_steps import LikelihoodScores

    LocalPipelineExecutor([JsonlReader(str(rows), text_key="output"), LikelihoodScores(config, text_column="output"),
                           JsonlWriter(str(output / "documents"), compression=None)],
                          tasks=1, workers=1, logging_dir=str(output / "logs")).run()


def run_nemo(config: str, rows: Path, output: Path) -> None:
    from nemo_curator.backends.ray_actor_pool import RayActorPoolExecutor
    from nemo_curator.pipeline import Pipeline
    from nemo_curator.stages.text.io.reader import JsonlReader
    from nemo_curator.stages.text.io.writer import ParquetWriter

    from hf_adapters.integrations.nemo_curator_stage import LikelihoodScoreStage

    pipeline = Pipeline(name="scores", stages=[JsonlReader(str(rows)), LikelihoodScoreStage(config),
                                               ParquetWriter(str(output / "parquet"))])
    pipeline.run(RayActorPoolExecutor(show_progress=False))


RUNNERS = {"command": run_command, "datatrove": run_datatrove, "nemo": run_nemo}


def read_scores(output: Path) -> dict[str, float]:
    """``{id: score}`` from whichever run wrote ``output`` (NaN where a score is null)."""
    def number(value: float | None) -> float:
        return math.nan if value is None else value

    if (output / "scores.jsonl").is_file():
        lines = (output / "scores.jsonl").read_text(encoding="utf-8").splitlines()
        return {str(row["id"]): number(row["score"]) for row in map(json.loads, filter(None, lines))}
    if (output / "documents").is_dir():
        rows = [json.loads(line) for path in sorted((output / "documents").glob("*.jsonl"))
                for line in path.read_text(encoding="utf-8").splitlines() if line]
        return {str(row["id"]): number(row["metadata"]["score"]) for row in rows}
    import pyarrow.parquet as pq

    rows = [row for path in sorted((output / "parquet").glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
    return {str(row["id"]): number(row["score"]) for row in rows}


if __name__ == "__main__":
    kind, config, rows, output = sys.argv[1:5]
    RUNNERS[kind](config, Path(rows), Path(output))
