"""The options the commands share (``hf_adapters.cli.arguments``): help text for every option, the
same ``--dtype`` values everywhere, and ``--no-progress``."""

from __future__ import annotations

import re

import pytest

from hf_adapters import clear_model_cache
from hf_adapters.cli import main


def help_text(command: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["demo", "parity", "perplexity", "score", "select"])
def test_every_command_and_option_has_help_text(command, capsys):
    text = help_text(command, capsys)
    head, _, options = text.partition("\noptions:\n")
    assert "\n\n" in head.strip(), f"`{command} --help` has no description"
    lines = options.splitlines()
    bare = [line.strip() for number, line in enumerate(lines)
            if re.match(r"^  -", line) and not re.match(r"^  -\S.*?\s{2,}\S", line)
            and not (number + 1 < len(lines) and re.match(r"^ {6,}\S", lines[number + 1]))]
    assert not bare, f"options of `{command}` without help: {bare}"


def test_dtype_offers_the_same_values_in_every_command(capsys):
    offered = {}
    for command in ("demo", "parity", "perplexity", "score"):
        text = help_text(command, capsys)
        block = re.search(r"\n  --dtype.*?(?=\n  -|\n\n|\Z)", text, re.S).group(0)
        offered[command] = sorted(set(re.findall(r"\b(?:b?float\d+|fp\d+|bf16|half)\b", block)))
    assert len({tuple(values) for values in offered.values()}) == 1, offered


def test_no_progress_hides_every_progress_bar(tmp_path, model, tokenizer, capsys):
    folder = tmp_path / "model"  # a model not loaded yet in this process
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    path = tmp_path / "doc.txt"
    path.write_text("The quick brown fox.", encoding="utf-8")
    capsys.readouterr()
    try:
        assert main(["perplexity", str(path), "--model", str(folder), "--max-length", "64", "--no-progress"]) == 0
    finally:
        clear_model_cache(str(folder))
    err = capsys.readouterr().err
    assert not re.search(r"\d+%\|", err), err
