"""An IFEval run folder: a refusal that says what changed since the samples it holds were generated,
and the lock file, gone when the run ends and left behind when it fails."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from hf_adapters.ifeval.end_to_end import run_manifest, run_settings
from hf_adapters.ifeval.run_folder import LOCK, MANIFEST, SAMPLES, RunFolderError, check_folder, locked, start

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


def test_what_a_killed_write_left_in_the_run_folder_does_not_survive_the_next_start(tmp_path):
    folder = tmp_path / "out"
    with locked(folder):
        assert start(folder, manifest()) == []
    (folder / f"{SAMPLES}.tmp-0123abcd").write_text('{"key": 1')  # a rewrite of the samples, killed

    with locked(folder):
        start(folder, manifest())

    assert sorted(entry.name for entry in folder.iterdir()) == [MANIFEST]
