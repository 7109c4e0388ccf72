"""The backend seam: a backend written outside the package drives every entry point, with the
default backend's numbers; backends by name in configs; what the formula modules may not touch."""

from __future__ import annotations

import ast
import inspect
import math
import re
from dataclasses import replace
from pathlib import Path

import evaluate
import pytest
import torch
from datasets import Dataset

import hf_adapters
from hf_adapters.backends import BACKENDS, BackendOptions, LikelihoodBackend, TransformersBackend, register_backend
from hf_adapters.cli import main
from hf_adapters.columns.dataset_columns import add_ifd_column, add_information_parity_column, add_perplexity_column
from hf_adapters.core.likelihood import ContinuationScore, prepare_items
from hf_adapters.formulas.ifd import IFDOptions, compute_ifd
from hf_adapters.formulas.information_parity import InformationParityOptions, compute_information_parity
from hf_adapters.formulas.parallel_corpus import evaluate_parallel
from hf_adapters.formulas.perplexity import PerplexityOptions, compute_perplexity
from hf_adapters.scorers import ConfigError, ConversationIFDScorer, IFDScorer, PPLScorer, build_scorer
from tests.conftest import assert_exact, naive_nll, write_jsonl
from tests.core.test_conversations import CONVERSATIONS, naive_conversation_ifd
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS

PACKAGE = Path(hf_adapters.__file__).parent
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Write a short poem about the sea.", "",
         "Le renard brun saute par-dessus le chien paresseux. 🦊"]


class OneAtATime(LikelihoodBackend):
    """A backend as a user would write it: one item per forward pass of a plain transformers model."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self.items_scored = 0

    @property
    def max_length(self):
        return self.model.config.max_position_embeddings

    def score(self, items, *, max_length=None, truncate=True, batch_size=None, token_losses=False, progress=None,
              desc="Scoring"):
        scores = []
        for item in prepare_items(items, self.start_token_id, max_length=max_length, truncate=truncate,
                                  position_limit=self.max_length):
            if not item.targets:
                scores.append(item.unscored(token_losses))
                continue
            with torch.no_grad():
                logits = self.model(torch.tensor([item.input_ids])).logits[0, item.first_scored - 1:-1]
            nlls = torch.nn.functional.cross_entropy(logits.double(), torch.tensor(item.targets),
                                                     reduction="none").tolist()
            scores.append(ContinuationScore(sum(nlls), len(nlls), item.truncated,
                                            tuple(nlls) if token_losses else None))
            self.items_scored += 1
        return scores


def naive_perplexities(tokenizer, texts):
    start = tokenizer.bos_token_id

    def naive(model):
        values = []
        for text in texts:
            total, count = naive_nll(model, [], tokenizer(text, add_special_tokens=False).input_ids, start)
            values.append(math.exp(total / count) if count else math.nan)
        return values

    return naive


def test_a_user_backend_drives_the_perplexity_metric_with_the_default_backends_numbers(model, tokenizer):
    backend = OneAtATime(model, tokenizer)
    metric = evaluate.load("./metrics/perplexity")
    ours = metric.compute(predictions=TEXTS, backend=backend)
    default = metric.compute(predictions=TEXTS, model=model, tokenizer=tokenizer)
    assert backend.items_scored == 3  # the empty text has nothing to score
    assert_exact(ours["perplexities"], naive_perplexities(tokenizer, TEXTS), model)
    assert_exact(default["perplexities"], naive_perplexities(tokenizer, TEXTS), model)


def test_a_user_backend_drives_the_ifd_metric_and_add_ifd_column(model, tokenizer):
    backend = OneAtATime(model, tokenizer)
    reference = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer)
    result = evaluate.load("./metrics/ifd").compute(instructions=INSTRUCTIONS, inputs=INPUTS, outputs=OUTPUTS,
                                                    backend=backend)
    assert result["ifd_scores"] == pytest.approx(reference["ifd_scores"], rel=1e-5, nan_ok=True)
    ds = Dataset.from_dict({"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS})
    column = add_ifd_column(ds, backend=backend)["ifd"]
    assert column == pytest.approx(reference["ifd_scores"], rel=1e-5, nan_ok=True)


def test_a_user_backend_scores_conversations_rolling_windows_and_parity(model, tokenizer):
    backend = OneAtATime(model, tokenizer)
    conversation = ConversationIFDScorer(backend=backend, turns="all").result(CONVERSATIONS)
    assert_exact(conversation["ifd_scores"],
                 lambda m: [naive_conversation_ifd(m, tokenizer, c, "all") for c in CONVERSATIONS], model)
    long_text = " ".join(TEXTS) * 4
    rolling = compute_perplexity([long_text], backend=backend, max_length=32, stride=16)
    expected = compute_perplexity([long_text], model=model, tokenizer=tokenizer, max_length=32, stride=16)
    assert rolling["nlls"] == pytest.approx(expected["nlls"], rel=1e-5)
    parity = compute_information_parity(TEXTS[:2], TEXTS[2:], backend=backend)
    assert parity["scores"] == pytest.approx(
        compute_information_parity(TEXTS[:2], TEXTS[2:], model=model, tokenizer=tokenizer)["scores"],
        rel=1e-5, nan_ok=True)
    rows = [{"lang": lang, "id": 0, "text": text} for lang, text in (("eng", TEXTS[0]), ("fra", TEXTS[3]))]
    assert evaluate_parallel(rows, "eng", backend=backend)["model"] == "OneAtATime"


def test_a_backend_without_identity_is_never_served_from_the_datasets_cache(model, tokenizer, tmp_path):
    Dataset.from_dict({"text": TEXTS[:2]}).save_to_disk(tmp_path / "ds")
    ds = Dataset.load_from_disk(tmp_path / "ds")
    backend = OneAtATime(model, tokenizer)
    add_perplexity_column(ds, text_column="text", backend=backend)
    add_perplexity_column(ds, text_column="text", backend=backend)
    assert backend.items_scored == 4


def test_a_registered_backend_is_named_in_configs(model, tokenizer, monkeypatch):
    loads = []

    class Registered(OneAtATime):
        name = "one-at-a-time"

        @classmethod
        def from_pretrained(cls, model_id, *, dtype=None, device=None):
            loads.append(model_id)
            return cls(model, tokenizer)

        @classmethod
        def identify(cls, model_id, *, dtype=None, device=None):
            return {"model": model_id, "backend": cls.name}

    monkeypatch.setitem(BACKENDS, Registered.name, Registered)
    scorer = build_scorer({"name": "PPLScorer", "backend": "one-at-a-time", "model": "my/model"})
    assert scorer.config["backend"] == "one-at-a-time"
    rows = [{"instruction": "Say hi.", "input": "", "output": "Hi!"}]
    assert scorer.score_rows(rows) == pytest.approx(PPLScorer(model=model, tokenizer=tokenizer).score_rows(rows),
                                                    rel=1e-5)
    assert loads == ["my/model"] and scorer.model_identity() == {"model": "my/model", "backend": "one-at-a-time"}
    assert "backend" not in PPLScorer().config  # the default backend leaves configs as they were


def test_register_backend_needs_a_name():
    with pytest.raises(ValueError, match="needs a `name`"):
        register_backend(OneAtATime)


@pytest.mark.parametrize(("options", "message"), [
    ({"backend": "vllm-nonexistent"},
     r"Unknown backend 'vllm-nonexistent'; valid backends: \['reward-model', 'transformers'"),
    ({"backend": 3}, "must be a LikelihoodBackend or a backend name"),
])
def test_a_bad_backend_is_refused_before_anything_loads(options, message, load_calls):
    with pytest.raises((ValueError, TypeError), match=message):
        compute_perplexity(["a text"], **options)
    with pytest.raises((ValueError, TypeError), match=message):
        build_scorer({"name": "IFDScorer", **options})
    assert load_calls == []


def test_a_backend_and_a_model_together_are_refused(model, tokenizer):
    with pytest.raises(ValueError, match="not both"):
        compute_ifd(["Say hi."], ["Hi."], backend=OneAtATime(model, tokenizer), model=model, tokenizer=tokenizer)


def test_the_transformers_backend_is_the_default_and_loads_by_name(load_calls):
    backend = BackendOptions(model_id="some/model").load()
    assert isinstance(backend, TransformersBackend) and load_calls == ["some/model"]
    assert TransformersBackend.name in BACKENDS


# Options, declared once.


@pytest.mark.parametrize(("spec", "entry_points"), [
    (IFDOptions, [compute_ifd, add_ifd_column]),
    (PerplexityOptions, [compute_perplexity, add_perplexity_column]),
    (InformationParityOptions, [compute_information_parity, add_information_parity_column, evaluate_parallel]),
])
def test_every_option_of_a_spec_is_a_keyword_of_each_entry_point(spec, entry_points):
    for function in entry_points:
        parameters = inspect.signature(function).parameters
        for name in (*spec.names(), *BackendOptions.names()):
            assert name in parameters, (function.__name__, name)
            assert parameters[name].default == {**spec.defaults(), **BackendOptions.defaults()}[name]


@pytest.mark.parametrize("cls", [IFDScorer, ConversationIFDScorer])
def test_every_ifd_option_is_a_config_key_of_the_ifd_scorers(cls):
    assert set(IFDOptions.names()) <= {*cls.options, *cls.extra_options}


def test_an_unknown_option_is_named_with_the_valid_ones(load_calls):
    ds = Dataset.from_dict({"instruction": ["a"], "input": [""], "output": ["b"]})
    with pytest.raises(ValueError, match=r"add_ifd_column got unknown option\(s\) \['max_lenght'\]; valid options: "
                                         r"\[.*'max_length'"):
        add_ifd_column(ds, max_lenght=512)
    with pytest.raises(ValueError, match=r"compute_perplexity got unknown option\(s\) \['strid'\]"):
        compute_perplexity(["a"], strid=4)
    with pytest.raises(ValueError, match=r"ifd.compute got unknown option\(s\) \['temperature'\]"):
        evaluate.load("./metrics/ifd").compute(instructions=["a"], outputs=["b"], temperature=0.5)
    with pytest.raises(ConfigError, match=r"Unknown key\(s\) \['temperature'\] for IFDScorer"):
        IFDScorer(temperature=0.5)
    assert load_calls == []


# The seam's edges.


def test_formula_modules_never_touch_a_model():
    for name in ("ifd.py", "perplexity.py", "information_parity.py"):
        text = (PACKAGE / "formulas" / name).read_text(encoding="utf-8")
        assert not re.search(r"score_continuations|from_pretrained|base_model|get_output_embeddings", text), name


def test_dir_and_type_checkers_see_every_public_name():
    assert set(hf_adapters.__all__) <= set(dir(hf_adapters))
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    checked = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.If)
               for statement in node.body if isinstance(statement, ast.ImportFrom) for alias in statement.names}
    assert checked == set(hf_adapters.__all__)


# --- From the round-four review: a user backend's scores are checked against the contract at every entry point

#: The texts, instruction rows and conversations each entry point scores with a backend breaking the contract.
CONTRACT_TEXTS = ["The quick brown fox jumps over the lazy dog.", "", "Write a short poem about the sea."]
CONTRACT_INSTRUCTIONS = ["Name a primary colour.", "Say hi.", "Count to three."]
CONTRACT_OUTPUTS = ["Red.", "Hi there!", "One, two, three."]
CONTRACT_CONVERSATIONS = [
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue is a colour."},
     {"role": "user", "content": "And a fruit?"}, {"role": "assistant", "content": "An apple, for one."}],
    [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}],
]


class Faulty(LikelihoodBackend):
    """A user-written backend that breaks the contract: ``fault`` changes the built-in backend's scores."""

    def __init__(self, model, tokenizer, fault):
        self.inner, self.tokenizer, self.fault = TransformersBackend(model, tokenizer), tokenizer, fault

    @property
    def max_length(self):
        return self.inner.max_length

    def score(self, items, **settings):
        return self.fault(self.inner.score(items, **settings))


#: Each broken contract, and what the error says of it.
FAULTS = {
    "one score too few": (lambda scores: scores[:-1], r"returned \d+ scores for \d+ items"),
    "one score too many": (lambda scores: [*scores, scores[-1]], r"returned \d+ scores for \d+ items"),
    "NaN for every item": (lambda scores: [replace(score, nll=math.nan) for score in scores], r"nll=nan"),
    "nothing scored for every item": (
        lambda scores: [ContinuationScore(math.nan, 0, score.truncated) for score in scores], r"num_tokens=0"),
    "a negative NLL": (lambda scores: [replace(score, nll=-score.nll) for score in scores], r"nll=-"),
    "tuples": (lambda scores: [(score.nll, score.num_tokens) for score in scores], r"tuple"),
}


#: Each entry point, as a call with a backend.
ENTRY_POINTS = {
    "compute_perplexity": lambda backend: compute_perplexity(CONTRACT_TEXTS, backend=backend),
    "rolling perplexity": lambda backend: compute_perplexity([" ".join(CONTRACT_TEXTS) * 3], backend=backend,
                                                             max_length=16, stride=8),
    "perplexity metric": lambda backend: evaluate.load("./metrics/perplexity").compute(predictions=CONTRACT_TEXTS,
                                                                                        backend=backend),
    "add_perplexity_column": lambda backend: add_perplexity_column(Dataset.from_dict({"text": CONTRACT_TEXTS}),
                                                                   text_column="text", backend=backend),
    "compute_ifd": lambda backend: compute_ifd(CONTRACT_INSTRUCTIONS, CONTRACT_OUTPUTS, backend=backend),
    "conversation IFD": lambda backend: ConversationIFDScorer(backend=backend,
                                                              turns="all").result(CONTRACT_CONVERSATIONS),
    "information parity": lambda backend: compute_information_parity(CONTRACT_TEXTS[:1] * 2, CONTRACT_TEXTS[2:] * 2,
                                                                     backend=backend),
}


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_backend_breaking_the_contract_is_an_error_naming_it_at_every_entry_point(model, tokenizer, fault,
                                                                                     entry_point):
    """From the round-four review, case 12."""
    change, message = FAULTS[fault]
    with pytest.raises(ValueError, match=rf"backend Faulty .*{message}"):
        ENTRY_POINTS[entry_point](Faulty(model, tokenizer, change))


@pytest.mark.parametrize("change", [
    lambda scores: [replace(score, token_nlls=None) for score in scores],
    lambda scores: [replace(score, token_nlls=score.token_nlls[:-1]) for score in scores],
], ids=["missing", "one short"])
@pytest.mark.parametrize("compute", [
    lambda backend: compute_perplexity(CONTRACT_TEXTS[:1], backend=backend, return_token_losses=True),
    lambda backend: compute_ifd(CONTRACT_INSTRUCTIONS, CONTRACT_OUTPUTS, backend=backend, return_token_losses=True),
], ids=["perplexity", "ifd"])
def test_token_losses_of_the_wrong_length_are_an_error_naming_the_backend(model, tokenizer, change, compute):
    """From the round-four review, case 12."""
    with pytest.raises(ValueError, match=r"backend Faulty .*token_nlls"):
        compute(Faulty(model, tokenizer, change))


def test_every_formula_scores_through_the_checked_call():
    """Outside ``backends/``, no module calls a backend's ``score`` directly (only ``score_checked``).

    From the round-four review, case 12.
    """
    unchecked = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path in sorted(PACKAGE.rglob("*.py"))
                 if "backends" not in path.parts
                 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "score"]
    assert unchecked == []


def test_a_job_with_a_registered_backend_breaking_the_contract_stops_with_one_line_naming_it(
        model, tokenizer, tmp_path, monkeypatch, capsys):
    """From the round-four review, case 12."""
    class Registered(Faulty):
        name = "faulty"

        @classmethod
        def from_pretrained(cls, model_id, *, dtype=None, device=None):
            return cls(model, tokenizer, FAULTS["one score too few"][0])

        @classmethod
        def identify(cls, model_id, *, dtype=None, device=None):
            return {"model": model_id, "backend": cls.name}

    monkeypatch.setitem(BACKENDS, Registered.name, Registered)
    config = tmp_path / "config.yaml"
    config.write_text("name: PPLScorer\nbackend: faulty\nmodel: my/model\nbatch_size: 4\n", encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "instruction": "Say a.", "output": "a" * (i + 1)}
                                                 for i in range(6)])
    code = main(["score", str(config), "--data", str(data), "--output", str(tmp_path / "scores.jsonl"),
                 "--no-progress", "--save-every", "4"])
    err = capsys.readouterr().err
    assert code == 2
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert "'faulty'" in line and "returned 3 scores for 4 items" in line and "PPLScorer" not in line


def test_a_token_budget_for_a_backend_that_batches_by_itself_is_refused_before_loading():
    with pytest.raises(ValueError, match="`max_batch_tokens` bounds the transformers backend's batches; the 'vllm'"):
        BackendOptions(backend="vllm", max_batch_tokens=4096)
    with pytest.raises(ValueError, match="`max_batch_tokens` must be a positive integer, got 0"):
        BackendOptions(max_batch_tokens=0)
