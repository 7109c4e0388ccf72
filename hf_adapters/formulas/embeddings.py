"""One vector per row, for diversity-aware selection: pooled final hidden states of the scoring
model (:meth:`LikelihoodBackend.embed`), or of a sentence encoder you loaded yourself.

:func:`add_embedding_column` adds them to a data set (a stream too) as a fixed-length float32 or
float16 Arrow column; :func:`embedding_matrix` reads such a column back as one NumPy array without
a Python list per row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.core.conversations import CHATML_TURN, check_messages
from hf_adapters.core.options import DEFAULT_BATCH_SIZE
from hf_adapters.core.texts import check_texts, ppl_text

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict

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
        >>> from hf_adapters.formulas.embeddings import add_embedding_column, embedding_matrix
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


#: What ``hf-adapters embed`` records beside ``EMBEDDINGS.npy``, as ``EMBEDDINGS.npy.json``: the rows it
#: embedded (their count and fingerprints of the columns it read), the model, the pooling, and whether it finished.
RECORD_FORMAT = "hf-adapters embeddings"
#: Rows hashed at a time.
FINGERPRINT_ROWS = 4096


def record_path(path: str | Path) -> Path:
    """Where the record of an embeddings file lies: ``EMBEDDINGS.npy.json``."""
    return Path(f"{path}.json")


def embedded_columns(column_names: Sequence[str], *, text_column: str | None = None,
                     messages_column: str | None = None) -> dict[str, str | None]:
    """The columns :func:`row_texts` reads of data with these columns, as ``hf-adapters embed`` reads
    them: ``text_column``, or ``messages_column``, or instruction, input (where there is one) and output."""
    return {"text_column": text_column, "messages_column": messages_column, "instruction_column": "instruction",
            "input_column": "input" if "input" in column_names else None, "output_column": "output"}


def read_columns(columns: Mapping[str, str | None]) -> list[str]:
    """The data columns :func:`row_texts` reads under ``columns`` (its keyword arguments)."""
    if columns.get("text_column") is not None:
        return [columns["text_column"]]
    if columns.get("messages_column") is not None:
        return [columns["messages_column"]]
    return [columns[key] for key in ("instruction_column", "input_column", "output_column") if columns.get(key)]


def rows_fingerprint(ds: Dataset, columns: Mapping[str, str | None]) -> dict[str, str]:
    """Fingerprints of the values each row's text is made of (:func:`read_columns`): ``"in_order"``,
    of the rows in order, and ``"any_order"``, the same for the same rows in any order (a sum of
    per-row hashes), which tells rows in another order from other rows."""
    import hashlib
    import json

    from hf_adapters.files.json_values import to_json_value

    names = read_columns(columns)
    if missing := [name for name in names if name not in ds.column_names]:
        raise ValueError(f"Column {missing[0]!r} not found; available: {ds.column_names}")
    encode = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=to_json_value).encode
    in_order, any_order = hashlib.sha256(), 0
    part = ds.select_columns(names)
    for start in range(0, len(part), FINGERPRINT_ROWS):
        batch = part[start:start + FINGERPRINT_ROWS]
        digests = [hashlib.blake2b(encode(values).encode("utf-8"), digest_size=16).digest()
                   for values in zip(*(batch[name] for name in names), strict=True)]
        in_order.update(b"".join(digests))
        any_order = (any_order + sum(int.from_bytes(digest, "big") for digest in digests)) % 2**128
    return {"in_order": in_order.hexdigest(), "any_order": f"{any_order:032x}"}


def load_embeddings(path: str | Path, ds: Dataset | None = None) -> tuple[np.ndarray, str | None]:
    """The (rows x dimensions) array of an embeddings ``.npy`` file, memory-mapped (never unpickled),
    and a note when it has no record of what it holds (a file of your own: it is used as given).

    With a record (written by ``hf-adapters embed``), a ValueError refuses an array the run did not
    finish, one changed since, or one written for other rows than ``ds``'s (another count, other
    texts, or the same rows in another order), saying what differs.
    """
    path = Path(path)
    if path.name.endswith(".npy.tmp"):
        raise ValueError(f"{path} is the unfinished file of an `hf-adapters embed` run; give the .npy file a "
                         "finished run writes.")
    array = _open_npy(path)
    record = record_path(path)
    if not record.exists():
        return array, (f"{path} has no record of the rows it was embedded for ({record.name}, which "
                       "`hf-adapters embed` writes beside it): row i of the array is used for row i of the data.")
    check_record(path, _read_record(record), array.shape, ds)
    return array, None


def _open_npy(path: Path) -> np.ndarray:
    """The array of a ``.npy`` file, memory-mapped; a ValueError says what the file should be."""
    should = ("it should be the (rows x dimensions) array of numbers `hf-adapters embed` writes (or numpy.save "
              "of such an array)")
    with open(path, "rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            shape, _, dtype = (np.lib.format.read_array_header_1_0(handle) if version == (1, 0)
                               else np.lib.format.read_array_header_2_0(handle))
        except (ValueError, EOFError):
            raise ValueError(f"{path} is not a NumPy .npy array file: {should}.") from None
    if dtype.hasobject or dtype.kind not in "fiu":
        raise ValueError(f"{path} holds {'Python objects' if dtype.hasobject else f'{dtype} values'}, not numbers: "
                         f"{should}.")
    if len(shape) != 2:
        raise ValueError(f"{path} holds an array of shape {shape}, not one vector per row: {should}.")
    try:
        return np.lib.format.open_memmap(path, mode="r")
    except ValueError as error:  # a file shorter than its header says
        raise ValueError(f"{path} cannot be read as the {shape} array its header names ({error}); it may be a "
                         "copy cut short: copy or embed it again.") from None


def _read_record(record: Path) -> dict[str, Any]:
    import json

    try:
        content = json.loads(record.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"The record {record} is not JSON ({error}): embed the data again (or delete the record "
                         "to use the array as it is).") from None
    fields = {"complete": bool, "rows": int, "dimensions": int, "columns": dict, "fingerprint": dict}
    if not isinstance(content, dict) or content.get("format") != RECORD_FORMAT or not all(
            isinstance(content.get(name), kind) for name, kind in fields.items()) or not all(
            isinstance(content["fingerprint"].get(name), str) for name in ("in_order", "any_order")):
        raise ValueError(f"{record} is not a record `hf-adapters embed` wrote: embed the data again (or delete it "
                         "to use the array as it is).")
    return content


def check_record(path: Path, record: Mapping[str, Any], shape: tuple[int, ...], ds: Dataset | None) -> None:
    """Raise a ValueError when the ``record`` ``embed`` wrote says that the array at ``path`` (of
    ``shape``) is unfinished, changed since, or embedded for other rows than ``ds``'s."""
    again = "run `hf-adapters embed` on the data again"
    if not record["complete"]:
        raise ValueError(f"{path} is not the array of a finished `hf-adapters embed` run (its record "
                         f"{record_path(path).name} says the run did not finish): {again}.")
    if tuple(shape) != (record["rows"], record["dimensions"]):
        raise ValueError(f"{path} holds shape {tuple(shape)}, but its record {record_path(path).name} says `embed` "
                         f"wrote ({record['rows']}, {record['dimensions']}): the file changed since; {again}.")
    if ds is None:
        return
    if len(ds) != record["rows"]:
        raise ValueError(f"{path} holds the embeddings of {record['rows']} rows (of {record.get('data')}); the data "
                         f"has {len(ds)}: {again}.")
    missing = [name for name in read_columns(record["columns"]) if name not in ds.column_names]
    if missing:
        raise ValueError(f"{path} was embedded from column {missing[0]!r} (of {record.get('data')}), which the "
                         f"data does not have: {again}.")
    fingerprint = rows_fingerprint(ds, record["columns"])
    if fingerprint["in_order"] != record["fingerprint"]["in_order"]:
        names = read_columns(record["columns"])
        columns = f"column {names[0]!r}" if len(names) == 1 else f"columns {', '.join(map(repr, names))}"
        what = ("the same rows in another order: each row would get another row's vector"
                if fingerprint["any_order"] == record["fingerprint"]["any_order"]
                else f"other rows ({columns} held other values)")
        raise ValueError(f"{path} was embedded for {what}, not for the rows of the data (it was embedded from "
                         f"{record.get('data')}): {again}, or select on the rows in the order embedded.")
