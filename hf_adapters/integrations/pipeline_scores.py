"""What the datatrove step and the NeMo Curator stage share: a scorer config (a YAML file as
``hf-adapters score`` reads it, or a dict) scored over a pipeline's rows, a chunk at a time.

:class:`PipelineScores` builds the config's scorer in the worker that first scores (the model loads
there, once per process: the backends keep loaded models process-wide), names its columns as the
command's score files do (:meth:`~hf_adapters.files.score_files.OutputFormat.columns_of`: a scorer's
first output as ``score``, a score set's members' first outputs under their own names, and the
``score_columns`` asked for) and scores rows through the scorer's own batched call, as the command
scores a chunk. A bad row gets NaN and a warning instead of stopping the pipeline. :class:`ScoreRange`
is the filter forms' rule. Neither imports datatrove nor NeMo Curator.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_adapters.core.scored_rows import (
    UndeclaredFieldError,
    chunk_cells,
    declared_rows,
    default_save_every,
    device_type_of,
    undeclared_read,
)
from hf_adapters.files.score_files import OutputFormat

logger = logging.getLogger(__name__)


def scorer_settings(config: str | Path | Mapping[str, Any],
                    score_columns: str | Sequence[str] | None = None) -> tuple[dict[str, Any], OutputFormat]:
    """A config (a YAML file's path or a dict) as the command reads it: the scorer's config, and the
    output format of its score columns (``score_columns`` over the config's own). A ValueError (a
    :class:`~hf_adapters.scorers.ConfigError` for the file) says what is wrong.

    Example:
        >>> config, output = scorer_settings({"name": "IFDScorer", "score_columns": "all"})
        >>> config, output.score_columns
        ({'name': 'IFDScorer'}, 'all')
    """
    from hf_adapters.scorers import load_config

    source = str(config) if isinstance(config, (str, Path)) else "the config"
    config = load_config(config) if isinstance(config, (str, Path)) else dict(config)
    asked = config.pop("score_columns", None)
    asked = score_columns if score_columns is not None else asked
    return config, OutputFormat(score_columns=_score_columns_of(asked, source))


def _score_columns_of(asked: Any, source: str) -> str | tuple[str, ...] | None:
    """``all``, a tuple of output names, or None, from a config's or caller's ``score_columns``."""
    if asked is None or asked == "all":
        return asked
    names = tuple(name.strip() for name in asked.split(",")) if isinstance(asked, str) else asked
    if not (isinstance(names, (list, tuple)) and names and all(isinstance(name, str) and name for name in names)):
        raise ValueError(f"{source}: `score_columns` takes all, an output name or a list of the scorer's output names, "
                         f"got {asked!r}.")
    return tuple(names)


class PipelineScores:
    """A scorer config scored over a pipeline's rows (see the module's docstring).

    Args:
        config: a YAML config's path (``hf_adapters/configs/ifd.yaml``) or a config dict, as
            ``hf-adapters score`` takes it: one scorer or a score set.
        score_columns: more outputs to write (``"all"`` or their names), over the config's ``score_columns``.
        device: where the model runs (None: as the command chooses).
        rows_per_call: rows given to the scorer at once (None: as the command's chunks, 16 on the CPU,
            4,096 on an accelerator), which it batches among themselves.

    Nothing is loaded until :meth:`columns_for` or :meth:`load`; the object pickles without its scorer.
    """

    def __init__(self, config: str | Path | Mapping[str, Any], *, score_columns: str | Sequence[str] | None = None,
                 device: str | None = None, rows_per_call: int | None = None):
        from hf_adapters.scorers import build_scorer

        self.config, self.output = scorer_settings(config, score_columns)
        if rows_per_call is not None and (isinstance(rows_per_call, bool) or not isinstance(rows_per_call, int)
                                          or rows_per_call < 1):
            raise ValueError(f"`rows_per_call` must be a positive whole number, got {rows_per_call!r}.")
        self.device, self._rows_per_call = device, rows_per_call
        checked = self._built(build_scorer)  # a bad config or column name fails here, where the pipeline is made
        #: Each output written (output -> column), as the command's score files name them.
        self.columns = self.output.columns_of(checked.outputs, checked.named_outputs)
        self.kinds = {output: checked.output_types.get(output, "float64") for output in self.columns}
        self.device_type = device_type_of(checked, device)
        self._scorer: Any = None

    def _built(self, build: Any) -> Any:
        from hf_adapters.scorers.base import scorer_class

        runs_model = scorer_class(self.config).runs_model
        return build(self.config, device=self.device) if runs_model else build(self.config)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_scorer": None}

    def load(self) -> Any:
        """The scorer, built and its model loaded on first use in this process."""
        if self._scorer is None:
            from hf_adapters.scorers import build_scorer

            scorer = self._built(build_scorer)
            scorer.prepare()
            self._scorer = scorer
        return self._scorer

    @property
    def rows_per_call(self) -> int:
        """Rows given to the scorer at once (where not given, as the command's chunks on this device)."""
        return self._rows_per_call or default_save_every(self.device_type)

    def refuse_taken_columns(self, names: Iterable[str], holder: str = "The data has a column") -> None:
        """A ValueError naming the first of ``names`` (a row's fields) that a score column would replace
        (``holder``: what has it), as ``hf-adapters score`` refuses a data column its scores would overwrite."""
        if taken := [column for column in self.columns.values() if column in set(names)]:
            raise ValueError(f"{holder} {taken[0]!r}: the scores would replace it. Rename it before scoring.")

    def columns_for(self, rows: Sequence[Mapping[str, Any]], first_row: int = 0) -> dict[str, list]:
        """``{column: one value per row}`` for ``rows`` (``first_row``: the first one's number, for
        messages), a chunk of :attr:`rows_per_call` at a time. A row the scorer refuses (a missing or
        non-string field) gets NaN in every column, with a warning naming it; a chunk whose scoring
        raises a ValueError or TypeError is scored row by row, each row that raises getting NaN."""
        scores: dict[str, list] = {column: [] for column in self.columns.values()}
        step = self.rows_per_call
        for start in range(0, len(rows), step):
            for cells in self._scored_chunk(rows[start:start + step], first_row + start):
                for column, value in cells.items():
                    scores[column].append(value)
        return scores

    def _scored_chunk(self, rows: Sequence[Mapping[str, Any]], offset: int) -> list[dict[str, Any]]:
        """The chunk's cells: its accepted rows scored together (each run of them between refused rows as one
        call, so that messages name every row by its own number), a refused row's NaN."""
        scorer = self.load()
        accepted = [self._accepted(scorer, row, offset + index) for index, row in enumerate(rows)]
        cells: list[dict[str, Any]] = []
        start = 0
        while start < len(rows):
            stop = start + 1
            while stop < len(rows) and accepted[stop] == accepted[start]:
                stop += 1
            run = rows[start:stop]
            cells += self._run_cells(scorer, run, offset + start) if accepted[start] else [self._nan_cells()] * len(run)
            start = stop
        return cells

    def _run_cells(self, scorer: Any, rows: Sequence[Mapping[str, Any]], offset: int) -> list[dict[str, Any]]:
        try:
            return self._cells(scorer, rows, offset)
        except UndeclaredFieldError:
            raise
        except (ValueError, TypeError) as error:
            logger.warning("Scoring rows %d-%d failed (%s); scoring them one by one.", offset,
                           offset + len(rows) - 1, error)
            return [self._row_cells(scorer, row, offset + index) for index, row in enumerate(rows)]

    def _accepted(self, scorer: Any, row: Mapping[str, Any], number: int) -> bool:
        try:
            scorer.check_rows([row], number)
        except ValueError as error:
            logger.warning("%s Its scores are NaN.", error)
            return False
        return True

    def _row_cells(self, scorer: Any, row: Mapping[str, Any], number: int) -> dict[str, Any]:
        try:
            return self._cells(scorer, [row], number)[0]
        except UndeclaredFieldError:
            raise
        except (ValueError, TypeError) as error:
            from hf_adapters.scorers.base import row_name

            logger.warning("%s could not be scored (%s); its scores are NaN.", row_name(row, number), error)
            return self._nan_cells()

    def _cells(self, scorer: Any, rows: Sequence[Mapping[str, Any]], offset: int) -> list[dict[str, Any]]:
        """Each row's ``{column: value}``: the scorer's batched call on the rows as it sees them (their
        declared fields: reading another is an :class:`~hf_adapters.core.scored_rows.UndeclaredFieldError`,
        as on every engine), as the command scores a chunk."""
        seen = declared_rows(scorer, rows)
        try:
            values = scorer.score_batch(scorer.rows_to_batch(seen, offset), offset)
        except KeyError as error:
            if (undeclared := undeclared_read(error, seen)) is None:
                raise
            raise undeclared from None
        return chunk_cells(scorer, values, self.columns, len(rows))

    def _nan_cells(self) -> dict[str, Any]:
        return {column: math.nan if self.kinds[output] == "float64" else None
                for output, column in self.columns.items()}


def worker_environment(device_type: str) -> dict[str, str]:
    """The environment variables of a Ray worker that scores on the CPU as this process's ``hf-adapters score``
    would: OpenMP's wait policy (this process's, else passive, as the command sets it for itself: spinning
    threads slow scoring on a busy machine, :mod:`hf_adapters.core.openmp`) and, where the CPU kernel is pinned
    (``HF_ADAPTERS_CPU_LINEAR``), that kernel and this process's thread count (float32 sums depend on it, and Ray
    starts a worker with one OpenMP thread per CPU it holds, which ``torch.set_num_threads`` does not undo for
    every kernel). None on an accelerator. The NeMo Curator stage gives them to its workers; datatrove's Ray
    executor takes them as ``ray_remote_kwargs={"runtime_env": {"env_vars": worker_environment("cpu")}}``."""
    if device_type != "cpu":
        return {}
    import torch

    from hf_adapters.backends.transformers.cpu_kernels import CPU_LINEAR_ENV, cpu_linear_setting
    from hf_adapters.core.openmp import PASSIVE, WAIT_POLICY_ENV

    settings = {WAIT_POLICY_ENV: os.environ.get(WAIT_POLICY_ENV, PASSIVE)}
    if (kernel := cpu_linear_setting()) != "auto":
        settings.update({CPU_LINEAR_ENV: kernel, "OMP_NUM_THREADS": str(torch.get_num_threads())})
    return settings


@dataclass(frozen=True)
class ScoreRange:
    """The filter forms' rule: keep a row whose score lies between ``min_score`` and ``max_score`` (each
    bound included; None: no bound). A NaN score (a row that could not be scored) is never kept.

    Example:
        >>> keep = ScoreRange(max_score=1.0)
        >>> keep(0.4), keep(1.3), keep(float("nan"))
        (True, False, False)
    """

    min_score: float | None = None
    max_score: float | None = None

    def __post_init__(self) -> None:
        if self.min_score is None and self.max_score is None:
            raise ValueError("A score filter needs min_score, max_score or both.")
        if None not in (self.min_score, self.max_score) and self.min_score > self.max_score:
            raise ValueError(f"min_score {self.min_score} is above max_score {self.max_score}.")

    def __call__(self, score: Any) -> bool:
        try:
            score = float(score)
        except (TypeError, ValueError):
            return False
        if math.isnan(score):
            return False
        return ((self.min_score is None or score >= self.min_score)
                and (self.max_score is None or score <= self.max_score))
