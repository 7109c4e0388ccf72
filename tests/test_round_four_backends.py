"""Regressions of issue "round four": a user backend's scores are checked against the contract, and
``hf-adapters score`` names a row by its index in the data and its id.

Case 12: a backend returning too few or too many scores, NaN or negative NLLs, something other than
a ``ContinuationScore`` or token NLLs of the wrong length is stopped by one check, whose error names
the backend, at every entry point. Case 15: warnings name a row by its index in the data (not in its
chunk) and its id.
"""

from __future__ import annotations

import ast
import logging
import math
from dataclasses import replace
from pathlib import Path

import evaluate
import pytest
from datasets import Dataset

import hf_adapters
from hf_adapters import (
    add_ifd_column,
    add_perplexity_column,
    compute_ifd,
    compute_information_parity,
    compute_perplexity,
)
from hf_adapters.backends import BACKENDS, LikelihoodBackend, TransformersBackend
from hf_adapters.cli import main
from hf_adapters.core.likelihood import ContinuationScore
from hf_adapters.scorers import ConversationIFDScorer
from tests.conftest import write_jsonl

PACKAGE = Path(hf_adapters.__file__).parent
TEXTS = ["The quick brown fox jumps over the lazy dog.", "", "Write a short poem about the sea."]
INSTRUCTIONS = ["Name a primary colour.", "Say hi.", "Count to three."]
OUTPUTS = ["Red.", "Hi there!", "One, two, three."]
CONVERSATIONS = [
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
    "compute_perplexity": lambda backend: compute_perplexity(TEXTS, backend=backend),
    "rolling perplexity": lambda backend: compute_perplexity([" ".join(TEXTS) * 3], backend=backend, max_length=16,
                                                             stride=8),
    "perplexity metric": lambda backend: evaluate.load("./metrics/perplexity").compute(predictions=TEXTS,
                                                                                        backend=backend),
    "add_perplexity_column": lambda backend: add_perplexity_column(Dataset.from_dict({"text": TEXTS}),
                                                                   text_column="text", backend=backend),
    "compute_ifd": lambda backend: compute_ifd(INSTRUCTIONS, OUTPUTS, backend=backend),
    "conversation IFD": lambda backend: ConversationIFDScorer(backend=backend, turns="all").result(CONVERSATIONS),
    "information parity": lambda backend: compute_information_parity(TEXTS[:1] * 2, TEXTS[2:] * 2,
                                                                     backend=backend),
}


# ---------------------------------------------------------------------------------- 12. the backend contract


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_backend_breaking_the_contract_is_an_error_naming_it_at_every_entry_point(model, tokenizer, fault,
                                                                                     entry_point):
    change, message = FAULTS[fault]
    with pytest.raises(ValueError, match=rf"backend Faulty .*{message}"):
        ENTRY_POINTS[entry_point](Faulty(model, tokenizer, change))


@pytest.mark.parametrize("change", [
    lambda scores: [replace(score, token_nlls=None) for score in scores],
    lambda scores: [replace(score, token_nlls=score.token_nlls[:-1]) for score in scores],
], ids=["missing", "one short"])
@pytest.mark.parametrize("compute", [
    lambda backend: compute_perplexity(TEXTS[:1], backend=backend, return_token_losses=True),
    lambda backend: compute_ifd(INSTRUCTIONS, OUTPUTS, backend=backend, return_token_losses=True),
], ids=["perplexity", "ifd"])
def test_token_losses_of_the_wrong_length_are_an_error_naming_the_backend(model, tokenizer, change, compute):
    with pytest.raises(ValueError, match=r"backend Faulty .*token_nlls"):
        compute(Faulty(model, tokenizer, change))


def test_every_formula_scores_through_the_checked_call():
    """Outside ``backends/``, no module calls a backend's ``score`` directly (only ``score_checked``)."""
    unchecked = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path in sorted(PACKAGE.rglob("*.py"))
                 if "backends" not in path.parts
                 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "score"]
    assert unchecked == []


def test_a_job_with_a_registered_backend_breaking_the_contract_stops_with_one_line_naming_it(
        model, tokenizer, tmp_path, monkeypatch, capsys):
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
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert "'faulty'" in line and "returned 3 scores for 4 items" in line and "PPLScorer" not in line


# ---------------------------------------------------------------------------------- 15. rows named in a job


def job_rows(empty: str = "output") -> list[dict]:
    """24 instruction rows ``sample-1``... whose row 21 (``sample-22``) has an empty ``empty`` field."""
    rows = [{"id": f"sample-{i + 1}", "instruction": f"Repeat {i}.", "input": "", "output": f"Done {i}."}
            for i in range(24)]
    rows[21][empty] = ""
    return rows


def conversation_rows() -> list[dict]:
    """24 conversations ``sample-1``... whose row 21 (``sample-22``) has an empty assistant turn."""
    rows = [{"id": f"sample-{i + 1}", "messages": [{"role": "user", "content": f"Repeat {i}."},
                                                   {"role": "assistant", "content": f"Done {i}."}]}
            for i in range(24)]
    rows[21]["messages"][1]["content"] = ""
    return rows


@pytest.mark.parametrize(("config", "rows", "message"), [
    ("name: IFDScorer\n", job_rows(), "Row 21 (id='sample-22') has an empty output"),
    ("name: IFDScorer\ndirection: reverse\n", job_rows("instruction"),
     "Row 21 (id='sample-22') has an empty instruction"),
    ("name: IFDScorer\nconvention: superfiltering\n", job_rows(), "Row 21 (id='sample-22')"),
    ("name: IFDScorer\nturns: last\n", conversation_rows(), "Row 21 (id='sample-22'), turn 0 has an empty output"),
], ids=["forward", "reverse", "peer", "conversation"])
def test_a_job_warning_names_the_row_by_its_index_in_the_data_and_its_id(tmp_path, model_dir, caplog, config,
                                                                         rows, message):
    path = tmp_path / "config.yaml"
    path.write_text(config + "max_length: 256\nbatch_size: 16\n", encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        assert main(["score", str(path), "--data", str(data), "--output", str(tmp_path / "scores.jsonl"),
                     "--model", model_dir, "--no-progress"]) == 0
    assert message in caplog.text
    assert "Row 5" not in caplog.text


def test_a_dataset_map_warning_names_the_row_by_its_id(model, tokenizer, caplog):
    rows = job_rows()[16:]
    ds = Dataset.from_list(rows)
    with caplog.at_level(logging.WARNING):
        add_ifd_column(ds, model=model, tokenizer=tokenizer)
    assert "Row 5 (id='sample-22') has an empty output" in caplog.text
