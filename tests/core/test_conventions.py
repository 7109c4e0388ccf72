"""The peers' conventions: their token pairs pinned on hand-made rows (a token merging across the
seam, a tokenizer with and without BOS, truncation), their scores against a naive one-row-at-a-time
computation written from the peers' published scripts, and their selection rules.

The tokenizer here has one token per character, plus ``:"`` (a merge across the seam when a prompt
ends with ``:`` and an answer starts with ``"``), and ``###`` and `` Response``, so that Cherry_LLM's
direct prefix ``### Response:`` is three tokens, as in SmolLM2's tokenizer.
"""

from __future__ import annotations

import math

import pytest
from tokenizers import Tokenizer, models, processors
from transformers import PreTrainedTokenizerFast

from hf_adapters.core.conventions import PEER_CONVENTIONS, peer_ifd_pairs, peer_text_pairs
from hf_adapters.curation.ranking import selection_indices
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT, compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.scorers import ConfigError, IFDScorer, PPLScorer
from tests.conftest import assert_exact, build_model, naive_nll

CHARACTERS = sorted(set('Q:"abcdefghij\n#ResponsABC ' + "".join(
    prompt for peer in PEER_CONVENTIONS.values() for prompt in (peer.template or "", peer.template_no_input or ""))
    + DEFAULT_TEMPLATE))


def char_tokenizer(bos: bool) -> PreTrainedTokenizerFast:
    vocab = {"<eos>": 0, "<bos>": 1, **{c: i + 2 for i, c in enumerate(CHARACTERS)}}
    vocab[':"'] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[(":", '"')]))
    if bos:
        backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", bos_token="<bos>" if bos else None)
    tokenizer.add_tokens(["###", " Response"])
    return tokenizer


@pytest.fixture(scope="module", params=[True, False], ids=["bos", "no-bos"])
def tokenizer(request) -> PreTrainedTokenizerFast:
    return char_tokenizer(request.param)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(len(tokenizer), seed=3)


def tokens(tokenizer, pair) -> tuple[list[str], list[str]] | None:
    """A pair of id lists as token strings, for expectations one can read."""
    return None if pair is None else tuple(tokenizer.convert_ids_to_tokens(ids) for ids in pair)


def pairs_as_tokens(tokenizer, convention: str, prompt: str, answer: str, max_length: int):
    [item] = peer_ifd_pairs(tokenizer, PEER_CONVENTIONS[convention], [prompt], [answer], max_length)
    return None if item is None else tuple(tokens(tokenizer, pair) for pair in item)


def with_bos(tokenizer, *token_lists: list[str]) -> list[list[str]]:
    return [(["<bos>"] if tokenizer.bos_token else []) + token_list for token_list in token_lists]


# Token pairs, written out from the peers' scripts.


def test_a_token_merging_across_the_seam_moves_the_answer_start_into_the_context(tokenizer):
    # Prompt and answer are tokenized as one string; the answer starts where the prompt alone ends,
    # so the merged ':"' is context and the answer's '"' is never scored, in either pass of Cherry_LLM.
    (conditional, direct) = pairs_as_tokens(tokenizer, "cherry", "Q:", '"ab', max_length=64)
    assert conditional == (*with_bos(tokenizer, ["Q", ':"']), ["a", "b"])
    assert direct == (*with_bos(tokenizer, ["###", " Response", ':"']), ["a", "b"])


def test_the_direct_pass_scores_the_first_answer_token_only_after_a_bos(tokenizer):
    # Superfiltering and OpenDataArena-Tool score the answer alone: without a BOS its first token is context.
    for convention in ("superfiltering", "opendataarena"):
        (conditional, direct) = pairs_as_tokens(tokenizer, convention, "Q\n", "abc", max_length=64)
        assert conditional == (*with_bos(tokenizer, ["Q", "\n"]), ["a", "b", "c"])
        if tokenizer.bos_token:
            assert direct == (["<bos>"], ["a", "b", "c"])
        else:
            assert direct == (["a"], ["b", "c"])


def test_the_direct_pass_is_cut_to_max_length_minus_the_prompt_plus_one(tokenizer):
    # max_length 6: the conditional text is cut at 6 tokens; the direct answer at 6 - prompt tokens + 1.
    prompt_tokens = len(with_bos(tokenizer, ["Q", "\n"])[0])
    (conditional, direct) = pairs_as_tokens(tokenizer, "superfiltering", "Q\n", "abcdefgh", max_length=6)
    assert conditional == (*with_bos(tokenizer, ["Q", "\n"]), list("abcdefgh")[: 6 - prompt_tokens])
    kept = with_bos(tokenizer, list("abcdefgh"))[0][: 6 - prompt_tokens + 1]
    assert direct == ([kept[0]], kept[1:])


def test_cherry_cuts_the_direct_pass_to_max_length_minus_the_prompt_plus_four():
    # max_length 9, prompt '<bos>Q:' (3 tokens): the direct text '<bos>### Response:abcdefgh' is cut
    # at 9 - 3 + 4 = 10 tokens, of which the prefix takes 4.
    tokenizer = char_tokenizer(bos=True)
    (conditional, direct) = pairs_as_tokens(tokenizer, "cherry", "Q:", "abcdefgh", max_length=9)
    assert conditional == (["<bos>", "Q", ":"], list("abcdef"))
    assert direct == (["<bos>", "###", " Response", ":"], list("abcdef"))


def test_cherry_gives_no_score_where_its_selection_script_skips_the_row():
    # data_by_IFD.py skips a row whose prompt plus direct answer is longer than max_length: without a
    # BOS, prompt 'Q:' (2) + direct answer (7 - 2 + 4 - 3 = 6 tokens) = 8 > 7.
    tokenizer = char_tokenizer(bos=False)
    assert pairs_as_tokens(tokenizer, "cherry", "Q:", "abcdefgh", max_length=7) is None
    assert pairs_as_tokens(tokenizer, "cherry", "Q:", "abcde", max_length=7) is not None
    # A prompt that fills max_length, and an empty answer, have no score in every convention.
    for convention in PEER_CONVENTIONS:
        assert pairs_as_tokens(tokenizer, convention, "Q:abc", "d", max_length=5) is None
        assert pairs_as_tokens(tokenizer, convention, "Q:", "", max_length=64) is None


def test_opendataarena_perplexity_scores_every_token_after_the_first_as_tokenized(tokenizer):
    [whole, cut, single] = [tokens(tokenizer, pair) for pair in peer_text_pairs(tokenizer, ["abc", "abcdef", "a"], 4)]
    if tokenizer.bos_token:
        assert whole == (["<bos>"], ["a", "b", "c"])
        assert cut == (["<bos>"], ["a", "b", "c"])
        assert single == (["<bos>"], ["a"])
    else:
        assert whole == (["a"], ["b", "c"])
        assert cut == (["a"], ["b", "c", "d"])
        assert single == (["a"], [])


# Scores: the peers' formulas, one row at a time, as their scripts compute them.

ROWS = [  # (instruction, input, output)
    ("Q", "", '"abc'),
    ("AB", "C", "abcdefghij" * 3),
    ("C", "", "a"),
    ("Q: B", "A", "ba" * 20),
    ("", "", ""),
]


def peer_prompt(peer, instruction: str, input: str) -> str:
    if input:
        return (peer.template or DEFAULT_TEMPLATE).format(instruction=instruction, input=input)
    return (peer.template_no_input or DEFAULT_TEMPLATE_NO_INPUT).format(instruction=instruction)


def naive_peer_ifd(model, tokenizer, convention: str, row, max_length: int) -> float:
    """One row as the peer's script computes it: labels masked before the prompt's token count, the
    direct text cut to max_length - prompt tokens + slack, the loss of each pass, and their ratio."""
    peer = PEER_CONVENTIONS[convention]
    instruction, input, output = row
    prompt = peer_prompt(peer, instruction, input)
    if not output:
        return math.nan
    prompt_length = len(tokenizer.encode(prompt, truncation=True, max_length=max_length))

    def mean_loss(text: str, start_text: str, limit: int) -> tuple[float, int]:
        ids = tokenizer.encode(text, truncation=True, max_length=limit)
        start = max(len(tokenizer.encode(start_text)), 1)
        total, count = naive_nll(model, ids[:start], ids[start:], start_id=0)
        return total / count if count else math.nan, count

    conditional, _ = mean_loss(prompt + output, prompt, max_length)
    direct, direct_count = mean_loss(peer.direct_prefix + output, peer.direct_prefix,
                                     max_length - prompt_length + peer.direct_slack)
    if peer.unrated_when_long and (prompt_length >= max_length or prompt_length + direct_count > max_length):
        return math.nan
    return conditional / direct if peer.mode == "loss_ratio" else math.exp(conditional - direct)


@pytest.mark.parametrize("convention", ["cherry", "superfiltering", "opendataarena"])
@pytest.mark.parametrize("batch_size", [1, 16])
def test_each_convention_equals_the_peers_formula_one_row_at_a_time(model, tokenizer, convention, batch_size):
    instructions, inputs, outputs = (list(column) for column in zip(*ROWS, strict=True))
    # Room for every prompt and 24 answer tokens: the long answers are cut.
    max_length = 24 + max(len(tokenizer.encode(peer_prompt(PEER_CONVENTIONS[convention], *row[:2]))) for row in ROWS)
    result = compute_ifd(instructions, outputs, inputs, model=model, tokenizer=tokenizer, convention=convention,
                         max_length=max_length, batch_size=batch_size)
    assert result["num_valid"] >= 2  # Cherry_LLM skips the cut rows without a BOS
    assert_exact(result["ifd_scores"],
                 lambda m: [naive_peer_ifd(m, tokenizer, convention, row, max_length) for row in ROWS], model)


def test_opendataarena_perplexity_equals_the_loss_of_the_text_as_tokenized(model, tokenizer):
    texts = ["abc", "Q: ba ba\nabcdefghij", "a", ""]

    def naive(m) -> list[float]:
        values = []
        for text in texts:
            ids = tokenizer.encode(text, truncation=True, max_length=12)
            total, count = naive_nll(m, ids[:1], ids[1:], start_id=0)
            values.append(math.exp(total / count) if count else math.nan)
        return values

    result = compute_perplexity(texts, model=model, tokenizer=tokenizer, max_length=12, convention="opendataarena")
    assert_exact(result["perplexities"], naive, model)


# Options.


def test_a_peer_convention_brings_its_prompt_and_ratio_unless_given():
    cherry = IFDScorer(convention="cherry")
    assert cherry.config["template"] == PEER_CONVENTIONS["cherry"].template
    assert cherry.config["mode"] == "loss_ratio"
    wiz = IFDScorer(convention="cherry", template="{instruction}\nInput:{input}\n\n### Response:", mode="ppl_ratio")
    assert wiz.config["template"].startswith("{instruction}\nInput:")
    assert wiz.config["template_no_input"] == PEER_CONVENTIONS["cherry"].template_no_input
    assert wiz.config["mode"] == "ppl_ratio"
    assert IFDScorer(convention="opendataarena").config["template"] == IFDScorer().config["template"]


@pytest.mark.parametrize("config", [
    {"convention": "alpagasus"},
    {"convention": "cherry", "direction": "reverse"},
    {"convention": "superfiltering", "return_token_losses": True},
])
def test_a_convention_the_peer_does_not_have_is_a_config_error(config):
    with pytest.raises(ConfigError, match="convention"):
        IFDScorer(**config)


def test_perplexity_conventions_are_exact_and_opendataarena_without_stride():
    assert PPLScorer(convention="opendataarena").setting("convention") == "opendataarena"
    with pytest.raises(ConfigError, match="convention"):
        PPLScorer(convention="cherry")
    with pytest.raises(ConfigError, match="stride"):
        PPLScorer(convention="opendataarena", stride=512)


# Selection.


def test_cherry_selection_counts_the_rows_left_after_the_cut_offs_and_prefers_the_later_tie():
    scores = [0.5, 1.2, math.nan, 0.9, 0.5, 1.0, 0.7, 0.2, 0.5, 0.3, 0.4]  # 9 rows at or below 1
    chosen, removed = selection_indices(scores, top=0.34, convention="cherry")  # int(9 * 0.34) = 3
    assert chosen == [3, 5, 6]
    assert removed == {"no score": 1, "above max_score": 1, "below min_score": 0, "outside the top": 6}
    tied, _ = selection_indices(scores, top_n=4, convention="cherry")
    assert tied == [3, 5, 6, 8]  # of the three 0.5s, the last one


def test_superfiltering_selection_keeps_scores_below_one_best_first():
    scores = [0.5, 1.0, 0.9, 0.5, 1.3, 0.2]
    chosen, removed = selection_indices(scores, top=0.5, convention="superfiltering")  # int(6 * 0.5) = 3
    assert chosen == [2, 0, 3]  # best first; of equal scores, the earlier first
    assert removed["at or above max_score"] == 2


def test_opendataarena_has_no_selection_convention():
    with pytest.raises(ValueError, match="valid conventions"):
        selection_indices([0.5], top=1.0, convention="opendataarena")
