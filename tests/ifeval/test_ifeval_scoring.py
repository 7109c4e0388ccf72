"""IFEval strict/loose wrapper, aggregation, row validation (at every entry point: prompt reader, scorer,
column helper, metric, command), tokenizers and language detection."""

import math
from pathlib import Path

import evaluate
import langdetect
import pytest
from datasets import Dataset

from hf_adapters import add_ifeval_columns, cli
from hf_adapters.ifeval import (
    IFEvalInputError,
    aggregate,
    build_check,
    compute_ifeval,
    loose_variants,
    score_row,
    score_rows,
)
from hf_adapters.ifeval.language import detect_language
from hf_adapters.ifeval.prompts import check_prompt_rows, read_prompts
from hf_adapters.ifeval.text import count_sentences, count_words, split_sentences, word_tokenize
from hf_adapters.scorers import build_scorer
from tests.conftest import write_jsonl


def row(*pairs, key=None):
    """An IFEval row from (instruction id, kwargs) pairs."""
    out = {"instruction_id_list": [iid for iid, _ in pairs], "kwargs": [kw for _, kw in pairs]}
    if key is not None:
        out["key"] = key
    return out


NO_COMMA = ("punctuation:no_comma", {})
QUOTED = ("startend:quotation", {})


def test_loose_variants_are_the_eight_reference_variants_in_order():
    response = "Sure!\n*a*, b\nBye **now**"
    assert loose_variants(response) == [
        response,
        "Sure!\na, b\nBye now",
        "*a*, b\nBye **now**",
        "Sure!\n*a*, b",
        "*a*, b",
        "a, b\nBye now",
        "Sure!\na, b",
        "a, b",
    ]


@pytest.mark.parametrize("response", ["", "   ", "\n\r\n\t"])
def test_blank_response_fails_every_instruction_strict_and_loose(response):
    # the checks themselves would pass on blank text: no comma, no forbidden word, few words
    result = score_row(
        response,
        row(
            NO_COMMA,
            ("keywords:forbidden_words", {"forbidden_words": ["x"]}),
            ("length_constraints:number_words", {"num_words": 5, "relation": "less than"}),
        ),
    )
    assert result.strict == (False, False, False)
    assert result.loose == (False, False, False)


def test_loose_passes_when_dropping_the_first_line_helps():
    result = score_row('Here is my answer:\n"Quoted answer."', row(QUOTED))
    assert result.strict == (False,)
    assert result.loose == (True,)


def test_loose_passes_when_dropping_the_last_line_helps():
    result = score_row('"Quoted answer."\nHope this helps', row(QUOTED))
    assert (result.strict, result.loose) == ((False,), (True,))


def test_loose_passes_when_removing_asterisks_helps():
    result = score_row('*"Quoted answer."*', row(QUOTED))
    assert (result.strict, result.loose) == ((False,), (True,))


def test_loose_asterisk_removal_deletes_bullets_and_dividers():
    result = score_row("* one\n* two", row(("detectable_format:number_bullet_lists", {"num_bullets": 0})))
    assert (result.strict, result.loose) == ((False,), (True,))


def test_loose_never_fails_an_instruction_strict_passes():
    response = 'A, b.\n\n"Quoted."\nEnd'
    result = score_row(response, row(NO_COMMA, QUOTED, ("startend:end_checker", {"end_phrase": "end"})))
    assert all(lo or not s for s, lo in zip(result.strict, result.loose, strict=True))


def test_crlf_line_ends_keep_the_carriage_return_in_loose_variants():
    assert loose_variants("a\r\nb") == ["a\r\nb", "a\r\nb", "b", "a", "", "b", "a", ""]


def test_aggregate_is_prompt_all_and_micro_instruction_average():
    results = score_rows(
        ["a, b", '"no commas"', "x"],
        [row(NO_COMMA, QUOTED), row(NO_COMMA, QUOTED), row(NO_COMMA)],
    )
    scores = aggregate(results)
    assert scores["prompt_level_strict_acc"] == pytest.approx(2 / 3)
    # micro: 4 of 5 instructions, not the mean of per-prompt fractions (0 + 1 + 1) / 3
    assert scores["inst_level_strict_acc"] == pytest.approx(3 / 5)
    assert set(scores) == {
        "prompt_level_strict_acc",
        "inst_level_strict_acc",
        "prompt_level_loose_acc",
        "inst_level_loose_acc",
    }


def test_detailed_output_has_per_prompt_lists_and_per_instruction_breakdown():
    scores = compute_ifeval(["a, b", '"no commas"'], [row(NO_COMMA, QUOTED), row(NO_COMMA, QUOTED)], detailed=True)
    assert scores["strict_follow_instruction_list"] == [[False, False], [True, True]]
    assert scores["loose_follow_instruction_list"] == [[False, False], [True, True]]
    assert scores["per_instruction"]["punctuation:no_comma"] == {
        "count": 2,
        "strict_followed": 1,
        "strict_acc": 0.5,
        "loose_followed": 1,
        "loose_acc": 0.5,
    }
    assert list(scores["per_instruction"]) == ["punctuation:no_comma", "startend:quotation"]


def test_empty_input_gives_nan_accuracies():
    assert all(math.isnan(v) for v in compute_ifeval([], []).values())


def test_hub_rows_with_none_for_absent_kwargs_score_like_jsonl_rows():
    hub_kwargs = {"num_words": 3, "relation": "at least", "letter": None, "keywords": None, "language": None}
    jsonl = score_row(
        "one two three", row(("length_constraints:number_words", {"num_words": 3, "relation": "at least"}))
    )
    hub = score_row("one two three", row(("length_constraints:number_words", hub_kwargs)))
    assert hub == jsonl
    no_kwargs = score_row("x", row(("punctuation:no_comma", {"num_words": None, "relation": None})))
    assert no_kwargs.strict == (True,)


def test_unknown_instruction_id_error_names_row_key_and_id():
    with pytest.raises(IFEvalInputError, match=r"unknown IFEval instruction id 'nope:nothing' \(row 1, key 42\)"):
        score_rows(["x", "y"], [row(NO_COMMA), row(("nope:nothing", {}), key=42)])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_words": 3}, r"missing \['relation'\]"),
        ({"num_words": 3, "relation": "at most"}, r"malformed kwarg 'relation'.*'at most'"),
        ({"num_words": "3", "relation": "at least"}, r"malformed kwarg 'num_words'.*expected an integer"),
        ({"num_words": True, "relation": "at least"}, r"malformed kwarg 'num_words'"),
        ({"num_words": 3, "relation": "at least", "keyword": "x"}, r"unexpected \['keyword'\]"),
        ([3, "at least"], r"must be a dict"),
    ],
)
def test_malformed_kwargs_error_names_row_and_id(kwargs, message):
    with pytest.raises(IFEvalInputError, match=message) as info:
        score_rows(["x"], [row(("length_constraints:number_words", kwargs), key="k7")])
    assert "'length_constraints:number_words' (row 0, key k7)" in str(info.value)


def test_invalid_regular_expression_kwarg_is_a_malformed_kwarg():
    with pytest.raises(IFEvalInputError, match=r"malformed kwarg 'keywords' for 'keywords:existence'.*'\(smile'"):
        build_check("keywords:existence", {"keywords": ["(smile"]})


def test_integral_floats_are_accepted_as_integers():
    assert build_check("length_constraints:number_words", {"num_words": 2.0, "relation": "at least"})("a b")


def test_letter_frequency_requires_a_single_character():
    with pytest.raises(IFEvalInputError, match="single character"):
        build_check("keywords:letter_frequency", {"letter": "ab", "let_frequency": 1, "let_relation": "at least"})


@pytest.mark.parametrize(
    ("references", "message"),
    [
        ([{"kwargs": [{}]}], "has no 'instruction_id_list'"),
        ([row(NO_COMMA, QUOTED) | {"kwargs": [{}]}], "1 entries for 2 instruction ids"),
        (["not a row"], "must be a dict"),
    ],
)
def test_malformed_rows_are_rejected_with_the_row_named(references, message):
    with pytest.raises(IFEvalInputError, match=message) as info:
        score_rows(["x"], references)
    assert "row 0" in str(info.value)


def test_non_string_response_is_rejected_with_the_row_named():
    with pytest.raises(IFEvalInputError, match=r"response \(row 0\) must be a string"):
        score_rows([None], [row(NO_COMMA)])


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="2 responses for 1"):
        score_rows(["a", "b"], [row(NO_COMMA)])


def test_sentence_counts_use_the_trained_english_punkt_model():
    text = "Mr. Smith went to Washington. He arrived at 3 p.m. on Jan. 5."
    assert split_sentences(text) == ["Mr. Smith went to Washington.", "He arrived at 3 p.m. on Jan. 5."]
    assert count_sentences("") == 0
    assert count_sentences("Dr. Who? Yes. " * 1000) == 2000


def test_word_tokenize_is_punkt_then_treebank():
    assert word_tokenize('They don\'t know. I said "HI".') == [
        "They",
        "do",
        "n't",
        "know",
        ".",
        "I",
        "said",
        "``",
        "HI",
        "''",
        ".",
    ]


def test_word_count_is_unicode_word_runs():
    assert count_words("Hello, wörld! 日本 don't") == 5


def test_language_detection_is_deterministic_and_leaves_the_global_seed_alone():
    langdetect.DetectorFactory.seed = None
    try:
        ambiguous = "ok la casa"
        assert len({detect_language(ambiguous) for _ in range(20)}) == 1
        assert langdetect.DetectorFactory.seed is None
    finally:
        langdetect.DetectorFactory.seed = None
    assert detect_language("") is None
    assert detect_language("1234 ...") is None


# --- From the round-four review: a prompt key that cannot be one, and a row without instructions, refused at
# every entry point -------------------------------------------------------------------------------------------

METRIC_DIR = Path(__file__).resolve().parents[2] / "metrics" / "ifeval"


ROW = {"key": 1, "prompt": "Say hi without commas.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}


def run(*args: str) -> int:
    return cli.main(["ifeval", "--no-progress", *args])


@pytest.mark.parametrize("key", [[1, 2], {"id": 1}])
def test_a_prompt_key_that_is_a_list_or_dict_is_a_value_error_naming_row_and_field(key, tmp_path, model_dir, capsys):
    """From the round-four review, case 11."""
    data = write_jsonl(tmp_path / "prompts.jsonl", [ROW, dict(ROW, key=key)])
    with pytest.raises(ValueError, match=r"IFEval row 1: its 'key' must be an integer or a string"):
        read_prompts(data)
    with pytest.raises(ValueError, match=r"IFEval row 1: its 'key' must be an integer or a string"):
        check_prompt_rows([ROW, dict(ROW, key=key)])
    assert run("--model", model_dir, "--data", str(data), "--output", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: IFEval row 1: its 'key' must be") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


EMPTY = dict(ROW, key=7, instruction_id_list=[], kwargs=[])


EMPTY_MESSAGE = r"instruction_id_list \(row 1, key 7\) is empty"


def test_the_prompt_reader_refuses_a_row_without_instructions(tmp_path, model_dir, capsys):
    """From the round-four review, case 16c."""
    data = write_jsonl(tmp_path / "prompts.jsonl", [ROW, EMPTY])
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        read_prompts(data)
    assert run("--model", model_dir, "--data", str(data), "--output", str(tmp_path / "out")) == 2
    assert "instruction_id_list (row 1, key 7) is empty" in capsys.readouterr().err


def test_the_scorer_and_its_column_helper_refuse_a_row_without_instructions():
    """From the round-four review, case 16c."""
    rows = [dict(ROW, response="Hi."), dict(EMPTY, response="Hi.")]
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        build_scorer({"name": "IFEvalScorer"}).check_rows(rows)
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        add_ifeval_columns(Dataset.from_list(rows))


def test_the_metric_and_compute_ifeval_refuse_a_row_without_instructions():
    """From the round-four review, case 16c."""
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        compute_ifeval(["Hi.", "Hi."], [ROW, EMPTY])
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        evaluate.load(str(METRIC_DIR)).compute(predictions=["Hi.", "Hi."], references=[ROW, EMPTY])


def test_every_packaged_prompt_has_an_instruction():
    """From the round-four review, case 16c."""
    assert all(row["instruction_id_list"] for row in read_prompts())
