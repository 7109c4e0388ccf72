"""Instruction-Following Difficulty (IFD, Li et al., NAACL 2024): how much an instruction helps a
model predict its answer, as the ratio of the answer's conditional to its direct perplexity.

Both passes score exactly the same answer tokens: the conditional pass after the prompt, the
direct pass after the start token alone. Both go through one call of the shared core, so they
share its length-sorted batching and it runs the output layer only at answer positions.

The reference scripts differ at the token level: Cherry_LLM and Superfiltering find the answer by
re-tokenizing the prompt string and truncate the direct pass by an estimate, and Superfiltering's
direct pass (GPT-2, no BOS) never scores the first answer token. Here the answer ids are computed
once and shared by both passes; see ``metrics/ifd/README.md`` for the full comparison.
"""

from __future__ import annotations

import logging
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.backends import BackendOptions, LikelihoodBackend
from hf_adapters.core.conventions import IFD_CONVENTIONS, IFDConvention, Pair, peer_ifd_pairs
from hf_adapters.core.conversations import TURNS, check_turn_template, turn_pairs, warn_missing_markers
from hf_adapters.core.likelihood import ContinuationScore, combined
from hf_adapters.core.options import (
    DEFAULT_MAX_LENGTH,
    OptionSpec,
    check_choice,
    check_max_length,
    split_options,
    takes_options,
)
from hf_adapters.core.texts import instruction_with_input, token_strings
from hf_adapters.core.wording import longer_than_max_length

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

#: The seed's ChatML prompt for rows with an input.
DEFAULT_TEMPLATE = "<|im_start|>user\n{instruction}\n{input}<|im_end|>\n<|im_start|>assistant\n"
#: The seed's ChatML prompt for rows without an input.
DEFAULT_TEMPLATE_NO_INPUT = "<|im_start|>user\n{instruction}<|im_end|>\n<|im_start|>assistant\n"
#: Pass as ``template`` to use the tokenizer's own chat template.
CHAT_TEMPLATE = "chat"
#: ``ppl_ratio``: PPL(A|Q) / PPL(A); ``loss_ratio``: mean NLL(A|Q) / mean NLL(A).
MODES = ("ppl_ratio", "loss_ratio")
#: ``forward``: IFD, how much the instruction helps predict the answer; ``reverse``: r-IFD
#: (Selective Reflection-Tuning), how much the answer helps predict the instruction.
DIRECTIONS = ("forward", "reverse")
#: The prompt of the reverse pass, with ``{output}``: the answer first, then the instruction (and its
#: input) is scored. ChatML like the default forward template; the authors' wording differs (see the card).
DEFAULT_REVERSE_TEMPLATE = (
    "<|im_start|>user\nHere is the answer to an instruction. Write the instruction that it answers.\n\n"
    "{output}<|im_end|>\n<|im_start|>assistant\n"
)


def check_ifd_inputs(
    instructions: Sequence, outputs: Sequence, inputs: Sequence | None = None
) -> list[str]:
    """Validate the three columns and return the inputs as strings (``None`` or omitted: empty).

    Raises a ValueError for unequal lengths and a TypeError naming the first non-string row.
    """
    columns = {"instructions": instructions, "outputs": outputs}
    if inputs is not None:
        columns["inputs"] = inputs
    for name, column in columns.items():
        if isinstance(column, str):
            raise TypeError(f"`{name}` must be a list of strings, not a single string.")
    lengths = {name: len(column) for name, column in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"`instructions`, `outputs` and `inputs` must have the same length, got {lengths}.")
    for name, column in columns.items():
        for row, value in enumerate(column):
            if not isinstance(value, str) and not (name == "inputs" and value is None):
                raise TypeError(f"`{name}`[{row}] must be a string, got {type(value).__name__}: {value!r:.80}")
    return [value or "" for value in inputs] if inputs is not None else [""] * len(instructions)


def _check_fields(name: str, template: Any, fields: tuple[str, ...]) -> None:
    """Raise a ValueError unless ``template`` is a string that holds each of ``fields`` and no other."""
    if not isinstance(template, str):
        raise ValueError(f"`{name}` must be a string, got {template!r}.")
    only = " and ".join(f"{{{field}}}" for field in fields)
    try:
        used = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
        template.format(**dict.fromkeys(fields, ""))
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(f"`{name}` must use only {only}: {error!r}") from None
    if missing := [field for field in fields if field not in used]:
        raise ValueError(f"`{name}` must use {only}: without {{{missing[0]}}} every row's {missing[0]} would be "
                         "left out of the prompt.")


@dataclass(frozen=True)
class IFDOptions(OptionSpec):
    """The options of IFD, declared once: :func:`compute_ifd`, the ``ifd`` metric, ``add_ifd_column``,
    the ``IFDScorer`` and ``ConversationIFDScorer`` configs and the Space all take these.

    Attributes:
        template: the prompt of a row with an input, with ``{instruction}`` and ``{input}``; ``"chat"``:
            the tokenizer's chat template (one user message). None: the convention's (the seed's ChatML).
        template_no_input: the prompt of a row without an input, with ``{instruction}``.
        max_length: prompt and answer are cut to fit this many tokens (capped at the model's limit).
        mode: ``"ppl_ratio"``, PPL(A|Q) / PPL(A), or ``"loss_ratio"``, the ratio of mean NLLs.
            None: the convention's (``ppl_ratio`` but for Cherry_LLM).
        convention: ``"exact"`` or a peer's (``conventions.IFD_CONVENTIONS``), whose numbers it reproduces.
        direction: ``"forward"`` (IFD) or ``"reverse"`` (r-IFD: PPL(Q|A) / PPL(Q)).
        reverse_template: the reverse pass's prompt, with ``{output}``.
        return_token_losses: add, per row, the scored tokens and their NLLs in both passes.
        turns: conversations only: ``"last"`` (the default) scores the last assistant turn, ``"all"`` every one.
        turn_template: conversations only: a turn layout with ``{role}`` and ``{content}`` used instead of
            the tokenizer's chat template (ChatML for a tokenizer without one).
    """

    template: str | None = None
    template_no_input: str | None = None
    max_length: int | None = DEFAULT_MAX_LENGTH
    mode: str | None = None
    convention: str = "exact"
    direction: str = "forward"
    reverse_template: str = DEFAULT_REVERSE_TEMPLATE
    return_token_losses: bool = False
    turns: str | None = None
    turn_template: str | None = None

    def check(self) -> None:
        check_choice("convention", self.convention, IFD_CONVENTIONS)
        if self.peer.peer and (self.direction != "forward" or self.return_token_losses):
            raise ValueError(f"convention={self.convention!r} reproduces the peer's forward IFD only: "
                             "`direction='reverse'` and `return_token_losses` need convention='exact'.")
        if self.mode is not None:
            check_choice("mode", self.mode, MODES)
        check_choice("direction", self.direction, DIRECTIONS)
        if self.prompt_template != CHAT_TEMPLATE:
            _check_fields("template", self.prompt_template, ("instruction", "input"))
            _check_fields("template_no_input", self.prompt_template_no_input, ("instruction",))
        _check_fields("reverse_template", self.reverse_template, ("output",))
        check_max_length(self.max_length)
        if self.turns is not None:
            check_choice("turns", self.turns, TURNS)
        check_turn_template(self.turn_template)

    @property
    def peer(self) -> IFDConvention:
        """The convention's entry in ``IFD_CONVENTIONS``."""
        return IFD_CONVENTIONS[self.convention]

    @property
    def prompt_template(self) -> str:
        """``template``, else the convention's, else the seed's ChatML prompt."""
        return self.template if self.template is not None else self.peer.template or DEFAULT_TEMPLATE

    @property
    def prompt_template_no_input(self) -> str:
        if self.template_no_input is not None:
            return self.template_no_input
        return self.peer.template_no_input or DEFAULT_TEMPLATE_NO_INPUT

    @property
    def ratio(self) -> str:
        """``mode``, else the convention's."""
        return self.mode if self.mode is not None else self.peer.mode

    def resolved(self) -> dict[str, Any]:
        """Every option with the convention's defaults filled in: what the scores depend on."""
        values = {name: getattr(self, name) for name in self.names()}
        values.update(template=self.prompt_template, template_no_input=self.prompt_template_no_input,
                      mode=self.ratio, turns=self.turns or "last")
        return values

    def check_rows(self) -> None:
        """Raise a ValueError if a conversation's option is given for instruction rows."""
        if given := [name for name in ("turns", "turn_template") if getattr(self, name) is not None]:
            raise ValueError(f"{given} apply to conversations (`messages`); instruction rows do not take them.")

    def check_conversations(self) -> None:
        """Raise a ValueError if an instruction row's option is given for conversations."""
        given = [name for name in ("template", "template_no_input") if getattr(self, name) is not None]
        given += [name for name in ("convention", "direction", "reverse_template", "return_token_losses")
                  if getattr(self, name) != self.defaults()[name]]
        if given:
            raise ValueError(f"{given} apply to instruction rows; conversations are scored forward, with "
                             "convention='exact' and no token losses (their turn layout is `turn_template`).")


def prompt_text(
    tokenizer: PreTrainedTokenizerBase,
    instruction: str,
    input: str,
    template: str = DEFAULT_TEMPLATE,
    template_no_input: str = DEFAULT_TEMPLATE_NO_INPUT,
) -> str:
    """The prompt of one row: ``template`` with an input, ``template_no_input`` without; with
    ``template="chat"`` the tokenizer's chat template rendered for one user message."""
    if template == CHAT_TEMPLATE:
        content = instruction_with_input(instruction, input)
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
    if input:
        return template.format(instruction=instruction, input=input)
    return template_no_input.format(instruction=instruction)


def warn_template_markers(tokenizer: PreTrainedTokenizerBase, options: IFDOptions) -> None:
    """Warn (once per tokenizer) if the prompt templates use ChatML markers, as the seed's do, that the
    tokenizer does not hold as single tokens, naming them and the fix."""
    if options.direction == "reverse":
        warn_missing_markers(tokenizer, [options.reverse_template], "The reverse IFD prompt (`reverse_template`) "
                             "uses ChatML's markers", "Write `reverse_template` in the model's prompt format.")
    elif options.prompt_template != CHAT_TEMPLATE:
        fix = ("Use `template: chat` (template=\"chat\" in Python), the model's own chat template, or write"
               if tokenizer.chat_template else "This tokenizer has no chat template for `template: chat`: write")
        warn_missing_markers(tokenizer, [options.prompt_template, options.prompt_template_no_input],
                             "The IFD prompt (`template`) uses ChatML's markers",
                             f"{fix} `template` and `template_no_input` in the model's prompt format.")


def labels_or_numbers(labels: Sequence[str] | None, count: int) -> Sequence[str]:
    """How warnings name ``count`` rows: by ``labels``, else ``Row 0``, ``Row 1``..."""
    return [f"Row {row}" for row in range(count)] if labels is None else labels


def fit_pairs(
    contexts: Sequence[list[int]], answers: Sequence[list[int]], labels: Sequence[str], max_length: int | None,
    empty: Sequence[str] | None = None, score: str = "IFD",
) -> tuple[list[tuple[list[int], list[int]] | None], int]:
    """Per (context ids, answer ids) pair, the pair with the answer cut so that both fit
    ``max_length``, or None when there is nothing to score (a warning names it by its label and,
    for an empty answer, by what of the row is empty: ``empty``, default ``"output"``, and the
    ``score`` that is NaN); and the number of cut answers."""
    items: list[tuple[list[int], list[int]] | None] = []
    truncated = 0
    empty = ["output"] * len(answers) if empty is None else empty
    for label, context, answer, what in zip(labels, contexts, answers, empty, strict=True):
        # An empty context becomes the one start token in the core.
        room = None if max_length is None else max_length - max(len(context), 1)
        if not answer:
            logger.warning("%s has an empty %s; its %s is NaN.", label, what, score)
            items.append(None)
        elif room is not None and room <= 0:
            logger.warning("%s: the prompt (%d tokens) fills max_length=%d; its %s is NaN.",
                           label, len(context), max_length, score)
            items.append(None)
        else:
            if room is not None and len(answer) > room:
                answer = answer[:room]
                truncated += 1
            items.append((context, answer))
    return items, truncated


def ifd_items(
    tokenizer: PreTrainedTokenizerBase,
    instructions: Sequence[str],
    outputs: Sequence[str],
    inputs: Sequence[str],
    *,
    template: str = DEFAULT_TEMPLATE,
    template_no_input: str = DEFAULT_TEMPLATE_NO_INPUT,
    max_length: int | None = None,
    labels: Sequence[str] | None = None,
    score: str = "IFD",
) -> tuple[list[tuple[list[int], list[int]] | None], int]:
    """Per row, the conditional (prompt ids, answer ids) pair with the answer cut so the pair fits
    ``max_length``, or None for a row with nothing to score (a warning names it by its label in
    ``labels``, default ``Row 0``, ``Row 1``..., and the ``score`` that is NaN); and the number of truncated rows."""
    if not outputs:
        return [], 0
    rows = zip(instructions, inputs, strict=True)
    prompts = [prompt_text(tokenizer, instruction, input, template, template_no_input) for instruction, input in rows]
    # The prompt keeps the tokenizer's default special tokens; a rendered chat template already holds its own.
    contexts = tokenizer(prompts, add_special_tokens=template != CHAT_TEMPLATE).input_ids
    answers = tokenizer(list(outputs), add_special_tokens=False).input_ids
    return fit_pairs(contexts, answers, labels_or_numbers(labels, len(answers)), max_length, score=score)


def reverse_items(
    tokenizer: PreTrainedTokenizerBase,
    instructions: Sequence[str],
    outputs: Sequence[str],
    inputs: Sequence[str],
    *,
    reverse_template: str = DEFAULT_REVERSE_TEMPLATE,
    max_length: int | None = None,
    labels: Sequence[str] | None = None,
) -> tuple[list[tuple[list[int], list[int]] | None], int]:
    """Per row, the reverse pair: the prompt ``reverse_template.format(output=...)`` (the tokenizer's
    default special tokens, as the forward prompt) and the question, the instruction and its input
    joined with a newline, cut to fit ``max_length``; None for a row with an empty output (a warning
    names it by its label in ``labels``)."""
    if not outputs:
        return [], 0
    contexts = tokenizer([reverse_template.format(output=output) for output in outputs]).input_ids
    questions = [instruction_with_input(instruction, input) for instruction, input in
                 zip(instructions, inputs, strict=True)]
    answers = [ids if output else [] for ids, output in
               zip(tokenizer(questions, add_special_tokens=False).input_ids, outputs, strict=True)]
    empty = ["output" if not output else "instruction" for output in outputs]
    return fit_pairs(contexts, answers, labels_or_numbers(labels, len(answers)), max_length, empty)


def ifd_ratio(conditional: ContinuationScore, direct: ContinuationScore, mode: str = "ppl_ratio") -> float:
    """IFD of one row from its two scores of the same answer tokens."""
    if mode == "ppl_ratio":
        return conditional.perplexity / direct.perplexity
    return conditional.mean_nll / direct.mean_nll if direct.mean_nll else math.nan


def score_pairs(
    backend: LikelihoodBackend,
    items: Sequence[tuple[list[int], list[int]] | None],
    *,
    max_length: int | None,
    batch_size: int | None = None,
    progress: bool | None = None,
    token_losses: bool = False,
) -> list[tuple[ContinuationScore, ContinuationScore] | None]:
    """The conditional and direct scores of each pair (None stays None): the direct pass scores the
    same (cut) answer ids after an empty context."""
    return score_pass_pairs(
        backend, [None if item is None else (item, ([], item[1])) for item in items],
        max_length=max_length, batch_size=batch_size, progress=progress, token_losses=token_losses,
    )


def score_pass_pairs(
    backend: LikelihoodBackend,
    items: Sequence[tuple[Pair, Pair] | None],
    *,
    max_length: int | None,
    batch_size: int | None = None,
    progress: bool | None = None,
    token_losses: bool = False,
) -> list[tuple[ContinuationScore, ContinuationScore] | None]:
    """The scores of each (conditional pair, direct pair) (None stays None), both passes of all rows
    in one call of the backend."""
    valid = [item for item in items if item is not None]
    scores = backend.score_checked(
        [conditional for conditional, _ in valid] + [direct for _, direct in valid],
        max_length=max_length, batch_size=batch_size, progress=progress, desc="IFD", token_losses=token_losses,
    )
    pairs = iter(zip(scores[: len(valid)], scores[len(valid):], strict=True))
    return [None if item is None else next(pairs) for item in items]


def ifd_result(pairs: Sequence[tuple[ContinuationScore, ContinuationScore] | None], mode: str) -> dict:
    """The result of :func:`compute_ifd` from each row's two scores (None: NaN)."""
    ifd = [math.nan if pair is None else ifd_ratio(*pair, mode) for pair in pairs]
    return {
        "ifd_scores": ifd,
        "conditional_perplexities": [math.nan if pair is None else pair[0].perplexity for pair in pairs],
        "direct_perplexities": [math.nan if pair is None else pair[1].perplexity for pair in pairs],
        "mean_ifd": _mean(ifd),
        "num_valid": sum(not math.isnan(score) for score in ifd),
    }


def peer_items(
    tokenizer: PreTrainedTokenizerBase,
    options: IFDOptions,
    instructions: Sequence[str],
    outputs: Sequence[str],
    inputs: Sequence[str],
    *,
    max_length: int | None,
    labels: Sequence[str] | None = None,
) -> list[tuple[Pair, Pair] | None]:
    """Per row, the (conditional, direct) pairs a peer's code scores (see :mod:`hf_adapters.core.conventions`),
    or None where it gives no score (a warning counts those rows and names the first five by their labels)."""
    if max_length is None:
        raise ValueError(f"convention={options.convention!r} cuts the passes by `max_length`: pass one (the model "
                         "does not say how many positions it has).")
    prompts = [prompt_text(tokenizer, instruction, input, options.prompt_template, options.prompt_template_no_input)
               for instruction, input in zip(instructions, inputs, strict=True)]
    items = peer_ifd_pairs(tokenizer, options.peer, prompts, outputs, max_length)
    named = zip(labels_or_numbers(labels, len(items)), items, strict=True)
    if unscored := [label for label, item in named if item is None]:
        logger.warning("%d row(s) get no IFD under convention=%r (an empty answer, no answer token left within "
                       "max_length=%d%s): %s%s.", len(unscored), options.convention, max_length,
                       ", or skipped by its selection script" if options.peer.unrated_when_long else "",
                       ", ".join(unscored[:5]), "..." if len(unscored) > 5 else "")
    return items


def _mean(values: Sequence[float]) -> float:
    finite = [value for value in values if not math.isnan(value)]
    return float(np.mean(finite)) if finite else math.nan


def score_ifd(
    backend: LikelihoodBackend,
    instructions: Sequence[str],
    outputs: Sequence[str],
    inputs: Sequence[str],
    options: IFDOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
    labels: Sequence[str] | None = None,
) -> dict:
    """IFD (``direction="reverse"``: r-IFD) of validated rows with a backend: the body of :func:`compute_ifd`.
    ``labels`` name the rows in warnings (default ``Row 0``, ``Row 1``...)."""
    tokenizer = backend.tokenizer
    if options.prompt_template == CHAT_TEMPLATE and not tokenizer.chat_template:
        raise ValueError("template='chat' needs a tokenizer with a chat template; this one has none.")
    warn_template_markers(tokenizer, options)
    max_length = backend.window(options.max_length)
    if options.peer.peer:
        items = peer_items(tokenizer, options, instructions, outputs, inputs, max_length=max_length,
                           labels=labels)
        # The peers' direct pass may be a few tokens longer than max_length: only the model's limit applies.
        pairs = score_pass_pairs(backend, items, max_length=None, batch_size=batch_size, progress=progress)
        return ifd_result(pairs, options.ratio)
    if options.direction == "reverse":
        items, truncated = reverse_items(tokenizer, instructions, outputs, inputs,
                                         reverse_template=options.reverse_template, max_length=max_length,
                                         labels=labels)
    else:
        items, truncated = ifd_items(
            tokenizer, instructions, outputs, inputs, template=options.prompt_template,
            template_no_input=options.prompt_template_no_input, max_length=max_length, labels=labels,
        )
    if truncated:
        logger.warning(longer_than_max_length(truncated, "row", max_length, "output"))
    pairs = score_pairs(backend, items, max_length=max_length, batch_size=batch_size, progress=progress,
                        token_losses=options.return_token_losses)
    result = ifd_result(pairs, options.ratio)
    if options.return_token_losses:
        result["tokens"] = [[] if item is None else token_strings(tokenizer, item[1]) for item in items]
        result["conditional_token_losses"] = [[] if pair is None else list(pair[0].token_nlls) for pair in pairs]
        result["direct_token_losses"] = [[] if pair is None else list(pair[1].token_nlls) for pair in pairs]
    return result


def score_conversation_ifd(
    backend: LikelihoodBackend,
    conversations: Sequence[Sequence[Mapping[str, str]]],
    options: IFDOptions,
    *,
    batch_size: int | None = None,
    progress: bool | None = None,
    labels: Sequence[str] | None = None,
) -> dict:
    """IFD of each assistant turn after its history, and of each conversation (checked messages).

    A turn's IFD compares its answer's perplexity after the history (rendered as the chat prompt,
    :func:`hf_adapters.core.conversations.history_prompt`) with its perplexity after the start token
    alone. ``turns="last"`` scores the last assistant turn; ``"all"`` every one, and the
    conversation's IFD is then exp(total conditional NLL / N) / exp(total direct NLL / N) over all
    its N scored answer tokens (``loss_ratio``: the ratio of the means). All turns of all
    conversations go through one call of the backend. ``labels`` name the conversations in warnings
    (default ``Row 0``, ``Row 1``...).
    """
    tokenizer, mode = backend.tokenizer, options.ratio
    max_length = backend.window(options.max_length)
    per_conversation = [turn_pairs(tokenizer, messages, options.turns or "last", options.turn_template)
                        for messages in conversations]
    turn_labels = [f"{label}, turn {turn}" for label, pairs in
                   zip(labels_or_numbers(labels, len(conversations)), per_conversation, strict=True)
                   for turn in range(len(pairs))]
    flat = [pair for pairs in per_conversation for pair in pairs]
    items, truncated = fit_pairs([c for c, _ in flat], [a for _, a in flat], turn_labels, max_length)
    if truncated:
        logger.warning(longer_than_max_length(truncated, "turn", max_length, "answer"))
    scored = iter(score_pairs(backend, items, max_length=max_length, batch_size=batch_size, progress=progress))
    ifd, turn_ifd, conditional_ppl, direct_ppl = [], [], [], []
    for pairs in per_conversation:
        turn_scores = [next(scored) for _ in pairs]
        valid = [pair for pair in turn_scores if pair is not None]
        turn_ifd.append([math.nan if pair is None else ifd_ratio(*pair, mode) for pair in turn_scores])
        if valid:
            conditional, direct = combined([c for c, _ in valid]), combined([d for _, d in valid])
            ifd.append(ifd_ratio(conditional, direct, mode))
            conditional_ppl.append(conditional.perplexity)
            direct_ppl.append(direct.perplexity)
        else:
            ifd.append(math.nan)
            conditional_ppl.append(math.nan)
            direct_ppl.append(math.nan)
    return {
        "ifd_scores": ifd,
        "turn_ifd_scores": turn_ifd,
        "conditional_perplexities": conditional_ppl,
        "direct_perplexities": direct_ppl,
        "mean_ifd": _mean(ifd),
        "num_valid": sum(not math.isnan(score) for score in ifd),
    }


@takes_options(BackendOptions, IFDOptions)
def compute_ifd(
    instructions: Sequence[str],
    outputs: Sequence[str],
    inputs: Sequence[str | None] | None = None,
    **options: Any,
) -> dict:
    """Instruction-Following Difficulty of each (instruction, input, output) row.

    The prompt is ``template.format(instruction=..., input=...)`` when the row has an input, else
    ``template_no_input.format(instruction=...)`` (default: the seed's ChatML prompts;
    ``template="chat"``: the tokenizer's chat template). IFD compares the output's perplexity
    after the prompt, PPL(A|Q), with its perplexity after the start token alone, PPL(A), over the
    same output tokens (cut so that prompt + output fit ``max_length``). ``mode="ppl_ratio"``
    (default) returns PPL(A|Q) / PPL(A); ``mode="loss_ratio"`` the ratio of mean NLLs. A row with
    an empty output, or whose prompt fills ``max_length``, gets
    NaN and a warning. IFD > 1 (the instruction does not help) is a valid score.

    ``direction="reverse"`` gives r-IFD (Selective Reflection-Tuning): PPL(Q|A) / PPL(Q), the
    question Q (instruction, and input after a newline) scored after ``reverse_template`` filled
    with the answer, and after the start token alone.

    ``convention`` reproduces a peer's numbers exactly: ``"cherry"`` (Cherry_LLM: Alpaca prompt,
    ``loss_ratio``), ``"superfiltering"`` or ``"opendataarena"`` (OpenDataArena-Tool's ``IFDScorer``)
    build the token pairs as that peer's code does (:mod:`hf_adapters.core.conventions`); ``template``,
    ``template_no_input`` and ``mode`` default to the peer's.

    ``return_token_losses`` adds, per row, the scored answer tokens as strings (``tokens``) and
    their NLLs after the prompt (``conditional_token_losses``) and alone (``direct_token_losses``).

    The options are those of :class:`IFDOptions`, and :class:`~hf_adapters.backends.BackendOptions`
    say what scores them (``model_id``, or ``model`` and ``tokenizer``, or ``backend``; ``dtype``,
    ``device``, ``batch_size``, ``progress``).

    Returns ``ifd_scores``, ``conditional_perplexities``, ``direct_perplexities``, ``mean_ifd``
    (over non-NaN scores) and ``num_valid``.

    Example:
        >>> from hf_adapters.formulas.ifd import compute_ifd
        >>> result = compute_ifd(["Name a primary colour."], ["Red."])
        >>> result["num_valid"]
        1
    """
    input_texts = check_ifd_inputs(instructions, outputs, inputs)
    run, ifd_options = split_options(options, BackendOptions, IFDOptions, caller="compute_ifd")
    ifd_options.check_rows()
    return score_ifd(run.load(), instructions, outputs, input_texts, ifd_options, batch_size=run.batch_size,
                     progress=run.progress)
