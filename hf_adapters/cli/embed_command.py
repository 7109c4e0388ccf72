"""``hf-adapters embed --data ROWS --output EMBEDDINGS.npy``: one vector per row, for ``select --diversity``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hf_adapters.cli.arguments import (
    add_model_arguments,
    add_progress_argument,
    hide_library_progress,
    one_line,
    positive_int,
)
from hf_adapters.core.wording import full_disk, plural
from hf_adapters.files.data_io import LOADERS

#: Rows embedded, and written to the file, at a time: the vectors of a large job never all sit in memory.
CHUNK_ROWS = 4096


def run(args: argparse.Namespace) -> int:
    from hf_adapters.backends.loading import ModelLoadError

    if not args.progress:
        hide_library_progress()
    if not args.output.endswith(".npy"):
        print("error: --output must be a .npy file (NumPy's format, which `select --embeddings` memory-maps)",
              file=sys.stderr)
        return 2
    try:
        return embed(args)
    except (ValueError, TypeError, KeyError, ModelLoadError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    except OSError as error:
        if (full := full_disk(error, Path(args.output).parent)) is not None:
            print(f"{full}: `hf-adapters embed` saved nothing complete; run the same command again.", file=sys.stderr)
            return 1
        print(f"error: cannot read or write {error.filename}: {error.strerror}", file=sys.stderr)
        return 2


def embed(args: argparse.Namespace) -> int:
    """Check the output and the data's columns, load the model, embed into ``OUTPUT.tmp``, and
    rename it onto ``OUTPUT`` beside its record (``OUTPUT.json``, marked complete last)."""
    import json

    from hf_adapters.backends import resolve_backend
    from hf_adapters.files.data_io import read_rows
    from hf_adapters.files.embedding_files import (
        RECORD_FORMAT,
        embedded_columns,
        read_columns,
        record_path,
        rows_fingerprint,
    )
    from hf_adapters.files.json_values import to_json_value, write_atomically
    from hf_adapters.files.output_paths import check_output_path, output_location

    output = output_location(args.output)
    temporary, record = output.with_name(output.name + ".tmp"), record_path(output)
    check_output_path(output, {"data": args.data}, work_files=[temporary, record])
    for path in (temporary, record):
        check_output_path(path, {"data": args.data})
    dataset = read_rows(args.data)
    if not len(dataset):
        raise ValueError("the data has no rows to embed")
    columns = embedded_columns(dataset.column_names, text_column=args.text_column,
                               messages_column=args.messages_column)
    missing = [name for name in read_columns(columns) if name not in dataset.column_names]
    if missing:
        raise ValueError(f"Column {missing[0]!r} not found; available: {dataset.column_names}. `embed` reads "
                         "--text-column, or --messages-column, or the instruction, input and output columns.")
    backend = resolve_backend(model_id=args.model, dtype=args.dtype, device=args.device)
    fingerprint = rows_fingerprint(dataset, columns)
    try:
        width, non_finite = write_vectors(args, dataset, backend, columns, temporary)
    except BaseException:
        temporary.unlink(missing_ok=True)  # never left for a later run to take as a finished file
        raise
    content = {"format": RECORD_FORMAT, "complete": False, "rows": len(dataset), "dimensions": width,
               "dtype": args.precision, "data": args.data, "columns": columns, "fingerprint": fingerprint,
               "model": backend.identity(), "pooling": args.pooling, "max_length": args.max_length}
    # The record says the run is not finished until the array has its name: a run killed in between
    # leaves an array `select` refuses, never one it takes for a finished run's.
    write_atomically(record, json.dumps(content, indent=1, default=to_json_value))
    os.replace(temporary, output)
    write_atomically(record, json.dumps({**content, "complete": True}, indent=1, default=to_json_value))
    if non_finite:
        shown = ", ".join(map(str, non_finite[:10])) + (", ..." if len(non_finite) > 10 else "")
        print(f"warning: {plural(len(non_finite), 'row')} got a non-finite embedding (NaN or infinity; rows "
              f"{shown}): `select --diversity` refuses them; embed in float32 (--dtype and --precision float32) "
              "or leave them out",
              file=sys.stderr)
    print(f"{plural(len(dataset), 'row')} embedded ({width} {args.precision} values each, "
          f"{args.pooling} pooling), written to {args.output}")
    return 0


def write_vectors(args: argparse.Namespace, dataset: Any, backend: Any, columns: dict[str, str | None],
                  path: Path) -> tuple[int, list[int]]:
    """Embed the rows, CHUNK_ROWS at a time, into a new .npy file at ``path``; the vectors' width
    and the rows whose vectors are not finite."""
    import numpy as np

    from hf_adapters.formulas.embeddings import embed_texts, row_texts

    output, non_finite = None, []
    for start in range(0, len(dataset), CHUNK_ROWS):
        texts = row_texts(dataset[start:start + CHUNK_ROWS], backend.tokenizer, **columns)
        vectors = embed_texts(texts, pooling=args.pooling, max_length=args.max_length, backend=backend,
                              batch_size=args.batch_size, progress=None if args.progress else False)
        if output is None:
            output = np.lib.format.open_memmap(path, mode="w+", dtype=args.precision,
                                               shape=(len(dataset), vectors.shape[1]))
        output[start:start + len(vectors)] = vectors
        non_finite.extend((start + np.flatnonzero(~np.isfinite(output[start:start + len(vectors)]).all(axis=1)))
                          .tolist())
    output.flush()
    return output.shape[1], non_finite


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "embed", help="One vector per row from the scoring model, for `select --diversity`.",
        description="Pool the model's final hidden states of each row's text (mean over its tokens, or DEITA's "
        "last token) and write them in input order as a (rows x hidden size) .npy file, which "
        "`hf-adapters select --embeddings` memory-maps, with a record of the rows embedded beside it (OUTPUT.json), "
        "which `select` checks against its data. The file is written under OUTPUT.tmp and renamed when every row "
        "is embedded. The text is --text-column, the conversation of "
        "--messages-column in the chat template, or the non-empty instruction, input and output joined "
        "with newlines.",
    )
    parser.add_argument("--data", required=True, help=f"the rows: {', '.join(sorted(LOADERS))} or a save_to_disk "
                        "directory")
    parser.add_argument("--output", required=True, help=".npy file for the embeddings")
    parser.add_argument("--text-column", help="embed this column's text")
    parser.add_argument("--messages-column", help="embed this column's conversations (OpenAI or ShareGPT form)")
    parser.add_argument("--pooling", choices=["mean", "last"], default="mean",
                        help="mean of the token states, or the last token's (DEITA's) (default: mean); either way a "
                        "language model's vectors of unrelated rows have high cosines, so give `select` "
                        "--similarity-quantile rather than a fixed threshold (docs/curation.md)")
    parser.add_argument("--precision", choices=["float32", "float16"], default="float32",
                        help="how each value is stored (default: float32; float16 halves the file)")
    parser.add_argument("--max-length", type=positive_int, help="embed at most this many first tokens of a row")
    add_model_arguments(parser, backend=False, token_budget=False)
    add_progress_argument(parser)
    parser.set_defaults(run=run)
