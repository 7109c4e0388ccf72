"""Embeddings from the scoring model: batched like scoring and equal, within float32 rounding, to
one sequence at a time; DEITA's last-token pooling as DEITA's embedder computes it; columns and files."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from datasets import Dataset, IterableDataset

from hf_adapters import cli
from hf_adapters.backends import LikelihoodBackend, TransformersBackend
from hf_adapters.columns.embedding_columns import add_embedding_column
from hf_adapters.formulas.embeddings import embed_texts, embedding_matrix
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


ROWS = [{"id": f"r{i}", "text": text} for i, text in enumerate(TEXTS)]


def embed_command(tmp_path, model_dir, rows=ROWS, *extra: str) -> tuple:
    """`embed` of ``rows`` (by their text) into embeddings.npy; the data file and the array's path."""
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    output = tmp_path / "embeddings.npy"
    assert cli.main(["embed", "--data", str(data), "--text-column", "text", "--output", str(output),
                     "--model", model_dir, "--no-progress", *extra]) == 0
    return data, output


def select_command(tmp_path, rows, embeddings) -> int:
    """`select --diversity facility_location` of ``rows`` (scored by position) with ``embeddings``."""
    data = write_jsonl(tmp_path / "selected_rows.jsonl", rows)
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": row["id"], "score": 1.0 - i / 10}
                                                     for i, row in enumerate(rows)])
    return cli.main(["select", "--data", str(data), "--scores", str(scores), "--diversity", "facility_location",
                     "--budget", "2", "--embeddings", str(embeddings), "--output", str(tmp_path / "kept.jsonl")])


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(("error:", "Traceback"))]


def test_embed_records_what_it_embedded_beside_the_array(model_dir, tmp_path, capsys):
    """Round five, item 2."""
    _, output = embed_command(tmp_path, model_dir, ROWS, "--pooling", "last")
    record = json.loads((tmp_path / "embeddings.npy.json").read_text(encoding="utf-8"))
    assert record["complete"] is True and (record["rows"], record["dimensions"]) == np.load(output).shape
    assert record["pooling"] == "last" and record["columns"]["text_column"] == "text" and record["model"]
    assert not (tmp_path / "embeddings.npy.tmp").exists()


def test_select_refuses_embeddings_of_the_same_rows_in_another_order(model_dir, tmp_path, capsys):
    """Each row would be paired with another row's vector. Round five, item 2."""
    _, output = embed_command(tmp_path, model_dir)
    capsys.readouterr()
    assert select_command(tmp_path, ROWS[::-1], output) == 2
    [error] = error_lines(capsys)
    assert "was embedded for the same rows in another order" in error
    assert select_command(tmp_path, ROWS, output) == 0


def test_select_refuses_embeddings_of_other_rows_naming_what_differs(model_dir, tmp_path, capsys):
    """Round five, item 2."""
    _, output = embed_command(tmp_path, model_dir)
    capsys.readouterr()
    assert select_command(tmp_path, [*ROWS[:2], {"id": "r2", "text": "Another text."}, *ROWS[3:]], output) == 2
    assert "was embedded for other rows (column 'text' held other values)" in error_lines(capsys)[0]
    assert select_command(tmp_path, ROWS[:4], output) == 2
    assert "holds the embeddings of 6 rows" in error_lines(capsys)[0]
    assert select_command(tmp_path, [{"id": row["id"], "prompt": row["text"]} for row in ROWS], output) == 2
    assert "was embedded from column 'text'" in error_lines(capsys)[0]


def test_select_uses_an_array_without_a_record_with_a_note(tmp_path, capsys):
    """A user's own .npy of the right shape is used as given, and said to be. Round five, item 2."""
    np.save(tmp_path / "mine.npy", np.random.default_rng(0).normal(size=(len(ROWS), 4)).astype(np.float32))
    assert select_command(tmp_path, ROWS, tmp_path / "mine.npy") == 0
    error = capsys.readouterr().err
    assert "note: " in error and "has no record of the rows it was embedded for" in error


def test_a_killed_embed_leaves_no_array_under_the_final_name(model_dir, tmp_path, capsys, monkeypatch):
    """A killed run left a full-size array, the rows it never reached all zeros, under the final
    name; it writes a temporary file and renames it at the end, and an earlier finished array and
    its record stay as they were. Round five, item 3."""
    from hf_adapters.cli import embed_command as command
    from hf_adapters.formulas import embeddings

    monkeypatch.setattr(command, "CHUNK_ROWS", 2)
    embed = embeddings.embed_texts
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return embed(*args, **kwargs)

    monkeypatch.setattr(embeddings, "embed_texts", interrupted)
    data = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    arguments = ["embed", "--data", str(data), "--text-column", "text", "--output", str(tmp_path / "embeddings.npy"),
                 "--model", model_dir, "--no-progress"]
    try:
        cli.main(arguments)
    except KeyboardInterrupt:
        pass
    assert not (tmp_path / "embeddings.npy").exists() and not (tmp_path / "embeddings.npy.tmp").exists()
    monkeypatch.setattr(embeddings, "embed_texts", embed)
    assert cli.main(arguments) == 0
    finished = np.load(tmp_path / "embeddings.npy")
    calls.clear()
    monkeypatch.setattr(embeddings, "embed_texts", interrupted)
    try:
        cli.main([*arguments[:-1], "--pooling", "last"])
    except KeyboardInterrupt:
        pass
    np.testing.assert_array_equal(np.load(tmp_path / "embeddings.npy"), finished)
    assert select_command(tmp_path, ROWS, tmp_path / "embeddings.npy") == 0


def test_select_refuses_an_array_a_finished_embed_did_not_write(model_dir, tmp_path, capsys, monkeypatch):
    """Killed between putting the array in place and marking its record complete: the record says
    the run did not finish. The temporary file is refused too. Round five, item 3."""
    import os
    import types

    from hf_adapters.cli import embed_command as command

    def replace_then_stop(source, target):
        os.replace(source, target)
        if str(target).endswith(".npy"):
            raise KeyboardInterrupt

    monkeypatch.setattr(command, "os", types.SimpleNamespace(replace=replace_then_stop))
    try:
        embed_command(tmp_path, model_dir)
    except (KeyboardInterrupt, AssertionError):
        pass
    assert (tmp_path / "embeddings.npy").exists()
    capsys.readouterr()
    assert select_command(tmp_path, ROWS, tmp_path / "embeddings.npy") == 2
    assert "its record embeddings.npy.json says the run did not finish" in error_lines(capsys)[0]
    np.save(tmp_path / "left.npy", np.ones((len(ROWS), 3)))
    os.replace(tmp_path / "left.npy", tmp_path / "left.npy.tmp")
    assert select_command(tmp_path, ROWS, tmp_path / "left.npy.tmp") == 2
    assert "unfinished file of an `hf-adapters embed` run" in error_lines(capsys)[0]


def test_select_refuses_an_array_changed_since_embed_wrote_it(model_dir, tmp_path, capsys):
    """Round five, item 2."""
    _, output = embed_command(tmp_path, model_dir)
    np.save(output, np.ones((len(ROWS), 3), dtype=np.float32))
    capsys.readouterr()
    assert select_command(tmp_path, ROWS, output) == 2
    assert "the file changed since" in error_lines(capsys)[0]
    (tmp_path / "embeddings.npy.json").write_text('{"format": "hf-adapters embeddings", "rows": "6"}')
    assert select_command(tmp_path, ROWS, output) == 2
    assert "is not a record `hf-adapters embed` wrote" in error_lines(capsys)[0]


def not_an_array(path):
    path.write_text("0.1 0.2\n0.3 0.4\n", encoding="utf-8")


def pickled(path):
    path.write_bytes(pickle.dumps([[0.1, 0.2]] * len(ROWS)))


@pytest.mark.parametrize(("write", "held"), [
    (lambda path: np.save(path, np.ones(len(ROWS))), "holds an array of shape (6,)"),
    (lambda path: np.save(path, np.ones((len(ROWS), 2, 2))), "holds an array of shape (6, 2, 2)"),
    (lambda path: np.save(path, np.array([{"a": 1}] * len(ROWS)), allow_pickle=True), "holds Python objects"),
    (lambda path: np.save(path, np.array([["a", "b"]] * len(ROWS))), "holds <U1 values"),
    (not_an_array, "is not a NumPy .npy array file"),
    (pickled, "is not a NumPy .npy array file"),
    (lambda path: np.savez(path.with_suffix(""), np.ones((len(ROWS), 2))) or path.with_suffix(".npz").rename(path),
     "is not a NumPy .npy array file"),
])
def test_select_says_what_an_embeddings_file_should_be(tmp_path, capsys, write, held):
    """A 1-D or 3-D array, or a file that is not a .npy array, said "axis 1 is out of bounds", an
    einsum message or numpy's hint to load it with `allow_pickle`. Round five, item 18."""
    path = tmp_path / "embeddings.npy"
    write(path)
    assert select_command(tmp_path, ROWS, path) == 2
    [error] = error_lines(capsys)
    assert held in error and "it should be the (rows x dimensions) array of numbers `hf-adapters embed` writes" in error
    assert "pickle" not in error


def test_select_refuses_a_truncated_array(tmp_path, capsys):
    """Round five, item 18."""
    path = tmp_path / "embeddings.npy"
    np.save(path, np.ones((len(ROWS), 8), dtype=np.float32))
    path.write_bytes(path.read_bytes()[:-40])
    assert select_command(tmp_path, ROWS, path) == 2
    assert "may be a copy cut short" in error_lines(capsys)[0]


def test_embed_names_a_missing_column_before_loading_the_model(tmp_path, capsys):
    """`error: 'instruction'` (a bare KeyError), after the model had loaded. Round five, item 18."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "prompt": "Hi.", "output": "Hello."}])
    assert cli.main(["embed", "--data", str(data), "--output", str(tmp_path / "e.npy"), "--model",
                     str(tmp_path / "no-such-model")]) == 2
    [error] = error_lines(capsys)
    assert error.startswith("error: Column 'instruction' not found; available: ['id', 'prompt', 'output']")
    assert "--text-column" in error


def test_embed_checks_its_output_path_before_loading_the_model(tmp_path, capsys):
    """The output was checked only after every row was embedded. Round five, item 20."""
    data = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    (tmp_path / "out.npy").mkdir()
    assert cli.main(["embed", "--data", str(data), "--text-column", "text", "--output", str(tmp_path / "out.npy"),
                     "--model", str(tmp_path / "no-such-model")]) == 2
    assert "exists and is not a regular file" in error_lines(capsys)[0]
    assert cli.main(["embed", "--data", str(data), "--text-column", "text", "--output", str(data.with_suffix(".npy")),
                     "--model", str(tmp_path / "no-such-model"), "--no-progress"]) == 2
    assert "no-such-model" in error_lines(capsys)[0]  # a good output: the model is what fails


def test_embed_warns_naming_rows_whose_vectors_are_not_finite(model_dir, tmp_path, capsys, monkeypatch):
    """Round five, item 1."""
    from hf_adapters.formulas import embeddings

    embed = embeddings.embed_texts

    def overflowing(*args, **kwargs):
        vectors = embed(*args, **kwargs)
        vectors[1, 0] = np.inf
        return vectors

    monkeypatch.setattr(embeddings, "embed_texts", overflowing)
    _, output = embed_command(tmp_path, model_dir)
    assert "warning: 1 row got a non-finite embedding (NaN or infinity; rows 1)" in capsys.readouterr().err
    assert select_command(tmp_path, ROWS, output) == 2
    assert "Row 1 has a non-finite embedding (it holds infinity)" in error_lines(capsys)[0]
