"""Conventions as data: one table per score (IFD, perplexity, selection) of the ways to compute it,
with what each one does, and the peers' token pairs: how Cherry_LLM, Superfiltering and
OpenDataArena-Tool cut a row into the tokens they score, so that their numbers can be reproduced exactly.

All of them compute "answer perplexity after the prompt over answer perplexity alone", but each
builds its token sequences its own way (``metrics/ifd/README.md`` has the table):

- the prompt and the answer are tokenized as one string, with the tokenizer's default special
  tokens, and the answer is taken to start where the prompt, tokenized alone, ends (a token that
  merges across the seam moves the boundary);
- the direct pass tokenizes a prefix and the answer the same way: ``"### Response:"`` in Cherry_LLM,
  nothing in the others, whose first answer token is then only a context token unless the tokenizer
  adds a BOS (a causal LM never scores the first token of a sequence);
- the direct pass is cut to ``max_length`` minus the prompt's length plus 4 (Cherry_LLM) or plus 1.

A convention here only builds (context ids, continuation ids) pairs; every pair goes through the
one batched core, so a peer's numbers come as fast as the default ones and do not depend on the
batch size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Pair = tuple[list[int], list[int]]


@dataclass(frozen=True)
class Convention:
    """One way of computing a score: this library's definition (``exact``) or a peer's published code."""

    #: What it does, in a sentence: the command line's help and the Space show it.
    description: str
    #: Where the peer's code lives, for messages and the card.
    source: str = ""


@dataclass(frozen=True)
class IFDConvention(Convention):
    """How one implementation builds IFD's two passes from a row."""

    #: The prompt of a row with an input (``{instruction}``, ``{input}``) and without; None: the seed's ChatML.
    template: str | None = None
    template_no_input: str | None = None
    #: The IFD ratio it reports: ``ppl_ratio`` or ``loss_ratio``.
    mode: str = "ppl_ratio"
    #: Whether the token pairs are built as a peer's code builds them (see above); False: the exact definition.
    peer: bool = False
    #: The text before the answer in the direct pass.
    direct_prefix: str = ""
    #: The direct pass is cut to ``max_length - prompt tokens + direct_slack`` tokens.
    direct_slack: int = 1
    #: Rows the peer's selection step never rates (prompt + direct answer longer than ``max_length``) get NaN.
    unrated_when_long: bool = False


@dataclass(frozen=True)
class PerplexityConvention(Convention):
    """Which tokens of a text perplexity scores."""

    #: Whether the text is tokenized with the tokenizer's default special tokens and every token after
    #: the first is scored (OpenDataArena-Tool's ``PPLScorer``); False: every token after the start token.
    peer: bool = False


@dataclass(frozen=True)
class SelectionConvention(Convention):
    """How the rows to keep are chosen from their scores."""

    #: The ``max_score`` cut-off when none is given.
    max_score: float | None = None
    #: Keep only scores below ``max_score`` (else at or below).
    strictly_below: bool = False
    #: The ``top`` fraction counts the rows left after the cut-offs (else all input rows).
    top_of_kept: bool = False
    #: Of tied scores, the later row ranks first (else the earlier).
    later_first_on_ties: bool = False
    #: The order of the kept rows when none is asked for: ``input`` or ``score`` (best first).
    order: str = "input"


#: Stanford Alpaca's prompts, which Cherry_LLM's scripts use with ``--prompt alpaca``.
ALPACA_TEMPLATE = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
ALPACA_TEMPLATE_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:"
)

#: IFD's conventions: ``exact`` is this library's definition; the others reproduce a peer's published code.
IFD_CONVENTIONS: dict[str, IFDConvention] = {
    "exact": IFDConvention(
        "this library's IFD: the same answer tokens in both passes, the direct one after the start token alone",
    ),
    "cherry": IFDConvention(
        "Cherry_LLM's numbers (Alpaca prompt, ratio of mean losses); its selection script drops scores above 1",
        source="tianyi-lab/Cherry_LLM cherry_seletion/data_analysis.py and data_by_IFD.py (--prompt alpaca)",
        template=ALPACA_TEMPLATE, template_no_input=ALPACA_TEMPLATE_NO_INPUT, mode="loss_ratio", peer=True,
        direct_prefix="### Response:", direct_slack=4, unrated_when_long=True,
    ),
    "superfiltering": IFDConvention(
        "Superfiltering's numbers (instruction and input on their own lines, no BOS in the direct pass)",
        source="tianyi-lab/Superfiltering code_ifd/data_analysis.py and put_analysis_to_data.py",
        template="{instruction}\n{input}\n", template_no_input="{instruction}\n", peer=True,
    ),
    "opendataarena": IFDConvention(
        "OpenDataArena-Tool's IFDScorer (the seed's ChatML prompt, the answer as the tokenizer encodes it alone)",
        source="OpenDataArena/OpenDataArena-Tool data_scorer/model_based/scorers/IFDScorer.py (score_item)",
        peer=True,
    ),
}
#: The IFD conventions that reproduce a peer.
PEER_CONVENTIONS = {name: convention for name, convention in IFD_CONVENTIONS.items() if convention.peer}

#: Perplexity's conventions: only OpenDataArena-Tool's ``PPLScorer`` differs from ours.
PERPLEXITY_CONVENTIONS: dict[str, PerplexityConvention] = {
    "exact": PerplexityConvention("every token of the text, the first after the start token (BOS, else EOS)"),
    "opendataarena": PerplexityConvention(
        "OpenDataArena-Tool's PPLScorer: the text with the tokenizer's special tokens, every token after the first",
        source="OpenDataArena/OpenDataArena-Tool data_scorer/model_based/scorers/PPLScorer.py", peer=True,
    ),
}

#: Selection's conventions: the rules of ``hf_adapters.curation.selection``, or a peer's selection script.
SELECTION_CONVENTIONS: dict[str, SelectionConvention] = {
    "exact": SelectionConvention(
        "drop rows without a score and outside the cut-offs, then keep the top fraction of all rows (rounded "
        "down) or the top N, ties in input order",
    ),
    "cherry": SelectionConvention(
        "Cherry_LLM's data_by_IFD.py: drops scores above 1, the top fraction counts the rows left after the "
        "cut-offs, ties go to the later row",
        source="tianyi-lab/Cherry_LLM cherry_seletion/data_by_IFD.py",
        max_score=1.0, top_of_kept=True, later_first_on_ties=True,
    ),
    "superfiltering": SelectionConvention(
        "Superfiltering's select_data.py: keeps scores below 1, best first",
        source="tianyi-lab/Superfiltering code_ifd/select_data.py",
        max_score=1.0, strictly_below=True, order="score",
    ),
}


def describe(conventions: Mapping[str, Convention]) -> str:
    """One line naming each convention with its description, for help texts."""
    return "; ".join(f"{name}: {convention.description}" for name, convention in conventions.items())


def encode(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_lengths: Sequence[int | None]
) -> list[list[int]]:
    """Each text tokenized with the tokenizer's default special tokens and right-truncated to its
    ``max_lengths`` entry (None: not cut), as ``tokenizer.encode(text, truncation=True, max_length=...)`` does."""
    ids = tokenizer(list(texts)).input_ids if texts else []
    return [row if limit is None or len(row) <= limit else tokenizer(text, truncation=True, max_length=limit).input_ids
            for text, row, limit in zip(texts, ids, max_lengths, strict=True)]


def split_pairs(
    tokenizer: PreTrainedTokenizerBase, prefixes: Sequence[str], prefix_lengths: Sequence[int], texts: Sequence[str],
    max_lengths: Sequence[int | None],
) -> list[Pair]:
    """Per row, ``prefix + text`` tokenized as one string (see :func:`encode`) and split where the
    prefix tokenized alone ends (``prefix_lengths``: its token count): (context ids, scored ids).
    The split comes after at least one token, since a causal LM never scores a sequence's first
    token; the scored ids may be empty."""
    whole = encode(tokenizer, [prefix + text for prefix, text in zip(prefixes, texts, strict=True)], max_lengths)
    return [(ids[:start], ids[start:]) for ids, start in
            zip(whole, (max(length, 1) for length in prefix_lengths), strict=True)]


def peer_ifd_pairs(
    tokenizer: PreTrainedTokenizerBase,
    convention: IFDConvention,
    prompts: Sequence[str],
    answers: Sequence[str],
    max_length: int,
) -> list[tuple[Pair, Pair] | None]:
    """Per row, the peer's (conditional pair, direct pair), or None where the peer gives no score: an
    empty answer, no answer token left after truncation in either pass, and, for a convention whose
    selection step skips them (Cherry_LLM's ``data_by_IFD.py``), rows whose prompt fills
    ``max_length`` or whose prompt plus direct answer is longer than it."""
    count = len(answers)
    full_prompt_lengths = [len(ids) for ids in tokenizer(list(prompts)).input_ids] if prompts else []
    conditional = split_pairs(tokenizer, prompts, full_prompt_lengths, answers, [max_length] * count)
    # The prompt as the peers measure it: tokenized and cut to max_length.
    prompt_lengths = [min(length, max_length) for length in full_prompt_lengths]
    direct_limits = [max_length - length + convention.direct_slack for length in prompt_lengths]
    prefix_length = len(tokenizer(convention.direct_prefix).input_ids)
    direct = split_pairs(tokenizer, [convention.direct_prefix] * count, [prefix_length] * count, answers,
                         direct_limits)
    pairs: list[tuple[Pair, Pair] | None] = []
    for answer, prompt_length, cond, alone in zip(answers, prompt_lengths, conditional, direct, strict=True):
        unrated = convention.unrated_when_long and (
            prompt_length >= max_length or prompt_length + len(alone[1]) > max_length)
        pairs.append(None if not answer or not cond[1] or not alone[1] or unrated else (cond, alone))
    return pairs


def peer_text_pairs(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int | None) -> list[Pair]:
    """OpenDataArena-Tool's ``PPLScorer`` pairs: each text tokenized with the tokenizer's default
    special tokens and cut to ``max_length``; every token after the first is scored (so without a
    BOS the text's first token is not, and a one-token text has nothing to score)."""
    count = len(texts)
    return split_pairs(tokenizer, [""] * count, [len(tokenizer("").input_ids)] * count, texts, [max_length] * count)
