"""Each metric folder is a Hub-ready module: the app its card names, requirements that install what it imports."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import evaluate
import pandas as pd
import pytest
import yaml

from hf_adapters.ifeval import compute_ifeval, demo_rows
from hf_adapters.integrations.module_widget import build_widget, compute_from_table

ROOT = Path(__file__).resolve().parents[1]
METRICS = sorted(path for path in (ROOT / "metrics").iterdir() if path.is_dir())


def requirement_names(lines: list[str]) -> set[str]:
    return {re.split(r"[<>=!~ \[]", line.strip())[0].lower().replace("_", "-")
            for line in lines if line.strip() and not line.strip().startswith("#")}


@pytest.mark.parametrize("folder", METRICS, ids=[path.name for path in METRICS])
def test_the_card_names_an_app_file_that_exists(folder):
    header = yaml.safe_load((folder / "README.md").read_text(encoding="utf-8").split("---")[1])
    assert header["sdk"] == "gradio" and (folder / header["app_file"]).is_file()


@pytest.mark.parametrize("folder", METRICS, ids=[path.name for path in METRICS])
def test_requirements_install_the_library_runtime(folder):
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    needed = requirement_names(setup["options"]["install_requires"].splitlines())
    listed = requirement_names((folder / "requirements.txt").read_text().splitlines())
    assert needed <= listed, f"missing from {folder.name}/requirements.txt: {sorted(needed - listed)}"


def test_the_widget_computes_the_module_on_its_table():
    module = evaluate.load(str(ROOT / "metrics" / "ifeval"))
    rows = demo_rows()
    table = pd.DataFrame({"predictions": [row["response"] for row in rows],
                          "references": [json.dumps(row) for row in rows]})
    result = compute_from_table(module, table, json_columns=("references",))
    assert result["prompt_level_strict_acc"] == compute_ifeval([row["response"] for row in rows], rows)[
        "prompt_level_strict_acc"]
    assert build_widget(module, json_columns=("references",)).title == f"Metric: {module.name}"
