"""A scoring job, planned once, and the interface of the engines that run it.

A :class:`ScoringJob` is everything ``hf-adapters score`` is asked to do, made once from its
arguments (or from Python, :meth:`ScoringJob.plan`): the scorer config with the command's overrides,
the data, the output and its format, the device, and whether to overwrite and show progress. An
:class:`Engine` runs a job: :class:`~hf_adapters.engines.local.LocalEngine` in this process (or in each
process of ``accelerate launch``), :class:`~hf_adapters.engines.ray.RayEngine` on a pool of Ray actors.
Every engine writes the same file for the same job; the guide ``docs/guides/adding_an_engine.md``
adds one.

Importing this module imports neither torch nor ``datasets``.
"""

from __future__ import annotations

import argparse
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from hf_adapters.engines.job_files import JobSummary
from hf_adapters.engines.work_folder import work_files
from hf_adapters.files.output_paths import output_location
from hf_adapters.files.score_files import OutputFormat

if TYPE_CHECKING:
    from datasets import Dataset, IterableDataset

    from hf_adapters.scorers import RowScorer

#: The config key (and ``--score-columns``) asking for more of the scorer's outputs: a job setting,
#: not the scorer's.
SCORE_COLUMNS_KEY = "score_columns"


class EngineError(RuntimeError):
    """Scoring failed inside an engine (an error in a worker it runs): the command line prints the
    message and exits with status 1."""


def score_columns_of(text: str) -> str | tuple[str, ...]:
    """``all``, or the output names ``text`` gives separated by commas (a ValueError for an empty name).

    Example:
        >>> score_columns_of("ppl_conditional, ppl_direct")
        ('ppl_conditional', 'ppl_direct')
    """
    if text.strip() == "all":
        return "all"
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise ValueError(f"expected all or output names separated by commas, got {text!r}")
    return names


def job_settings(config: Mapping[str, Any], *, score_columns: str | Sequence[str] | None = None,
                 overrides: Mapping[str, Any] | None = None,
                 source: str = "the config") -> tuple[dict[str, Any], str | Sequence[str] | None]:
    """The scorer's config (``overrides`` that are not None, such as the command's ``model``,
    ``batch_size``, ``dtype`` and ``backend``, over the file's) and the score columns asked for
    (``score_columns`` over the config's ``score_columns``: ``all``, output names separated by
    commas, or a list of them; anything else is a ValueError naming ``source``).

    Example:
        >>> job_settings({"name": "IFDScorer", "score_columns": "all"}, overrides={"batch_size": 4})
        ({'name': 'IFDScorer', 'batch_size': 4}, 'all')
    """
    config = dict(config)
    asked = config.pop(SCORE_COLUMNS_KEY, None)
    if isinstance(asked, str):
        try:
            asked = score_columns_of(asked)
        except ValueError:
            pass  # an empty name: refused below
    if asked is not None and asked != "all" and not (
            isinstance(asked, (list, tuple)) and all(isinstance(name, str) and name for name in asked)):
        raise ValueError(f"{source}: `{SCORE_COLUMNS_KEY}` takes all, an output name or a list of the scorer's output "
                         f"names (IFD: [ppl_conditional, ppl_direct]), got {asked!r}.")
    if score_columns is not None:
        asked = score_columns
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    return {**config, **given}, asked


@dataclass(frozen=True)
class ScoringJob:
    """One scoring job: what to score, with what, into what. Plan it with :meth:`plan`; run it with an
    :class:`Engine`. Nothing is read or checked until an engine runs it.

    Attributes:
        config: the scorer's config (``name`` and its keys), the command's overrides applied.
        data: the rows: a data file, a folder or glob of shards, a ``save_to_disk`` folder or a hub id.
        output_path: the file (or, for Parquet, the folder) to write.
        output_format: how the output is written: JSONL or Parquet, the rows' own columns or not, the
            score columns.
        split: the split of a hub data set (None: ``train``).
        streaming: read the rows as they are scored, without loading the data set first.
        device: where the scorer's model runs (None: accelerate's device).
        overwrite: discard another job's partial results, and score a finished job again.
        progress: show a progress bar.
        config_path: the YAML file the config came from (None for a dict): an output there is refused.
    """

    config: dict[str, Any]
    data: str
    output_path: Path
    output_format: OutputFormat = OutputFormat()
    split: str | None = None
    streaming: bool = False
    device: str | None = None
    overwrite: bool = False
    progress: bool = True
    config_path: str | None = None

    @classmethod
    def plan(cls, config: Mapping[str, Any] | str | Path, *, data: str | Path, output: str | Path,
             split: str | None = None, streaming: bool = False, output_format: str = "jsonl",
             keep_columns: bool = False, rows_per_shard: int = OutputFormat.rows_per_shard,
             score_columns: str | Sequence[str] | None = None, model: str | None = None,
             batch_size: int | None = None, max_batch_tokens: int | None = None, dtype: str | None = None,
             backend: str | None = None, device: str | None = None, overwrite: bool = False,
             progress: bool = True) -> ScoringJob:
        """The job ``hf-adapters score CONFIG --data DATA --output OUTPUT ...`` runs, each keyword as
        its option: ``config`` a YAML file or a config dict; ``output_format`` ``"jsonl"`` or
        ``"parquet"``; ``model``, ``batch_size``, ``max_batch_tokens``, ``dtype`` and ``backend`` override
        the config's.
        A ValueError (a :class:`~hf_adapters.scorers.ConfigError` for the file) says what is wrong
        with the config; the data and output are checked when an engine runs the job.

        Example:
            >>> job = ScoringJob.plan({"name": "PPLScorer", "score_columns": "all"}, data="rows.jsonl",
            ...                       output="ppl.jsonl", batch_size=8)
            >>> job.config, job.output_format.score_columns
            ({'name': 'PPLScorer', 'batch_size': 8}, 'all')
        """
        config_path = None
        if isinstance(config, (str, Path)):
            from hf_adapters.scorers import load_config

            config_path, config = str(config), load_config(config)
        overrides = {"model": model, "batch_size": batch_size, "max_batch_tokens": max_batch_tokens, "dtype": dtype,
                     "backend": backend}
        config, score_columns = job_settings(config, score_columns=score_columns, overrides=overrides,
                                             source=config_path or "the config")
        output_format = OutputFormat(output_format, keep_columns, rows_per_shard, score_columns=score_columns)
        return cls(config, str(data), output_location(output), output_format, split=split, streaming=streaming,
                   device=device, overwrite=overwrite, progress=progress, config_path=config_path)

    def check_output(self, parts: Sequence[str] = ()) -> None:
        """Refuse, before any work, an output that would destroy an input or could not be written
        (:func:`~hf_adapters.files.output_paths.check_output_path`; a ValueError), the engine's files
        in the work folder included: ``parts``, the names of the files it saves rows in (one of each kind)."""
        from hf_adapters.files.output_paths import check_output_path

        check_output_path(self.output_path, {"data": self.data, "config": self.config_path},
                          folder=self.output_format.kind == "parquet",
                          work_files=work_files(self.output_path, self.output_format, parts))

    def build_scorer(self) -> RowScorer:
        """The config's scorer, on the job's device (a ValueError where it runs no model), checked to
        have the score columns asked for, before any row is read. Its model loads when it first scores."""
        from hf_adapters.scorers import build_scorer
        from hf_adapters.scorers.base import scorer_class

        if self.device is not None and not (cls := scorer_class(self.config)).runs_model:
            raise ValueError(f"--device: {cls.name} runs no model.")
        scorer = build_scorer(self.config, device=self.device)
        self.output_format.columns_of(scorer.outputs, scorer.named_outputs)
        return scorer

    def read_rows(self) -> Dataset | IterableDataset:
        """The rows (:func:`~hf_adapters.files.data_io.read_rows`): a ``Dataset``, or with ``streaming`` an
        ``IterableDataset`` that reads them as they are scored."""
        from hf_adapters.files.data_io import read_rows

        return read_rows(self.data, split=self.split, streaming=self.streaming)

    def data_fingerprint(self) -> str:
        """What identifies the data (:func:`~hf_adapters.files.data_io.data_fingerprint`): a hash of its
        files' bytes, or a hub data set's id, split and commit."""
        from hf_adapters.files.data_io import data_fingerprint

        return data_fingerprint(self.data, self.split)

    def expected_rows(self) -> int | None:
        """How many rows the data has, where that is cheap to know without reading it: the sum of a
        Parquet source's row counts (its shards' metadata), the length of a ``save_to_disk`` folder's
        data set; None for others (JSON and CSV would be read a second time to count them, a hub data
        set has no count offline). A stream's progress bar shows it as its total."""
        from hf_adapters.files.data_io import data_files, is_saved_dataset, parquet_rows

        if is_saved_dataset(self.data):
            from datasets import DatasetDict, load_from_disk

            saved = load_from_disk(self.data)
            if isinstance(saved, DatasetDict):
                saved = saved[self.split] if self.split is not None else next(iter(saved.values()))
            return len(saved)
        shards = data_files(self.data)
        if shards is None or shards[0] != "parquet":
            return None
        return sum(parquet_rows(file) for file in shards[1])

    def with_stored_types(self) -> ScoringJob:
        """This job, its output format told the types a Parquet source stores, where it writes the rows'
        columns in Parquet (:func:`~hf_adapters.files.data_io.stored_types`); else this job."""
        if not (self.output_format.keep_columns and self.output_format.kind == "parquet"):
            return self
        from hf_adapters.files.data_io import stored_types

        return dataclasses.replace(self, output_format=dataclasses.replace(self.output_format,
                                                                           column_types=stored_types(self.data)))


class Engine(ABC):
    """What runs a :class:`ScoringJob` over a whole data set: a subclass with a ``name``, registered with
    :func:`~hf_adapters.engines.register_engine`, is ``hf-adapters score --engine NAME``.

    Whatever the engine, the output is the same file: every row once, in input order (see
    :meth:`run`). The guide ``docs/guides/adding_an_engine.md`` walks through a new one.

    Attributes:
        name: what ``--engine`` calls it.
        summary: what it is, in a few words, for ``--engine``'s help.
        title: the heading of its options in ``hf-adapters score --help`` (None: it has none).
        description: what that heading says below it.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    title: ClassVar[str | None] = None
    description: ClassVar[str | None] = None

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        """Add this engine's own options to ``group``, its heading in ``hf-adapters score --help`` (none
        by default). Give each a default of None: one given with another engine is refused by name."""
        return None

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> Engine:
        """The engine the command line's options ask for (those :meth:`add_arguments` added)."""
        return cls()

    @classmethod
    def options(cls) -> list[argparse.Action]:
        """The options :meth:`add_arguments` adds, on a parser of their own."""
        parser = argparse.ArgumentParser(add_help=False)
        cls.add_arguments(parser.add_argument_group())
        return parser._actions

    @classmethod
    def options_given(cls, args: argparse.Namespace) -> list[str]:
        """The flags of this engine's options that ``args`` gives (a value other than their default)."""
        return [action.option_strings[0] for action in cls.options()
                if getattr(args, action.dest, action.default) != action.default]

    @abstractmethod
    def run(self, job: ScoringJob) -> JobSummary:
        """Score every row of ``job`` into its output and say what was done.

        Before reading the rows: :meth:`ScoringJob.check_output`, then :meth:`ScoringJob.build_scorer`.
        The output is what :func:`~hf_adapters.files.score_files.write_output` writes: each row's id
        (its row number where it has none) and scores, in input order, all rows or no file at all.
        Errors a user can fix are ValueErrors (the command exits with status 2); a failure inside
        the engine's workers is an :class:`EngineError` (status 1)."""

    @abstractmethod
    def interrupted_message(self, job: ScoringJob) -> str:
        """What a Ctrl-C during :meth:`run` leaves behind, in one line: what is saved, and how to go on."""

    def stopped_message(self, job: ScoringJob, stopped: str) -> str:
        """What :meth:`run` stopped by something other than a Ctrl-C leaves behind, in one line beginning
        with ``stopped``, what stopped it (``error: no space left on the device holding ...``): by default
        ``stopped``, then :meth:`interrupted_message`. A resumable engine says the rows saved instead."""
        return f"{stopped}. {self.interrupted_message(job)}"
