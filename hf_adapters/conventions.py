"""The peers' token pairs: how Cherry_LLM, Superfiltering and OpenDataArena-Tool cut a row into the
tokens they score, so that their IFD and perplexity numbers can be reproduced exactly.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: ``exact``: this library's definition; the others reproduce a peer's published code.
CONVENTIONS = ("exact", "cherry", "superfiltering", "opendataarena")
#: The conventions of perplexity: only OpenDataArena-Tool's ``PPLScorer`` differs from ours.
PERPLEXITY_CONVENTIONS = ("exact", "opendataarena")

Pair = tuple[list[int], list[int]]


@dataclass(frozen=True)
class PeerConvention:
    """How one peer builds IFD's two passes from a row."""

    #: The prompt of a row with an input (``{instruction}``, ``{input}``) and without; None: the seed's ChatML.
    template: str | None
    template_no_input: str | None
    #: The IFD ratio the peer reports: ``ppl_ratio`` or ``loss_ratio``.
    mode: str
    #: The text before the answer in the direct pass.
    direct_prefix: str
    #: The direct pass is cut to ``max_length - prompt tokens + direct_slack`` tokens.
    direct_slack: int
    #: Rows the peer's selection step never rates (prompt + direct answer longer than ``max_length``) get NaN.
    unrated_when_long: bool = False
    #: Where the peer's code lives, for messages and the card.
    source: str = ""


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

PEER_CONVENTIONS = {
    "cherry": PeerConvention(
        ALPACA_TEMPLATE, ALPACA_TEMPLATE_NO_INPUT, mode="loss_ratio", direct_prefix="### Response:",
        direct_slack=4, unrated_when_long=True,
        source="tianyi-lab/Cherry_LLM cherry_seletion/data_analysis.py and data_by_IFD.py (--prompt alpaca)",
    ),
    "superfiltering": PeerConvention(
        "{instruction}\n{input}\n", "{instruction}\n", mode="ppl_ratio", direct_prefix="", direct_slack=1,
        source="tianyi-lab/Superfiltering code_ifd/data_analysis.py and put_analysis_to_data.py",
    ),
    "opendataarena": PeerConvention(
        None, None, mode="ppl_ratio", direct_prefix="", direct_slack=1,
        source="OpenDataArena/OpenDataArena-Tool data_scorer/model_based/scorers/IFDScorer.py (score_item)",
    ),
}


def check_convention(convention: str, valid: Sequence[str] = CONVENTIONS) -> None:
    """Raise a ValueError for a convention not in ``valid``."""
    if convention not in valid:
        raise ValueError(f"Unknown convention {convention!r}; valid conventions: {list(valid)}")


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
    convention: PeerConvention,
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
