"""Scores as new columns of a ``ray.data.Dataset``: ``map_batches`` over a pool of actors, each
building the scorer of a config and loading its model once.

:class:`ScoreBatches` is the Ray Data UDF; :func:`add_ray_score_columns` wires it up (order kept,
workers checked against the cluster); :func:`arrow_blocks` and :func:`ordered_scores` hand an
in-memory ``Dataset`` to it and read its scores back in order. The Ray engine's own workers
(:mod:`hf_adapters.engines.ray_blocks`) share the actors' settings (:func:`scoring_actors`). Ray is
imported inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hf_adapters.core.options import DEFAULT_BATCH_SIZE
from hf_adapters.files.json_values import json_safe
from hf_adapters.files.score_files import SCORE

if TYPE_CHECKING:
    from datasets import Dataset

#: The column that carries each row's index in the data through Ray (added by the scoring job):
#: messages name rows by it, and the driver checks the order with it.
ROW_COLUMN = "__hf_adapters_row"
#: How often Ray replaces a worker that died (a lost node, a killed process) and hands its batch to
#: the new one: a batch that kills every worker it reaches stops the run on the third death, where
#: Ray's default would replace workers forever.
WORKER_RESTARTS = 2
#: Blocks per worker that :func:`arrow_blocks` cuts an in-memory data set into, so that the workers share them out.
BLOCKS_PER_WORKER = 8
#: Most batches in one of those blocks.
MAX_BATCHES_PER_BLOCK = 64


def worker_environment() -> dict[str, str]:
    """This process's settings for the workers, where they are set (Ray starts workers with the
    environment of the node's ``ray start``, not this one's): ``HF_ADAPTERS_CPU_LINEAR``,
    ``HF_ADAPTERS_COMPILE`` and ``HF_ADAPTERS_FUSED_KERNELS``, which change scores,
    ``HF_ADAPTERS_VLLM_ARGS``, the vLLM engines' arguments, and OpenMP's wait policy
    (:mod:`hf_adapters.core.openmp`), which keeps workers that share cores fast."""
    from hf_adapters.backends.transformers.compilation import COMPILE_ENV
    from hf_adapters.backends.transformers.cpu_kernels import CPU_LINEAR_ENV
    from hf_adapters.backends.transformers.fused_kernels import FUSED_KERNELS_ENV
    from hf_adapters.backends.vllm import ENGINE_ARGS_ENV
    from hf_adapters.core.openmp import WAIT_POLICY_ENV

    names = (CPU_LINEAR_ENV, COMPILE_ENV, FUSED_KERNELS_ENV, ENGINE_ARGS_ENV, WAIT_POLICY_ENV)
    return {name: os.environ[name] for name in names if os.environ.get(name)}


def worker_threads(gpus_per_worker: float) -> int | None:
    """Torch threads for each worker: where the CPU kernel is pinned and the workers score on CPU,
    this process's count, which the single-process job scores with (MKL sums small products in an
    order that depends on the thread count, and Ray gives a worker one thread per CPU it holds);
    else None, Ray's choice."""
    import torch

    from hf_adapters.backends.transformers.cpu_kernels import cpu_linear_setting

    return None if gpus_per_worker or cpu_linear_setting() == "auto" else torch.get_num_threads()


def build_worker_scorer(config: Mapping[str, Any], device: str | None = None) -> Any:
    """The scorer of ``config``, on ``device`` when it runs a model (other scorers take no device)."""
    from hf_adapters.scorers import build_scorer
    from hf_adapters.scorers.base import scorer_class

    return build_scorer(config, device=device) if scorer_class(config).runs_model else build_scorer(config)


def score_columns(scorer: Any, batch: dict[str, list], first_row: int) -> dict[str, list]:
    """``scorer.score_batch(batch, first_row)``; on an out-of-memory error, each half separately
    (down to one row, as the scoring job does), so no row is dropped."""
    from hf_adapters.backends.base import is_out_of_memory

    try:
        return scorer.score_batch(batch, first_row)
    except RuntimeError as error:
        count = len(next(iter(batch.values()), []))
        if not is_out_of_memory(error) or count < 2:
            raise
    half = count // 2
    first = score_columns(scorer, {key: values[:half] for key, values in batch.items()}, first_row)
    second = score_columns(scorer, {key: values[half:] for key, values in batch.items()}, first_row + half)
    return {output: list(first[output]) + list(second[output]) for output in first}


class ScoreBatches:
    """A Ray Data callable class: ``map_batches(ScoreBatches, batch_format="pyarrow", ...)`` adds a
    scorer's output columns to each batch (an Arrow table). Each actor builds the scorer of
    ``config`` and loads its model once.

    ``names`` maps outputs to column names (default: the outputs' own); ``keep_columns=False``
    returns only the score columns (and :data:`ROW_COLUMN`, if the batch has it); ``device``
    (``"cpu"``) keeps the model off a GPU the worker was not given; ``threads`` sets torch's thread
    count (see :func:`worker_threads`). Each batch's rows are checked with the scorer's
    ``check_rows`` before they are scored; a missing optional column reads as None.

    Example:
        >>> import pyarrow as pa
        >>> from hf_adapters.engines.ray_columns import ScoreBatches
        >>> udf = ScoreBatches({"name": "PPLScorer", "model": "./tiny"}, names={"perplexity": "ppl"})  # doctest: +SKIP
        >>> udf(pa.table({"instruction": ["Say hi."], "output": ["Hi!"]})).column_names  # doctest: +SKIP
        ['instruction', 'output', 'ppl']
    """

    def __init__(self, config: Mapping[str, Any], names: Mapping[str, str] | None = None, keep_columns: bool = True,
                 device: str | None = None, threads: int | None = None):
        import torch
        from datasets import Features

        from hf_adapters.columns.dataset_columns import output_names

        if threads:
            torch.set_num_threads(threads)
        self.scorer = build_worker_scorer(config, device)
        self.names = output_names(self.scorer, names)
        self.types = {field.name: field.type for field in Features(self.scorer.output_features()).arrow_schema}
        self.keep_columns = keep_columns
        self.scorer.prepare()

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        columns = table.to_pydict()
        count = table.num_rows
        first_row = int(columns[ROW_COLUMN][0]) if count and ROW_COLUMN in columns else 0
        rows = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
        self.scorer.check_rows(rows, first_row)
        if count:
            missing = {column: [None] * count for column in self.scorer.source_columns if column not in columns}
            scores = score_columns(self.scorer, {**columns, **missing}, first_row)
        else:
            scores = {output: [] for output in self.names}
        if self.keep_columns:
            result = table.drop_columns([column for column in self.names.values() if column in table.column_names])
        else:
            result = table.select([ROW_COLUMN] if ROW_COLUMN in table.column_names else [])
        for output, column in self.names.items():
            result = result.append_column(column, pa.array(list(scores[output]), type=self.types[output]))
        return result


def add_ray_score_columns(
    ds: Any,
    config: Mapping[str, Any],
    *,
    num_workers: int = 1,
    gpus_per_worker: float = 0,
    batch_size: int | None = None,
    names: Mapping[str, str] | None = None,
    keep_columns: bool = True,
) -> Any:
    """Return the ``ray.data.Dataset`` ``ds`` with the output columns of the scorer ``config`` names
    (renamed by ``names``: output -> column), in ``ds``'s row order: lazily, like any Ray Data
    transform. ``num_workers`` actors score it, each with its own copy of the model and
    ``gpus_per_worker`` GPUs (0: on CPU), ``batch_size`` rows per call (default: the config's).
    The workers get this process's ``HF_ADAPTERS_CPU_LINEAR`` and, where it pins the kernel of CPU
    workers, its torch thread count: then they score as this process would, bit for bit.

    Connects to Ray first if this process is not connected (see
    :func:`hf_adapters.engines.ray_cluster.connect`), refuses workers the cluster cannot place, and turns on
    ``preserve_order`` in ``ds``'s context. Rows are checked batch by batch in the workers, so a bad
    row fails the run with a ``ray.exceptions.RayTaskError`` naming it (the command line checks every
    row before it starts); a worker that dies is replaced :data:`WORKER_RESTARTS` times at most. On a
    cluster whose every CPU the workers take, a data set read from files (``read_parquet`` ...) has
    no CPU left for its read tasks: leave one free.

    Example:
        >>> import ray
        >>> from hf_adapters.engines.ray_columns import add_ray_score_columns
        >>> ds = ray.data.from_items([{"text": "The cat sat on the mat."}])  # doctest: +SKIP
        >>> scored = add_ray_score_columns(ds, {"name": "PerplexityScorer"}, num_workers=2)  # doctest: +SKIP
        >>> scored.take_all()  # doctest: +SKIP
        [{'text': 'The cat sat on the mat.', 'perplexity': 28.6}]
    """
    from hf_adapters.columns.dataset_columns import output_names
    from hf_adapters.engines.ray_cluster import check_resources, connect, import_ray
    from hf_adapters.scorers import build_scorer

    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"`num_workers` must be a positive integer, got {num_workers!r}.")
    if not gpus_per_worker >= 0:
        raise ValueError(f"`gpus_per_worker` must be 0 or more, got {gpus_per_worker!r}.")
    config = {**config, **({"batch_size": batch_size} if batch_size is not None else {})}
    scorer = build_scorer(config)  # a bad config fails here, before any worker starts
    names = output_names(scorer, names)
    connect()
    check_resources(num_workers, gpus_per_worker)
    ray = import_ray()
    ds.context.execution_options.preserve_order = True
    environment = worker_environment()
    with remote_arguments_allowed():
        return ds.map_batches(
            ScoreBatches,
            batch_size=int(scorer.config.get("batch_size") or DEFAULT_BATCH_SIZE),
            batch_format="pyarrow",
            fn_constructor_kwargs={"config": dict(config), "names": names, "keep_columns": keep_columns,
                                   "device": None if gpus_per_worker else "cpu",
                                   "threads": worker_threads(gpus_per_worker)},
            **scoring_actors(ray, num_workers, gpus_per_worker, {"env_vars": environment} if environment else None),
        )


def scoring_actors(ray: Any, num_workers: int, gpus_per_worker: float,
                   runtime_env: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``map_batches``' arguments for a pool of ``num_workers`` scoring actors, each with 1 CPU and
    ``gpus_per_worker`` GPUs, the ``runtime_env`` given, and :data:`WORKER_RESTARTS` replacements at
    most (pass them inside :func:`remote_arguments_allowed`)."""
    return {"compute": ray.data.ActorPoolStrategy(size=num_workers), "num_cpus": 1,
            "num_gpus": gpus_per_worker or None, "max_restarts": WORKER_RESTARTS, "max_task_retries": WORKER_RESTARTS,
            **({"runtime_env": dict(runtime_env)} if runtime_env else {})}


@contextlib.contextmanager
def remote_arguments_allowed() -> Iterator[None]:
    """Pass Ray remote arguments to ``map_batches`` without its warning: Ray 2.60 deprecates them, but
    names no parameter for an actor's restarts yet (its default replaces a worker forever). Nor does
    Ray warn, as it plans the pool, that it sees fewer inputs than actors: it counts the read tasks
    before they have cut their shards into blocks."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="The minimum number of concurrent actors", category=UserWarning)
        yield


def arrow_blocks(dataset: Dataset, num_workers: int, batch_size: int) -> Iterator[Any]:
    """The rows of an in-memory ``Dataset`` as Arrow tables of whole batches, each with a
    :data:`ROW_COLUMN` of the rows' indices, for ``ray.data.from_arrow``: about ``BLOCKS_PER_WORKER``
    per worker, at most ``MAX_BATCHES_PER_BLOCK`` batches each."""
    import pyarrow as pa

    batches = math.ceil(len(dataset) / (batch_size * num_workers * BLOCKS_PER_WORKER))
    rows_per_block = batch_size * min(max(batches, 1), MAX_BATCHES_PER_BLOCK)
    arrow = dataset.with_format("arrow")
    for start in range(0, len(dataset), rows_per_block):
        stop = min(start + rows_per_block, len(dataset))
        yield arrow[start:stop].append_column(ROW_COLUMN, pa.array(range(start, stop), pa.int64()))


def ordered_scores(scored: Any, num_rows: int) -> Iterator[float | None]:
    """The ``score`` of each row of the Ray data set ``scored`` (made from :func:`arrow_blocks`), as a
    job writes it (NaN or inf as None), checked to come back in input order."""
    return (row[SCORE] for row in ordered_columns(scored, num_rows, [SCORE]))


def ordered_columns(scored: Any, num_rows: int, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The ``columns`` of each row of the Ray data set ``scored`` (made from :func:`arrow_blocks`), as a
    job writes them (``score`` a float; NaN or inf, in lists too, as None), checked to come back in
    input order."""
    expected = 0
    for table in scored.iter_batches(batch_format="pyarrow", batch_size=None):
        indices = table.column(ROW_COLUMN).to_pylist()
        if indices != list(range(expected, expected + len(indices))):
            raise RuntimeError(f"Ray returned the rows out of order (row {indices[0]} where {expected} was due).")
        expected += len(indices)
        values = [[_cell(column, value) for value in table.column(column).to_pylist()] for column in columns]
        yield from (dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True))
    if expected != num_rows:
        raise RuntimeError(f"Ray returned {expected} rows of {num_rows}.")


def _cell(column: str, value: Any) -> Any:
    """A value as a job writes it: the score as a float, NaN or inf (in lists too) as None."""
    if column == SCORE and value is not None:
        value = float(value)
    return json_safe(value)
