"""What the lm-eval integration refuses, as errors that ``hf-adapters lm-eval`` says in one line (exit 2)."""

from __future__ import annotations


class LMEvalUsageError(ValueError):
    """An argument or a data file given to lm-eval for our model or our tasks is refused."""


class ModelArgumentError(LMEvalUsageError, TypeError):
    """An argument of the model ``hf-adapters`` (``--model_args``, ``--batch_size``, ``--device``) is refused:
    unknown (a TypeError, as Python has it), of a wrong value, or given twice with two values."""


class TaskDataError(LMEvalUsageError):
    """A task's data (``--metadata``) is missing or cannot be read."""
