"""DEITA's complexity and quality scores (Liu et al., ICLR 2024): the expected rating 1-6 that a scorer
model gives a row after a rating prompt.

The prompt is the scorer model's input format (DEITA's ``llama_scorer.py``: the complexity prompt holds
the instruction, the quality prompt the instruction and the response), encoded with the tokenizer's
special tokens, as DEITA encodes it. The score is ``sum_r r * softmax(logits of "1".."6")_r`` at the
position after the prompt: :func:`~hf_adapters.formulas.rating_tokens.expected_rating`. DEITA's models
are ``hkust-nlp/deita-complexity-scorer`` and ``hkust-nlp/deita-quality-scorer``; any causal LM whose
vocabulary has the entries "1".."6" can be the scorer model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.core.options import OptionSpec, check_choice, check_max_length, split_options, takes_options
from hf_adapters.core.texts import instruction_rows, instruction_with_input
from hf_adapters.formulas.rating_tokens import check_convention, expected_rating, label_log_probs, label_token_ids

#: The rating labels, each a vocabulary entry, and the rating each stands for.
DEITA_LABELS = ("1", "2", "3", "4", "5", "6")
#: What DEITA rates: the row's instruction (``complexity``) or its response to it (``quality``).
DEITA_ASPECTS = ("complexity", "quality")
#: The prompts DEITA's scorer models were trained on (``exact``), and OpenDataArena-Tool's (the
#: quality prompt without the space before ``#Question#``, the texts stripped).
_PROMPTS = {
    ("complexity", "exact"): "You are a helpful assistant. Please identify the complexity score of the following "
                             "user query. \n##Query: {instruction}  \n##Complexity: ",
    ("quality", "exact"): "You are a helpful assistant. Please identify the quality score of the Response "
                          "corresponding to the Question. \n #Question#:\n{instruction}\n#Response#:\n{output} "
                          "\n##Quality: ",
}
_PROMPTS[("complexity", "opendataarena")] = _PROMPTS[("complexity", "exact")]
_PROMPTS[("quality", "opendataarena")] = _PROMPTS[("quality", "exact")].replace("\n #Question#", "\n#Question#")


@dataclass(frozen=True)
class DeitaOptions(OptionSpec):
    """The options of DEITA's scores.

    Attributes:
        aspect: ``complexity`` (of the instruction) or ``quality`` (of the output).
        max_length: the longest prompt in tokens, with the label (default: the model's position limit).
        convention: ``exact`` (DEITA's prompts; a longer prompt gets NaN) or ``opendataarena``
            (OpenDataArena-Tool's quality prompt and stripped texts; a longer prompt keeps its first tokens).
    """

    aspect: str = "complexity"
    max_length: int | None = None
    convention: str = "exact"

    def check(self) -> None:
        check_choice("aspect", self.aspect, DEITA_ASPECTS)
        check_max_length(self.max_length)
        check_convention(self.convention)

    def resolved(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def check_rows(self) -> None:
        """Every option applies to instruction rows."""


def deita_prompt(instruction: str, input: str, output: str, options: DeitaOptions) -> str:
    """The rating prompt of one row: its instruction, with a non-empty input on the next line (as
    OpenDataArena-Tool joins Alpaca rows), and for ``quality`` its output.

    Example:
        >>> deita_prompt("Add.", "2 + 3", "5", DeitaOptions())[-37:]
        '\\n##Query: Add.\\n2 + 3  \\n##Complexity: '
    """
    if options.convention == "opendataarena" and options.aspect == "quality":
        instruction, input, output = instruction.strip(), input.strip(), output.strip()
    query = instruction_with_input(instruction, input)
    return _PROMPTS[(options.aspect, options.convention)].format(instruction=query, output=output)


def score_deita(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
                outputs: Sequence[str], options: DeitaOptions, *, batch_size: int | None = None,
                progress: bool | None = None, labels: Sequence[str] | None = None) -> dict[str, Any]:
    """DEITA's scores of checked rows with a backend: the body of :func:`compute_deita`."""
    prompts = [deita_prompt(*row, options) for row in zip(instructions, inputs, outputs, strict=True)]
    encoded = backend.tokenizer(prompts).input_ids if prompts else []
    log_probs = label_log_probs(backend, encoded, label_token_ids(backend.tokenizer, DEITA_LABELS),
                                max_length=options.max_length, convention=options.convention, labels=labels,
                                batch_size=batch_size, progress=progress, desc=f"DEITA {options.aspect}")
    ratings = [int(label) for label in DEITA_LABELS]
    return {"deita_scores": [expected_rating(row, ratings) for row in log_probs]}


@takes_options(BackendOptions, DeitaOptions)
def compute_deita(instructions: Sequence[str], outputs: Sequence[str] | None = None,
                  inputs: Sequence[str] | None = None, **options: Any) -> dict[str, Any]:
    """Per row, DEITA's expected rating from 1 to 6 (``deita_scores``): the complexity of the instruction
    (``aspect="complexity"``, the default; ``outputs`` may be omitted) or the quality of the output
    (``aspect="quality"``). NaN for a prompt longer than ``max_length`` under the exact convention.
    The options are those of :class:`DeitaOptions` and :class:`~hf_adapters.backends.BackendOptions`.

    Example:
        >>> result = compute_deita(["Write a haiku about the sea."])
        >>> 1 <= result["deita_scores"][0] <= 6
        True
    """
    instructions, inputs, outputs = instruction_rows(instructions, inputs, outputs)
    run, spec = split_options(options, BackendOptions, DeitaOptions, caller="compute_deita")
    return score_deita(run.load(), instructions, inputs, outputs, spec, batch_size=run.batch_size,
                       progress=run.progress)
