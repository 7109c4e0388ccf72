"""``hf-adapters perplexity FILE...``: the bytes of a file as they are, text that is not UTF-8, long texts without
white space, and ``--stride`` against the model's positions."""

from __future__ import annotations

import io
import re
import sys

import pytest

from hf_adapters.cli import main
from hf_adapters.formulas.perplexity import compute_perplexity
from tests.conftest import LONG_CJK


def table_rows(out: str, header: str) -> list[list[str]]:
    """The data lines of the text table whose header line starts with ``header``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def cli_perplexity(model_dir: str, *files: str, extra: tuple[str, ...] = ()) -> int:
    return main(["perplexity", *files, "--model", model_dir, "--max-length", "64", "--no-progress", *extra])


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_perplexity_scores_the_bytes_of_a_file_as_they_are(tmp_path, model_dir, capsys, newline):
    """From the round-three review: silently wrong."""
    text = newline.join(["The quick brown fox jumps over the lazy dog.", "Write a short poem about the sea.",
                         "Cats are small mammals.", ""])
    path = tmp_path / "doc.txt"
    path.write_bytes(text.encode("utf-8"))
    assert cli_perplexity(model_dir, str(path)) == 0
    [[_, size, tokens, perplexity, _]] = table_rows(capsys.readouterr().out, "file")
    expected = compute_perplexity([text], model_id=model_dir, max_length=64, stride=64, return_token_losses=True)
    as_lf = compute_perplexity([text.replace(newline, "\n")], model_id=model_dir, max_length=64, stride=64)
    assert f"{as_lf['perplexities'][0]:.3f}" != f"{expected['perplexities'][0]:.3f}"  # the test can tell them apart
    assert int(size) == len(text.encode("utf-8"))
    assert int(tokens) == len(expected["token_losses"][0])
    assert perplexity == f"{expected['perplexities'][0]:.3f}"


def test_perplexity_batches_by_the_token_budget_given_on_the_command_line(tmp_path, model_dir, monkeypatch):
    from hf_adapters.backends import TransformersBackend

    budgets, original = [], TransformersBackend.batch_limits
    monkeypatch.setattr(TransformersBackend, "batch_limits",
                        lambda self, *args: budgets.append(self.max_batch_tokens) or original(self, *args))
    path = tmp_path / "doc.txt"
    path.write_text("The quick brown fox jumps over the lazy dog.", encoding="utf-8")
    assert cli_perplexity(model_dir, str(path), extra=("--max-batch-tokens", "32")) == 0
    assert budgets and set(budgets) == {32}


def test_perplexity_refuses_invalid_utf8_on_stdin_with_a_message(model_dir, capsys, monkeypatch):
    """From the round-three review: silently wrong."""
    stdin = io.TextIOWrapper(io.BytesIO(b"valid text \xff\xfe then more"), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert cli_perplexity(model_dir, "-") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "UTF-8" in err


def test_perplexity_of_a_long_text_without_white_space_gives_inf_word_perplexity(tmp_path, model_dir, capsys):
    """From the round-three review: jobs that never finish."""
    path = tmp_path / "zho.txt"
    path.write_text(LONG_CJK, encoding="utf-8")
    assert cli_perplexity(model_dir, str(path), extra=("--stride", "32")) == 0
    [[word]] = [[row[1]] for row in table_rows(capsys.readouterr().out, "token perplexity")]
    assert word.lower() in ("inf", "infinity")


def test_perplexity_with_stride_caps_max_length_at_the_model_positions(tmp_path, model_dir, tokenizer, capsys):
    """From the round-three review: jobs that never finish."""
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 80)
    assert len(tokenizer(text).input_ids) > 600  # longer than the model's 512 positions
    path = tmp_path / "long.txt"
    path.write_text(text, encoding="utf-8")
    code = main(["perplexity", str(path), "--model", model_dir, "--max-length", "2048", "--stride", "256",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Item" not in err


def test_stride_zero_has_one_meaning_on_the_command_line_and_in_the_metric(tmp_path, model_dir, capsys):
    """From the round-three review: jobs that never finish."""
    import evaluate

    path = tmp_path / "doc.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. " * 10, encoding="utf-8")
    try:
        code = cli_perplexity(model_dir, str(path), extra=("--stride", "0"))
    except SystemExit as exit_:
        code = exit_.code
    metric = evaluate.load("./metrics/perplexity")
    try:
        metric.compute(predictions=[path.read_text(encoding="utf-8")], model_id=model_dir, max_length=64, stride=0)
        metric_refuses = False
    except (ValueError, TypeError):
        metric_refuses = True
    assert (code != 0) == metric_refuses, (code, metric_refuses, capsys.readouterr().err)


def test_the_perplexity_progress_bar_counts_scored_tokens(tmp_path, model_dir, capsys):
    path = tmp_path / "doc.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    assert main(["perplexity", str(path), "--model", model_dir, "--max-length", "64", "--stride", "16"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    tokens = int(lines[lines.index(next(line for line in lines if line.startswith("file"))) + 2].split()[2])
    totals = re.findall(r"(\d+)/(\d+) \[[^\]]*tok", captured.err)
    assert totals, captured.err
    assert int(totals[-1][1]) == tokens


def test_perplexity_names_the_files_without_tokens(tmp_path, model_dir, capsys):
    empty, text = tmp_path / "empty.txt", tmp_path / "text.txt"
    empty.write_text("", encoding="utf-8")
    text.write_text("The quick brown fox.", encoding="utf-8")
    main(["perplexity", str(text), str(empty), "--model", model_dir, "--max-length", "64", "--no-progress"])
    captured = capsys.readouterr()
    said = [line for line in (captured.out + captured.err).splitlines() if "no token" in line]
    assert any("empty.txt" in line and "text.txt" not in line for line in said), captured
    assert main(["perplexity", str(empty), "--model", model_dir, "--max-length", "64", "--no-progress"]) != 0
