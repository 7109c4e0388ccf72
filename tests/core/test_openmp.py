"""The command line lets OpenMP threads wait passively (fast beside busy processes), unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hf_adapters import cli
from hf_adapters.core.openmp import WAIT_POLICY_ENV, wait_passively
from hf_adapters.engines.ray_columns import worker_environment


def test_importing_the_command_line_does_not_import_torch():
    """libgomp reads the policy when torch loads it: main must run before the first torch import."""
    code = "import sys, hf_adapters.cli; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_the_command_line_defaults_the_wait_policy_to_passive(monkeypatch):
    monkeypatch.delenv(WAIT_POLICY_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "torch")  # as in a fresh `hf-adapters` process
    with pytest.raises(SystemExit):
        cli.main(["summary", "--help"])
    assert os.environ[WAIT_POLICY_ENV] == "PASSIVE"


def test_a_wait_policy_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv(WAIT_POLICY_ENV, "ACTIVE")
    monkeypatch.delitem(sys.modules, "torch")
    wait_passively()
    assert os.environ[WAIT_POLICY_ENV] == "ACTIVE"


def test_nothing_is_set_once_torch_is_imported(monkeypatch):
    monkeypatch.delenv(WAIT_POLICY_ENV, raising=False)
    wait_passively()  # torch is imported in this test process: the setting would not take effect
    assert WAIT_POLICY_ENV not in os.environ


def test_ray_workers_get_the_wait_policy(monkeypatch):
    monkeypatch.setenv(WAIT_POLICY_ENV, "PASSIVE")
    assert worker_environment()[WAIT_POLICY_ENV] == "PASSIVE"
