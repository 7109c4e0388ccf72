"""The 25 IFEval instruction checks, one function each: ``check(text, **kwargs) -> bool``.

Each follows the reference semantics (``shared/ifeval/SEMANTICS.md``), quirks included; see the
module card for the few deliberate differences. Relations are ``"less than"`` (``<``) and
``"at least"`` (``>=``). Patterns taken from kwargs (keywords, section splitters) are regular
expressions, as in the reference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from hf_adapters.ifeval.language import detect_language
from hf_adapters.ifeval.text import count_sentences, count_words, word_tokenize

LESS_THAN = "less than"
AT_LEAST = "at least"
RELATIONS = (LESS_THAN, AT_LEAST)

_CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
_JSON_FENCES = ("```json", "```Json", "```JSON", "```")
_FIRST_WORD_STOPS = frozenset(".,?!'\"")

_PARAGRAPH_DIVIDER = re.compile(r"\s?\*\*\*\s?")
_STAR_BULLET = re.compile(r"^\s*\*[^\*].*$", re.MULTILINE)
_DASH_BULLET = re.compile(r"^\s*-.*$", re.MULTILINE)
_SINGLE_HIGHLIGHT = re.compile(r"\*([^\n\*]*)\*")
_DOUBLE_HIGHLIGHT = re.compile(r"\*\*([^\n\*]*)\*\*")
_PLACEHOLDER = re.compile(r"\[.*?\]")
_TITLE = re.compile(r"<<[^\n]+>>")


def _compare(count: int, relation: str, threshold: int) -> bool:
    return count < threshold if relation == LESS_THAN else count >= threshold


# keywords:*


_PLAIN_KEYWORD = re.compile(r"[\w\s'-]*")


def keyword_pattern(keyword: str) -> str:
    """The regex a keyword is searched with. The reference searches the keyword as a regex; for a
    keyword of letters, digits, spaces, hyphens and apostrophes (every keyword in IFEval's data)
    that is the literal text. Any other keyword is searched literally too, so a user-supplied
    keyword such as ``(a+)+$`` cannot make the check run for exponential time."""
    return keyword if _PLAIN_KEYWORD.fullmatch(keyword) else re.escape(keyword)


def keyword_existence(text: str, keywords: Sequence[str]) -> bool:
    """Every keyword occurs, case-insensitively, anywhere (no word boundaries)."""
    return all(re.search(keyword_pattern(keyword), text, re.IGNORECASE) for keyword in keywords)


def keyword_frequency(text: str, keyword: str, frequency: int, relation: str) -> bool:
    """The keyword's case-insensitive occurrences (no word boundaries) compare to ``frequency``."""
    return _compare(len(re.findall(keyword_pattern(keyword.strip()), text, re.IGNORECASE)), relation, frequency)


def forbidden_words(text: str, forbidden_words: Sequence[str]) -> bool:
    """No forbidden word occurs as a whole word, case-insensitively."""
    return not any(re.search(rf"\b{word}\b", text, re.IGNORECASE) for word in forbidden_words)


def letter_frequency(text: str, letter: str, let_frequency: int, let_relation: str) -> bool:
    """The letter given (any character, case-insensitive) occurs ``let_relation`` ``let_frequency`` times."""
    return _compare(text.lower().count(letter.lower()), let_relation, let_frequency)


# language:*


def response_language(text: str, language: str) -> bool:
    """langdetect names ``language``; text langdetect cannot classify passes."""
    detected = detect_language(text)
    return detected is None or detected == language


# length_constraints:*


def number_sentences(text: str, num_sentences: int, relation: str) -> bool:
    """The punkt sentence count compares to ``num_sentences``."""
    return _compare(count_sentences(text), relation, num_sentences)


def number_paragraphs(text: str, num_paragraphs: int) -> bool:
    """Exactly ``num_paragraphs`` pieces between ``***`` dividers; a blank inner piece fails."""
    pieces = _PARAGRAPH_DIVIDER.split(text)
    count = len(pieces)
    last = len(pieces) - 1
    for index, piece in enumerate(pieces):
        if not piece.strip():
            if index not in (0, last):
                return False
            count -= 1
    return count == num_paragraphs


def number_words(text: str, num_words: int, relation: str) -> bool:
    """The ``\\w+`` word count compares to ``num_words``."""
    return _compare(count_words(text), relation, num_words)


def nth_paragraph_first_word(text: str, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    """``num_paragraphs`` non-blank ``\\n\\n`` paragraphs, and paragraph ``nth_paragraph`` starts with ``first_word``.

    As in the reference, ``nth_paragraph`` indexes the unfiltered list of chunks, blank ones
    included, and a blank chunk there fails.
    """
    chunks = text.split("\n\n")
    count = sum(1 for chunk in chunks if chunk.strip())
    if nth_paragraph > count:
        return False
    paragraph = chunks[nth_paragraph - 1].strip()
    if not paragraph:
        return False
    word = paragraph.split()[0].lstrip("'").lstrip('"')
    stop = next((i for i, char in enumerate(word) if char in _FIRST_WORD_STOPS), len(word))
    return count == num_paragraphs and word[:stop].lower() == first_word.lower()


# detectable_content:*


def number_placeholders(text: str, num_placeholders: int) -> bool:
    """At least ``num_placeholders`` square-bracket placeholders such as ``[name]``."""
    return len(_PLACEHOLDER.findall(text)) >= num_placeholders


def postscript(text: str, postscript_marker: str) -> bool:
    """Some line holds the marker (case-insensitive); ``"P.P.S."`` also satisfies ``"P.S."``."""
    postscript_marker = postscript_marker.strip()
    if postscript_marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif postscript_marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + postscript_marker.lower() + r".*$"
    return re.search(pattern, text.lower(), re.MULTILINE) is not None


# detectable_format:*


def number_bullet_lists(text: str, num_bullets: int) -> bool:
    """Exactly ``num_bullets`` lines starting with ``* `` or ``-`` (a ``---`` rule counts too)."""
    return len(_STAR_BULLET.findall(text)) + len(_DASH_BULLET.findall(text)) == num_bullets


def constrained_response(text: str) -> bool:
    """Contains "My answer is yes.", "My answer is no." or "My answer is maybe." (case-sensitive)."""
    stripped = text.strip()
    return any(option in stripped for option in _CONSTRAINED_RESPONSES)


def number_highlighted_sections(text: str, num_highlights: int) -> bool:
    """At least ``num_highlights`` non-blank ``*...*`` plus ``**...**`` spans on one line."""
    singles = sum(1 for match in _SINGLE_HIGHLIGHT.finditer(text) if match.group(1).strip())
    doubles = sum(1 for match in _DOUBLE_HIGHLIGHT.finditer(text) if match.group(1).strip())
    return singles + doubles >= num_highlights


def multiple_sections(text: str, section_spliter: str, num_sections: int) -> bool:
    """At least ``num_sections`` markers such as "SECTION 1" (case-sensitive, anywhere)."""
    return len(re.split(r"\s?" + section_spliter.strip() + r"\s?\d+\s?", text)) - 1 >= num_sections


def json_format(text: str) -> bool:
    """The text, stripped of a Markdown code fence, parses as JSON."""
    value = text.strip()
    for fence in _JSON_FENCES:
        value = value.removeprefix(fence)
    value = value.removesuffix("```").strip()
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def title(text: str) -> bool:
    """Some ``<<...>>`` on one line holds non-blank text."""
    return any(match.lstrip("<").rstrip(">").strip() for match in _TITLE.findall(text))


# combination:*


def two_responses(text: str) -> bool:
    """Exactly two different non-blank responses separated by ``******``; a blank middle piece fails."""
    pieces = text.split("******")
    last = len(pieces) - 1
    responses = []
    for index, piece in enumerate(pieces):
        if piece.strip():
            responses.append(piece.strip())
        elif index not in (0, last):
            return False
    return len(responses) == 2 and responses[0] != responses[1]


def repeat_prompt(text: str, prompt_to_repeat: str) -> bool:
    """Starts (case-insensitively, after stripping) with ``prompt_to_repeat``."""
    return text.strip().lower().startswith(prompt_to_repeat.strip().lower())


# startend:*


def end_checker(text: str, end_phrase: str) -> bool:
    """Ends (case-insensitively, ignoring whitespace and outer double quotes) with ``end_phrase``."""
    return text.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def quotation(text: str) -> bool:
    """Wrapped in double quotes, after stripping whitespace."""
    stripped = text.strip()
    return len(stripped) > 1 and stripped[0] == '"' and stripped[-1] == '"'


# change_case:*


def capital_word_frequency(text: str, capital_frequency: int, capital_relation: str) -> bool:
    """The number of all-capital NLTK word tokens compares to ``capital_frequency``."""
    return _compare(sum(1 for word in word_tokenize(text) if word.isupper()), capital_relation, capital_frequency)


def english_capital(text: str) -> bool:
    """All letters upper case and English (text langdetect cannot classify passes)."""
    return text.isupper() and detect_language(text) in (None, "en")


def english_lowercase(text: str) -> bool:
    """All letters lower case and English (text langdetect cannot classify passes)."""
    return text.islower() and detect_language(text) in (None, "en")


# punctuation:*


def no_comma(text: str) -> bool:
    """No ASCII comma."""
    return "," not in text
