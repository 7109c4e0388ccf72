"""What the package prints beside its results: its warnings as one line, log lines above the progress bars."""

from __future__ import annotations

import io
import logging
import re
import warnings

from tqdm import tqdm

from hf_adapters.core.console import LogAboveBarsHandler, warn_user


class ExampleWarning(UserWarning):
    pass


def test_a_warning_for_the_user_is_formatted_as_one_line_and_other_warnings_as_python_formats_them(monkeypatch):
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, category, filename, lineno, file=None, line=None:
                        shown.append(warnings.formatwarning(message, category, filename, lineno, line)))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warn_user("The thing is slow here.", ExampleWarning)
        warnings.warn("Another library's warning.", UserWarning, stacklevel=1)
    assert shown[0] == "ExampleWarning: The thing is slow here.\n"
    assert re.match(r".*test_console\.py:\d+: UserWarning: Another library's warning\.\n", shown[1])


def test_a_rows_log_line_goes_above_the_progress_bar_and_not_at_the_end_of_its_line():
    stream = io.StringIO()
    logger = logging.getLogger("hf_adapters.test_console")
    handler = LogAboveBarsHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with tqdm(total=10, file=stream, desc="Scoring", mininterval=0, ascii=True) as bar:
            bar.update(3)
            logger.warning("Row 3 has an empty output; its perplexity is NaN.")
            bar.update(7)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    written = stream.getvalue()
    before, _, after = written.partition("Row 3 has an empty output; its perplexity is NaN.\n")
    assert after, written
    assert before.endswith("\r"), "the line was written after the bar's text: " + repr(before[-60:])
    assert "Scoring: 100%" in after  # the bar is drawn again below the line
