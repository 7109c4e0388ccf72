"""``hf-adapters perplexity FILE... --stride S``: perplexity and bits per byte of whole documents."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..models import DEFAULT_MODEL_ID, ModelLoadError
from ..options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH
from ..scorers import PerplexityScorer
from ..scorers.base import ConfigError
from .tables import format_table


def read_documents(paths: list[str]) -> list[str]:
    """Each file's text as one document; ``-`` reads standard input."""
    texts = []
    for path in paths:
        try:
            texts.append(sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"Cannot read {path}: {error}") from None
    return texts


def run(args: argparse.Namespace) -> int:
    args.stride = args.stride or args.max_length
    try:
        texts = read_documents(args.files)
        scorer = PerplexityScorer(model=args.model, max_length=args.max_length, stride=args.stride,
                                  batch_size=args.batch_size, dtype=args.dtype, progress=not args.no_progress)
        result = scorer.result({"text": texts})
    except (ValueError, ConfigError, ModelLoadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rows = []
    for path, text, nll, tokens, perplexity in zip(args.files, texts, result["nlls"], result["token_counts"],
                                                   result["perplexities"], strict=True):
        size = len(text.encode("utf-8"))
        rows.append([path, size, tokens, perplexity, nll / size / math.log(2) if tokens else math.nan])
    print(format_table(["file", "bytes", "tokens", "perplexity", "bits per byte"], rows))
    print(f"\nAll {len(texts)} document(s), model {args.model}, windows of {args.max_length} tokens, "
          f"stride {args.stride}:")
    print(format_table(["token perplexity", "word perplexity", "byte perplexity", "bits per byte"],
                       [[result["corpus_perplexity"], result["word_perplexity"], result["byte_perplexity"],
                         result["bits_per_byte"]]]))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "perplexity", help="Perplexity and bits per byte of whole text files, every token scored in rolling windows.",
        description="Score every token of each plain-text file (one document per file; - for standard input) in "
        "lm-evaluation-harness's rolling windows, and print per-file perplexity and bits per byte, then the word "
        "perplexity, byte perplexity and bits per byte of all files together.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="plain-text files, one document each; - for stdin")
    parser.add_argument("--stride", type=int, default=None,
                        help="new tokens predicted per window (default: --max-length, lm-eval's disjoint windows)")
    parser.add_argument("--max-length", type=int, default=DEFAULT_MAX_LENGTH,
                        help=f"most tokens the model reads per window (default: {DEFAULT_MAX_LENGTH})")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID, help=f"model id or path (default: {DEFAULT_MODEL_ID})")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--dtype", default=None, help="float32 (CPU default), bfloat16 or float16")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar over tokens")
    parser.set_defaults(run=run)
