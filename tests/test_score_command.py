"""``hf-adapters score CONFIG --data FILE --output FILE``: output file, overrides, summary line and errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from hf_adapters import cli
from hf_adapters.ifd import compute_ifd
from hf_adapters.perplexity import compute_perplexity
from hf_adapters.scorers import RowScorer, register_scorer
from hf_adapters.texts import ppl_text


@register_scorer
class OutputLengthScorer(RowScorer):
    """len(output), NaN when it is empty; records the chunk sizes it is given."""

    name = "OutputLengthScorer"
    options = {"model": "none", "batch_size": 4}
    required_fields = ("output",)
    chunks: list[int] = []

    def score_rows(self, rows):
        OutputLengthScorer.chunks.append(len(rows))
        return [float(len(row["output"])) if row["output"] else float("nan") for row in rows]


@pytest.fixture
def data(tmp_path):
    rows = [{"id": i, "instruction": "Repeat.", "input": "", "output": "ab" * (i % 3)} for i in range(10)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def config(tmp_path, text="name: OutputLengthScorer\n"):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_writes_one_line_per_row_and_prints_a_summary(tmp_path, data, capsys):
    output = tmp_path / "out" / "scores.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 0
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert lines == [{"id": i, "score": [None, 2.0, 4.0][i % 3]} for i in range(10)]
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("10 rows, 6 valid scores, ") and summary.endswith(" rows/s")
    assert sorted(p.name for p in output.parent.iterdir()) == ["scores.jsonl"]


def test_batch_size_and_model_flags_override_the_config(tmp_path, data):
    OutputLengthScorer.chunks.clear()
    args = ["score", config(tmp_path), "--data", str(data), "--output", str(tmp_path / "o.jsonl"), "--no-progress"]
    assert cli.main([*args, "--batch-size", "3", "--model", "other"]) == 0
    assert OutputLengthScorer.chunks == [3, 3, 3, 1]


@pytest.mark.parametrize(
    "config_text,flags,message",
    [
        ("name: NoSuchScorer\n", [], r"error: Unknown scorer name 'NoSuchScorer'; valid names: .*'OutputLengthScorer'"),
        ("name: OutputLengthScorer\ntemperature: 2\n", [], r"error: Unknown key\(s\) \['temperature'\] .*valid keys"),
        ("- just a list\n", [], r"error: .*a config is a YAML mapping with a `name` key"),
        ("name: OutputLengthScorer\n", ["--data", "missing.jsonl"], r"error: Data file .*missing.jsonl. does not"),
    ],
)
def test_config_and_data_errors_exit_2_with_a_message_and_no_traceback(tmp_path, data, capsys, config_text,
                                                                       flags, message):
    output = tmp_path / "o.jsonl"
    argv = ["score", config(tmp_path, config_text), "--data", str(data), "--output", str(output), *flags]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(message, err)
    assert not output.exists()


def test_a_row_missing_a_field_is_named_and_nothing_is_written(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "x1", "output": "a"}\n{"id": "x2", "instruction": "b"}\n', encoding="utf-8")
    output = tmp_path / "o.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(path), "--output", str(output)]) == 2
    assert "error: Row 1 (id='x2') has no field 'output'." in capsys.readouterr().err
    assert not output.exists() and not (tmp_path / "o.jsonl.parts").exists()


def test_a_changed_config_is_refused_until_overwrite(tmp_path, data, capsys):
    output = tmp_path / "o.jsonl"
    parts = tmp_path / "o.jsonl.parts"
    parts.mkdir()
    (parts / "manifest.json").write_text(json.dumps({"scorer": {"name": "OutputLengthScorer", "batch_size": 9}}))
    args = ["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "holds partial results of a different job: the scorer config changed" in err and "--overwrite" in err
    assert cli.main([*args, "--overwrite"]) == 0 and output.exists() and not parts.exists()


def test_batch_size_must_be_positive(tmp_path, data, capsys):
    with pytest.raises(SystemExit):
        cli.main(["score", config(tmp_path), "--data", str(data), "--output", "o.jsonl", "--batch-size", "0"])
    assert "must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["IFDScorer", "PPLScorer"])
def test_seed_configs_on_the_command_line_give_the_metric_numbers(tmp_path, model, tokenizer, name):
    model_dir = tmp_path / "tiny"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = [
        {"id": "a", "instruction": "Write a poem about the sea.", "input": "", "output": "The sea is wide."},
        {"id": "b", "instruction": "Summarise:", "input": "Cats are small mammals.", "output": "Cats."},
        {"id": "c", "instruction": "Say nothing.", "input": "", "output": ""},
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    args = ["score", config(tmp_path, f"name: {name}\nmax_length: 256\nbatch_size: 2\n"), "--data", str(data),
            "--output", str(output), "--model", str(model_dir), "--no-progress"]
    assert cli.main(args) == 0
    scores = [json.loads(line)["score"] for line in output.read_text().splitlines()]
    if name == "IFDScorer":
        expected = compute_ifd([r["instruction"] for r in rows], [r["output"] for r in rows],
                               [r["input"] for r in rows], max_length=256, model=model, tokenizer=tokenizer)
        expected = expected["ifd_scores"]
    else:
        texts = [ppl_text(r["instruction"], r["input"], r["output"]) for r in rows]
        expected = compute_perplexity(texts, max_length=256, model=model, tokenizer=tokenizer)["perplexities"]
    assert scores[:2] == pytest.approx(expected[:2], rel=1e-5)
    assert (scores[2] is None) == (name == "IFDScorer")


def test_a_config_convention_reaches_the_ifd_scorer(tmp_path, model, tokenizer):
    model_dir = tmp_path / "tiny"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = [{"id": "a", "instruction": "Write a poem about the sea.", "input": "", "output": "The sea is wide."},
            {"id": "b", "instruction": "Summarise:", "input": "Cats are small mammals.", "output": "Cats."}]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    args = ["score", config(tmp_path, "name: IFDScorer\nconvention: superfiltering\nmax_length: 256\n"),
            "--data", str(data), "--output", str(output), "--model", str(model_dir), "--no-progress"]
    assert cli.main(args) == 0
    expected = compute_ifd([r["instruction"] for r in rows], [r["output"] for r in rows], [r["input"] for r in rows],
                           max_length=256, convention="superfiltering", model=model, tokenizer=tokenizer)
    scores = [json.loads(line)["score"] for line in output.read_text().splitlines()]
    assert scores == pytest.approx(expected["ifd_scores"], rel=1e-5)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_an_output_that_is_not_a_regular_file_is_refused_and_left_alone(tmp_path, data, capsys, kind):
    output = Path("/dev/null") if kind == "device" else tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(output)
    elif kind == "directory":
        output.mkdir()
    before = output.stat().st_mode
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert output.stat().st_mode == before


@pytest.mark.parametrize("through_link", [False, True])
def test_the_input_data_as_output_is_refused_before_anything_is_scored(tmp_path, data, capsys, through_link):
    before = data.read_bytes()
    output = data
    if through_link:
        output = tmp_path / "link.jsonl"
        output.symlink_to(data)
    OutputLengthScorer.chunks.clear()
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 2
    assert "is the input data" in capsys.readouterr().err
    assert data.read_bytes() == before and OutputLengthScorer.chunks == []


def test_an_output_folder_that_is_a_file_is_a_clear_error(tmp_path, data, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    output = blocker / "sub" / "scores.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
