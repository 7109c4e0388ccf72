"""The entropy- and loss-based row scores OpenDataArena's ODA-DataScorer ships (``UPDScorer``,
``HESScorer``, ``NormLossScorer``), on the tokens its code scores, from one batched call of the core
that returns each token's NLL and predictive entropy from the same forward pass.

- UPD: per answer token ``sigmoid(L_t) * max(0, 1 - H_t / ln V)`` (V: the model's vocabulary size),
  averaged over the answer after ``instruction + "\\n" + [input + "\\n"]``.
- HES: the sum of the answer's token entropies (in bits) at or above their ``1 - percentile_cutoff``
  percentile, the answer following ``instruction [+ "\\n" + input]`` directly.
- NormLoss: the mean NLL in bits of every token after the first of
  ``instruction + "\\n" + [input + "\\n"] + output``.

``metrics/excess_loss/README.md`` spells out the tokens of each. A row with no scored token gets NaN
(the peer code writes 0).

With ``convention="exact"`` each score reads, instead, the answer's tokens after IFD's prompt, exactly
the items of IFD's conditional pass (:func:`hf_adapters.formulas.ifd.ifd_items`: the ``template``, the
tokenizer's special tokens, the answer tokenized alone and cut to ``max_length``): UPD averages every
answer token, HES sums its high-entropy answer tokens, NormLoss is the answer's mean NLL in bits, and
:func:`score_answer_entropy` gives its mean predictive entropy. In a score set with IFD they all come
from IFD's own conditional pass (:mod:`hf_adapters.backends.shared_passes`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.core.conventions import peer_text_pairs
from hf_adapters.core.likelihood import ContinuationScore
from hf_adapters.core.options import OptionSpec, check_choice, check_max_length
from hf_adapters.core.wording import longer_than_max_length
from hf_adapters.formulas.ifd import CHAT_TEMPLATE, IFDOptions, ifd_items, labels_or_numbers, warn_template_markers

logger = logging.getLogger(__name__)

Pair = tuple[list[int], list[int]]


#: ``opendataarena``: the tokens the peer's code scores (its numbers); ``exact``: the answer's tokens after
#: IFD's prompt, as IFD's conditional pass scores them.
CONVENTIONS = ("opendataarena", "exact")


@dataclass(frozen=True)
class PeerScoreOptions(OptionSpec):
    """Base of the options of these scores: ``max_length``, the most tokens of a row that are read;
    ``convention`` (:data:`CONVENTIONS`); with ``convention="exact"``, IFD's ``template`` and
    ``template_no_input`` (default: IFD's, the seed's ChatML prompt; ``"chat"``: the tokenizer's chat template)."""

    max_length: int | None = 2048
    convention: str = "opendataarena"
    template: str | None = None
    template_no_input: str | None = None

    def check(self) -> None:
        check_max_length(self.max_length)
        check_choice("convention", self.convention, CONVENTIONS)
        if self.convention == "exact":
            self.prompt.check()
        elif given := [name for name in ("template", "template_no_input") if getattr(self, name) is not None]:
            raise ValueError(f"{given} set IFD's prompt, which only convention='exact' reads; the "
                             f"{self.convention!r} convention scores the peer's own text.")

    @property
    def prompt(self) -> IFDOptions:
        """IFD's options for the prompt of ``convention="exact"``."""
        return IFDOptions(template=self.template, template_no_input=self.template_no_input, max_length=self.max_length)

    def resolved(self) -> dict[str, Any]:
        """Every option: what the scores depend on."""
        return {name: getattr(self, name) for name in self.names()}

    def check_rows(self) -> None:
        """Instruction rows take every option."""


@dataclass(frozen=True)
class UPDOptions(PeerScoreOptions):
    """UPD's options: ``max_length`` (default 2048, the peer's)."""


@dataclass(frozen=True)
class HESOptions(PeerScoreOptions):
    """HES's options: ``max_length`` (default 4096, the peer's) and ``percentile_cutoff`` (the fraction
    of highest-entropy tokens summed, in (0, 1); default 0.005)."""

    max_length: int | None = 4096
    percentile_cutoff: float = 0.005

    def check(self) -> None:
        super().check()
        if isinstance(self.percentile_cutoff, bool) or not isinstance(self.percentile_cutoff, (int, float)) \
                or not 0 < self.percentile_cutoff < 1:
            raise ValueError(f"`percentile_cutoff` must be a fraction in (0, 1), got {self.percentile_cutoff!r}.")


@dataclass(frozen=True)
class NormLossOptions(PeerScoreOptions):
    """NormLoss's options: ``max_length`` (default 2048, the peer's)."""


def vocabulary_size(backend: LikelihoodBackend) -> int:
    """The size of the model's output vocabulary (its config's ``vocab_size``; else the tokenizer's length)."""
    config = getattr(getattr(backend, "model", None), "config", None)
    return int(getattr(config, "vocab_size", None) or len(backend.tokenizer))


def prompt_pairs(tokenizer: Any, prompts: Sequence[str], answers: Sequence[str], max_length: int | None, *,
                 special_tokens: bool) -> list[Pair | None]:
    """Per row, (context, answer) as the peers cut it: prompt + answer tokenized as one string (with the
    tokenizer's default special tokens or without), cut to ``max_length``; the answer starts at the
    prompt's length tokenized alone without special tokens, and never at the first token. None: no
    answer token is left."""
    pairs: list[Pair | None] = []
    for prompt, answer in zip(prompts, answers, strict=True):
        ids = tokenizer(prompt + answer, add_special_tokens=special_tokens).input_ids[:max_length]
        start = max(len(tokenizer(prompt, add_special_tokens=False).input_ids), 1)
        pairs.append((ids[:start], ids[start:]) if start < len(ids) else None)
    return pairs


def warn_unscored(pairs: Sequence[Pair | None], outputs: Sequence[str], labels: Sequence[str] | None, score: str,
                  max_length: int | None) -> None:
    """Warn, naming the row by its label in ``labels`` (default ``Row 0``, ``Row 1``...), for each row
    without a pair: its output is empty, or no answer token is left within ``max_length``."""
    for label, pair, output in zip(labels_or_numbers(labels, len(pairs)), pairs, outputs, strict=True):
        if pair is None and not output:
            logger.warning("%s has an empty output; its %s is NaN.", label, score)
        elif pair is None:
            logger.warning("%s: no answer token is left within max_length=%s; its %s is NaN.", label, max_length,
                           score)


def score_pairs(backend: LikelihoodBackend, pairs: Sequence[Pair | None], *, batch_size: int | None,
                progress: bool | None, desc: str, token_losses: bool = False,
                entropies: bool = False) -> list[ContinuationScore | None]:
    """The scores of the pairs that are not None (with token NLLs and entropies if asked), in one call."""
    scores = iter(backend.score_checked([pair for pair in pairs if pair is not None], batch_size=batch_size,
                                        progress=progress, desc=desc, token_losses=token_losses,
                                        entropies=entropies))
    return [None if pair is None else next(scores) for pair in pairs]


def answer_pairs(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
                 outputs: Sequence[str], options: PeerScoreOptions, labels: Sequence[str] | None,
                 score: str) -> list[Pair | None]:
    """Per row, IFD's conditional (prompt ids, answer ids) pair (``convention="exact"``), or None where
    there is nothing to score (a warning names the row and the NaN ``score``). A prompt on ChatML markers
    the tokenizer lacks warns once, as IFD's does."""
    prompt = options.prompt
    if prompt.prompt_template == CHAT_TEMPLATE and not backend.tokenizer.chat_template:
        raise ValueError("template='chat' needs a tokenizer with a chat template; this one has none.")
    warn_template_markers(backend.tokenizer, prompt)
    max_length = backend.window(options.max_length)
    pairs, truncated = ifd_items(backend.tokenizer, instructions, outputs, inputs, template=prompt.prompt_template,
                                 template_no_input=prompt.prompt_template_no_input, max_length=max_length,
                                 labels=labels, score=score)
    if truncated:
        logger.warning(longer_than_max_length(truncated, "row", max_length, "output"))
    return pairs


def upd_prompt(instruction: str, input: str) -> str:
    """UPD's prompt: the instruction and the input (when there is one), each followed by a newline."""
    return instruction + "\n" + (input + "\n" if input else "")


def token_upd(nll: float, entropy: float, log_vocabulary: float) -> float:
    """``sigmoid(L) * max(0, 1 - H / ln V)``."""
    return 1 / (1 + math.exp(-nll)) * max(0.0, 1 - entropy / log_vocabulary)


def score_upd(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
              outputs: Sequence[str], options: UPDOptions, *, batch_size: int | None = None,
              progress: bool | None = None, labels: Sequence[str] | None = None) -> dict:
    """UPD of each row (``upd_scores``; NaN where no answer token is scored, with a warning naming the row
    by its label in ``labels``) and their mean (``mean_upd``). Under the peer's convention answer tokens
    equal to the pad token (else EOS) are left out, as its code leaves them out."""
    tokenizer = backend.tokenizer
    if options.convention == "exact":
        pairs = answer_pairs(backend, instructions, inputs, outputs, options, labels, "UPD")
        pad = None
    else:
        prompts = [upd_prompt(instruction, input) for instruction, input in zip(instructions, inputs, strict=True)]
        pairs = prompt_pairs(tokenizer, prompts, outputs, options.max_length, special_tokens=False)
        warn_unscored(pairs, outputs, labels, "UPD", options.max_length)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scores = score_pairs(backend, pairs, batch_size=batch_size, progress=progress, desc="UPD", token_losses=True,
                         entropies=True)
    log_vocabulary = math.log(vocabulary_size(backend))
    upd = []
    for pair, score in zip(pairs, scores, strict=True):
        values = [] if score is None else [
            token_upd(nll, entropy, log_vocabulary)
            for token, nll, entropy in zip(pair[1], score.token_nlls, score.token_entropies, strict=False)
            if token != pad]
        upd.append(math.fsum(values) / len(values) if values else math.nan)
    valid = [value for value in upd if not math.isnan(value)]
    return {"upd_scores": upd, "mean_upd": float(np.mean(valid)) if valid else math.nan}


def high_entropy_sum(entropies: Sequence[float], percentile_cutoff: float) -> float:
    """The sum of the entropies at or above their ``(1 - percentile_cutoff)`` percentile (NumPy's linear
    interpolation), at least the largest one.

    Example:
        >>> high_entropy_sum([0.5, 3.0, 1.0, 2.0], 0.5)
        5.0
    """
    values = np.asarray(entropies, dtype=np.float64)
    threshold = np.percentile(values, (1.0 - percentile_cutoff) * 100.0)
    selected = values[values >= threshold]
    return float(selected.sum() if selected.size else values.max())


def score_hes(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
              outputs: Sequence[str], options: HESOptions, *, batch_size: int | None = None,
              progress: bool | None = None, labels: Sequence[str] | None = None) -> dict:
    """HES of each row (``hes_scores``, in bits; NaN for an empty answer or one cut off entirely, with a
    warning naming the row by its label in ``labels``) and the number of answer tokens read
    (``completion_token_lengths``)."""
    if options.convention == "exact":
        pairs = answer_pairs(backend, instructions, inputs, outputs, options, labels, "HES")
    else:
        prompts = [instruction + ("\n" + input if input else "")
                   for instruction, input in zip(instructions, inputs, strict=True)]
        pairs = prompt_pairs(backend.tokenizer, prompts, outputs, options.max_length, special_tokens=True)
        pairs = [None if not output else pair for pair, output in zip(pairs, outputs, strict=True)]
        warn_unscored(pairs, outputs, labels, "HES", options.max_length)
    scores = score_pairs(backend, pairs, batch_size=batch_size, progress=progress, desc="HES", entropies=True)
    bits = [[] if score is None else [entropy / math.log(2) for entropy in score.token_entropies] for score in scores]
    return {"hes_scores": [high_entropy_sum(row, options.percentile_cutoff) if row else math.nan for row in bits],
            "completion_token_lengths": [len(row) for row in bits]}


def score_norm_loss(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
                    outputs: Sequence[str], options: NormLossOptions, *, batch_size: int | None = None,
                    progress: bool | None = None, labels: Sequence[str] | None = None) -> dict:
    """NormLoss of each row (``norm_losses``: mean NLL in bits of every token after the first of the
    joined text; NaN for a text of one token, with a warning naming the row by its label in ``labels``;
    ``convention="exact"``: of the answer's tokens after IFD's prompt)."""
    if options.convention == "exact":
        pairs = answer_pairs(backend, instructions, inputs, outputs, options, labels, "NormLoss")
        scores = score_pairs(backend, pairs, batch_size=batch_size, progress=progress, desc="NormLoss")
        return {"norm_losses": [math.nan if score is None else score.mean_nll / math.log(2) for score in scores]}
    texts = [upd_prompt(instruction, input) + output
             for instruction, input, output in zip(instructions, inputs, outputs, strict=True)]
    pairs = [pair if pair[1] else None for pair in peer_text_pairs(backend.tokenizer, texts, options.max_length)]
    for label, pair in zip(labels_or_numbers(labels, len(pairs)), pairs, strict=True):
        if pair is None:
            logger.warning("%s: its text is one token, and the first is never scored; its NormLoss is NaN.", label)
    scores = score_pairs(backend, pairs, batch_size=batch_size, progress=progress, desc="NormLoss")
    return {"norm_losses": [math.nan if score is None else score.mean_nll / math.log(2) for score in scores]}


@dataclass(frozen=True)
class AnswerEntropyOptions(PeerScoreOptions):
    """The answer entropy's options: ``max_length`` (default 2048), IFD's ``template`` and
    ``template_no_input``; its only convention is ``exact``."""

    convention: str = "exact"

    def check(self) -> None:
        if self.convention != "exact":
            raise ValueError(f"The answer entropy has one convention, 'exact', got {self.convention!r}.")
        super().check()


def score_answer_entropy(backend: LikelihoodBackend, instructions: Sequence[str], inputs: Sequence[str],
                         outputs: Sequence[str], options: AnswerEntropyOptions, *, batch_size: int | None = None,
                         progress: bool | None = None, labels: Sequence[str] | None = None) -> dict:
    """The mean predictive entropy, in nats, over each row's answer tokens after IFD's prompt
    (``answer_entropies``; NaN where none is scored, with a warning naming the row) and their mean
    (``mean_answer_entropy``): how unsure the model is, on average, while it reads the answer."""
    pairs = answer_pairs(backend, instructions, inputs, outputs, options, labels, "answer entropy")
    scores = score_pairs(backend, pairs, batch_size=batch_size, progress=progress, desc="Answer entropy",
                         entropies=True)
    entropies = [math.nan if score is None else score.mean_entropy for score in scores]
    valid = [value for value in entropies if not math.isnan(value)]
    return {"answer_entropies": entropies, "mean_answer_entropy": float(np.mean(valid)) if valid else math.nan}
