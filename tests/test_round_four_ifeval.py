"""Regressions of issue "round four", IFEval cases: a bad line in the middle of a run's samples, a
prompt key that cannot be one, and a row with no instruction."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import evaluate
import pytest
from datasets import Dataset

from hf_adapters import add_ifeval_columns, cli
from hf_adapters.backends import TransformersBackend
from hf_adapters.ifeval import IFEvalInputError, compute_ifeval
from hf_adapters.ifeval.prompts import check_prompt_rows, read_prompts
from hf_adapters.ifeval.run_folder import recover_samples
from hf_adapters.scorers import build_scorer
from tests.conftest import read_jsonl, write_jsonl

METRIC_DIR = Path(__file__).resolve().parents[1] / "metrics" / "ifeval"
ROW = {"key": 1, "prompt": "Say hi without commas.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}


def run(*args: str) -> int:
    return cli.main(["ifeval", "--no-progress", *args])


def sample(key: int) -> dict:
    return {"key": key, "prompt": "p", "response": f"response {key}"}


def lines(*texts: str) -> bytes:
    return "".join(texts).encode("utf-8")


# 7. A blank or bad line in the middle of samples.jsonl


def test_a_blank_or_bad_line_mid_samples_skips_only_that_line_and_names_it(tmp_path, caplog):
    path = tmp_path / "samples.jsonl"
    whole = [json.dumps(sample(key)) + "\n" for key in range(4)]
    content = lines(whole[0], "\n", whole[1], "{not json\n", whole[2], "[1, 2]\n", whole[3])
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert recover_samples(path) == [sample(key) for key in range(4)]
    assert path.read_bytes() == content  # nothing cut: the later samples stay in the file
    [warning] = caplog.messages
    assert "line 2 (blank)" in warning and "line 4 (not JSON)" in warning and "line 6 (not a sample" in warning


def test_only_a_torn_last_sample_line_is_cut_off_and_it_is_named(tmp_path, caplog):
    path = tmp_path / "samples.jsonl"
    kept = lines(json.dumps(sample(0)) + "\n", "\n", json.dumps(sample(1)) + "\n")
    path.write_bytes(kept + b'{"key": 2, "prompt": "to')
    with caplog.at_level(logging.WARNING):
        assert recover_samples(path) == [sample(0), sample(1)]
    assert path.read_bytes() == kept
    assert "line 4 (torn" in caplog.text and "line 2 (blank)" in caplog.text


def test_a_run_resumed_over_a_blank_line_keeps_every_sample_after_it(model_dir, tmp_path, monkeypatch, caplog):
    folder = tmp_path / "out"
    args = ["--model", model_dir, "--limit", "4", "--max-new-tokens", "3", "--output", str(folder)]
    assert run(*args) == 0
    finished = read_jsonl(folder / "samples.jsonl")
    texts = (folder / "samples.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "samples.jsonl").write_text(texts[0] + "\n" + "".join(texts[1:]), encoding="utf-8")
    monkeypatch.setattr(TransformersBackend, "generate", lambda *a, **k: pytest.fail("nothing is left to generate"))
    with caplog.at_level(logging.WARNING):
        assert run(*args) == 0
    assert read_jsonl(folder / "samples.jsonl") == finished
    assert json.loads((folder / "results.json").read_text())["this_run"]["prompts_generated"] == 0
    assert "line 2 (blank)" in caplog.text


# 11. A prompt key that is a list or a dict


@pytest.mark.parametrize("key", [[1, 2], {"id": 1}])
def test_a_prompt_key_that_is_a_list_or_dict_is_a_value_error_naming_row_and_field(key, tmp_path, model_dir, capsys):
    data = write_jsonl(tmp_path / "prompts.jsonl", [ROW, dict(ROW, key=key)])
    with pytest.raises(ValueError, match=r"IFEval row 1: its 'key' must be an integer or a string"):
        read_prompts(data)
    with pytest.raises(ValueError, match=r"IFEval row 1: its 'key' must be an integer or a string"):
        check_prompt_rows([ROW, dict(ROW, key=key)])
    assert run("--model", model_dir, "--data", str(data), "--output", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: IFEval row 1: its 'key' must be") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_sample_line_whose_key_is_a_list_is_skipped_not_a_traceback(tmp_path, caplog):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(lines(json.dumps(dict(sample(0), key=[0])) + "\n", json.dumps(sample(1)) + "\n"))
    with caplog.at_level(logging.WARNING):
        assert recover_samples(path) == [sample(1)]
    assert "line 1 (not a sample" in caplog.text


# 16c. A row with an empty instruction_id_list


EMPTY = dict(ROW, key=7, instruction_id_list=[], kwargs=[])
EMPTY_MESSAGE = r"instruction_id_list \(row 1, key 7\) is empty"


def test_the_prompt_reader_refuses_a_row_without_instructions(tmp_path, model_dir, capsys):
    data = write_jsonl(tmp_path / "prompts.jsonl", [ROW, EMPTY])
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        read_prompts(data)
    assert run("--model", model_dir, "--data", str(data), "--output", str(tmp_path / "out")) == 2
    assert "instruction_id_list (row 1, key 7) is empty" in capsys.readouterr().err


def test_the_scorer_and_its_column_helper_refuse_a_row_without_instructions():
    rows = [dict(ROW, response="Hi."), dict(EMPTY, response="Hi.")]
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        build_scorer({"name": "IFEvalScorer"}).check_rows(rows)
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        add_ifeval_columns(Dataset.from_list(rows))


def test_the_metric_and_compute_ifeval_refuse_a_row_without_instructions():
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        compute_ifeval(["Hi.", "Hi."], [ROW, EMPTY])
    with pytest.raises(IFEvalInputError, match=EMPTY_MESSAGE):
        evaluate.load(str(METRIC_DIR)).compute(predictions=["Hi.", "Hi."], references=[ROW, EMPTY])


def test_every_packaged_prompt_has_an_instruction():
    assert all(row["instruction_id_list"] for row in read_prompts())
