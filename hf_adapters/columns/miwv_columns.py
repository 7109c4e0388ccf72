"""MIWV as columns of an in-memory data set: :func:`add_miwv_column`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hf_adapters.backends import BackendOptions
from hf_adapters.core.options import takes_options
from hf_adapters.formulas.embeddings import embedding_matrix
from hf_adapters.formulas.miwv import MIWVOptions, compute_miwv

if TYPE_CHECKING:
    from datasets import Dataset


@takes_options(BackendOptions, MIWVOptions)
def add_miwv_column(ds: Dataset, *, embedding_column: str = "embedding", embeddings: Any = None,
                    instruction_column: str = "instruction", input_column: str | None = "input",
                    output_column: str = "output", column: str = "miwv", **options: Any) -> Dataset:
    """Return the in-memory ``ds`` with a ``column`` of MIWV scores (:func:`compute_miwv`) and a
    ``miwv_neighbour`` column (the index of each row's example row), on the vectors of
    ``embedding_column`` (:func:`hf_adapters.add_embedding_column`) or the given ``embeddings``. Every
    row's score depends on the other rows, so a stream is refused.

    Example:
        >>> from datasets import Dataset
        >>> from hf_adapters.columns.miwv_columns import add_miwv_column
        >>> ds = Dataset.from_dict({"instruction": ["Name a colour.", "Name a color.", "Add 2 and 3."],
        ...                         "input": ["", "", ""], "output": ["Blue.", "Red.", "5"],
        ...                         "embedding": [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]})
        >>> add_miwv_column(ds).column_names
        ['instruction', 'input', 'output', 'embedding', 'miwv', 'miwv_neighbour']
    """
    from datasets import IterableDataset

    if isinstance(ds, IterableDataset):
        raise ValueError("MIWV compares every row with the others, which a stream does not hold: pass an in-memory "
                         "Dataset.")
    vectors = embedding_matrix(ds if embeddings is None else np.asarray(embeddings), embedding_column)
    inputs = ds[input_column] if input_column is not None and input_column in ds.column_names else None
    result = compute_miwv(list(ds[instruction_column]), list(ds[output_column]),
                          None if inputs is None else list(inputs), embeddings=vectors, **options)
    return ds.add_column(column, result["miwv_scores"]).add_column("miwv_neighbour", result["neighbours"])
