"""``hf-adapters ifeval``: generate with a model, score, write samples and results; resume; refuse; errors."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import signal
from pathlib import Path

import evaluate
import pytest
import torch

from hf_adapters import cli
from hf_adapters.backends import TransformersBackend
from hf_adapters.ifeval.end_to_end import METRICS, make_sample, results_table
from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts
from hf_adapters.ifeval.responses import strip_thinking
from hf_adapters.ifeval.run_folder import recover_samples
from tests.conftest import read_jsonl, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> int:
    return cli.main(["ifeval", "--no-progress", *args])


def read_samples(folder: Path) -> list[dict]:
    return read_jsonl(folder / "samples.jsonl")


@pytest.fixture(scope="module")
def finished(model_dir, tmp_path_factory) -> Path:
    """One uninterrupted run: 6 prompts, 8 new tokens, batches of 4."""
    folder = tmp_path_factory.mktemp("run") / "out"
    assert run("--model", model_dir, "--limit", "6", "--max-new-tokens", "8", "--batch-size", "4",
               "--output", str(folder)) == 0
    return folder


def test_writes_one_sample_per_prompt_and_the_results(finished, model_dir):
    samples = read_samples(finished)
    rows = read_prompts()[:6]
    assert [sample["key"] for sample in samples] == [row["key"] for row in rows]
    for sample, row in zip(samples, rows, strict=True):
        assert sample["prompt"] == row["prompt"] and sample["instruction_id_list"] == row["instruction_id_list"]
        assert len(sample["follow_instruction_list_strict"]) == len(row["instruction_id_list"])
        assert sample["follow_all_instructions_loose"] == all(sample["follow_instruction_list_loose"])
        assert sample["generated_tokens"] == 8 and sample["reached_max_new_tokens"]
    results = json.loads((finished / "results.json").read_text(encoding="utf-8"))
    assert results["prompts"] == 6 and results["model"]["model"] == model_dir
    assert results["settings"]["max_new_tokens"] == 8 and results["settings"]["decoding"] == "greedy"
    assert results["data"]["name"] == "packaged:ifeval_input_data.jsonl" and results["date"]


def test_results_equal_rescoring_the_samples_with_the_evaluate_metric(finished):
    samples = read_samples(finished)
    results = json.loads((finished / "results.json").read_text(encoding="utf-8"))
    rescored = evaluate.load(str(ROOT / "metrics" / "ifeval")).compute(
        predictions=[sample["response"] for sample in samples], references=read_prompts()[:6], detailed=True)
    assert {name: results[name] for name in METRICS} == {name: rescored[name] for name in METRICS}
    assert [s["follow_instruction_list_strict"] for s in samples] == rescored["strict_follow_instruction_list"]
    assert [s["follow_instruction_list_loose"] for s in samples] == rescored["loose_follow_instruction_list"]


def test_each_response_is_greedy_decoding_of_its_prompt_alone(finished, model_dir):
    backend = TransformersBackend.from_pretrained(model_dir)
    tokenizer = backend.tokenizer
    for sample, prompt in zip(read_samples(finished), prompt_token_ids(tokenizer, read_prompts()[:6]), strict=True):
        with torch.inference_mode():
            out = backend.model.generate(input_ids=torch.tensor([prompt]), do_sample=False, max_new_tokens=8,
                                         attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        assert sample["response"] == tokenizer.decode(out[0, len(prompt):], skip_special_tokens=True)


def test_prints_the_table_the_way_lm_eval_does(finished, capsys):
    results = json.loads((finished / "results.json").read_text(encoding="utf-8"))
    lines = results_table(results).splitlines()
    assert lines[0].replace(" ", "") == "|Tasks|Version|Filter|n-shot|Metric||Value||Stderr|"
    assert lines[2].startswith("|ifeval|      4|none  |     0|inst_level_loose_acc   |↑  |")
    assert lines[2].endswith("|±  |   N/A|")
    assert [line.split("|")[5].strip() for line in lines[2:]] == list(METRICS)
    assert lines[5].endswith(f"|{results['prompt_level_strict_acc_stderr']:.4f}|")


def test_a_killed_run_resumes_with_the_prompts_not_yet_generated(finished, model_dir, tmp_path, monkeypatch):
    folder = tmp_path / "out"
    original = TransformersBackend.generate

    def killed_after_two_responses(self, prompts, *, on_result, **kwargs):
        kept = []

        def keep_two(index, tokens):
            if len(kept) == 2:
                raise KeyboardInterrupt
            kept.append(index)
            on_result(index, tokens)

        return original(self, prompts, on_result=keep_two, **kwargs)

    args = ["--model", model_dir, "--limit", "6", "--max-new-tokens", "8", "--output", str(folder)]
    monkeypatch.setattr(TransformersBackend, "generate", killed_after_two_responses)
    assert run(*args, "--batch-size", "2") == cli.INTERRUPTED  # a Ctrl-C: one line, status 130 (round five, item 15)
    assert len(read_samples(folder)) == 2 and not (folder / "results.json").exists()
    with open(folder / "samples.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"key": 1005, "prompt": "torn')  # the kill tore the next sample's line
    monkeypatch.setattr(TransformersBackend, "generate", original)
    assert run(*args, "--batch-size", "3") == 0  # another batch size: responses do not depend on it
    assert read_samples(folder) == read_samples(finished)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    assert results["this_run"]["prompts_generated"] == 4
    assert {name: results[name] for name in METRICS} == {
        name: value for name, value in json.loads((finished / "results.json").read_text()).items() if name in METRICS}


def test_a_backend_that_reports_no_response_early_has_its_samples_saved_when_it_returns(
        finished, model_dir, tmp_path, monkeypatch):
    original = TransformersBackend.generate
    monkeypatch.setattr(TransformersBackend, "generate",
                        lambda self, prompts, on_result=None, **kwargs: original(self, prompts, **kwargs))
    folder = tmp_path / "out"
    assert run("--model", model_dir, "--limit", "6", "--max-new-tokens", "8", "--output", str(folder)) == 0
    assert read_samples(folder) == read_samples(finished)


def test_another_runs_samples_are_refused_unless_overwrite(finished, model_dir, tmp_path, capsys):
    folder = tmp_path / "out"
    assert run("--model", model_dir, "--limit", "2", "--max-new-tokens", "4", "--output", str(folder)) == 0
    capsys.readouterr()
    assert run("--model", model_dir, "--limit", "2", "--max-new-tokens", "5", "--output", str(folder)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "holds samples of another run (its settings changed: max_new_tokens 4 -> 5)" in err
    assert err.count("\n") == 1 and "--overwrite" in err
    assert run("--model", model_dir, "--limit", "2", "--max-new-tokens", "5", "--output", str(folder),
               "--overwrite") == 0
    assert [sample["generated_tokens"] for sample in read_samples(folder)] == [5, 5]
    assert run("--model", model_dir, "--limit", "1", "--max-new-tokens", "5", "--output", str(folder)) == 2
    assert "a larger --limit" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["unknown model", "unknown instruction", "missing data"])
def test_bad_input_exits_2_with_one_error_line_and_no_traceback(case, model_dir, tmp_path, capsys):
    unknown_check = {"key": 1, "prompt": "Hi.", "instruction_id_list": ["no:such_check"], "kwargs": [{}]}
    bad = str(write_jsonl(tmp_path / "bad.jsonl", [unknown_check]))
    args = {
        "unknown model": ["--model", str(tmp_path / "no-such-model")],
        "unknown instruction": ["--model", model_dir, "--data", bad],
        "missing data": ["--model", model_dir, "--data", str(tmp_path / "missing.jsonl")],
    }[case]
    assert run(*args, "--output", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    expected = {"unknown model": "Could not load model",
                "unknown instruction": "unknown IFEval instruction id 'no:such_check' (row 0, key 1)",
                "missing data": "does not exist"}[case]
    assert expected in err


@pytest.mark.parametrize("flag", ["--limit", "--max-new-tokens", "--batch-size"])
def test_a_count_below_one_is_a_usage_error(flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(flag, "0", "--output", str(tmp_path / "out"))
    assert exit_info.value.code == 2
    assert f"argument {flag}: must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_unknown_hub_model_offline_is_one_error_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run("--model", "no-such-org/no-such-model", "--limit", "1", "--output", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Could not load model 'no-such-org/no-such-model'") and err.count("\n") == 1


def test_other_ifeval_files_run_with_data(model_dir, tmp_path):
    rows = [{"key": "a", "prompt": "Say hi without commas.", "instruction_id_list": ["punctuation:no_comma"],
             "kwargs": [{}]},
            {"key": "b", "prompt": "Answer in lowercase.", "instruction_id_list": ["change_case:english_lowercase"],
             "kwargs": [{}]}]
    data = str(write_jsonl(tmp_path / "mine.jsonl", rows))
    assert run("--model", model_dir, "--data", data, "--max-new-tokens", "3", "--output", str(tmp_path / "out")) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["prompts"] == 2 and results["data"]["name"] == data
    assert math.isclose(results["prompt_level_strict_acc"] * 2, round(results["prompt_level_strict_acc"] * 2))


def test_strip_thinking_scores_the_text_after_the_thinking_and_keeps_both():
    row = read_prompts()[0]  # no commas, 3 highlighted sections, at least 300 words
    text = "<think>Hmm, commas, commas.</think>\n\n*one* *two* *three* " + "word " * 300
    sample = make_sample(row, text, 320, 1280, strip=True)
    assert sample["raw_response"] == text and sample["response"] == text.split("</think>")[1].lstrip()
    assert sample["follow_instruction_list_strict"] == [True, True, True]
    assert make_sample(row, text, 320, 1280, strip=False)["follow_instruction_list_strict"][0] is False
    assert strip_thinking("<think>out of tokens") == "" and strip_thinking("  <think>a</think> b") == "b"
    assert strip_thinking("reasoning opened by the template</think>Answer.") == "Answer."
    assert strip_thinking("A <think>late</think> tag stays.") == "A <think>late</think> tag stays."


def test_ctrl_c_during_generation_says_how_many_responses_are_saved_exits_130_and_resumes(model_dir, tmp_path):
    """Ctrl-C while ``ifeval`` generates printed 35-80 lines and exited 1 or died by the signal: one line
    now, saying how many responses the run folder keeps, and the same command resumes.

    Round five, item 15."""
    from tests.cli.test_curator_command_line import interrupt, lines_in

    output = tmp_path / "out"
    args = ["ifeval", "--no-progress", "--model", model_dir, "--limit", "10", "--max-new-tokens", "48",
            "--batch-size", "1", "--output", str(output)]
    returncode, stdout, stderr = interrupt(args, lines_in(output / "samples.jsonl", 2))
    saved = len(read_samples(output))
    assert (returncode, stdout) == (130, ""), stderr
    assert "Traceback" not in stderr and 2 <= saved < 10
    assert stderr.splitlines()[-1] == (f"Interrupted with {saved} of 10 responses saved in {output / 'samples.jsonl'}; "
                                       "run the same command again to resume.")
    assert run(*args[2:]) == 0
    assert [sample["key"] for sample in read_samples(output)] == [row["key"] for row in read_prompts()[:10]]


def test_sigterm_during_generation_says_how_many_responses_are_saved_and_exits_143(model_dir, tmp_path):
    """A SIGTERM (Slurm, Kubernetes, ``timeout``) stopped ``ifeval`` with no word: it says what a Ctrl-C says.

    Round six: SIGTERM."""
    from tests.cli.test_curator_command_line import interrupt, lines_in

    output = tmp_path / "out"
    args = ["ifeval", "--no-progress", "--model", model_dir, "--limit", "10", "--max-new-tokens", "48",
            "--batch-size", "1", "--output", str(output)]
    returncode, stdout, stderr = interrupt(args, lines_in(output / "samples.jsonl", 2), sent=signal.SIGTERM)
    saved = len(read_samples(output))
    assert (returncode, stdout) == (143, ""), stderr
    assert "Traceback" not in stderr and 2 <= saved < 10
    assert stderr.splitlines()[-1] == (f"Interrupted with {saved} of 10 responses saved in {output / 'samples.jsonl'}; "
                                       "run the same command again to resume.")


def test_ctrl_c_before_any_response_is_saved_says_so(model_dir, tmp_path, capsys, monkeypatch):
    """Round five, item 15."""
    from hf_adapters.ifeval import end_to_end

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(end_to_end, "run_ifeval", interrupted)
    assert run("--model", model_dir, "--limit", "3", "--output", str(tmp_path / "out")) == cli.INTERRUPTED
    assert capsys.readouterr().err.splitlines()[-1] == (f"Interrupted before any response was saved in "
                                                        f"{tmp_path / 'out'}; the same command starts again.")


def test_a_full_disk_says_how_many_responses_are_saved_and_the_same_command_resumes(model_dir, tmp_path, capsys,
                                                                                   monkeypatch):
    """A full disk while ``ifeval`` saved its responses was an OSError's traceback.

    Round six: a full disk."""
    from hf_adapters.ifeval import run_folder

    appended = run_folder.append_durably

    def full_after_a_response(handle, data):
        if handle.tell():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        appended(handle, data)

    output = tmp_path / "out"
    args = ["--model", model_dir, "--limit", "6", "--max-new-tokens", "8", "--batch-size", "2", "--output", str(output)]
    monkeypatch.setattr(run_folder, "append_durably", full_after_a_response)
    assert run(*args) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: no space left on a device this job writes to, such as the one holding {output} (free some space "
        f"there): 1 of 6 responses are saved in {output / 'samples.jsonl'}; run the same command again to resume."]
    monkeypatch.setattr(run_folder, "append_durably", appended)
    assert run(*args) == 0
    assert [sample["key"] for sample in read_samples(output)] == [row["key"] for row in read_prompts()[:6]]


# --- From the round-four review: a blank or bad line in the middle of a run's samples -----------------------

def sample(key: int) -> dict:
    return {"key": key, "prompt": "p", "response": f"response {key}"}


def lines(*texts: str) -> bytes:
    return "".join(texts).encode("utf-8")


def test_a_blank_or_bad_line_mid_samples_skips_only_that_line_and_names_it(tmp_path, caplog):
    """From the round-four review, case 7."""
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
    """From the round-four review, case 7."""
    path = tmp_path / "samples.jsonl"
    kept = lines(json.dumps(sample(0)) + "\n", "\n", json.dumps(sample(1)) + "\n")
    path.write_bytes(kept + b'{"key": 2, "prompt": "to')
    with caplog.at_level(logging.WARNING):
        assert recover_samples(path) == [sample(0), sample(1)]
    assert path.read_bytes() == kept
    assert "line 4 (torn" in caplog.text and "line 2 (blank)" in caplog.text


def test_a_run_resumed_over_a_blank_line_keeps_every_sample_after_it(model_dir, tmp_path, monkeypatch, caplog):
    """From the round-four review, case 7."""
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


def test_a_sample_line_whose_key_is_a_list_is_skipped_not_a_traceback(tmp_path, caplog):
    """From the round-four review, case 11."""
    path = tmp_path / "samples.jsonl"
    path.write_bytes(lines(json.dumps(dict(sample(0), key=[0])) + "\n", json.dumps(sample(1)) + "\n"))
    with caplog.at_level(logging.WARNING):
        assert recover_samples(path) == [sample(1)]
    assert "line 1 (not a sample" in caplog.text


def test_an_ifeval_run_of_one_prompt_speaks_in_the_singular_and_leaves_no_lock(model_dir, tmp_path, capsys):
    folder = tmp_path / "out"
    assert cli.main(["ifeval", "--no-progress", "--model", model_dir, "--limit", "1", "--max-new-tokens", "2",
                     "--output", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "ifeval: 1 prompt, 3 instructions;" in out and "this run generated 1 response, 2 tokens in" in out
    assert sorted(path.name for path in folder.iterdir()) == ["results.json", "run.json", "samples.jsonl"]
