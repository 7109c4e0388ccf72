"""The Space of this metric module: a form that computes it (the `hf_adapters` folder sits beside this file)."""

from pathlib import Path

import evaluate

from hf_adapters.integrations.module_widget import build_widget

build_widget(evaluate.load(str(Path(__file__).resolve().parent))).launch()
