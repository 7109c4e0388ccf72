"""One vector per row, for diversity-aware selection: pooled final hidden states of the scoring
model (:meth:`LikelihoodBackend.embed`), or of a sentence encoder you loaded yourself.

:func:`add_embedding_column` adds them to a data set (a stream too) as a fixed-length float32 or
float16 Arrow column; :func:`embedding_matrix` reads such a column back as one NumPy array without
a Python list per row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .conversations import CHATML_TURN, check_messages
from .options import DEFAULT_BATCH_SIZE
from .texts import check_texts, ppl_text

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict

    from .backends import LikelihoodBackend

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
        >>> from hf_adapters.embeddings import embed_texts
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
    from .backends import resolve_backend

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


def add_embedding_column(
    ds: Dataset | DatasetDict | IterableDataset | IterableDatasetDict,
    *,
    text_column: str | None = None,
    messages_column: str | None = None,
    instruction_column: str = "instruction",
    input_column: str | None = "input",
    output_column: str = "output",
    column: str = "embedding",
    pooling: str = "mean",
    precision: str = "float32",
    max_length: int | None = None,
    encoder: Any = None,
    map_batch_size: int = 1000,
    **model_options: Any,
) -> Dataset | DatasetDict | IterableDataset | IterableDatasetDict:
    """``ds`` with a ``column`` of one vector per row (:func:`embed_texts`), stored as a fixed-length
    ``precision`` array (``"float32"`` or ``"float16"``). The text is ``text_column``, or the
    conversation of ``messages_column`` in the chat template, or the non-empty instruction, input and
    output joined with newlines. A stream is embedded lazily, ``map_batch_size`` rows at a time.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.embeddings import add_embedding_column, embedding_matrix
        >>> ds = add_embedding_column(Dataset.from_dict({"text": ["Hello there.", "Good night."]}), text_column="text")
        >>> embedding_matrix(ds).shape
        (2, 576)
    """
    from datasets import DatasetDict, Features, IterableDataset, IterableDatasetDict, List, Value
    from datasets.fingerprint import Hasher, generate_random_fingerprint

    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {list(PRECISIONS)}, got {precision!r}.")
    if isinstance(ds, (DatasetDict, IterableDatasetDict)):
        return type(ds)({split: add_embedding_column(
            part, text_column=text_column, messages_column=messages_column, instruction_column=instruction_column,
            input_column=input_column, output_column=output_column, column=column, pooling=pooling,
            precision=precision, max_length=max_length, encoder=encoder, map_batch_size=map_batch_size,
            **model_options) for split, part in ds.items()})
    backend = None
    if encoder is None:
        from .backends import resolve_backend

        backend = resolve_backend(model_options.pop("backend", None), **{
            key: model_options.pop(key) for key in ("model_id", "model", "tokenizer", "dtype", "device")
            if key in model_options})
    tokenizer = getattr(backend, "tokenizer", getattr(encoder, "tokenizer", None))
    columns = {"text_column": text_column, "messages_column": messages_column,
               "instruction_column": instruction_column, "input_column": input_column, "output_column": output_column}

    def embed_batch(batch: Mapping[str, list]) -> dict[str, np.ndarray]:
        texts = row_texts(batch, tokenizer, **columns)
        vectors = embed_texts(texts, pooling=pooling, max_length=max_length, encoder=encoder, backend=backend,
                              **model_options)
        return {column: vectors.astype(precision)}

    if isinstance(ds, IterableDataset):
        return ds.map(embed_batch, batched=True, batch_size=map_batch_size)
    identity = None if backend is None else backend.identity()
    settings = {**columns, "column": column, "pooling": pooling, "precision": precision, "max_length": max_length}
    fingerprint = generate_random_fingerprint() if identity is None else \
        Hasher.hash([ds._fingerprint, "embedding", identity, settings])
    width = embed_batch(ds[:1])[column].shape[1] if len(ds) else 0
    features = Features({**ds.features, column: List(Value(precision), length=width)})
    return ds.map(embed_batch, batched=True, batch_size=map_batch_size, features=features, desc="Embedding",
                  new_fingerprint=fingerprint)


def embedding_matrix(ds: Any, column: str = "embedding") -> np.ndarray:
    """The ``column`` of an in-memory ``Dataset`` (or a NumPy array, a list of vectors) as one
    float32 array of shape (rows, dimensions); a ValueError names a row without a vector or of
    another length.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.embeddings import embedding_matrix
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
    if matrix.ndim != 2:
        raise ValueError(f"Embeddings must be one vector per row (a 2-D array), got shape {matrix.shape}.")
    if not np.isfinite(matrix).all():
        raise ValueError(f"Row {int(np.argmin(np.isfinite(matrix).all(axis=1)))} has a non-finite embedding.")
    return matrix.astype(np.float32, copy=False)
