"""Our scores as NeMo Curator stages (needs ``pip install 'hf_adapters[nemo-curator]'``; tested with
nemo-curator 1.4.0, whose task API changed in 1.3).

:class:`LikelihoodScoreStage` is a ``ProcessingStage[DocumentBatch, DocumentBatch]`` that adds a scorer
config's scores (one scorer or a score set, the YAML files ``hf-adapters score`` reads) to each batch as
columns named as the command's score files name them (``score`` for one scorer's score, each member's name
for a score set). It is an actor stage: each worker builds the scorer and loads its model once, in
``setup``, and scores every batch it is given, a chunk of rows at a time as the command does, so the
numbers are the command's for the same rows. It asks for a GPU only where the model runs on one; on the CPU
its workers get the command's OpenMP wait policy, and its kernel and thread count where the kernel is pinned
(:func:`~hf_adapters.integrations.pipeline_scores.worker_environment`).
:class:`LikelihoodScoreFilter` is the composite of that stage and NeMo Curator's ``Filter`` on a score
range. A row the scorer refuses gets NaN and a warning naming it by its place among the rows its worker
has scored and its id; the pipeline goes on. A data column with a score column's name is refused (a
ValueError naming it), as ``hf-adapters score`` refuses it, rather than replaced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nemo_curator.backends.base import WorkerMetadata
from nemo_curator.stages.base import CompositeStage, ProcessingStage
from nemo_curator.stages.resources import Resources
from nemo_curator.stages.text.filters.score_filter import Filter
from nemo_curator.tasks import DocumentBatch

from hf_adapters.integrations.pipeline_scores import PipelineScores, ScoreRange, worker_environment


class LikelihoodScoreStage(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Add a scorer config's score columns to each ``DocumentBatch`` (see the module's docstring).

    Args:
        config: a YAML config's path or a config dict, as ``hf-adapters score`` takes it; its columns are
            the rows' fields (``instruction``, ``input``, ``output`` for IFD; ``messages`` for chats).
        score_columns: more outputs to write (``"all"`` or their names), over the config's.
        device: where the model runs (None: as the command chooses); a GPU is asked for only on ``cuda``.
        rows_per_call: rows scored together (None: 16 on the CPU, 4,096 on an accelerator, as the
            command's chunks).
        cpus: CPUs each worker asks for.

    Example:
        >>> stage = LikelihoodScoreStage({"name": "PPLScorer", "model": "./tiny"})  # doctest: +SKIP
        >>> stage.resources, stage.outputs()  # doctest: +SKIP
        (Resources(cpus=1.0, gpu_memory_gb=0.0, gpus=0.0), (['data'], ['score']))
    """

    name = "likelihood_scores"

    def __init__(self, config: str | Path | Mapping[str, Any], *, score_columns: str | Sequence[str] | None = None,
                 device: str | None = None, rows_per_call: int | None = None, cpus: float = 1.0):
        self.scores = PipelineScores(config, score_columns=score_columns, device=device, rows_per_call=rows_per_call)
        #: Rows this worker has scored: a warning names a row by its place among them, and its id.
        self.rows_scored = 0
        self.resources = Resources(cpus=cpus, gpus=1.0 if self.scores.device_type == "cuda" else 0.0)
        if settings := worker_environment(self.scores.device_type):
            self.runtime_env = {"env_vars": settings}

    def inputs(self) -> tuple[list[str], list[str]]:
        return ["data"], []

    def outputs(self) -> tuple[list[str], list[str]]:
        return ["data"], list(self.scores.columns.values())

    def ray_stage_spec(self) -> dict[str, Any]:
        return {**super().ray_stage_spec(), "is_actor_stage": True}

    def setup(self, worker_metadata: WorkerMetadata | None = None) -> None:
        """Build the scorer and load its model, once per worker."""
        self.scores.load()

    def process(self, task: DocumentBatch) -> DocumentBatch:
        import pyarrow as pa

        table = task.to_pyarrow()
        self.scores.refuse_taken_columns(table.column_names)
        scores = self.scores.columns_for(table.to_pylist(), self.rows_scored)
        self.rows_scored += table.num_rows
        for column, values in scores.items():
            table = table.append_column(column, pa.array(values, from_pandas=False))
        return DocumentBatch(dataset_name=task.dataset_name, data=table, _metadata=task._metadata,
                             _stage_perf=task._stage_perf)


class LikelihoodScoreFilter(CompositeStage[DocumentBatch, DocumentBatch]):
    """Score rows as :class:`LikelihoodScoreStage` does, then keep those whose ``column`` lies between
    ``min_score`` and ``max_score`` (bounds included; a NaN score is never kept): the stage, then NeMo
    Curator's ``Filter`` on the column. ``column`` is one of the written columns (default: the first, ``score``
    for one scorer); the other arguments are the stage's."""

    name = "likelihood_score_filter"

    def __init__(self, config: str | Path | Mapping[str, Any], *, min_score: float | None = None,
                 max_score: float | None = None, column: str | None = None, **stage_options: Any):
        super().__init__()
        self.stage = LikelihoodScoreStage(config, **stage_options)
        self.keep = ScoreRange(min_score, max_score)
        written = list(self.stage.scores.columns.values())
        self.column = column or written[0]
        if self.column not in written:
            raise ValueError(f"column {self.column!r} is not written by this config; it writes {written}.")

    def decompose(self) -> list[ProcessingStage]:
        return [self.stage, Filter(filter_fn=self.keep, filter_field=self.column, name="likelihood_score_range")]
