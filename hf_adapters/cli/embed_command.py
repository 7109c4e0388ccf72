"""``hf-adapters embed --data ROWS --output EMBEDDINGS.npy``: one vector per row, for ``select --diversity``."""

from __future__ import annotations

import argparse
import sys

from ..data_io import LOADERS
from ..wording import plural
from .arguments import add_model_arguments, add_progress_argument, hide_library_progress, one_line, positive_int

#: Rows embedded, and written to the file, at a time: the vectors of a large job never all sit in memory.
CHUNK_ROWS = 4096


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..data_io import read_rows
    from ..embeddings import embed_texts, row_texts
    from ..models import ModelLoadError

    if not args.progress:
        hide_library_progress()
    if not args.output.endswith(".npy"):
        print("error: --output must be a .npy file (NumPy's format, which `select --embeddings` memory-maps)",
              file=sys.stderr)
        return 2
    try:
        dataset = read_rows(args.data)
        from ..backends import resolve_backend

        backend = resolve_backend(model_id=args.model, dtype=args.dtype, device=args.device)
        columns = {"text_column": args.text_column, "messages_column": args.messages_column,
                   "instruction_column": "instruction", "input_column": "input" if "input" in dataset.column_names
                   else None, "output_column": "output"}
        output = None
        for start in range(0, len(dataset), CHUNK_ROWS):
            texts = row_texts(dataset[start:start + CHUNK_ROWS], backend.tokenizer, **columns)
            vectors = embed_texts(texts, pooling=args.pooling, max_length=args.max_length, backend=backend,
                                  batch_size=args.batch_size, progress=None if args.progress else False)
            if output is None:
                output = np.lib.format.open_memmap(args.output, mode="w+", dtype=args.precision,
                                                   shape=(len(dataset), vectors.shape[1]))
            output[start:start + len(vectors)] = vectors
    except (ValueError, TypeError, KeyError, ModelLoadError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    if output is None:
        print("error: the data has no rows to embed", file=sys.stderr)
        return 2
    output.flush()
    print(f"{plural(len(dataset), 'row')} embedded ({output.shape[1]} {args.precision} values each, "
          f"{args.pooling} pooling), written to {args.output}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "embed", help="One vector per row from the scoring model, for `select --diversity`.",
        description="Pool the model's final hidden states of each row's text (mean over its tokens, or DEITA's "
        "last token) and write them in input order as a (rows x hidden size) .npy file, which "
        "`hf-adapters select --embeddings` memory-maps. The text is --text-column, the conversation of "
        "--messages-column in the chat template, or the non-empty instruction, input and output joined "
        "with newlines.",
    )
    parser.add_argument("--data", required=True, help=f"the rows: {', '.join(sorted(LOADERS))} or a save_to_disk "
                        "directory")
    parser.add_argument("--output", required=True, help=".npy file for the embeddings")
    parser.add_argument("--text-column", help="embed this column's text")
    parser.add_argument("--messages-column", help="embed this column's conversations (OpenAI or ShareGPT form)")
    parser.add_argument("--pooling", choices=["mean", "last"], default="mean",
                        help="mean of the token states, or the last token's (DEITA's) (default: mean)")
    parser.add_argument("--precision", choices=["float32", "float16"], default="float32",
                        help="how each value is stored (default: float32; float16 halves the file)")
    parser.add_argument("--max-length", type=positive_int, help="embed at most this many first tokens of a row")
    add_model_arguments(parser, backend=False)
    add_progress_argument(parser)
    parser.set_defaults(run=run)
