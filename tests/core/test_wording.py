"""The words of the package's messages: counts in the singular when there is one."""

from hf_adapters.core.wording import plural


def test_counts_are_singular_for_one():
    assert [plural(count, "response") for count in (0, 1, 2)] == ["0 responses", "1 response", "2 responses"]
