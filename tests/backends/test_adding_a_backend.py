"""The guide docs/guides/adding_a_backend.md, followed once: a backend of one float64 forward pass per
item, registered under its name, scores as the transformers backend does from Python and from a config."""

import math

import pytest
import torch

from hf_adapters import ContinuationScore, LikelihoodBackend, compute_perplexity, load_model, register_backend
from hf_adapters.backends import BACKENDS
from hf_adapters.core.likelihood import prepare_items
from tests.conftest import read_jsonl, write_jsonl

TEXTS = ["The cat sat on the mat.", "Add two and three.", "A longer sentence, with a comma in it."]


class OneAtATimeBackend(LikelihoodBackend):
    """Step 1: one forward pass per item, in float64."""

    name = "one-at-a-time-test"

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model.to(torch.float64), tokenizer

    def score(self, items, *, max_length=None, truncate=True, token_losses=False, **settings):
        scores = []
        for item in prepare_items(items, self.start_token_id, max_length=max_length, truncate=truncate):
            if not item.targets:
                scores.append(item.unscored(token_losses))
                continue
            with torch.no_grad():
                logits = self.model(torch.tensor([item.input_ids])).logits[0, item.first_scored - 1:-1]
            nlls = torch.nn.functional.cross_entropy(logits, torch.tensor(item.targets), reduction="none")
            scores.append(ContinuationScore(nlls.sum().item(), len(nlls), item.truncated,
                                            tuple(nlls.tolist()) if token_losses else None))
        return scores

    def identity(self):
        """Step 2: what produces the scores."""
        return {"backend": self.name, "model": self.model.name_or_path}

    @classmethod
    def from_pretrained(cls, model_id, *, dtype=None, device=None):
        """Step 3: a config's ``model:`` loaded."""
        model, tokenizer = load_model(model_id)
        return cls(model, tokenizer)


@pytest.fixture
def registered():
    """Step 3: the class registered under its name, and taken out again after the test."""
    register_backend(OneAtATimeBackend)
    yield OneAtATimeBackend.name
    BACKENDS.pop(OneAtATimeBackend.name)


def test_a_registered_backend_scores_as_the_transformers_backend_from_python(registered, model_dir):
    ours = compute_perplexity(TEXTS, backend=registered, model_id=model_dir)["perplexities"]
    reference = compute_perplexity(TEXTS, model_id=model_dir)["perplexities"]
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(ours, reference, strict=True))


def test_a_config_naming_the_backend_scores_as_the_transformers_backend(registered, model_dir, tmp_path):
    from hf_adapters import cli

    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": i, "text": text} for i, text in enumerate(TEXTS)])
    scores = {}
    for backend in (registered, "transformers"):
        config = tmp_path / f"{backend}.yaml"
        config.write_text(f"name: PerplexityScorer\nbackend: {backend}\nmodel: {model_dir}\n", encoding="utf-8")
        output = tmp_path / f"{backend}.jsonl"
        assert cli.main(["score", str(config), "--data", str(data), "--output", str(output), "--no-progress"]) == 0
        scores[backend] = [row["score"] for row in read_jsonl(output)]
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(scores[registered], scores["transformers"],
                                                                   strict=True))


def test_a_built_in_name_cannot_be_taken():
    class Impostor(OneAtATimeBackend):
        name = "transformers"

    with pytest.raises(ValueError, match="transformers"):
        register_backend(Impostor)
