"""``hf-adapters parity``: Information Parity of every language of a parallel (FLORES-style) corpus.

The data is JSONL of ``{"lang", "id", "text"}`` rows, the same ``id`` in every language naming
one sentence. Each language is paired with the reference language on their shared ids, all
distinct texts are scored in one batched pass, and the result is printed as a table sorted by
parity, written as JSON and drawn as a bar chart.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .data_io import read_jsonl
from .models import DEFAULT_MODEL_ID, model_and_tokenizer
from .parity import score_texts, summarize_information_parity
from .perplexity import check_texts
from .report import format_table as text_table

logger = logging.getLogger(__name__)

#: Per-language statistics, in table order, with the table's column headers.
STAT_COLUMNS = {
    "information_parity": "parity",
    "information_parity_std": "std",
    "information_parity_median": "median",
    "corpus_information_parity": "corpus",
    "tokenization_parity": "tok_parity",
    "bits_per_byte": "bits/byte",
}


def parallel_sample_rows() -> list[dict[str, Any]]:
    """The five parallel sentences in English, French, German and Spanish shipped with the package."""
    with resources.as_file(resources.files("hf_adapters") / "data" / "parallel_sample.jsonl") as path:
        return read_jsonl(path)


def group_by_language(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[Any, str]]:
    """``{lang: {id: text}}`` from ``{lang, id, text}`` rows; a row lacking a field or repeating
    a (lang, id) gets a ValueError naming it, a non-string text a TypeError."""
    languages: dict[str, dict[Any, str]] = {}
    for number, row in enumerate(rows):
        missing = [field for field in ("lang", "id", "text") if row.get(field) is None]
        if missing:
            raise ValueError(f"Row {number} has no {missing} field(s): {dict(row)!r:.120}")
        texts = languages.setdefault(row["lang"], {})
        if row["id"] in texts:
            raise ValueError(f"Row {number}: language {row['lang']!r} has id {row['id']!r} twice.")
        check_texts([row["text"]], f"rows[{number}].text")
        texts[row["id"]] = row["text"]
    return languages


def evaluate_parallel(
    rows: Iterable[Mapping[str, Any]],
    reference_lang: str = "eng_Latn",
    *,
    languages: Sequence[str] | None = None,
    model_id: str = DEFAULT_MODEL_ID,
    batch_size: int = 16,
    max_length: int | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Information Parity of each language against ``reference_lang`` on parallel ``{lang, id, text}`` rows.

    Returns ``{"model", "reference", "languages": {lang: stats}}`` where each language's stats are
    those of :func:`~hf_adapters.parity.compute_information_parity` (``scores`` replaced by
    ``pairs``: ``[{"id", "score"}]``) plus ``num_pairs``; languages are sorted by parity, highest
    first. Ids missing from either side are skipped with a warning. ``languages`` restricts the
    languages under test.

    Example:
        >>> from hf_adapters.parity_command import evaluate_parallel
        >>> rows = [{"lang": "eng_Latn", "id": 0, "text": "The cat sleeps."},
        ...         {"lang": "fra_Latn", "id": 0, "text": "Le chat dort."}]
        >>> list(evaluate_parallel(rows, "eng_Latn")["languages"])
        ['fra_Latn']
    """
    grouped = group_by_language(rows)
    if reference_lang not in grouped:
        raise ValueError(f"Reference language {reference_lang!r} is not in the data; languages: {sorted(grouped)}")
    tested = [lang for lang in grouped if lang != reference_lang] if languages is None else list(languages)
    if unknown := sorted(set(tested) - set(grouped)):
        raise ValueError(f"Language(s) {unknown} not in the data; languages: {sorted(grouped)}")
    reference = grouped[reference_lang]
    pairs = {}
    for lang in tested:
        ids = [i for i in reference if i in grouped[lang]]
        if skipped := len(set(reference) ^ set(grouped[lang])):
            logger.warning("%s: %d id(s) not in both %s and %s are skipped.", lang, skipped, lang, reference_lang)
        pairs[lang] = ids

    name = model_id if model is None else (getattr(model, "name_or_path", "") or type(model).__name__)
    model, tokenizer = model_and_tokenizer(model_id, model, tokenizer, dtype, device)
    texts = [reference[i] for ids in pairs.values() for i in ids]
    texts += [grouped[lang][i] for lang, ids in pairs.items() for i in ids]
    scores = score_texts(model, tokenizer, texts, max_length=max_length, batch_size=batch_size, progress=progress)

    results = {}
    for lang, ids in pairs.items():
        stats = summarize_information_parity([grouped[lang][i] for i in ids], [reference[i] for i in ids], scores)
        per_pair = stats.pop("scores")
        stats["num_pairs"] = sum(not math.isnan(score) for score in per_pair)
        stats["pairs"] = [{"id": i, "score": score} for i, score in zip(ids, per_pair, strict=True)]
        results[lang] = stats
    order = sorted(results, key=lambda lang: _sort_key(results[lang]["information_parity"]))
    return {"model": name, "reference": reference_lang, "languages": {lang: results[lang] for lang in order}}


def _sort_key(value: float) -> float:
    return math.inf if math.isnan(value) else -value


def format_table(result: Mapping[str, Any]) -> str:
    """The per-language table, one row per language in the result's order (highest parity first)."""
    rows = [
        [lang, *(float(stats[key]) for key in STAT_COLUMNS), stats["num_pairs"]]
        for lang, stats in result["languages"].items()
    ]
    return text_table(["lang", *STAT_COLUMNS.values(), "pairs"], rows)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def write_json(result: Mapping[str, Any], path: str | Path) -> None:
    """Write the result as JSON, NaN as null."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(result), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def plot_parity(result: Mapping[str, Any], path: str | Path) -> None:
    """A bar chart of mean parity per language, std as error bars, with the parity-1 line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    languages = list(result["languages"])
    means = [result["languages"][lang]["information_parity"] for lang in languages]
    stds = [result["languages"][lang]["information_parity_std"] for lang in languages]
    figure, axes = plt.subplots(figsize=(max(6.0, 0.6 * len(languages) + 2), 4.5))
    axes.bar(languages, means, yerr=stds, capsize=3, color="tab:blue", alpha=0.85)
    axes.axhline(1.0, color="tab:red", linestyle="--", linewidth=1, label=f"parity with {result['reference']}")
    axes.set_xlabel("language")
    axes.set_ylabel(f"information parity (NLL {result['reference']} / NLL language)")
    axes.set_title(f"Information parity, {result['model']}")
    plt.setp(axes.get_xticklabels(), rotation=45, ha="right", rotation_mode="anchor")
    axes.legend()
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def hub_rows(name: str, config: str | None = None, split: str = "dev") -> list[dict[str, Any]]:
    """``{lang, id, text}`` rows of a FLORES-style data set on the hub: columns ``lang, id, text``,
    or FLORES+'s ``iso_639_3, iso_15924, id, text``."""
    from datasets import load_dataset

    dataset = load_dataset(name, config, split=split)
    columns = set(dataset.column_names)
    if {"lang", "id", "text"} <= columns:
        return [{"lang": row["lang"], "id": row["id"], "text": row["text"]} for row in dataset]
    if {"iso_639_3", "iso_15924", "id", "text"} <= columns:
        return [{"lang": f"{row['iso_639_3']}_{row['iso_15924']}", "id": row["id"], "text": row["text"]}
                for row in dataset]
    raise ValueError(f"{name}: expected columns lang, id, text (or iso_639_3, iso_15924, id, text); "
                     f"got {sorted(columns)}")


def run(args: argparse.Namespace) -> int:
    if (args.data is None) == (args.hub is None):
        raise SystemExit("parity: give exactly one of --data FILE or --hub DATASET")
    rows = read_jsonl(args.data) if args.data else hub_rows(args.hub, args.hub_config, args.split)
    result = evaluate_parallel(
        rows, args.reference, languages=args.languages, model_id=args.model, batch_size=args.batch_size,
        max_length=args.max_length, dtype=args.dtype, device=args.device,
    )
    print(f"Information parity against {args.reference}, model {args.model}")
    print(format_table(result))
    if args.output:
        write_json(result, args.output)
        print(f"\nResults written to {args.output}")
    if args.plot:
        plot_parity(result, args.plot)
        print(f"Chart written to {args.plot}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "parity", help="Information Parity of each language of a parallel corpus against a reference language.",
        description="Information Parity of every language of a parallel (FLORES-style) corpus against a reference "
        "language: a table sorted by parity, and optionally JSON and a bar chart.",
    )
    source = parser.add_argument_group("data (one of)")
    source.add_argument("--data", help="JSONL of {lang, id, text} rows, e.g. FLORES-200 sentences")
    source.add_argument("--hub", metavar="DATASET", help="a FLORES-style data set on the hub, loaded with datasets")
    source.add_argument("--hub-config", help="the hub data set's configuration name")
    source.add_argument("--split", default="dev", help="the hub data set's split (default: dev)")
    parser.add_argument("--reference", default="eng_Latn", help="the reference language (default: eng_Latn)")
    parser.add_argument("--languages", nargs="+", help="only these languages under test (default: all)")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID, help=f"model id or path (default: {DEFAULT_MODEL_ID})")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--dtype", default=None, help="float32 (CPU default), bfloat16 or float16")
    parser.add_argument("--device", default=None)
    parser.add_argument("--output", help="write per-language statistics and per-pair scores as JSON here")
    parser.add_argument("--plot", help="draw a bar chart of parity per language here (PNG, SVG, PDF)")
    parser.set_defaults(run=run)
