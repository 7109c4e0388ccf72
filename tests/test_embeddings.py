"""Embeddings from the scoring model: batched like scoring and equal, within float32 rounding, to
one sequence at a time; DEITA's last-token pooling as DEITA's embedder computes it; columns and files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset, IterableDataset

from hf_adapters import cli
from hf_adapters.backends import LikelihoodBackend, TransformersBackend
from hf_adapters.embeddings import add_embedding_column, embed_texts, embedding_matrix
from tests.conftest import CORPUS, write_jsonl

TEXTS = [CORPUS[0], "Short.", CORPUS[2], "", CORPUS[3], "A little longer than short."]


def one_at_a_time(model, ids: list[int], pooling: str) -> np.ndarray:
    """Reference: one unpadded forward pass of the base model, pooled in float64."""
    with torch.no_grad():
        states = model.base_model(torch.tensor([ids])).last_hidden_state[0].double()
    return (states[-1] if pooling == "last" else states.mean(dim=0)).numpy()


@pytest.mark.parametrize("pooling", ["mean", "last"])
@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_batched_vectors_equal_one_text_at_a_time(model, tokenizer, pooling, batch_size):
    backend = TransformersBackend(model, tokenizer, max_padding=1.0)  # pad freely: the hardest case
    ids = tokenizer(TEXTS).input_ids
    vectors = backend.embed(ids, pooling=pooling, batch_size=batch_size)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), model.config.hidden_size)
    for row, text_ids in enumerate(ids):
        expected = one_at_a_time(model, text_ids or [backend.start_token_id], pooling)
        np.testing.assert_allclose(vectors[row], expected, rtol=1e-5, atol=1e-5)


def test_last_pooling_is_deitas_last_token_of_a_right_padded_batch(model, tokenizer):
    """DEITA's CLM embedder: right padding, an attention mask, output_hidden_states[-1] at length - 1."""
    ids = tokenizer(TEXTS[:3]).input_ids
    width = max(map(len, ids))
    input_ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in ids])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
    with torch.no_grad():
        states = model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
    deita = states[torch.arange(len(ids)), mask.sum(1) - 1].numpy()
    np.testing.assert_allclose(TransformersBackend(model, tokenizer).embed(ids, pooling="last"), deita,
                               rtol=1e-5, atol=1e-5)


def test_long_sequences_keep_their_first_max_length_tokens(model, tokenizer):
    backend = TransformersBackend(model, tokenizer)
    ids = tokenizer([CORPUS[2]]).input_ids
    cut = backend.embed(ids, pooling="mean", max_length=5)
    np.testing.assert_allclose(cut[0], one_at_a_time(model, ids[0][:5], "mean"), rtol=1e-5, atol=1e-5)


def test_unknown_pooling_is_refused(model, tokenizer):
    with pytest.raises(ValueError, match="pooling"):
        TransformersBackend(model, tokenizer).embed([[1, 2]], pooling="cls")


def test_a_backend_without_embed_says_so_by_name():
    class ScoresOnly(LikelihoodBackend):
        def score(self, items, **settings):
            return []

    with pytest.raises(NotImplementedError, match="ScoresOnly does not compute embeddings"):
        ScoresOnly().embed([[1]])


def test_embed_texts_takes_an_encoder_instead_of_the_model():
    class Encoder:
        def encode(self, texts, **settings):
            return [[len(text), 1.0] for text in texts]

    assert embed_texts(["ab", "abc"], encoder=Encoder()).tolist() == [[2.0, 1.0], [3.0, 1.0]]
    with pytest.raises(ValueError, match="not both"):
        embed_texts(["ab"], encoder=Encoder(), model_id="x")


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_column_holds_fixed_length_vectors_in_the_asked_precision(model, tokenizer, precision):
    ds = Dataset.from_dict({"instruction": ["Say hi.", "Add 2 and 3."], "input": ["", "2 3"], "output": ["Hi!", "5"]})
    embedded = add_embedding_column(ds, model=model, tokenizer=tokenizer, precision=precision)
    feature = embedded.features["embedding"]
    assert feature.length == model.config.hidden_size and feature.feature.dtype == precision
    texts = ["Say hi.\nHi!", "Add 2 and 3.\n2 3\n5"]  # the non-empty fields joined with newlines
    expected = TransformersBackend(model, tokenizer).embed(tokenizer(texts).input_ids).astype(precision)
    tolerance = 1e-3 if precision == "float16" else 1e-6
    np.testing.assert_allclose(embedding_matrix(embedded), expected, rtol=tolerance, atol=tolerance)


def test_a_stream_is_embedded_lazily_and_like_a_dataset(model, tokenizer):
    ds = Dataset.from_dict({"text": TEXTS})
    stream = IterableDataset.from_generator(lambda: ({"text": text} for text in TEXTS))
    kept = add_embedding_column(ds, text_column="text", model=model, tokenizer=tokenizer, map_batch_size=2)
    streamed = add_embedding_column(stream, text_column="text", model=model, tokenizer=tokenizer, map_batch_size=2)
    assert isinstance(streamed, IterableDataset)
    np.testing.assert_allclose(np.array([row["embedding"] for row in streamed]), embedding_matrix(kept),
                               rtol=1e-5, atol=1e-5)


def test_embedding_matrix_follows_selections_and_names_bad_rows():
    ds = Dataset.from_dict({"embedding": [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]})
    assert embedding_matrix(ds.select([2, 0])).tolist() == [[2.0, 2.0], [1.0, 0.0]]
    with pytest.raises(ValueError, match="Row 1 has no embedding"):
        embedding_matrix(Dataset.from_dict({"embedding": [[1.0], None]}))
    with pytest.raises(ValueError, match="Row 1 has an embedding of 1 values"):
        embedding_matrix(Dataset.from_dict({"embedding": [[1.0, 2.0], [1.0]]}))
    with pytest.raises(ValueError, match="not found"):
        embedding_matrix(ds, "vector")


def test_embed_command_writes_a_memory_mappable_file_in_row_order(model, tokenizer, model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": i, "text": text} for i, text in enumerate(TEXTS)])
    output = tmp_path / "embeddings.npy"
    assert cli.main(["embed", "--data", str(data), "--text-column", "text", "--output", str(output),
                     "--model", model_dir, "--pooling", "last", "--no-progress"]) == 0
    assert "6 rows embedded" in capsys.readouterr().out
    written = np.load(output, mmap_mode="r")
    expected = TransformersBackend(model, tokenizer).embed(tokenizer(TEXTS).input_ids, pooling="last")
    np.testing.assert_allclose(written, expected, rtol=1e-5, atol=1e-5)
