"""One vector per row as a column: :func:`add_embedding_column`, in memory or on a stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.formulas.embeddings import PRECISIONS, embed_texts, row_texts

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict


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
        >>> from hf_adapters.columns.embedding_columns import add_embedding_column
        >>> from hf_adapters.formulas.embeddings import embedding_matrix
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
        from hf_adapters.backends import resolve_backend

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
