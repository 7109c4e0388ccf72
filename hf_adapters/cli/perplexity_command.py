"""``hf-adapters perplexity FILE... --stride S``: perplexity and bits per byte of whole documents."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from hf_adapters.cli.arguments import (
    add_model_arguments,
    add_progress_argument,
    hide_library_progress,
    one_line,
    positive_int,
)
from hf_adapters.cli.tables import format_table
from hf_adapters.core.options import DEFAULT_MAX_LENGTH
from hf_adapters.core.wording import plural


def read_documents(paths: list[str]) -> list[str]:
    """Each file's text as one document, its bytes as they are (line endings included); ``-`` reads
    standard input. A file that is not UTF-8 is a ValueError naming it and the first bad byte."""
    texts = []
    for path in paths:
        name = "standard input" if path == "-" else path
        try:
            data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
            texts.append(data.decode("utf-8"))
        except OSError as error:
            raise ValueError(f"Cannot read {name}: {error.strerror or error}") from None
        except UnicodeDecodeError as error:
            raise ValueError(f"{name} is not UTF-8 text: byte {error.start} is {data[error.start]:#04x}.") from None
    return texts


def run(args: argparse.Namespace) -> int:
    from hf_adapters.backends.loading import ModelLoadError
    from hf_adapters.scorers import PerplexityScorer

    if not args.progress:
        hide_library_progress()
    stride = args.stride or args.max_length
    try:
        texts = read_documents(args.files)
        scorer = PerplexityScorer(model=args.model, max_length=args.max_length, stride=stride,
                                  batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens,
                                  dtype=args.dtype, device=args.device,
                                  backend=args.backend, progress=args.progress)
        result = scorer.result({"text": texts})
    except (ValueError, ModelLoadError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    rows = []
    for path, text, nll, tokens, perplexity in zip(args.files, texts, result["nlls"], result["token_counts"],
                                                   result["perplexities"], strict=True):
        size = len(text.encode("utf-8"))
        rows.append([path, size, tokens, perplexity, nll / size / math.log(2) if tokens else math.nan])
    print(format_table(["file", "bytes", "tokens", "perplexity", "bits per byte"], rows))
    print(f"\nAll {plural(len(texts), 'document')}, model {args.model}, windows of {args.max_length} tokens, "
          f"stride {stride}:")
    print(format_table(["token perplexity", "word perplexity", "byte perplexity", "bits per byte"],
                       [[result["corpus_perplexity"], result["word_perplexity"], result["byte_perplexity"],
                         result["bits_per_byte"]]]))
    empty = [path for path, tokens in zip(args.files, result["token_counts"], strict=True) if not tokens]
    for path in empty:
        print(f"{path}: no tokens to score (the file holds no text)", file=sys.stderr)
    return 1 if len(empty) == len(texts) else 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "perplexity", help="Perplexity and bits per byte of whole text files, every token scored in rolling windows.",
        description="Score every token of each plain-text file (one document per file; - for standard input) in "
        "lm-evaluation-harness's rolling windows, and print per-file perplexity and bits per byte, then the word "
        "perplexity, byte perplexity and bits per byte of all files together. The files are scored as their bytes "
        "are (UTF-8, line endings kept). Exits 1 when no file had any text to score.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="plain-text files, one document each; - for stdin")
    parser.add_argument("--stride", type=positive_int, default=None,
                        help="new tokens predicted per window (default: --max-length, lm-eval's disjoint windows)")
    parser.add_argument("--max-length", type=positive_int, default=DEFAULT_MAX_LENGTH,
                        help=f"most tokens the model reads per window, capped at the model's position limit "
                        f"(default: {DEFAULT_MAX_LENGTH})")
    add_model_arguments(parser)
    add_progress_argument(parser)
    parser.set_defaults(run=run)
