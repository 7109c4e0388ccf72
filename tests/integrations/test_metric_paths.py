"""``hf_adapters.metric_path``: the evaluate modules of ``metrics/`` load from any working directory, from a
checkout and from an installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import evaluate
import pytest

from hf_adapters import metric_path

ROOT = Path(__file__).resolve().parents[2]


def test_a_metric_module_loads_by_its_path_from_a_directory_outside_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    row = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    result = evaluate.load(metric_path("ifeval")).compute(predictions=["Hello world."], references=[row])
    assert result["prompt_level_strict_acc"] == 1.0
    assert Path(metric_path("ifd")) == ROOT / "metrics" / "ifd"


def test_an_unknown_metric_name_is_an_error_naming_the_shipped_modules():
    with pytest.raises(ValueError, match=r"no evaluate module named 'ifdd'; the package ships .*\bifd\b"):
        metric_path("ifdd")


def test_an_installed_package_ships_the_metric_modules_and_loads_them_from_anywhere(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("hf_adapters", "metrics"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", tmp_path / "wheel", source],
                   check=True, capture_output=True)
    wheel = next((tmp_path / "wheel").glob("hf_adapters-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", tmp_path / "site", wheel],
                   check=True, capture_output=True)
    check = ("import evaluate, hf_adapters; path = hf_adapters.metric_path('ifeval'); "
             "assert path.startswith(hf_adapters.__path__[0]), path; print(type(evaluate.load(path)).__name__)")
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = subprocess.run([sys.executable, "-c", check], cwd=work, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "IFEval"
