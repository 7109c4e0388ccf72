"""Every folder of ``metrics/`` is a Hub-ready evaluate module on the one base (as evaluate's own
``test_metric_common.py`` checks its metrics): it loads, its MetricInfo carries its card, its card and
app exist, its requirements install what it imports, its documented examples (docstring and card) run,
and its script holds class attributes only (the glue lives in ``hf_adapters.integrations.evaluate_modules``).

evaluate gets no more fixes upstream (setup.cfg pins the range tested): loading every module with the
installed evaluate, datasets and huggingface-hub and running its examples here is what shows a breaking
release of one of them in CI."""

from __future__ import annotations

import ast
import configparser
import doctest
import json
import re
from pathlib import Path

import datasets
import evaluate
import pandas as pd
import pytest
import yaml

from hf_adapters.ifeval import compute_ifeval, demo_rows
from hf_adapters.integrations.evaluate_modules import ScorerMetric
from hf_adapters.integrations.module_widget import build_widget, compute_from_table

ROOT = Path(__file__).resolve().parents[2]
METRICS = sorted(path for path in (ROOT / "metrics").glob("*/") if path.is_dir())
IDS = [path.name for path in METRICS]


def script(folder: Path) -> Path:
    """The module's script: evaluate loads ``NAME/NAME.py``."""
    return folder / f"{folder.name}.py"


def script_classes(folder: Path) -> list[ast.ClassDef]:
    return [node for node in ast.parse(script(folder).read_text(encoding="utf-8")).body
            if isinstance(node, ast.ClassDef)]


def runs_a_model(folder: Path) -> bool:
    """Whether the module names a scorer (its example then loads the embedded default model)."""
    return any(isinstance(node, ast.Assign) and any(getattr(target, "id", "") == "scorer" for target in node.targets)
               for cls in script_classes(folder) for node in cls.body)


def requirement_names(lines: list[str]) -> set[str]:
    return {re.split(r"[<>=!~ \[]", line.strip())[0].lower().replace("_", "-")
            for line in lines if line.strip() and not line.strip().startswith("#")}


def card_header(folder: Path) -> dict:
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{folder.name}/README.md opens with no YAML header"
    return yaml.safe_load(text.split("---")[1])


def load(folder: Path) -> evaluate.EvaluationModule:
    """The folder's module, loaded from its path (no hub involved); fresh, so that no test sees another's rows."""
    return evaluate.load(str(folder))


def check_metric_info(module: evaluate.EvaluationModule) -> None:
    """The module is on the base, and its MetricInfo carries its card: description, citation, the
    inputs description (each column described, an example), string features named after its columns."""
    info = module.info
    assert isinstance(module, ScorerMetric)
    assert info.description.strip() and info.citation.strip().startswith("@")
    assert all(section in info.inputs_description for section in ("Args:", "Returns:", "Examples:", ">>> "))
    assert info.features == datasets.Features({column: datasets.Value("string") for column in module.columns})
    for column in module.columns:
        assert f"    {column} (" in info.inputs_description, f"the card does not describe `{column}`"
    assert type(module).__doc__.startswith(info.description)


def check_script_holds_class_attributes_only(folder: Path) -> None:
    """The glue is gone: no function anywhere, one class on the base whose body sets class attributes."""
    tree = ast.parse(script(folder).read_text(encoding="utf-8"))
    assert not [node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    (cls,) = script_classes(folder)
    assert [ast.unparse(base) for base in cls.bases] == ["ScorerMetric"]
    assert all(isinstance(node, ast.Assign) for node in cls.body), ast.unparse(cls)


def check_card_and_app(folder: Path) -> None:
    """The card's YAML header names the module, its tags and its Space's app, which exists."""
    header = card_header(folder)
    assert header["title"] and header["description"]
    assert {"evaluate", "metric"} <= set(header["tags"])
    assert header["sdk"] == "gradio" and header["app_file"] == "app.py" and (folder / "app.py").is_file()


def check_requirements(folder: Path) -> None:
    """``requirements.txt`` installs the library's runtime (``setup.cfg``'s ``install_requires``)."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    needed = requirement_names(setup["options"]["install_requires"].splitlines())
    listed = requirement_names((folder / "requirements.txt").read_text().splitlines())
    assert needed <= listed, f"missing from {folder.name}/requirements.txt: {sorted(needed - listed)}"


def check_documented_example(folder: Path) -> None:
    """The ``>>>`` lines of the module's inputs description pass as a doctest, run from the current
    folder (where its ``evaluate.load("./metrics/NAME")`` finds it)."""
    example = doctest.DocTestParser().get_doctest(load(folder).info.inputs_description, {"evaluate": evaluate},
                                                  folder.name, str(script(folder)), 0)
    assert example.examples, f"{folder.name} documents no example"
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert runner.run(example, out=report.append).failed == 0, "".join(report)


def card_example(folder: Path) -> str:
    """The first Python block of the card's "How to Use" section, as code (a doctest's lines without
    their outputs)."""
    section = (folder / "README.md").read_text(encoding="utf-8").split("## How to Use", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    if block.lstrip().startswith(">>>"):
        return "".join(example.source for example in doctest.DocTestParser().get_examples(block))
    return block


def test_every_module_folder_is_found():
    assert {"excess_loss", "ifd", "ifeval", "information_parity", "perplexity"} <= set(IDS)


@pytest.mark.parametrize("folder", METRICS, ids=IDS)
def test_the_module_loads_on_the_base_with_its_card_in_its_metric_info(folder):
    check_metric_info(load(folder))


@pytest.mark.parametrize("folder", [folder for folder in METRICS if runs_a_model(folder)],
                         ids=[folder.name for folder in METRICS if runs_a_model(folder)])
def test_a_module_with_a_scorer_names_itself_after_its_folder_in_errors(folder):
    module = load(folder)
    rows = {column: ["Some text."] for column in module.columns}
    with pytest.raises(ValueError, match=rf"^{folder.name}\.compute got unknown option\(s\) \['temperature'\]"):
        module.compute(**rows, temperature=0.5)


@pytest.mark.parametrize("folder", METRICS, ids=IDS)
def test_a_bad_row_or_a_missing_column_is_named_before_evaluate_casts_it(folder):
    module = load(folder)
    first = next(iter(module.columns))
    bad_rows = {column: ["Some text.", 3] for column in module.columns}
    for add in (module.compute, module.add_batch):
        with pytest.raises(TypeError, match=rf"`{first}`\[1\] must be a string, got int"):
            add(**bad_rows)
    with pytest.raises(TypeError, match=rf"`{first}` is missing"):
        module.compute()
    if len(module.required_columns) > 1:
        with pytest.raises(ValueError, match=r"same length|parallel"):
            module.compute(**{column: ["Some text."] * (2 if column == first else 1) for column in module.columns})


@pytest.mark.parametrize("folder", METRICS, ids=IDS)
def test_the_script_holds_its_card_columns_and_scorer_only(folder):
    check_script_holds_class_attributes_only(folder)


@pytest.mark.parametrize("folder", METRICS, ids=IDS)
def test_the_card_has_a_yaml_header_naming_an_app_file_that_exists(folder):
    check_card_and_app(folder)


@pytest.mark.parametrize("folder", METRICS, ids=IDS)
def test_requirements_install_the_library_runtime(folder):
    check_requirements(folder)


@pytest.mark.parametrize("folder", [pytest.param(folder, marks=[pytest.mark.slow] if runs_a_model(folder) else [])
                                    for folder in METRICS], ids=IDS)
def test_the_documented_example_runs(folder, monkeypatch):
    """From the repository root; a module with a scorer runs the embedded default model."""
    monkeypatch.chdir(ROOT)
    check_documented_example(folder)


@pytest.mark.parametrize("folder", METRICS, ids=IDS)
def test_the_cards_example_runs_on_the_installed_evaluate_datasets_and_hub(folder, load_calls, monkeypatch):
    """The card's "How to Use" example, as written, from the repository root: evaluate.load of the
    folder, then compute. The model it names (the default one, or a placeholder path) is the tiny
    model here, so that every module's calls into evaluate and datasets run in seconds; the numbers
    are checked by the docstring examples above."""
    monkeypatch.chdir(ROOT)
    code = card_example(folder)
    assert f'evaluate.load("./metrics/{folder.name}")' in code
    exec(compile(code, str(folder / "README.md"), "exec"), {})
    assert bool(load_calls) == runs_a_model(folder)


def test_the_widget_computes_the_module_on_its_table():
    module = load(ROOT / "metrics" / "ifeval")
    rows = demo_rows()
    table = pd.DataFrame({"predictions": [row["response"] for row in rows],
                          "references": [json.dumps(row) for row in rows]})
    result = compute_from_table(module, table, json_columns=("references",))
    assert result["prompt_level_strict_acc"] == compute_ifeval([row["response"] for row in rows], rows)[
        "prompt_level_strict_acc"]
    assert build_widget(module, json_columns=("references",)).title == f"Metric: {module.name}"
