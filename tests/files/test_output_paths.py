"""Outputs checked before any work (``hf_adapters.files.output_paths``): a command never writes over its data,
its config or the score file it reads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from datasets import Dataset

from hf_adapters.cli import main
from hf_adapters.files.output_paths import check_output_path
from tests.conftest import instruction_rows, ppl_config, write_jsonl


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def saved_data(tmp_path: Path) -> Path:
    """Four instruction rows saved with ``save_to_disk`` in ``tmp_path / "saved"``."""
    folder = tmp_path / "saved"
    Dataset.from_list(instruction_rows()).save_to_disk(str(folder))
    return folder


@pytest.mark.parametrize("inside", ["data-00000-of-00001.arrow", "state.json"])
def test_score_refuses_an_output_inside_the_saved_data_folder(tmp_path, model_dir, capsys, inside):
    """From the round-three review: data lost or changed in what we write."""
    folder = saved_data(tmp_path)
    before = tree_digest(folder)
    assert (folder / inside).is_file()
    code = main(["score", ppl_config(tmp_path), "--data", str(folder), "--output", str(folder / inside),
                 "--model", model_dir, "--no-progress"])
    assert tree_digest(folder) == before
    assert code == 2 and "input" in capsys.readouterr().err


def test_select_refuses_an_output_inside_the_saved_data_folder(tmp_path, capsys):
    """From the round-three review: data lost or changed in what we write."""
    # state.json, not the .arrow file: select memory-maps the .arrow file and truncating it would crash pytest.
    folder = saved_data(tmp_path)
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": row["id"], "score": 0.5} for row in instruction_rows()])
    before = tree_digest(folder)
    code = main(["select", "--data", str(folder), "--scores", str(scores), "--top-n", "1",
                 "--output", str(folder / "state.json")])
    assert tree_digest(folder) == before
    assert code == 2 and "input" in capsys.readouterr().err


def test_score_refuses_the_config_as_its_output(tmp_path, model_dir, capsys):
    """From the round-three review: data lost or changed in what we write."""
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows())
    config = ppl_config(tmp_path)
    before = Path(config).read_bytes()
    code = main(["score", config, "--data", str(data), "--output", config, "--model", model_dir, "--no-progress"])
    assert Path(config).read_bytes() == before
    err = capsys.readouterr().err
    assert code == 2 and ("config" in err or "input" in err)


def test_select_refuses_the_score_file_as_its_output(tmp_path, capsys):
    """From the round-three review: data lost or changed in what we write."""
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows())
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": row["id"], "score": 0.5} for row in instruction_rows()])
    before = scores.read_bytes()
    code = main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1", "--output", str(scores)])
    assert scores.read_bytes() == before
    err = capsys.readouterr().err
    assert code == 2 and ("score" in err or "input" in err)


def test_score_refuses_an_output_that_a_file_url_of_its_data_names_or_matches(tmp_path, model_dir, capsys,
                                                                              monkeypatch):
    """``--data file://$PWD/rows.jsonl --output rows.jsonl`` would replace the data with its scores, and
    an output that a ``file://`` glob matches would be read as a shard by the next run: both are
    refused, as for the data's path.

    Round six: every check of data against output sees through URLs.
    """
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows())
    before = data.read_bytes()
    monkeypatch.chdir(tmp_path)
    base = ["score", ppl_config(tmp_path), "--model", model_dir, "--no-progress"]
    assert main([*base, "--data", f"file://{data}", "--output", "rows.jsonl"]) == 2
    assert data.read_bytes() == before and "is the input data" in capsys.readouterr().err
    assert main([*base, "--data", f"file://{tmp_path}/*.jsonl", "--output", "scores.jsonl"]) == 2
    assert "matches the input data" in capsys.readouterr().err and not (tmp_path / "scores.jsonl").exists()
    assert main([*base, "--data", f"file://{tmp_path}", "--output", str(tmp_path / "out" / "s.jsonl")]) == 2
    assert "inside the input data" in capsys.readouterr().err


def test_an_input_whose_name_holds_glob_characters_is_that_file_not_a_glob(tmp_path):
    """``p[1].jsonl`` is the data, not a glob matching ``p1.jsonl``: an output ``p1.jsonl`` destroys
    nothing, and the output ``p[1].jsonl`` would.

    Round six: a file name is a name.
    """
    data = write_jsonl(tmp_path / "p[1].jsonl", instruction_rows())
    check_output_path(tmp_path / "p1.jsonl", {"data": str(data)})
    with pytest.raises(ValueError, match="is the input data"):
        check_output_path(data, {"data": str(data)})


@pytest.mark.parametrize("command", ["score", "select", "embed", "ifeval", "parity", "demo"])
def test_an_output_at_a_url_is_refused_in_one_line_instead_of_written_as_a_local_folder_named_after_it(
        tmp_path, model_dir, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows())
    argv = {"score": ["score", ppl_config(tmp_path), "--data", str(data), "--model", model_dir],
            "select": ["select", "--data", str(data), "--scores", str(data)],
            "embed": ["embed", "--data", str(data), "--model", model_dir],
            "ifeval": ["ifeval", "--model", model_dir, "--limit", "1"],
            "parity": ["parity", "--data", str(data), "--model", model_dir],
            "demo": ["demo", "--model", model_dir]}[command]
    output = "s3://bucket/vectors.npy" if command == "embed" else "s3://bucket/scores.jsonl"
    assert main([*argv, "--output", output]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"The output {output} is a URL" in error
    assert not (tmp_path / "s3:").exists()


def test_a_file_url_output_is_the_local_path_it_names(tmp_path, model_dir):
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows())
    output = tmp_path / "scores.jsonl"
    assert main(["score", ppl_config(tmp_path), "--data", str(data), "--model", model_dir, "--output",
                 output.as_uri(), "--no-progress"]) == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == len(instruction_rows())
