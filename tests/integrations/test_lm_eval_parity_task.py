"""The lm-eval task ``information_parity`` (shipped in hf_adapters/integrations/lm_eval_harness/tasks), run
by lm-eval's own ``hf`` model on a tiny model saved to a folder, against ``metrics/information_parity``."""

import importlib
import math
import statistics

import evaluate
import pytest
from tokenizers import processors

from hf_adapters import cli
from hf_adapters.files.data_io import read_records
from hf_adapters.formulas.parallel_corpus import group_by_language, pair_ids
from tests.conftest import build_model, build_tokenizer, lm_eval_logs_to_this_stderr, saved_model, write_jsonl

lm_eval = pytest.importorskip("lm_eval")
pytestmark = pytest.mark.usefixtures("lm_eval_tasks_indexed_once")
lm_eval_tasks = importlib.import_module("lm_eval.tasks")
TASKS_DIR = importlib.import_module("hf_adapters.integrations.lm_eval_harness.tasks").TASKS_DIR

ROWS = [
    {"lang": "eng_Latn", "id": 0, "text": "The cat sleeps on the sofa."},
    {"lang": "eng_Latn", "id": 1, "text": "Write a short poem about the sea."},
    {"lang": "fra_Latn", "id": 0, "text": "Le chat dort sur le canapé."},
    {"lang": "fra_Latn", "id": 1, "text": "Écris un court poème sur la mer."},
    {"lang": "deu_Latn", "id": 0, "text": "Die Katze schläft auf dem Sofa."},
    {"lang": "deu_Latn", "id": 1, "text": "Schreibe ein kurzes Gedicht über das Meer."},
]
#: Each language's metrics, the task's name for each being ``<lang>_<name>``.
METRICS = ("information_parity", "corpus_information_parity", "bits_per_byte", "reference_bits_per_byte")


@pytest.fixture(scope="module")
def long_model(tokenizer):
    """The tiny model with 1024 positions: the FLORES sample's longest text (Hindi) is 598 tokens of the
    tiny tokenizer, and the two agree only on texts that fit one window (README.md of the task)."""
    return build_model(len(tokenizer), max_position_embeddings=1024)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, long_model, tokenizer) -> str:
    return saved_model(tmp_path_factory.mktemp("tiny-lm-eval"), long_model, tokenizer)


@pytest.fixture(scope="module")
def bos_model_folder(tmp_path_factory, long_model) -> str:
    """The same model with a tokenizer that prepends BOS to every text it encodes, as Llama's does."""
    tokenizer = build_tokenizer()
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tokenizer.bos_token_id)])
    assert tokenizer("hello").input_ids[0] == tokenizer.bos_token_id
    return saved_model(tmp_path_factory.mktemp("tiny-lm-eval-bos"), long_model, tokenizer)


@pytest.fixture
def rows_file(tmp_path):
    return write_jsonl(tmp_path / "parallel.jsonl", ROWS)


def manager(**metadata):
    return lm_eval_tasks.TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=metadata)


def run_task(folder: str, data_files: str, **model_args) -> dict:
    """The task's results from lm-eval's ``hf`` model, float32 on the CPU."""
    results = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": folder, "device": "cpu", "dtype": "float32", **model_args},
        tasks=["information_parity"], task_manager=manager(data_files=data_files), batch_size=16)
    return results["results"]["information_parity"]


def metric_results(model, tokenizer, rows) -> dict[str, dict]:
    """``metrics/information_parity`` on each language's pairs."""
    metric = evaluate.load("./metrics/information_parity")
    grouped = group_by_language(rows)
    return {lang: metric.compute(predictions=[grouped[lang][i] for i in ids],
                                 references=[grouped["eng_Latn"][i] for i in ids], model=model, tokenizer=tokenizer)
            for lang, ids in pair_ids(grouped, "eng_Latn").items()}


def assert_equal_to_the_metric(task: dict, expected: dict[str, dict]) -> None:
    for lang, stats in expected.items():
        for name in METRICS:
            assert task[f"{lang}_{name},none"] == pytest.approx(stats[name], rel=1e-5), (lang, name)
        scores = stats["scores"]
        assert task[f"{lang}_information_parity_stderr,none"] == pytest.approx(
            statistics.stdev(scores) / math.sqrt(len(scores)), rel=1e-4)


def test_flores_sample_equals_the_metric(shared_dir, model_folder, long_model, tokenizer):
    path = shared_dir / "data" / "flores200_dev10.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    task = run_task(model_folder, str(path))
    expected = metric_results(long_model, tokenizer, read_records(path))
    assert len(expected) == 10
    assert_equal_to_the_metric(task, expected)


def test_a_tokenizer_that_adds_bos_needs_add_bos_token_false(bos_model_folder, rows_file, long_model, tokenizer):
    # lm-eval encodes a rolling text with the tokenizer's own special tokens and puts its prefix token
    # (BOS, else EOS) before them: a tokenizer that prepends BOS has BOS scored after BOS. The metric
    # never adds special tokens, so add_bos_token=False makes lm-eval score what the metric scores.
    expected = metric_results(long_model, tokenizer, ROWS)
    assert_equal_to_the_metric(run_task(bos_model_folder, str(rows_file), add_bos_token=False), expected)
    default = run_task(bos_model_folder, str(rows_file))
    assert default["fra_Latn_information_parity,none"] != pytest.approx(
        expected["fra_Latn"]["information_parity"], rel=1e-3)


def test_flores_text_files_give_the_pairs_of_their_rows(tmp_path, rows_file):
    folder = tmp_path / "dev"
    folder.mkdir()
    for lang, texts in group_by_language(ROWS).items():
        (folder / f"{lang}.dev").write_text("".join(text + "\n" for text in texts.values()), encoding="utf-8")
    from_rows, from_folder = (lm_eval_tasks.get_task_dict(["information_parity"], manager(data_files=str(path)))
                              ["information_parity"].eval_docs.to_list() for path in (rows_file, folder))
    assert sorted(from_folder, key=lambda doc: (doc["id"], doc["lang"])) == \
        sorted(from_rows, key=lambda doc: (doc["id"], doc["lang"]))
    # Id by id, so that --limit takes the first sentences of every language.
    assert [(doc["id"], doc["lang"]) for doc in from_rows] == \
        [("0", "fra_Latn"), ("0", "deu_Latn"), ("1", "fra_Latn"), ("1", "deu_Latn")]
    assert from_rows[0]["reference"] == "The cat sleeps on the sofa."


def test_languages_restrict_and_data_files_are_required(rows_file):
    task = lm_eval_tasks.get_task_dict(["information_parity"], manager(data_files=str(rows_file), languages="deu_Latn"))
    assert {doc["lang"] for doc in task["information_parity"].eval_docs} == {"deu_Latn"}
    with pytest.raises(ValueError, match="data_files"):
        lm_eval_tasks.get_task_dict(["information_parity"], manager())


@pytest.mark.parametrize("metadata, message", [
    ([], "pass the parallel files, e.g. --metadata"),
    (["--metadata", '{"data_files": "no/such/folder"}'], "No parallel file or folder at no/such"),
    (["--metadata", '{"data_files": "PARALLEL", "languages": "xho_Latn"}'], "Language(s) ['xho_Latn'] not in the data"),
], ids=["no data_files", "missing files", "unknown language"])
def test_the_tasks_data_refused_is_one_error_line_from_the_command_line(metadata, message, model_dir, rows_file,
                                                                         capsys):
    """``hf-adapters lm-eval``: the task's clear message as one ``error:`` line, exit 2, no traceback.

    Round five, item 14."""
    metadata = [argument.replace("PARALLEL", str(rows_file)) for argument in metadata]
    lm_eval_logs_to_this_stderr()
    argv = ["lm-eval", "--model", "hf-adapters", "--model_args", f"model_id={model_dir}",
            "--tasks", "information_parity", "--limit", "1", *metadata]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1 and err.rstrip().endswith(errors[0]), err[-2000:]
    assert errors[0].startswith(f"error: information_parity: {message}")
