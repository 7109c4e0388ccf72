"""The guide docs/guides/adding_a_score.md, followed once. Its worked example is the throwaway score
`answer_nll` (the mean NLL of an answer after its instruction). The guide's titled blocks run as the
files they name: package modules imported under their names, the metric folder, the config and the
Space tab written to a temporary folder. Its edits to existing files are made here, for this module's
tests only, and undone afterwards, the registered scorer included. The score is then checked against
a naive computation through the formula, `add_score_columns`, `hf-adapters score`, `evaluate.load`
of the module folder and the Space tab."""

from __future__ import annotations

import importlib
import inspect
import math
import re
import shutil
import sys
import types
from pathlib import Path

import evaluate
import pytest
from datasets import Dataset

import hf_adapters
from hf_adapters import add_score_columns, cli
from hf_adapters.core.likelihood import start_token_id
from hf_adapters.scorers import SCORERS, build_scorer, load_config
from tests.conftest import assert_exact, naive_nll, read_jsonl, write_jsonl
from tests.integrations.test_metric_modules import (
    check_card_and_app,
    check_documented_example,
    check_metric_info,
    check_requirements,
    check_script_holds_class_attributes_only,
)
from tests.spaces.spaces_fixtures import app_fixture  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "adding_a_score.md"
#: A block whose info string has a title: the file the title names (an edit to it when the title says "(add)").
TITLED_BLOCK = re.compile(r'^```\w+ title="([^"]+)"\n(.*?)^```[ \t]*$', re.S | re.M)
ROWS = [
    {"id": "a", "instruction": "Write a short poem about the sea.", "output": "The sea is wide and deep."},
    {"id": "b", "instruction": "Name a primary colour.", "output": "Red."},
    {"id": "c", "instruction": "Say nothing.", "output": ""},
]
INSTRUCTIONS = [row["instruction"] for row in ROWS]
OUTPUTS = [row["output"] for row in ROWS]


def guide_blocks() -> dict[str, str]:
    """The guide's titled blocks: the path each title names -> the block's text."""
    return {title.split()[0]: text for title, text in TITLED_BLOCK.findall(GUIDE.read_text(encoding="utf-8"))}


def import_as(name: str, path: str, code: str, patch: pytest.MonkeyPatch) -> types.ModuleType:
    """``code`` run as the package module ``name`` (the file ``path``), importable by that name until
    ``patch`` is undone."""
    module = types.ModuleType(name)
    module.__file__ = str(ROOT / path)
    patch.setitem(sys.modules, name, module)
    package, _, attribute = name.rpartition(".")
    patch.setattr(importlib.import_module(package), attribute, module, raising=False)
    exec(compile(code, module.__file__, "exec"), module.__dict__)
    return module


def naive_answer_nlls(model, tokenizer, instructions=INSTRUCTIONS, outputs=OUTPUTS) -> list[float]:
    """Per row, one unbatched forward pass: the mean NLL of the output's tokens after the instruction's
    and a newline's (NaN for an empty output)."""
    values = []
    for instruction, output in zip(instructions, outputs, strict=True):
        prompt = tokenizer(instruction + "\n", add_special_tokens=False).input_ids
        answer = tokenizer(output, add_special_tokens=False).input_ids
        total, count = naive_nll(model, prompt, answer, start_token_id(tokenizer))
        values.append(total / count if count else math.nan)
    return values


@pytest.fixture(scope="module")
def answer_nll(tmp_path_factory):
    """The guide's steps 1 to 7: a repository folder holding the new metric module and config, with the
    new package modules importable and the existing files' edits made."""
    blocks = guide_blocks()
    repository = tmp_path_factory.mktemp("repository")
    with pytest.MonkeyPatch.context() as patch:
        try:
            import_as("hf_adapters.formulas.answer_nll", "hf_adapters/formulas/answer_nll.py",
                                blocks["hf_adapters/formulas/answer_nll.py"], patch)
            scorer = import_as("hf_adapters.scorers.answer_nll_scorer", "hf_adapters/scorers/answer_nll_scorer.py",
                               blocks["hf_adapters/scorers/answer_nll_scorer.py"], patch).AnswerNLLScorer
            patch.setattr(hf_adapters.scorers, "AnswerNLLScorer", scorer, raising=False)  # its import in __init__
            columns = import_as("hf_adapters.columns.answer_nll_columns", "hf_adapters/columns/answer_nll_columns.py",
                                blocks["hf_adapters/columns/answer_nll_columns.py"], patch)
            patch.setattr(hf_adapters.columns, "add_answer_nll_column", columns.add_answer_nll_column, raising=False)
            for path in ("metrics/answer_nll/answer_nll.py", "metrics/answer_nll/README.md",
                         "metrics/answer_nll/app.py", "hf_adapters/configs/answer_nll.yaml"):
                (repository / path).parent.mkdir(parents=True, exist_ok=True)
                (repository / path).write_text(blocks[path], encoding="utf-8")
            shutil.copy(ROOT / "metrics" / "ifd" / "requirements.txt", repository / "metrics" / "answer_nll")
            patch.setitem(hf_adapters._EXPORTS, "compute_answer_nll", "formulas.answer_nll")
            patch.setitem(hf_adapters._EXPORTS, "add_answer_nll_column", "columns.answer_nll_columns")
            yield types.SimpleNamespace(root=repository, metric=repository / "metrics" / "answer_nll",
                                        config=repository / "hf_adapters" / "configs" / "answer_nll.yaml",
                                        scorer=scorer, space_tab=blocks["spaces_demo/space_inputs.py"])
        finally:
            SCORERS.pop("AnswerNLLScorer", None)


def test_the_guide_lists_every_file_its_example_writes():
    table = GUIDE.read_text(encoding="utf-8").split("## 1.")[0]
    for path in guide_blocks():
        assert f"`{path}`" in table or f"`{path.rsplit('/', 1)[0]}/`" in table, path


def test_the_formula_matches_the_naive_computation_and_is_a_public_name(answer_nll, model, tokenizer):
    result = hf_adapters.compute_answer_nll(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer)
    assert_exact(result["answer_nlls"], lambda m: naive_answer_nlls(m, tokenizer), model)
    assert math.isnan(result["answer_nlls"][2])
    assert result["mean_answer_nll"] == pytest.approx(sum(result["answer_nlls"][:2]) / 2)
    for entry_point in (hf_adapters.compute_answer_nll, hf_adapters.add_answer_nll_column):
        assert inspect.signature(entry_point).parameters["separator"].default == "\n"
    with pytest.raises(ValueError, match=r"compute_answer_nll got unknown option\(s\) \['seperator'\]"):
        hf_adapters.compute_answer_nll(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer, seperator=" ")


def test_add_score_columns_and_the_column_helper_give_the_naive_numbers(answer_nll, model, tokenizer):
    ds = Dataset.from_list(ROWS)
    scored = list(add_score_columns(ds, answer_nll.scorer(model=model, tokenizer=tokenizer))["answer_nll"])
    assert_exact(scored, lambda m: naive_answer_nlls(m, tokenizer), model)
    helped = hf_adapters.add_answer_nll_column(ds.rename_column("output", "answer"), output_column="answer",
                                               column="nll", model=model, tokenizer=tokenizer)
    assert helped.column_names == ["id", "instruction", "answer", "nll"]
    assert list(helped["nll"]) == pytest.approx(scored, rel=1e-12, nan_ok=True)


def test_the_seed_config_builds_the_scorer_and_runs_on_the_command_line(answer_nll, model, tokenizer, model_dir,
                                                                       tmp_path):
    assert type(build_scorer(load_config(answer_nll.config))) is answer_nll.scorer
    output = tmp_path / "scores.jsonl"
    argv = ["score", str(answer_nll.config), "--data", str(write_jsonl(tmp_path / "rows.jsonl", ROWS)),
            "--output", str(output), "--model", model_dir, "--no-progress"]
    assert cli.main(argv) == 0
    lines = read_jsonl(output)
    assert [line["id"] for line in lines] == ["a", "b", "c"] and lines[2]["score"] is None
    assert_exact([math.nan if line["score"] is None else line["score"] for line in lines],
                 lambda m: naive_answer_nlls(m, tokenizer), model)


def test_the_metric_folder_loads_on_the_base_and_gives_the_naive_numbers(answer_nll, model, tokenizer):
    for check in (check_script_holds_class_attributes_only, check_card_and_app, check_requirements):
        check(answer_nll.metric)
    module = evaluate.load(str(answer_nll.metric))
    check_metric_info(module)
    result = module.compute(instructions=INSTRUCTIONS, outputs=OUTPUTS, model=model, tokenizer=tokenizer)
    assert_exact(result["answer_nlls"], lambda m: naive_answer_nlls(m, tokenizer), model)
    with pytest.raises(ValueError, match=r"^answer_nll\.compute got unknown option\(s\) \['seperator'\]"):
        evaluate.load(str(answer_nll.metric)).compute(instructions=["a"], outputs=["b"], seperator=" ")
    with pytest.raises(TypeError, match=r"`outputs`\[1\] must be a string"):
        evaluate.load(str(answer_nll.metric)).compute(instructions=["a", "b"], outputs=["c", None])
    with pytest.raises(ValueError, match=r"`instructions` and `outputs` must have the same length"):
        evaluate.load(str(answer_nll.metric)).compute(instructions=["a", "b"], outputs=["c"])


@pytest.mark.slow
def test_the_metric_folders_documented_example_runs(answer_nll, monkeypatch):
    monkeypatch.chdir(answer_nll.root)
    check_documented_example(answer_nll.metric)


def test_the_space_tab_scores_its_example_as_the_naive_computation(answer_nll, app, model, tokenizer, model_dir):
    namespace = dict(vars(sys.modules["space_inputs"]))
    exec(compile(answer_nll.space_tab, "spaces_demo/space_inputs.py", "exec"), namespace)
    task = namespace["ANSWER_NLL"]
    rows, _ = app.load_rows(task, task.example, None)
    table, summary, _, _ = app.score_with_model(task, task.example, None, model_dir)
    instructions, outputs = [row["instruction"] for row in rows], [row["output"] for row in rows]
    assert_exact(list(table["answer_nll"]), lambda m: naive_answer_nlls(m, tokenizer, instructions, outputs), model)
    assert summary["rows"] == len(rows) and summary["mean_answer_nll"] == pytest.approx(table["answer_nll"].mean())
