"""The lm-eval model ``hf-adapters`` gives the numbers of lm-eval's own ``hf`` model (``HFLM``) on the
same tiny model: through ``simple_evaluate`` on real tasks over data shipped in the repo (a rolling
perplexity, a multiple choice, IFEval), request by request, and from lm-eval's command line."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is installed with the [test] extra")
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from hf_adapters import cli  # noqa: E402
from hf_adapters.backends import TransformersBackend  # noqa: E402
from hf_adapters.integrations.lm_eval_harness import HFAdaptersLM  # noqa: E402
from hf_adapters.integrations.lm_eval_harness.errors import ModelArgumentError  # noqa: E402
from hf_adapters.integrations.lm_eval_harness.model import LM_EVAL_DEFAULT_DEVICE  # noqa: E402
from tests.conftest import lm_eval_logs_to_this_stderr  # noqa: E402

pytestmark = pytest.mark.usefixtures("lm_eval_tasks_indexed_once")
TASKS = Path(__file__).parent / "lm_eval_tasks"
PARALLEL = Path(__file__).resolve().parents[2] / "hf_adapters" / "data" / "parallel_sample.jsonl"
RTOL = 1e-5


def ours(model, tokenizer, **settings) -> HFAdaptersLM:
    return HFAdaptersLM(TransformersBackend(model, tokenizer), **settings)


def theirs(model, tokenizer, **settings) -> HFLM:
    return HFLM(pretrained=model, tokenizer=tokenizer, **settings)


def assert_same_number(a, b) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=RTOL, abs=1e-9)
    else:
        assert a == b


def assert_same_results(mine: dict, reference: dict) -> None:
    """Every metric of every task, and every sample's responses, equal (numbers to RTOL)."""
    for task, metrics in reference["results"].items():
        assert metrics.keys() == mine["results"][task].keys()
        for name, value in metrics.items():
            assert_same_number(mine["results"][task][name], value)
        for my_sample, sample in zip(mine["samples"][task], reference["samples"][task], strict=True):
            for my_response, response in zip(my_sample["resps"], sample["resps"], strict=True):
                my_response, response = my_response[0], response[0]
                if isinstance(response, (tuple, list)):  # loglikelihood: (logprob, is_greedy)
                    assert_same_number(my_response[0], response[0])
                    assert my_response[1] == response[1]
                else:
                    assert_same_number(my_response, response)


@pytest.fixture
def in_tasks_folder(monkeypatch):
    monkeypatch.chdir(TASKS)  # the task files name the shipped data relative to their folder
    return TaskManager(include_path=str(TASKS))


def evaluate(lm, tasks: list[str], task_manager: TaskManager) -> dict:
    return lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager, limit=6, log_samples=True)


def test_rolling_perplexity_task_gives_hflms_numbers_across_windows(model, tokenizer, in_tasks_folder):
    tasks = ["hf_adapters_shipped_rolling"]
    mine = evaluate(ours(model, tokenizer, batch_size=8, max_length=40), tasks, in_tasks_folder)
    reference = evaluate(theirs(model, tokenizer, batch_size=8, max_length=40), tasks, in_tasks_folder)
    assert_same_results(mine, reference)


def test_multiple_choice_and_ifeval_tasks_give_hflms_numbers(model, tokenizer, in_tasks_folder):
    tasks = ["hf_adapters_shipped_choice", "hf_adapters_shipped_ifeval"]
    mine = evaluate(ours(model, tokenizer, batch_size=8), tasks, in_tasks_folder)
    reference = evaluate(theirs(model, tokenizer, batch_size=1), tasks, in_tasks_folder)
    assert_same_results(mine, reference)


def loglikelihood_requests(tokenizer, continuations: list[list[int]]) -> list:
    context = tokenizer.encode("Instruction: summarise the text below.\nInput: Cats are small mammals.")
    return [(("", ""), context, continuation) for continuation in continuations]


def test_loglikelihood_cuts_long_contexts_from_the_left_and_says_which_continuations_are_greedy(model, tokenizer):
    mine, reference = ours(model, tokenizer, max_length=12), theirs(model, tokenizer, max_length=12)
    context = loglikelihood_requests(tokenizer, [[0]])[0][1]
    greedy = mine.backend.generate([context[-11:]], max_new_tokens=3, stop_token_ids=[])[0]
    requests = loglikelihood_requests(tokenizer, [greedy, greedy[:1], tokenizer.encode(" Cats are mammals.")])
    my_scores = mine._loglikelihood_tokens(requests)
    their_scores = reference._loglikelihood_tokens(requests)
    assert [is_greedy for _, is_greedy in my_scores] == [is_greedy for _, is_greedy in their_scores] == \
        [True, True, False]
    for (my_logprob, _), (their_logprob, _) in zip(my_scores, their_scores, strict=True):
        assert my_logprob == pytest.approx(their_logprob, rel=RTOL)


def test_empty_context_is_the_prefix_token_as_in_hflm(model, tokenizer):
    requests = [Instance("loglikelihood", {}, ("", " The quick brown fox"), 0)]
    [(my_logprob, _)] = ours(model, tokenizer).loglikelihood(requests)
    [(their_logprob, _)] = theirs(model, tokenizer).loglikelihood(requests)
    assert my_logprob == pytest.approx(their_logprob, rel=RTOL)


def test_generation_stops_at_the_stop_sequences_lm_eval_passes(model, tokenizer):
    settings = {"until": ["fox", "\n"], "do_sample": False, "max_gen_toks": 20}
    requests = [Instance("generate_until", {}, (prompt, settings), index)
                for index, prompt in enumerate(["The quick brown", "Write a short poem", "Le renard"])]
    assert ours(model, tokenizer, batch_size=3).generate_until(requests) == \
        theirs(model, tokenizer, batch_size=1).generate_until(requests)


def test_a_sampling_task_is_refused_with_a_clear_error(model, tokenizer):
    request = Instance("generate_until", {}, ("The quick", {"do_sample": True, "temperature": 0.7}), 0)
    with pytest.raises(ValueError, match="greedily"):
        ours(model, tokenizer).generate_until([request])


def test_an_empty_text_has_a_rolling_loglikelihood_of_zero_as_in_hflm(model, tokenizer):
    requests = [Instance("loglikelihood_rolling", {}, ("",), 0), Instance("loglikelihood_rolling", {}, ("Cats",), 1)]
    mine, reference = ours(model, tokenizer).loglikelihood_rolling(requests), \
        theirs(model, tokenizer).loglikelihood_rolling(requests)
    assert mine[0] == reference[0] == 0
    assert mine[1] == pytest.approx(reference[1], rel=RTOL)
    assert math.isfinite(mine[1])


def test_unknown_model_arguments_are_refused_by_name(model, tokenizer):
    with pytest.raises(TypeError, match="trust_remote"):
        ours(model, tokenizer, trust_remote_code=True)


def test_lm_evals_command_line_runs_our_model_and_our_parity_task_offline(model_dir, tmp_path):
    """``hf-adapters lm-eval``: lm-eval's command line, our model registered and our tasks on its path."""
    parallel = Path(__file__).resolve().parents[2] / "hf_adapters" / "data" / "parallel_sample.jsonl"
    command = [sys.executable, "-m", "hf_adapters", "lm-eval", "--model", "hf-adapters",
               "--model_args", f"model_id={model_dir}", "--tasks", "information_parity",
               "--metadata", json.dumps({"data_files": str(parallel)}), "--limit", "3", "--batch_size", "4",
               "--output_path", str(tmp_path)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert finished.returncode == 0, finished.stderr[-2000:]
    [results] = tmp_path.glob("**/results_*.json")
    metrics = json.loads(results.read_text())["results"]["information_parity"]
    assert any(name.endswith("_information_parity,none") and value > 0 for name, value in metrics.items())


def lm_eval_argv(model_dir: str, model_args: str, *options: str, metadata: bool = True) -> list[str]:
    """``hf-adapters lm-eval`` on the tiny model, our parity task over the shipped sample, one pair a language."""
    return ["lm-eval", "--model", "hf-adapters", "--model_args", f"model_id={model_dir},{model_args}".rstrip(","),
            "--tasks", "information_parity", "--limit", "1", *options,
            *(["--metadata", json.dumps({"data_files": str(PARALLEL)})] if metadata else [])]


def one_error_line(argv: list[str], capsys) -> str:
    """The command's one ``error:`` line, last on stderr, with exit status 2 and no traceback."""
    lm_eval_logs_to_this_stderr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err and err.rstrip().endswith(errors[0]), err[-2000:]
    return errors[0]


def test_batch_size_and_device_in_model_args_are_lm_evals_own_settings_given_once(model_dir, tmp_path):
    """lm-eval passes its own --batch_size and --device to the model beside --model_args (its defaults, 1 and
    cuda:0, when they are not given): named in --model_args, or in both places with one value, each is
    used once, and lm-eval's results record it.

    Round five, item 13."""
    argv = lm_eval_argv(model_dir, "batch_size=4,device=cpu", "--batch_size", "4", "--output_path", str(tmp_path))
    assert cli.main(argv) == 0
    [results] = tmp_path.glob("**/results_*.json")
    config = json.loads(results.read_text())["config"]
    assert (str(config["batch_size"]), config["device"]) == ("4", "cpu")


@pytest.mark.parametrize("model_args, option", [("batch_size=4", ["--batch_size", "8"]),
                                                ("device=cpu", ["--device", "cuda"])], ids=["batch_size", "device"])
def test_a_setting_named_in_model_args_and_by_lm_eval_with_two_values_is_one_error_line(
        model_args, option, model_dir, capsys):
    """Given twice with two values, neither wins silently: lm-eval's ``hf`` model stops there too (with
    Python's "got multiple values").

    Round five, item 13."""
    name = model_args.split("=")[0]
    assert f"{name} is given twice" in one_error_line(lm_eval_argv(model_dir, model_args, *option), capsys)


def test_an_unknown_task_is_one_error_line_saying_how_to_list_the_tasks(model_dir, capsys):
    """``hf-adapters lm-eval --tasks nope_task`` printed lm-eval's traceback.

    Round six: tracebacks instead of one error line."""
    line = one_error_line(["lm-eval", "--model", "hf-adapters", "--model_args", f"model_id={model_dir}", "--tasks",
                           "nope_task"], capsys)
    assert line.startswith("error: Tasks not found: nope_task. `hf-adapters lm-eval ls tasks` lists"), line


def test_from_python_each_setting_is_taken_once_as_lm_evals_hf_model_takes_it(model_dir):
    """``simple_evaluate``'s settings (None: not given) beside model arguments: one value each.

    Round five, item 13."""
    unset = {"batch_size": None, "max_batch_size": None, "device": None}
    assert HFAdaptersLM.create_from_arg_string(f"model_id={model_dir},batch_size=16", unset).rows_per_batch == 16
    assert HFAdaptersLM.create_from_arg_string(f"model_id={model_dir}", {**unset, "batch_size": 8}).rows_per_batch == 8
    assert HFAdaptersLM.create_from_arg_obj({"model_id": model_dir, "batch_size": 16},
                                            {"batch_size": "16"}).rows_per_batch == 16
    with pytest.raises(ModelArgumentError, match="batch_size is given twice, 16 in --model_args and 8"):
        HFAdaptersLM.create_from_arg_string(f"model_id={model_dir},batch_size=16", {**unset, "batch_size": 8})
    with pytest.raises(TypeError, match="multiple values for keyword argument 'batch_size'"):
        HFLM.create_from_arg_string(f"pretrained={model_dir},batch_size=16", {"batch_size": 8})


def test_an_unknown_model_argument_is_one_error_line_and_exit_2(model_dir, capsys):
    """Round five, item 14."""
    line = one_error_line(lm_eval_argv(model_dir, "foo=1"), capsys)
    assert line.startswith("error: hf-adapters does not take foo: remove it from --model_args")


@pytest.mark.parametrize("value", ["abc", 0, "0", -2, 2.5, True, "auto:x"])
def test_batch_size_must_be_a_whole_number_of_rows_or_auto(value, model, tokenizer):
    """Round five, item 20."""
    with pytest.raises(ModelArgumentError, match=r"batch_size must be a whole number of rows of at least 1, or 'auto'"):
        ours(model, tokenizer, batch_size=value)


@pytest.mark.parametrize("value, rows", [("auto", None), ("auto:4", None), (16, 16), ("16", 16), (None, None)])
def test_batch_size_auto_or_a_whole_number_is_taken(value, rows, model, tokenizer):
    """Round five, item 20."""
    assert ours(model, tokenizer, batch_size=value).rows_per_batch == rows


def test_a_bad_batch_size_from_the_command_line_is_one_error_line(model_dir, capsys):
    """Round five, item 20."""
    assert "got 'abc'" in one_error_line(lm_eval_argv(model_dir, "batch_size=abc"), capsys)


def test_lm_evals_unasked_cuda_device_falls_back_quietly_and_a_named_one_with_a_warning(
        model, tokenizer, model_dir, monkeypatch, caplog, capsys):
    """lm-eval's command line passes ``cuda:0`` when no device is named: on a machine without CUDA the
    fallback to the default device is a debug line, shown with lm-eval's ``--verbosity DEBUG``; a CUDA
    device named falls back with a warning.

    Round five, item 22."""
    from lm_eval.config.evaluate_config import EvaluatorConfig

    assert EvaluatorConfig().device == LM_EVAL_DEFAULT_DEVICE
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    caplog.set_level(logging.DEBUG, logger="hf_adapters.integrations.lm_eval_harness.model")

    def fallbacks(**settings) -> list[int]:
        caplog.clear()
        assert ours(model, tokenizer, **settings).backend is not None
        return [record.levelno for record in caplog.records if "not available here" in record.getMessage()]

    assert fallbacks(device=LM_EVAL_DEFAULT_DEVICE) == [logging.DEBUG]
    assert fallbacks(device="cuda") == [logging.WARNING]
    assert fallbacks(device="cpu") == []
    caplog.set_level(logging.NOTSET, logger="hf_adapters.integrations.lm_eval_harness.model")  # the package's level
    for options, shown in (([], []), (["--verbosity", "DEBUG"], [logging.DEBUG])):
        caplog.clear()
        one_error_line(lm_eval_argv(model_dir, "", *options, metadata=False), capsys)  # after the model is built
        assert [record.levelno for record in caplog.records if "not available here" in record.getMessage()] == shown


def test_a_device_torch_does_not_know_is_refused_by_name(model, tokenizer):
    """Round five, item 14."""
    with pytest.raises(ModelArgumentError, match="device='tpu' is not a device torch knows"):
        ours(model, tokenizer, device="tpu")


def test_the_lm_eval_models_entry_point_is_declared_installed_and_resolves_to_the_registered_model():
    """lm-eval releases after 0.4.13 load model plugins from the entry-point group ``lm_eval.models``
    (EleutherAI/lm-evaluation-harness#4013), so that ``lm_eval --model hf-adapters`` finds ours without
    ``hf-adapters lm-eval``: the group in setup.cfg, as the installed distribution declares it (else:
    ``pip install -e . --no-deps``), names the class registered as ``hf-adapters``."""
    import configparser
    from importlib.metadata import distribution, entry_points

    from lm_eval.api.registry import get_model

    setup = configparser.ConfigParser()
    setup.read(Path(__file__).resolve().parents[2] / "setup.cfg")
    declared = [line.strip() for line in setup["options.entry_points"]["lm_eval.models"].splitlines() if line.strip()]
    installed = [entry for entry in distribution("hf_adapters").entry_points if entry.group == "lm_eval.models"]
    assert [f"{entry.name} = {entry.value}" for entry in installed] == declared, "reinstall: pip install -e . --no-deps"
    [entry] = installed
    assert entry in entry_points(group="lm_eval.models")
    assert entry.name == "hf-adapters" and entry.load() is HFAdaptersLM is get_model("hf-adapters")
