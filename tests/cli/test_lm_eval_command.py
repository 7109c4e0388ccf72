"""``hf-adapters lm-eval``: without lm-eval installed, one line saying how to install it; the arguments it
hands to lm-eval are refused by every other command."""

from __future__ import annotations

import importlib.util

import pytest

from hf_adapters import cli


def test_lm_eval_without_lm_eval_installed_says_how_to_install_it(monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "lm_eval"
                        else find_spec(name, *rest))
    assert cli.main(["lm-eval", "--model", "hf-adapters", "--tasks", "ifeval"]) == 2
    assert capsys.readouterr().err == ("error: lm-evaluation-harness is not installed: "
                                       "pip install 'hf_adapters[lm-eval]'\n")


def test_other_commands_still_refuse_arguments_they_do_not_take(capsys):
    with pytest.raises(SystemExit):
        cli.main(["summary", "scores.jsonl", "--model_args", "x"])
    assert "unrecognized arguments: --model_args x" in capsys.readouterr().err
