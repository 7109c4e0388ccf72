"""What the package prints beside its results: its warnings as one line, log lines above the progress bars."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import warnings

from tqdm import tqdm

from hf_adapters.core.console import LogAboveBarsHandler, warn_user
from tests.spaces.spaces_fixtures import ROOT, tiny_model_dir_fixture  # noqa: F401  (fixture)


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


def test_the_command_lines_row_warning_is_written_above_its_progress_bar(tiny_model_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "instruction": f"Say {i}.", "output": "A fox. " * i}) + "\n"
                            for i in range(4)), encoding="utf-8")
    config = tmp_path / "ifd.yaml"
    config.write_text(f"name: IFDScorer\nmodel: {tiny_model_dir}\nbatch_size: 2\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "hf_adapters", "score", str(config), "--data", str(rows),
                             "--output", str(tmp_path / "scores.jsonl")],
                            cwd=tmp_path, capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert "Row 0 (id=0) has an empty output; its IFD is NaN.\n" in result.stderr, result.stderr
    bar_then_text = re.search(r"Scoring:[^\r\n]*\][^\r\n]+", result.stderr)
    assert bar_then_text is None, repr(bar_then_text.group(0))


def test_the_command_lines_last_progress_line_is_written_once(tiny_model_dir, tmp_path):
    """The local engine's bar at its end: the line of the final count once, not drawn again by closing the bar
    (every update draws here, as the last one does on a slow model)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "instruction": f"Say {i}.", "output": "A fox."}) + "\n"
                            for i in range(4)), encoding="utf-8")
    config = tmp_path / "ppl.yaml"
    config.write_text(f"name: PPLScorer\nmodel: {tiny_model_dir}\nbatch_size: 2\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "hf_adapters", "score", str(config), "--data", str(rows),
                             "--output", str(tmp_path / "scores.jsonl"), "--save-every", "2"],
                            cwd=tmp_path, capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TQDM_MININTERVAL": "0"})
    assert len(re.findall(r"Scoring: *100%", result.stderr)) == 1, result.stderr


def test_a_warning_for_the_user_goes_above_the_progress_bar_on_stderr(capsys, monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", lambda message, category, filename, lineno, file=None, line=None:
                        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line)))
    with warnings.catch_warnings(), tqdm(total=10, file=sys.stderr, desc="Scoring", mininterval=0, ascii=True) as bar:
        warnings.simplefilter("always")
        bar.update(3)
        warn_user("The thing is slow here.", ExampleWarning)
        bar.update(7)
    before, _, after = capsys.readouterr().err.partition("ExampleWarning: The thing is slow here.\n")
    assert after and before.endswith("\r"), repr(before[-60:])
    assert "Scoring: 100%" in after
