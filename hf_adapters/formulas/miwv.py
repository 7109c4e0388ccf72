"""MIWV, the Model Instruction Weakness Value (Jiang et al., 2025), as OpenDataArena's ``MIWVScorer``
computes it: a row's mean answer loss with its most similar other row as a one-shot example, minus
its mean answer loss alone.

- The most similar row is the one nearest by embedding (cosine, or Euclidean distance), never the row
  itself; of equally near rows, the first.
- The prompt is the instruction, then a newline and the input when there is one. The zero-shot text is
  ``"User: {prompt}\\nAssistant: {output}"``; the one-shot text puts the neighbour's
  ``"User: {prompt}\\nAssistant: {output}\\n"`` before it.
- Each text is tokenized with the tokenizer's default special tokens and cut to ``max_length``; the
  answer starts at the length of the text up to ``"Assistant: "`` tokenized alone (so a first answer
  token merged with that space is not scored, as in the peer's code), or at the last token when the
  cut leaves less; the first token is never scored. The loss is the mean NLL of the answer tokens.

A row whose answer has no token left gets NaN (the peer writes a loss of 0). High MIWV: the example
did not help, the row is where the model is weak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.core.options import OptionSpec, check_choice, check_max_length, split_options, takes_options
from hf_adapters.core.texts import check_texts
from hf_adapters.formulas.embeddings import embedding_matrix
from hf_adapters.formulas.entropy_scores import Pair, score_pairs, warn_unscored
from hf_adapters.formulas.similarity import Similarity

if TYPE_CHECKING:
    pass

#: How the nearest row is found: the largest cosine similarity, or the smallest Euclidean distance
#: (``squared_euclidean``, the peer's other name for it, finds the same rows).
DISTANCES = ("cosine", "euclidean", "squared_euclidean")


@dataclass(frozen=True)
class MIWVOptions(OptionSpec):
    """MIWV's options: ``distance`` (how the nearest row is found, default cosine) and ``max_length``
    (the most tokens of a text that are read; default 2048, the peer's)."""

    distance: str = "cosine"
    max_length: int | None = 2048

    def check(self) -> None:
        check_choice("distance", self.distance, DISTANCES)
        check_max_length(self.max_length)


def nearest_rows(embeddings: Any, distance: str = "cosine") -> list[int]:
    """For each row, the index of the nearest other row by ``distance``; ties go to the earlier row.
    Rows are compared a block at a time, so no rows x rows matrix is held.

    Example:
        >>> nearest_rows(np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1]]))
        [2, 2, 0]
    """
    check_choice("distance", distance, DISTANCES)
    rows = np.asarray(embeddings)
    if rows.ndim != 2 or len(rows) < 2:
        raise ValueError(f"MIWV needs an embedding matrix of at least 2 rows, got shape {rows.shape}.")
    # The Euclidean kernel exp(-distance / dimensions) falls as the distance grows: its largest value is the nearest.
    pool = Similarity(rows, "cosine" if distance == "cosine" else "euclidean")
    nearest = np.empty(len(pool), dtype=np.int64)
    step = pool.block_rows(len(pool))
    for start in range(0, len(pool), step):
        block_rows = np.arange(start, min(start + step, len(pool)))
        block = pool.block(block_rows, slice(None))
        block[np.arange(len(block_rows)), block_rows] = -np.inf  # never the row itself
        nearest[block_rows] = np.argmax(block, axis=1)
    return nearest.tolist()


def miwv_prompt(instruction: str, input: str) -> str:
    """The instruction, then a newline and the input when there is one."""
    return instruction + ("\n" + input if input else "")


def dialogue(prompt: str, output: str, example: tuple[str, str] | None = None) -> tuple[str, str]:
    """The text up to the answer and the whole text, with the ``example`` (prompt, output) turn first."""
    head = f"User: {example[0]}\nAssistant: {example[1]}\n" if example else ""
    before_answer = f"{head}User: {prompt}\nAssistant: "
    return before_answer, before_answer + output


def answer_pair(tokenizer: Any, before_answer: str, text: str, max_length: int | None) -> Pair | None:
    """(context, answer) token ids of ``text`` as the peer cuts them (see the module), or None when no
    answer token is left."""
    ids = tokenizer(text).input_ids
    cut = ids[:max_length]
    start = len(tokenizer(before_answer).input_ids)
    if len(cut) < len(ids):
        start = min(start, len(cut) - 1)
    start = max(start, 1)
    return (cut[:start], cut[start:]) if start < len(cut) else None


def score_miwv(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
               outputs: Sequence[str], neighbours: Sequence[int], options: MIWVOptions, *,
               batch_size: int | None = None, progress: bool | None = None) -> dict:
    """MIWV of each row given each row's nearest row (``neighbours``): see :func:`compute_miwv`. A row
    without an answer token to score is NaN, with a warning naming it (``Row 4``)."""
    prompts = [miwv_prompt(instruction, input) for instruction, input in zip(instructions, inputs, strict=True)]
    examples = [(prompts[n], outputs[n]) for n in neighbours]
    zero_shot = [answer_pair(backend.tokenizer, *dialogue(prompt, output), options.max_length)
                 for prompt, output in zip(prompts, outputs, strict=True)]
    one_shot = [answer_pair(backend.tokenizer, *dialogue(prompt, output, example), options.max_length)
                for prompt, output, example in zip(prompts, outputs, examples, strict=True)]
    warn_unscored([None if one is None else zero for zero, one in zip(zero_shot, one_shot, strict=True)], outputs,
                  None, "MIWV", options.max_length)
    scores = score_pairs(backend, zero_shot + one_shot, batch_size=batch_size, progress=progress, desc="MIWV")
    losses = [math.nan if score is None else score.mean_nll for score in scores]
    zero, one = losses[:len(prompts)], losses[len(prompts):]
    miwv = [a - b for a, b in zip(one, zero, strict=True)]
    valid = [value for value in miwv if not math.isnan(value)]
    return {"miwv_scores": miwv, "one_shot_losses": one, "zero_shot_losses": zero, "neighbours": list(neighbours),
            "mean_miwv": float(np.mean(valid)) if valid else math.nan}


@takes_options(BackendOptions, MIWVOptions)
def compute_miwv(instructions: Sequence[str], outputs: Sequence[str], inputs: Sequence[str | None] | None = None, *,
                 embeddings: Any, **options: Any) -> dict:
    """MIWV of each instruction row: its mean answer loss with its nearest row by ``embeddings`` (one
    vector per row, e.g. from :func:`hf_adapters.embed_texts` or a ``.npy`` file) as a one-shot example,
    minus its mean answer loss alone, in nats.

    Returns ``miwv_scores`` (NaN, with a warning, where the answer has no token left), ``one_shot_losses``,
    ``zero_shot_losses``, ``neighbours`` (each row's example row) and ``mean_miwv``. The options are
    those of :class:`MIWVOptions` and :class:`~hf_adapters.backends.BackendOptions`.

    Example:
        >>> from hf_adapters.formulas.miwv import compute_miwv
        >>> result = compute_miwv(["Name a colour.", "Name a color.", "Add 2 and 3."], ["Blue.", "Red.", "5"],
        ...                       embeddings=[[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
        >>> result["neighbours"]
        [1, 0, 1]
    """
    run, spec = split_options(options, BackendOptions, MIWVOptions, caller="compute_miwv")
    check_texts(instructions, "instructions")
    check_texts(outputs, "outputs")
    if inputs is None:
        inputs = [""] * len(instructions)
    elif not isinstance(inputs, str):  # a missing input (None) reads as "", as every scorer reads it
        inputs = ["" if value is None else value for value in inputs]
    check_texts(inputs, "inputs")
    if not len(instructions) == len(outputs) == len(inputs):
        raise ValueError(f"Got {len(instructions)} instructions, {len(outputs)} outputs and {len(inputs)} inputs; "
                         "give one of each per row.")
    matrix = embedding_matrix(embeddings if isinstance(embeddings, np.ndarray) else list(embeddings))
    if len(matrix) != len(instructions):
        raise ValueError(f"{len(matrix)} embeddings for {len(instructions)} rows: give one embedding per row.")
    return score_miwv(run.load(), instructions, inputs, outputs, nearest_rows(matrix, spec.distance), spec,
                      batch_size=run.batch_size, progress=run.progress)
