"""Where vLLM is not installed, asking for the vllm backend is one line naming what to install."""

from __future__ import annotations

import importlib.util

import pytest

from hf_adapters import cli
from hf_adapters.backends import backend_class
from hf_adapters.backends.vllm import VLLMUnavailableError
from hf_adapters.formulas.perplexity import compute_perplexity

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def test_the_vllm_backend_without_vllm_is_an_error_naming_what_to_install(model_dir):
    with pytest.raises(VLLMUnavailableError, match=r"not installed: install it: `pip install 'hf_adapters\[vllm\]'"):
        compute_perplexity(["Some text."], backend="vllm", model_id=model_dir)


@pytest.mark.parametrize("command", ["perplexity", "ifeval"])
def test_the_command_line_says_so_in_one_line_and_exits_2(command, model_dir, tmp_path, capsys):
    if command == "perplexity":
        document = tmp_path / "doc.txt"
        document.write_text("Some text to score.", encoding="utf-8")
        argv = ["perplexity", str(document), "--model", model_dir, "--backend", "vllm", "--no-progress"]
    else:
        argv = ["ifeval", "--output", str(tmp_path / "run"), "--model", model_dir, "--backend", "vllm",
                "--limit", "1", "--no-progress"]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: The vllm backend needs vLLM, which is not installed") and "\n" not in error
    assert "make vllm" in error


def test_the_vllm_backend_identifies_a_model_without_vllm(model_dir):
    identity = backend_class("vllm").identify(model_dir)
    assert identity["backend"] == "vllm" and identity["vllm"] is None and identity["files"]
