"""What a scoring job will cost before it runs: its rows, the tokens and forward passes its scorer asks of
the model (after a score set's sharing and prefix hosting), and its time on this machine, from a measured
sample (:func:`estimate_job`).

The counts come from recording the scorer's likelihood calls over every row, with nothing run
(:class:`~hf_adapters.backends.shared_passes.SharedPasses`): the tokenization of the whole data, which is
quick beside scoring it. The time is that of scoring an evenly spread sample of the rows for real, scaled
by the tokens that go through the model: the cost of a forward pass grows with its tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hf_adapters.backends.shared_passes import SharedPasses
from hf_adapters.engines.base import ScoringJob
from hf_adapters.scorers.base import RowScorer

#: Rows the estimate records at once.
COUNTING_BATCH = 256


@dataclass(frozen=True)
class JobEstimate:
    """A job's cost, estimated.

    Attributes:
        rows: the data's rows.
        tokens: the tokens of the sequences that go through the model.
        forward_passes: the sequences that go through the model (each distinct one once per batch of rows).
        sample_rows: the rows scored to measure the rate.
        sample_seconds: the time scoring them took.
        seconds: the whole job's estimated time, loading the model aside.
    """

    rows: int
    tokens: int
    forward_passes: int
    sample_rows: int
    sample_seconds: float
    seconds: float

    @property
    def seconds_per_1000_rows(self) -> float:
        return self.seconds / self.rows * 1000 if self.rows else math.nan

    def as_dict(self) -> dict[str, Any]:
        """The estimate as one JSON object."""
        return {**asdict(self), "seconds_per_1000_rows": self.seconds_per_1000_rows}


def _members(scorer: RowScorer) -> Sequence[RowScorer]:
    return getattr(scorer, "members", [scorer])


def _recorded(scorer: RowScorer, batch: Mapping[str, list]) -> SharedPasses:
    """The likelihood calls of scoring ``batch``, recorded with nothing run: of the members that score
    with a causal LM's likelihoods (those that may join a score set); a reward model's head values are
    not likelihood calls, so recording would run them."""
    shared = SharedPasses()
    with shared.recording():
        for member in _members(scorer):
            if member.runs_model and member.joins_score_sets:
                member.score_batch(batch)
    return shared


def recorded_work(scorer: RowScorer, batch: Mapping[str, list]) -> tuple[int, int]:
    """(forward passes, tokens) that scoring ``batch`` sends through the model, recorded with nothing run."""
    shared = _recorded(scorer, batch)
    return shared.count()[1], shared.tokens()


def tell_job_tokens(scorer: RowScorer, rows: Sequence[Mapping[str, Any]], job_rows: int) -> None:
    """Set the ``job_tokens`` of each backend the scorer runs: the tokens scoring ``rows`` sends through it
    (recorded with nothing run), scaled to ``job_rows`` rows, so that a choice that depends on the job's
    size (``compile="auto"``) is final when the backend makes it."""
    if not rows:
        return
    batch = {name: [row[name] for row in rows] for name in rows[0]}
    for backend, tokens in _recorded(scorer, batch).backend_tokens():
        backend.job_tokens = math.ceil(tokens * job_rows / len(rows))


def sample_indices(rows: int, sample_rows: int) -> list[int]:
    """``sample_rows`` row numbers spread evenly over ``rows`` (all of them when there are fewer).

    Example:
        >>> sample_indices(10, 4)
        [0, 2, 5, 7]
    """
    if rows <= sample_rows:
        return list(range(rows))
    return [index * rows // sample_rows for index in range(sample_rows)]


def estimate_job(job: ScoringJob, *, sample_rows: int = 64) -> JobEstimate:
    """The cost of ``job`` (see the module's docstring): its scorer's model is loaded, every row's calls
    recorded, and ``sample_rows`` rows scored for real, after a warm-up on one row."""
    scorer = job.build_scorer()
    dataset = job.read_rows()
    if not hasattr(dataset, "__len__"):
        raise ValueError("An estimate reads the whole data set: leave out --streaming.")
    scorer.use_columns(dataset.column_names)
    scorer.prepare()
    passes = tokens = 0
    for start in range(0, len(dataset), COUNTING_BATCH):
        batch_passes, batch_tokens = recorded_work(scorer, dataset[start:start + COUNTING_BATCH])
        passes, tokens = passes + batch_passes, tokens + batch_tokens
    sample = dataset.select(sample_indices(len(dataset), sample_rows))
    if len(sample):
        scorer.score_batch(sample[:1])
    started = time.perf_counter()
    if len(sample):
        scorer.score_batch(sample[:])
    seconds = time.perf_counter() - started
    sample_tokens = recorded_work(scorer, sample[:])[1] if len(sample) else 0
    total = seconds * tokens / sample_tokens if sample_tokens else 0.0
    return JobEstimate(len(dataset), tokens, passes, len(sample), seconds, total)
