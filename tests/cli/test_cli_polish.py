"""The command line's finish: refusals that say what changed, one ``error:`` prefix, no lock file
left behind, and counts in the singular when there is one."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_adapters import clear_model_cache, cli
from hf_adapters.cli import main
from hf_adapters.core.wording import plural
from hf_adapters.engines.local import JobSummary
from hf_adapters.ifeval.end_to_end import run_manifest, run_settings
from hf_adapters.ifeval.run_folder import LOCK, MANIFEST, SAMPLES, RunFolderError, check_folder, locked
from tests.conftest import write_jsonl

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"model": "./tiny", "source": "tiny", "dtype": "float32", "device_type": "cpu",
         "files": [{"name": "config.json", "size": 600, "mtime_ns": 1_700_000_000_000_000_000,
                    "head_tail_sha256": "a" * 64},
                   {"name": "model.safetensors", "size": 1000, "mtime_ns": 1_700_000_000_000_000_000,
                    "head_tail_sha256": "b" * 64}]}
DATA = {"name": "mine.jsonl", "sha256": "0" * 64}


def manifest(max_new_tokens: int = 48, strip: bool = False, model: dict = MODEL, data: dict = DATA) -> dict:
    return run_manifest(model, run_settings(max_new_tokens, strip), data)


def changed_model(**changes) -> dict:
    model = copy.deepcopy(MODEL)
    for key, value in changes.items():
        if key in ("size", "mtime_ns", "head_tail_sha256"):
            model["files"][1][key] = value
        else:
            model[key] = value
    return model


@pytest.fixture
def old_run(tmp_path) -> Path:
    """A folder holding the samples of a run with ``manifest()``."""
    (tmp_path / SAMPLES).write_text('{"key": 1, "response": "Hi."}\n', encoding="utf-8")
    (tmp_path / MANIFEST).write_text(json.dumps(manifest()), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(("new", "reason"), [
    (manifest(max_new_tokens=64), "its settings changed: max_new_tokens 48 -> 64"),
    (manifest(max_new_tokens=64, strip=True),
     "its settings changed: max_new_tokens 48 -> 64, strip_thinking False -> True"),
    (manifest(model=changed_model(dtype="bfloat16")), "its model changed: dtype 'float32' -> 'bfloat16'"),
    (manifest(model=changed_model(model="./other", source="other")),
     "its model changed: model './tiny' -> './other', source 'tiny' -> 'other'"),
    (manifest(model=changed_model(size=1200, head_tail_sha256="c" * 64)),
     "its model changed: file model.safetensors size 1000 -> 1200 bytes"),
    (manifest(model=changed_model(head_tail_sha256="c" * 64)),
     "its model changed: file model.safetensors content changed (same size)"),
    (manifest(model=changed_model(mtime_ns=1_700_000_000_000_000_001)),
     "its model changed: file model.safetensors touched (same size, same first and last MiB)"),
    (manifest(model={key: value for key, value in changed_model(revision="d" * 40).items() if key != "files"}),
     "its model changed: file config.json removed, file model.safetensors removed, revision (none) -> "
     "dddddddddddd..."),
    (manifest(model={**MODEL, "files": MODEL["files"][1:]}), "its model changed: file config.json removed"),
    (manifest(model={**MODEL, "files": [*MODEL["files"], {"name": "tokenizer.json", "size": 5}]}),
     "its model changed: file tokenizer.json added"),
    (manifest(data={**DATA, "sha256": "1" * 64}),
     "its prompt file changed: sha256 000000000000... -> 111111111111..."),
    (manifest(max_new_tokens=64, data={"name": "other.jsonl", "sha256": "0" * 64}),
     "its settings changed: max_new_tokens 48 -> 64; its prompt file changed: name 'mine.jsonl' -> 'other.jsonl'"),
], ids=["one setting", "two settings", "dtype", "model id", "file size", "file content", "file touched", "hub",
        "file removed", "file added", "prompt file content", "settings and prompt file"])
def test_a_refused_folder_says_what_changed(old_run, new, reason):
    with pytest.raises(RunFolderError) as info:
        check_folder(old_run, new)
    assert f"holds samples of another run ({reason}); rerun" in str(info.value)


def test_an_unchanged_run_is_accepted_and_a_setting_the_old_run_lacked_is_named(old_run):
    check_folder(old_run, manifest())
    old = manifest()
    del old["settings"]["strip_thinking"]
    (old_run / MANIFEST).write_text(json.dumps(old), encoding="utf-8")
    with pytest.raises(RunFolderError, match=r"its settings changed: strip_thinking \(none\) -> False\)"):
        check_folder(old_run, manifest())


def test_the_lock_file_goes_when_the_run_ends_and_stays_when_it_fails(tmp_path):
    folder = tmp_path / "out"
    with locked(folder):
        assert (folder / LOCK).exists()
        with pytest.raises(RunFolderError, match="Another run is writing"), locked(folder):
            pass
    assert not (folder / LOCK).exists()
    with pytest.raises(KeyboardInterrupt), locked(folder):
        raise KeyboardInterrupt
    assert (folder / LOCK).exists()
    with locked(folder):  # a lock file left by a killed run is no obstacle
        pass
    assert list(folder.iterdir()) == []


def test_an_ifeval_run_of_one_prompt_speaks_in_the_singular_and_leaves_no_lock(model_dir, tmp_path, capsys):
    folder = tmp_path / "out"
    assert cli.main(["ifeval", "--no-progress", "--model", model_dir, "--limit", "1", "--max-new-tokens", "2",
                     "--output", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "ifeval: 1 prompt, 3 instructions;" in out and "this run generated 1 response, 2 tokens in" in out
    assert sorted(path.name for path in folder.iterdir()) == ["results.json", "run.json", "samples.jsonl"]


def test_counts_are_singular_for_one():
    assert [plural(count, "response") for count in (0, 1, 2)] == ["0 responses", "1 response", "2 responses"]


def test_select_counts_one_row_in_the_singular(tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}])
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": 1.0}])
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1", "--max-score", "0.5",
                     "--output", str(tmp_path / "kept.jsonl")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ +1 row removed: ", out, re.M) and "0 of 1 row selected" in out, out


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


def test_a_job_summary_of_one_row_speaks_in_the_singular():
    assert str(JobSummary(rows=1, valid=1, seconds=2.0, scored=1)) == "1 row, 1 valid score, 0.5 rows/s"
    assert str(JobSummary(rows=2, valid=0, seconds=1.0, scored=2)).startswith("2 rows, 0 valid scores, ")


def test_lm_eval_without_lm_eval_installed_says_how_to_install_it(monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "lm_eval"
                        else find_spec(name, *rest))
    assert cli.main(["lm-eval", "--model", "hf-adapters", "--tasks", "ifeval"]) == 2
    assert capsys.readouterr().err == ("error: lm-evaluation-harness is not installed: "
                                       "pip install 'hf_adapters[lm-eval]'\n")


def test_other_commands_still_refuse_arguments_they_do_not_take(capsys):
    with pytest.raises(SystemExit):
        cli.main(["summary", "scores.jsonl", "--model_args", "x"])
    assert "unrecognized arguments: --model_args x" in capsys.readouterr().err


def test_a_hub_that_cannot_be_reached_is_said_only_with_verbose(unreachable_hub, tmp_path, caplog, capsys,
                                                               monkeypatch):
    """Offline on purpose, every run said "The hub ... cannot be reached": a debug message now, which
    ``--verbose`` shows; a model that cannot be found still says why in its error.

    Round five, item 22."""
    from hf_adapters.backends import loading as models

    config = tmp_path / "ppl.yaml"
    config.write_text("name: PPLScorer\nmodel: nobody-here/no-such-model\n", encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "instruction": "Hi.", "output": "Hello."}])
    for flags, said in (([], False), (["--verbose"], True)):
        monkeypatch.setattr(models, "_hub_checks", {})
        caplog.clear()
        assert cli.main(["score", str(config), "--data", str(data), "--output", str(tmp_path / "o.jsonl"),
                         "--no-progress", *flags]) == 2
        assert "the hub could not be reached" in capsys.readouterr().err
        assert any("cannot be reached" in message for message in caplog.messages) == said


@pytest.mark.parametrize("argv", [["--help"], ["perplexity", "--help"], ["select", "--top", "5%"]])
def test_help_and_argument_errors_do_not_import_torch(argv):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_adapters", *argv], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == (0 if "--help" in argv else 2), done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported, f"torch imported ({time.perf_counter() - started:.1f} s)"


def test_no_progress_hides_every_progress_bar(tmp_path, model, tokenizer, capsys):
    folder = tmp_path / "model"  # a model not loaded yet in this process
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    path = tmp_path / "doc.txt"
    path.write_text("The quick brown fox.", encoding="utf-8")
    capsys.readouterr()
    try:
        assert main(["perplexity", str(path), "--model", str(folder), "--max-length", "64", "--no-progress"]) == 0
    finally:
        clear_model_cache(str(folder))
    err = capsys.readouterr().err
    assert not re.search(r"\d+%\|", err), err


def help_text(command: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["demo", "parity", "perplexity", "score", "select"])
def test_every_command_and_option_has_help_text(command, capsys):
    text = help_text(command, capsys)
    head, _, options = text.partition("\noptions:\n")
    assert "\n\n" in head.strip(), f"`{command} --help` has no description"
    lines = options.splitlines()
    bare = [line.strip() for number, line in enumerate(lines)
            if re.match(r"^  -", line) and not re.match(r"^  -\S.*?\s{2,}\S", line)
            and not (number + 1 < len(lines) and re.match(r"^ {6,}\S", lines[number + 1]))]
    assert not bare, f"options of `{command}` without help: {bare}"


def test_dtype_offers_the_same_values_in_every_command(capsys):
    offered = {}
    for command in ("demo", "parity", "perplexity", "score"):
        text = help_text(command, capsys)
        block = re.search(r"\n  --dtype.*?(?=\n  -|\n\n|\Z)", text, re.S).group(0)
        offered[command] = sorted(set(re.findall(r"\b(?:b?float\d+|fp\d+|bf16|half)\b", block)))
    assert len({tuple(values) for values in offered.values()}) == 1, offered
