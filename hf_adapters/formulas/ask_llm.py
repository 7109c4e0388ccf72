"""Ask-LLM (Sachdeva et al., 2024): how readily a model answers "yes" when asked whether a row is good
training data: the mean log-probability of the answer's tokens after the question and the row.

The text before the answer is ``prompt``, then the row (instruction, a non-empty input, output, each
followed by a newline), then a blank line; the answer is ``yes_token``, encoded on its own (no special
tokens on either side). OpenDataArena-Tool's ``AskLlmScorer`` config (``prompt``, ``yes_token``) runs as it is;
``convention: opendataarena`` gives its numbers: it encodes text and answer together and scores the tokens
after as many as the text has alone (where a token merges across the seam, not the answer's own tokens),
and a row whose text fills ``max_length`` scores -100.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.core.options import OptionSpec, check_choice, check_max_length, split_options, takes_options
from hf_adapters.core.texts import instruction_rows

logger = logging.getLogger(__name__)

#: ``exact`` (the answer's own tokens; NaN past ``max_length``) or ``opendataarena`` (see the module's docstring).
ASK_LLM_CONVENTIONS = ("exact", "opendataarena")
#: OpenDataArena-Tool's score of a row whose text leaves no room for the answer.
OPENDATAARENA_NO_ROOM = -100.0
#: The question asked before each row (our wording; a config's ``prompt`` replaces it).
DEFAULT_ASK_PROMPT = ("Here is an example for training an assistant. Would a careful editor keep it in the "
                      "training set? Answer yes or no.\n\n")


@dataclass(frozen=True)
class AskLlmOptions(OptionSpec):
    """The options of Ask-LLM.

    Attributes:
        prompt: the question before the row.
        yes_token: the answer whose log-probability is the score (one or more tokens).
        max_length: the longest question, row and answer in tokens (default: the model's position
            limit); a longer row gets NaN.
        convention: ``exact`` or ``opendataarena`` (see :mod:`hf_adapters.formulas.ask_llm`).
    """

    prompt: str = DEFAULT_ASK_PROMPT
    yes_token: str = "yes"
    max_length: int | None = None
    convention: str = "exact"

    def check(self) -> None:
        if not isinstance(self.prompt, str):
            raise ValueError(f"`prompt` must be a string, got {self.prompt!r}.")
        if not isinstance(self.yes_token, str) or not self.yes_token:
            raise ValueError(f"`yes_token` must be a non-empty string, got {self.yes_token!r}.")
        check_max_length(self.max_length)
        check_choice("convention", self.convention, ASK_LLM_CONVENTIONS)

    def resolved(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def check_rows(self) -> None:
        """Every option applies to instruction rows."""


def ask_llm_text(instruction: str, input: str, output: str, options: AskLlmOptions) -> str:
    """The text before the answer for one row.

    Example:
        >>> ask_llm_text("Add.", "", "5", AskLlmOptions(prompt="Good? "))
        'Good? Add.\\n5\\n\\n\\n'
    """
    parts = (instruction, input, output) if input else (instruction, output)
    row = "".join(f"{part}\n" for part in parts)
    return f"{options.prompt}{row}\n\n"


def score_ask_llm(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
                  outputs: Sequence[str], options: AskLlmOptions, *, batch_size: int | None = None,
                  progress: bool | None = None, labels: Sequence[str] | None = None) -> dict[str, Any]:
    """Ask-LLM's scores of checked rows with a backend: the body of :func:`compute_ask_llm`."""
    tokenizer = backend.tokenizer
    texts = [ask_llm_text(*row, options) for row in zip(instructions, inputs, outputs, strict=True)]
    if options.convention == "opendataarena":
        return {"ask_llm_scores": _opendataarena_scores(backend, texts, options, batch_size, progress)}
    contexts = tokenizer(texts, add_special_tokens=False).input_ids if texts else []
    answer = tokenizer(options.yes_token, add_special_tokens=False).input_ids
    window = backend.window(options.max_length)
    fits = [window is None or len(context) + len(answer) <= window for context in contexts]
    for index, fit in enumerate(fits):
        if not fit:
            logger.warning("%s: the question, row and answer have %d tokens, more than max_length %d allows; its "
                           "score is NaN.", labels[index] if labels else f"Row {index}",
                           len(contexts[index]) + len(answer), window)
    items = [(context, answer) for context, fit in zip(contexts, fits, strict=True) if fit]
    scores = iter(backend.score_checked(items, max_length=None, truncate=False, batch_size=batch_size,
                                        progress=progress, desc="Ask-LLM") if items else [])
    return {"ask_llm_scores": [-next(scores).mean_nll if fit else math.nan for fit in fits]}


def _opendataarena_scores(backend: LikelihoodBackend, texts: Sequence[str], options: AskLlmOptions,
                          batch_size: int | None, progress: bool | None) -> list[float]:
    """OpenDataArena-Tool's numbers: text and answer encoded together, cut to ``max_length``; the scored
    tokens are those after as many as the text has alone; -100 where none is left."""
    tokenizer = backend.tokenizer
    window = backend.window(options.max_length)
    joined = tokenizer([text + options.yes_token for text in texts], add_special_tokens=False).input_ids
    alone = [len(ids) for ids in tokenizer(list(texts), add_special_tokens=False).input_ids]
    items, scored = [], []
    for ids, length in zip(joined, alone, strict=True):
        ids = ids[:window] if window is not None else ids
        scored.append(length < len(ids))
        if scored[-1]:
            items.append((ids[:length], ids[length:]))
    scores = iter(backend.score_checked(items, max_length=None, truncate=False, batch_size=batch_size,
                                        progress=progress, desc="Ask-LLM") if items else [])
    return [-next(scores).mean_nll if fits else OPENDATAARENA_NO_ROOM for fits in scored]


@takes_options(BackendOptions, AskLlmOptions)
def compute_ask_llm(instructions: Sequence[str], outputs: Sequence[str], inputs: Sequence[str] | None = None,
                    **options: Any) -> dict[str, Any]:
    """Per row, the mean log-probability (nats, at most 0; higher: the model says "yes" more readily) of
    ``yes_token`` after ``prompt`` and the row (``ask_llm_scores``). The options are those of
    :class:`AskLlmOptions` and :class:`~hf_adapters.backends.BackendOptions`.

    Example:
        >>> result = compute_ask_llm(["Name a primary colour."], ["Blue."])
        >>> result["ask_llm_scores"][0] < 0
        True
    """
    instructions, inputs, outputs = instruction_rows(instructions, inputs, outputs)
    run, spec = split_options(options, BackendOptions, AskLlmOptions, caller="compute_ask_llm")
    return score_ask_llm(run.load(), instructions, inputs, outputs, spec, batch_size=run.batch_size,
                         progress=run.progress)
