"""Each of the 25 IFEval checks on hand-written responses: pass, fail and edge cases."""

import pytest

from hf_adapters.ifeval import INSTRUCTIONS, build_check

LONG = "word " * 20000

# (instruction id, kwargs, response, expected raw check result)
CASES = [
    # keywords:existence: case-insensitive regex search, substrings count
    ("keywords:existence", {"keywords": ["river", "Sea"]}, "The RIVER meets the sea.", True),
    ("keywords:existence", {"keywords": ["river", "lake"]}, "The river meets the sea.", False),
    ("keywords:existence", {"keywords": ["art"]}, "A party started.", True),
    ("keywords:existence", {"keywords": ["café"]}, "Un CAFÉ noir.", True),
    ("keywords:existence", {"keywords": ["end"]}, "", False),
    # keywords:frequency: less than / at least, overlapping words count as substrings
    ("keywords:frequency", {"keyword": "cat", "frequency": 3, "relation": "at least"}, "Cat cat CAT", True),
    ("keywords:frequency", {"keyword": "cat", "frequency": 3, "relation": "at least"}, "cat cats", False),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "concatenate", True),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "cat\r\ncat", False),
    ("keywords:frequency", {"keyword": "word", "frequency": 20000, "relation": "at least"}, LONG, True),
    ("keywords:frequency", {"keyword": " cat ", "frequency": 2, "relation": "at least"}, "cat,cat", True),
    # keywords:forbidden_words: whole words only, case-insensitive
    ("keywords:forbidden_words", {"forbidden_words": ["bad", "ugly"]}, "All good here.", True),
    ("keywords:forbidden_words", {"forbidden_words": ["bad", "ugly"]}, "Not BAD at all.", False),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]}, "A badge of honour.", True),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]}, "**bad**", False),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]}, "", True),
    # keywords:letter_frequency: the letter given, case-insensitive; non-letters are literal
    ("keywords:letter_frequency", {"letter": "a", "let_frequency": 3, "let_relation": "at least"}, "A banana", True),
    ("keywords:letter_frequency", {"letter": "Z", "let_frequency": 2, "let_relation": "at least"}, "zebra", False),
    ("keywords:letter_frequency", {"letter": "q", "let_frequency": 1, "let_relation": "less than"}, "abc", True),
    ("keywords:letter_frequency", {"letter": "#", "let_frequency": 2, "let_relation": "at least"}, "# a\n# b", True),
    ("keywords:letter_frequency", {"letter": "!", "let_frequency": 1, "let_relation": "less than"}, "Hi!", False),
    ("keywords:letter_frequency", {"letter": "é", "let_frequency": 2, "let_relation": "at least"}, "Été", True),
    # language:response_language: langdetect, seed 0; undetectable text passes
    ("language:response_language", {"language": "en"}, "This is clearly a sentence written in English.", True),
    ("language:response_language", {"language": "de"}, "This is clearly a sentence written in English.", False),
    ("language:response_language", {"language": "fr"}, "Ceci est une phrase écrite en français, bien sûr.", True),
    ("language:response_language", {"language": "hi"}, "यह हिंदी में लिखा गया एक वाक्य है।", True),
    ("language:response_language", {"language": "en"}, "12345 !!! ...", True),
    # length_constraints:number_sentences: trained English punkt
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "less than"}, "One sentence.", True),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 2, "relation": "at least"},
        "Mr. Smith went to Washington. He arrived at 3 p.m. on Jan. 5.",
        True,
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "Mr. Smith went to Washington. He arrived at 3 p.m. on Jan. 5.",
        True,
    ),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "at least"}, "A. B? C!", True),
    ("length_constraints:number_sentences", {"num_sentences": 1, "relation": "less than"}, "", True),
    # length_constraints:number_paragraphs: *** dividers, blank edges dropped, blank middle fails
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "First.\n***\nSecond.", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "***\nFirst.\n***\nSecond.\n***", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "First.\n***\n***\nSecond.", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 1}, "First.\n\nStill first.", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "A\r\n***\r\nB", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 0}, "   ", True),
    # length_constraints:number_words: \w+ runs
    ("length_constraints:number_words", {"num_words": 3, "relation": "less than"}, "Hello, world!", True),
    ("length_constraints:number_words", {"num_words": 4, "relation": "at least"}, "don't stop-me now", True),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "日本 語 テキスト", True),
    ("length_constraints:number_words", {"num_words": 20000, "relation": "less than"}, LONG, False),
    ("length_constraints:number_words", {"num_words": 1, "relation": "less than"}, "*** --- !!!", True),
    # length_constraints:nth_paragraph_first_word
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        'First part.\n\n"Then, second part.',
        True,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Then"},
        "First part.\n\nThen's second part.",
        True,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "then"},
        "First part.\n\nThen second part.",
        False,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First part.\n\nNow second part.",
        False,
    ),
    # the unfiltered chunk list is indexed: a blank chunk at position nth fails
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First part.\n\n\n\nThen second part.",
        False,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First part.\r\n\r\nThen second part.",
        False,
    ),
    # detectable_content:number_placeholders
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], at [address].", True),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name].", False),
    ("detectable_content:number_placeholders", {"num_placeholders": 1}, "Empty [] counts.", True),
    ("detectable_content:number_placeholders", {"num_placeholders": 1}, "Split [across\nlines]", False),
    # detectable_content:postscript
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Bye.\n\nP.S. See you.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Bye.\n\np.s. see you.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Bye.\n\nP.P.S. See you.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Bye.\n\nP.S. See you.", False),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Bye. PS see you.", False),
    ("detectable_content:postscript", {"postscript_marker": "Note:"}, "Bye.\nNOTE: later", True),
    ("detectable_content:postscript", {"postscript_marker": " P.S. "}, "Bye.\nP.S. later", True),
    # detectable_format:number_bullet_lists: exact count of * and - lines
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "Intro\n* one\n* two", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "- one\n- two\n- three", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n---\n", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 1}, "**bold** line\n* one", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\r\n* two\r\n", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 0}, "", True),
    # detectable_format:constrained_response
    ("detectable_format:constrained_response", {}, "My answer is yes.", True),
    ("detectable_format:constrained_response", {}, "Well... My answer is maybe. Sorry.", True),
    ("detectable_format:constrained_response", {}, "my answer is yes.", False),
    ("detectable_format:constrained_response", {}, "My answer is yes", False),
    # detectable_format:number_highlighted_sections
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and *two*", True),
    # "**bold**" counts once: as a double highlight; the single pattern only finds blank "**" pairs
    ("detectable_format:number_highlighted_sections", {"num_highlights": 1}, "**bold** text", True),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "**bold** text", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 1}, "* * and ** **", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 1}, "*across\nlines*", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 1}, "*ünïcödé*", True),
    # detectable_format:multiple_sections: case-sensitive splitter followed by a number
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nA\nSECTION 2\nB",
        True,
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "Section 1\nA\nSection 2\nB",
        False,
    ),
    ("detectable_format:multiple_sections", {"section_spliter": "Day", "num_sections": 3}, "Day 1 Day 2", False),
    ("detectable_format:multiple_sections", {"section_spliter": "SECTION", "num_sections": 1}, "SUBSECTION 7", True),
    ("detectable_format:multiple_sections", {"section_spliter": " Day ", "num_sections": 2}, "Day 1 x Day 2 y", True),
    # detectable_format:json_format
    ("detectable_format:json_format", {}, '{"a": 1}', True),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', True),
    ("detectable_format:json_format", {}, '```JSON\r\n{"a": 1}\r\n```', True),
    ("detectable_format:json_format", {}, 'Here it is: {"a": 1}', False),
    ("detectable_format:json_format", {}, "```\n```", False),
    # detectable_format:title
    ("detectable_format:title", {}, "<<My Title>>\nBody", True),
    ("detectable_format:title", {}, "<< >>\nBody", False),
    ("detectable_format:title", {}, "<<split\ntitle>>", False),
    ("detectable_format:title", {}, "<<Ünïcödé Title>>", True),
    # combination:two_responses
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", True),
    ("combination:two_responses", {}, "Same.\n******\nSame.", False),
    ("combination:two_responses", {}, "One.\n******\n******\nTwo.", False),
    ("combination:two_responses", {}, "******\nOne.\n******\nTwo.\n******", True),
    ("combination:two_responses", {}, "Only one.", False),
    # combination:repeat_prompt
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi."}, "  say HI. Hi!", True),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi."}, "Hi! Say hi.", False),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Line one\nline two"}, "Line one\r\nline two", False),
    # startend:end_checker
    ("startend:end_checker", {"end_phrase": "Any questions?"}, "Done. any QUESTIONS?  \n", True),
    ("startend:end_checker", {"end_phrase": "Any questions?"}, '"Done. Any questions?"', True),
    ("startend:end_checker", {"end_phrase": "Any questions?"}, "Any questions? Done.", False),
    (
        "startend:end_checker",
        {"end_phrase": "Is there anything else I can help with?"},
        "**Is there anything else I can help with?**",
        False,
    ),
    # startend:quotation
    ("startend:quotation", {}, '  "Wrapped in quotes."\n', True),
    ("startend:quotation", {}, '"', False),
    ("startend:quotation", {}, "\u201cCurly quotes.\u201d", False),
    ("startend:quotation", {}, '"Open only.', False),
    # change_case:capital_word_frequency: NLTK word tokens that are all capitals
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "The USA and the UK agreed.",
        True,
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "The USA and the UK agreed.",
        False,
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 1, "capital_relation": "less than"},
        "I am here.",
        False,
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 1, "capital_relation": "less than"},
        "Mr. Smith isn't here.",
        True,
    ),
    # Treebank splits "HERE'S" into "HERE" and "'S", two capital tokens
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "Mr. Smith said HERE'S",
        True,
    ),
    # change_case:english_capital
    ("change_case:english_capital", {}, "THIS IS AN ENGLISH SENTENCE IN CAPITAL LETTERS.", True),
    ("change_case:english_capital", {}, "THIS IS Mostly capitals.", False),
    ("change_case:english_capital", {}, "C'EST UNE PHRASE ÉCRITE EN FRANÇAIS, MAIS EN MAJUSCULES.", False),
    ("change_case:english_capital", {}, "123 !!!", False),
    # change_case:english_lowercase
    ("change_case:english_lowercase", {}, "this is an english sentence in lowercase letters.", True),
    ("change_case:english_lowercase", {}, "this is an English sentence.", False),
    ("change_case:english_lowercase", {}, "das ist ein satz, der auf deutsch geschrieben wurde.", False),
    ("change_case:english_lowercase", {}, "hello there,\r\nhow are you doing today? i am fine, thank you.", True),
    # punctuation:no_comma
    ("punctuation:no_comma", {}, "No commas here.", True),
    ("punctuation:no_comma", {}, "One, two.", False),
    ("punctuation:no_comma", {}, "Full-width\uff0ccomma and Arabic \u060c only.", True),
    ("punctuation:no_comma", {}, LONG + ",", False),
]


def test_every_instruction_id_has_cases():
    assert {case[0] for case in CASES} == set(INSTRUCTIONS)
    assert len(INSTRUCTIONS) == 25


@pytest.mark.parametrize(("instruction_id", "kwargs", "response", "expected"), CASES)
def test_check_result_on_hand_written_response(instruction_id, kwargs, response, expected):
    assert build_check(instruction_id, kwargs)(response) is expected


@pytest.mark.parametrize("instruction_id", sorted(INSTRUCTIONS))
def test_every_check_returns_a_bool_on_whitespace_unicode_and_crlf(instruction_id):
    kwargs = next(case[1] for case in CASES if case[0] == instruction_id)
    check = build_check(instruction_id, kwargs)
    for text in ("", " \n\t ", "\r\n\r\n", "ünïcödé 日本語 😀", "# Title\r\n\r\n* a\r\n* b\r\n"):
        assert isinstance(check(text), bool)


def test_a_keyword_with_regex_syntax_is_searched_literally_in_bounded_time():
    import time

    existence = build_check("keywords:existence", {"keywords": ["(a+)+$"]})
    started = time.perf_counter()
    assert existence("a" * 40 + "b") is False
    assert time.perf_counter() - started < 0.5
    assert build_check("keywords:existence", {"keywords": ["C++"]})("I write C++ daily.") is True
    frequency = build_check("keywords:frequency", {"keyword": "well-being", "frequency": 2, "relation": "at least"})
    assert frequency("Well-being first, well-being always.") is True
