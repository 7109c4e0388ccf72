"""What every command of ``hf_adapters.cli.main`` shares: errors as one line starting with ``error:``,
and help and argument errors answered without importing torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_adapters import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["parity"], ["demo", "--model", "no/such-model-here"]], ids=["parity", "demo"])
def test_command_errors_are_one_line_starting_with_error(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err


def test_no_command_prints_an_error_with_another_prefix():
    """Every ``print("word: ...", file=sys.stderr)`` of the command line says ``error:``, as argparse does, or
    ``note:`` for a line that stops nothing (a bare embeddings array used as given)."""
    sources = Path(cli.__file__).parent.glob("*.py")
    prefixes = {match for path in sources
                for match in re.findall(r"print\(f?\"(\w+): .*file=sys\.stderr", path.read_text(encoding="utf-8"))}
    assert prefixes <= {"error", "note"}, prefixes


@pytest.mark.parametrize("argv", [["--help"], ["perplexity", "--help"], ["select", "--top", "5%"]])
def test_help_and_argument_errors_do_not_import_torch(argv):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_adapters", *argv], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == (0 if "--help" in argv else 2), done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported, f"torch imported ({time.perf_counter() - started:.1f} s)"
