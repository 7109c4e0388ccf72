"""SelectIT's token-level score (Liu et al., NeurIPS 2024): a model rates each row 1-5 after each of
``k`` rating prompts; the score is the mean of the expected ratings over the prompts, penalised by
their spread: ``mean / (1 + alpha * std)`` (the population standard deviation).

Each prompt is one line of ``rp_file`` (a text file of rating prompts, one per line: the user's), then
``Instruction:`` and the instruction (with a non-empty input on the next line), ``Response:`` and the
output, and ``The answer is:``, encoded with the tokenizer's special tokens. The expected rating is
:func:`~hf_adapters.formulas.rating_tokens.expected_rating` over the vocabulary entries "1".."5".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.core.options import OptionSpec, check_max_length, split_options, takes_options
from hf_adapters.core.texts import instruction_rows, instruction_with_input
from hf_adapters.formulas.rating_tokens import check_convention, expected_rating, label_log_probs, label_token_ids

#: The rating labels, each a vocabulary entry, and the rating each stands for.
SELECTIT_LABELS = ("1", "2", "3", "4", "5")
#: The rating prompts used when no ``rp_file`` is given (our wording).
DEFAULT_RATING_PROMPTS = (
    "Rate from 1 (poor) to 5 (excellent) how well the response below answers the instruction.",
    "On a scale of 1 to 5, how useful would this response be to the person who wrote the instruction?",
    "Give the response a grade from 1 to 5 for being correct, complete and clear.",
    "How would an expert judge this answer to the instruction? Reply with a number from 1 (bad) to 5 (very good).",
    "Score the quality of this instruction and response pair from 1 to 5.",
)


@dataclass(frozen=True)
class SelectitOptions(OptionSpec):
    """The options of SelectIT's token-level score.

    Attributes:
        rp_file: a text file of rating prompts, one per line (default: five prompts of our own).
        k: how many of its prompts (the first ``k``) rate each row.
        alpha: how much the ratings' spread lowers the score.
        max_length: the longest prompt in tokens, with the label (default: the model's position limit).
        convention: ``exact`` (a longer prompt gets NaN) or ``opendataarena`` (it keeps its first tokens).
    """

    rp_file: str | None = None
    k: int = 5
    alpha: float = 0.2
    max_length: int | None = None
    convention: str = "exact"

    def check(self) -> None:
        if self.rp_file is not None and not isinstance(self.rp_file, str):
            raise ValueError(f"`rp_file` must be the path of a text file, got {self.rp_file!r}.")
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"`k` must be a positive integer, got {self.k!r}.")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not self.alpha >= 0 \
                or math.isinf(self.alpha):
            raise ValueError(f"`alpha` must be a finite number of at least 0, got {self.alpha!r}.")
        check_max_length(self.max_length)
        check_convention(self.convention)
        self.prompts  # noqa: B018 - read now: an unreadable file, or one of fewer than k lines, is refused here

    @cached_property
    def prompts(self) -> list[str]:
        """The first ``k`` rating prompts (:func:`rating_prompts`), read once per spec: a scorer's check and
        every batch it scores share one read of ``rp_file``."""
        return rating_prompts(self)

    def resolved(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def check_rows(self) -> None:
        """Every option applies to instruction rows."""


def rating_prompts(options: SelectitOptions) -> list[str]:
    """The first ``k`` rating prompts; a ValueError says when the file cannot be read or has fewer lines."""
    if options.rp_file is None:
        lines = list(DEFAULT_RATING_PROMPTS)
    else:
        try:
            lines = Path(options.rp_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"`rp_file` {options.rp_file!r} cannot be read: {error}") from None
    if len(lines) < options.k:
        source = options.rp_file or "the default prompts"
        raise ValueError(f"`k` is {options.k} but {source} holds {len(lines)} rating prompts (one per line).")
    return lines[:options.k]


def selectit_prompt(rating_prompt: str, instruction: str, input: str, output: str) -> str:
    """One rating prompt for one row.

    Example:
        >>> selectit_prompt("Rate it.", "Add.", "2 + 3", "5")
        'Rate it.\\nInstruction:Add.\\n2 + 3\\nResponse:5\\nThe answer is: \\n'
    """
    query = instruction_with_input(instruction, input)
    return f"{rating_prompt}\nInstruction:{query}\nResponse:{output}\nThe answer is: \n"


def selectit_score(ratings: Sequence[float], alpha: float) -> float:
    """``mean / (1 + alpha * std)`` of one row's expected ratings (NaN if one is NaN).

    Example:
        >>> selectit_score([3.0, 5.0], 1.0)
        2.0
    """
    if any(math.isnan(rating) for rating in ratings):
        return math.nan
    return statistics.fmean(ratings) / (1 + alpha * statistics.pstdev(ratings))


def score_selectit(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
                   outputs: Sequence[str], options: SelectitOptions, *, batch_size: int | None = None,
                   progress: bool | None = None, labels: Sequence[str] | None = None) -> dict[str, Any]:
    """SelectIT's scores of checked rows with a backend: the body of :func:`compute_selectit`."""
    prompts = options.prompts
    texts = [selectit_prompt(prompt, *row) for row in zip(instructions, inputs, outputs, strict=True)
             for prompt in prompts]
    encoded = backend.tokenizer(texts).input_ids if texts else []
    row_labels = [label for label in labels for _ in prompts] if labels else None
    log_probs = label_log_probs(backend, encoded, label_token_ids(backend.tokenizer, SELECTIT_LABELS),
                                max_length=options.max_length, convention=options.convention, labels=row_labels,
                                batch_size=batch_size, progress=progress, desc="SelectIT")
    values = [int(label) for label in SELECTIT_LABELS]
    expected = [expected_rating(row, values) for row in log_probs]
    k = len(prompts)
    return {"selectit_scores": [selectit_score(expected[start:start + k], options.alpha)
                                for start in range(0, len(expected), k)]}


@takes_options(BackendOptions, SelectitOptions)
def compute_selectit(instructions: Sequence[str], outputs: Sequence[str], inputs: Sequence[str] | None = None,
                     **options: Any) -> dict[str, Any]:
    """Per row, SelectIT's token-level score (``selectit_scores``): the mean over ``k`` rating prompts
    of the expected rating 1-5, divided by ``1 + alpha * std``. The options are those of
    :class:`SelectitOptions` and :class:`~hf_adapters.backends.BackendOptions`.

    Example:
        >>> result = compute_selectit(["Name a primary colour."], ["Blue."], k=2)
        >>> 0 < result["selectit_scores"][0] <= 5
        True
    """
    instructions, inputs, outputs = instruction_rows(instructions, inputs, outputs)
    run, spec = split_options(options, BackendOptions, SelectitOptions, caller="compute_selectit")
    return score_selectit(run.load(), instructions, inputs, outputs, spec, batch_size=run.batch_size,
                          progress=run.progress)
