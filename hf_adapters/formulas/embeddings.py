"""One vector per row, for diversity-aware selection: pooled final hidden states of the scoring
model (:meth:`LikelihoodBackend.embed`), or of a sentence encoder you loaded yourself.

:func:`~hf_adapters.columns.embedding_columns.add_embedding_column` adds them to a data set (a
stream too) as a fixed-length float32 or float16 Arrow column; :func:`embedding_matrix` reads such a
column back as one NumPy array without a Python list per row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.core.conversations import CHATML_TURN, check_messages
from hf_adapters.core.options import DEFAULT_BATCH_SIZE
from hf_adapters.core.texts import check_texts, ppl_text

if TYPE_CHECKING:

    from hf_adapters.backends import LikelihoodBackend

#: How vectors are stored in a column: float32, or float16 (half the size; about 3 significant digits).
PRECISIONS = ("float32", "float16")


def conversation_text(tokenizer: Any, conversation: Any) -> str:
    """A conversation (OpenAI or ShareGPT form) as one text: the tokenizer's chat template over every
    turn, else ChatML, as DEITA embeds a whole conversation in its template."""
    messages = check_messages(conversation)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return "".join(CHATML_TURN.format(**message) for message in messages)


def embed_texts(
    texts: Sequence[str],
    *,
    pooling: str = "mean",
    max_length: int | None = None,
    encoder: Any = None,
    backend: LikelihoodBackend | str | None = None,
    progress: bool | None = None,
    **model_options: Any,
) -> np.ndarray:
    """One float32 vector per text, in order: ``encoder.encode(texts)`` when an encoder is given (a
    ``sentence_transformers.SentenceTransformer`` you loaded, or anything with that method), else the
    backend's pooled final hidden states (``pooling``: ``"mean"`` or DEITA's ``"last"``) of each text
    tokenized with the tokenizer's special tokens. ``model_options`` (``model_id``, ``model`` and
    ``tokenizer``, ``dtype``, ``device``, ``batch_size``) choose the backend as every entry point does.

    Example:
        >>> from hf_adapters.formulas.embeddings import embed_texts
        >>> embed_texts(["A short text.", "Another one."]).shape  # the embedded SmolLM2-135M
        (2, 576)
    """
    check_texts(texts, "texts")
    if encoder is not None:
        if backend is not None or model_options.keys() - {"batch_size"}:
            raise ValueError("Pass an `encoder`, or a backend and its model options, not both.")
        vectors = encoder.encode(list(texts), batch_size=model_options.get("batch_size", DEFAULT_BATCH_SIZE),
                                 show_progress_bar=bool(progress), convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)
    from hf_adapters.backends import resolve_backend

    batch_size = model_options.pop("batch_size", None)
    model = resolve_backend(backend, **model_options)
    ids = model.tokenizer(list(texts)).input_ids if texts else []
    return model.embed(ids, pooling=pooling, max_length=max_length, batch_size=batch_size, progress=progress)


def row_texts(batch: Mapping[str, list], tokenizer: Any, *, text_column: str | None, messages_column: str | None,
              instruction_column: str, input_column: str | None, output_column: str) -> list[str]:
    """The text embedded for each row of a batch: ``text_column``, or the conversation of
    ``messages_column``, or the non-empty instruction, input and output joined with newlines."""
    if text_column is not None:
        return list(batch[text_column])
    if messages_column is not None:
        return [conversation_text(tokenizer, conversation) for conversation in batch[messages_column]]
    inputs = batch[input_column] if input_column is not None else [None] * len(batch[instruction_column])
    return [ppl_text(instruction, given, output)
            for instruction, given, output in zip(batch[instruction_column], inputs, batch[output_column], strict=True)]


def embedding_matrix(ds: Any, column: str = "embedding") -> np.ndarray:
    """The ``column`` of an in-memory ``Dataset`` (or a NumPy array, a list of vectors) as one
    float32 array of shape (rows, dimensions); a ValueError names a row without a vector or of
    another length. Values are not checked: the diversity rules refuse a row they compare whose
    vector holds NaN or infinity, naming it.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.formulas.embeddings import embedding_matrix
        >>> embedding_matrix(Dataset.from_dict({"embedding": [[1.0, 0.0], [0.0, 2.0]]})).tolist()
        [[1.0, 0.0], [0.0, 2.0]]
    """
    if isinstance(ds, np.ndarray):
        return _checked(ds)
    if not hasattr(ds, "with_format"):
        return _checked(_stacked(list(ds)))
    if column not in ds.column_names:
        raise ValueError(f"Column {column!r} not found; available: {ds.column_names}")
    import pyarrow as pa

    values = ds.with_format("arrow")[column]  # the rows ds holds, selections and shuffles applied
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if values.null_count or not pa.types.is_fixed_size_list(values.type):
        return _checked(_stacked(values.to_pylist()))
    flat = values.flatten().to_numpy(zero_copy_only=False)
    return _checked(flat.reshape(len(values), values.type.list_size))


def _stacked(vectors: list) -> np.ndarray:
    for row, vector in enumerate(vectors):
        if vector is None:
            raise ValueError(f"Row {row} has no embedding.")
        if len(vector) != len(vectors[0]):
            raise ValueError(f"Row {row} has an embedding of {len(vector)} values; row 0 has {len(vectors[0])}.")
    return np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)


def _checked(matrix: np.ndarray) -> np.ndarray:
    """The matrix as float32; NaN and infinity stay (a diversity rule refuses a row it compares that holds one)."""
    from hf_adapters.formulas.similarity import check_shape

    check_shape(matrix)
    return matrix.astype(np.float32, copy=False)
