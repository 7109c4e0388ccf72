"""A reward model's score of each instruction row: the scalar head of a sequence classifier at the last
token of the chat-templated conversation (the instruction, with a non-empty input on the next line, as
the user's turn; the output as the assistant's).

``convention: opendataarena`` gives OpenDataArena-Tool's reward scorers' numbers: the user's turn is the
instruction alone (the input is dropped), and a conversation longer than ``max_length`` keeps its last
tokens (the start of the prompt goes). By default such a row gets NaN and a warning naming it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.core.options import OptionSpec, check_choice, check_max_length
from hf_adapters.core.texts import instruction_with_input

logger = logging.getLogger(__name__)

#: ``exact`` (the whole row; NaN past ``max_length``) or ``opendataarena`` (no input; cut from the left).
REWARD_CONVENTIONS = ("exact", "opendataarena")


@dataclass(frozen=True)
class RewardOptions(OptionSpec):
    """The options of a reward model's score.

    Attributes:
        max_length: the longest conversation in tokens (default: the model's position limit).
        convention: ``exact`` or ``opendataarena`` (see :mod:`hf_adapters.formulas.reward`).
    """

    max_length: int | None = None
    convention: str = "exact"

    def check(self) -> None:
        check_max_length(self.max_length)
        check_choice("convention", self.convention, REWARD_CONVENTIONS)

    def resolved(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def check_rows(self) -> None:
        """Every option applies to instruction rows."""


def reward_conversation(instruction: str, input: str, output: str, options: RewardOptions) -> list[dict[str, str]]:
    """The conversation a reward model reads for one row.

    Example:
        >>> reward_conversation("Add.", "2 + 3", "5", RewardOptions())[0]
        {'role': 'user', 'content': 'Add.\\n2 + 3'}
    """
    user = instruction_with_input(instruction, input if options.convention == "exact" else "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": output}]


def score_reward(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
                 outputs: Sequence[str], options: RewardOptions, *, batch_size: int | None = None,
                 progress: bool | None = None, labels: Sequence[str] | None = None) -> dict[str, Any]:
    """The reward model's first head value for each checked row (``rewards``), NaN for a row that does
    not fit ``max_length`` under the exact convention."""
    tokenizer = backend.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("The reward model's tokenizer has no chat template: a reward model reads the row as the "
                         "conversation it was trained on.")
    texts = [tokenizer.apply_chat_template(reward_conversation(*row, options), tokenize=False)
             for row in zip(instructions, inputs, outputs, strict=True)]
    sequences = tokenizer(texts, add_special_tokens=False).input_ids if texts else []
    window = backend.window(options.max_length)
    kept = []
    for index, sequence in enumerate(sequences):
        if window is not None and len(sequence) > window:
            if options.convention == "exact":
                logger.warning("%s: the conversation has %d tokens, more than max_length %d allows; its reward is "
                               "NaN.", labels[index] if labels else f"Row {index}", len(sequence), window)
                continue
            sequences[index] = sequence[-window:]
        kept.append(index)
    values = backend.head_values([sequences[index] for index in kept], batch_size=batch_size,
                                 progress=progress) if kept else []
    rewards = [math.nan] * len(sequences)
    for index, value in zip(kept, values, strict=True):
        rewards[index] = value[0]
    return {"rewards": rewards}
