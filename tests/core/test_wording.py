"""The words of the package's messages: counts in the singular when there is one."""

import logging
import re

from hf_adapters.core.wording import plural
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.information_parity import compute_information_parity
from hf_adapters.formulas.perplexity import compute_perplexity


def test_counts_are_singular_for_one():
    assert [plural(count, "response") for count in (0, 1, 2)] == ["0 responses", "1 response", "2 responses"]


def test_a_text_longer_than_max_length_is_warned_of_in_one_wording_by_every_formula(model, tokenizer, caplog):
    long = "The quick brown fox jumps over the lazy dog. " * 20
    with caplog.at_level(logging.WARNING, logger="hf_adapters.formulas"):
        compute_perplexity([long], model=model, tokenizer=tokenizer, max_length=64)
        compute_information_parity([long], [long], model=model, tokenizer=tokenizer, max_length=64)
        compute_ifd(["Repeat."], [long], model=model, tokenizer=tokenizer, max_length=64)
    warnings = [record.getMessage() for record in caplog.records if "truncated" in record.getMessage()]
    assert len(warnings) == 3, warnings
    wording = re.compile(r"^1 (text|row) longer than max_length=64 was truncated( \(its output cut to fit\))?\.")
    assert all(wording.match(warning) for warning in warnings), warnings
