"""Information Parity of every language of a parallel (FLORES-style) corpus against a reference language.

The data is ``{"lang", "id", "text"}`` rows, the same ``id`` in every language naming one
sentence (:func:`read_parallel_files` reads them from files, FLORES-200's plain-text ones too).
Each language is paired with the reference language on their shared ids (:func:`pair_ids`) and all
distinct texts are scored in one batched pass. ``hf-adapters parity`` (:mod:`hf_adapters.cli.parity_command`)
prints, writes and draws the result.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from hf_adapters.backends import BackendOptions
from hf_adapters.core.options import split_options, takes_options
from hf_adapters.core.texts import check_texts
from hf_adapters.files.data_io import read_records
from hf_adapters.formulas.information_parity import InformationParityOptions, score_texts, summarize_information_parity

logger = logging.getLogger(__name__)

#: The suffixes of files of ``{lang, id, text}`` rows; any other parallel file is FLORES-200 plain text.
RECORD_SUFFIXES = (".jsonl", ".json", ".csv")


def parallel_sample_rows() -> list[dict[str, Any]]:
    """The five parallel sentences in English, French, German and Spanish shipped with the package."""
    with resources.as_file(resources.files("hf_adapters") / "data" / "parallel_sample.jsonl") as path:
        return read_records(path)


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


def read_parallel_files(paths: str | Path | Iterable[str | Path]) -> list[dict[str, Any]]:
    """``{lang, id, text}`` rows of parallel files: ``.jsonl``, ``.json`` or ``.csv`` files of such rows,
    or FLORES-200's plain-text files (``eng_Latn.dev``: one sentence a line, the language the name
    before its first dot, the id the line number from 0). A folder stands for the files in it."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    files = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"No parallel file or folder at {path}")
        files += sorted(entry for entry in path.iterdir() if entry.is_file()) if path.is_dir() else [path]
    rows: list[dict[str, Any]] = []
    for path in files:
        if path.suffix.lower() in RECORD_SUFFIXES:
            rows += read_records(path)
        else:
            lang = path.name.split(".")[0]
            lines = [line.removesuffix("\r") for line in path.read_text(encoding="utf-8-sig").split("\n")]
            lines = lines[:-1] if lines and not lines[-1] else lines  # a sentence a line, at \n only (not U+2028)
            rows += [{"lang": lang, "id": number, "text": line} for number, line in enumerate(lines)]
    return rows


def pair_ids(grouped: Mapping[str, Mapping[Any, str]], reference_lang: str,
             languages: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """``{lang: ids}``: the ids each language under test shares with ``reference_lang``, in the
    reference's order, from :func:`group_by_language`'s ``{lang: {id: text}}``. The languages are
    ``languages``, else every other language of the data in its order; an unknown language gets a
    ValueError, ids missing from either side a warning."""
    if reference_lang not in grouped:
        raise ValueError(f"Reference language {reference_lang!r} is not in the data; languages: {sorted(grouped)}")
    tested = [lang for lang in grouped if lang != reference_lang] if languages is None else list(languages)
    if unknown := sorted(set(tested) - set(grouped)):
        raise ValueError(f"Language(s) {unknown} not in the data; languages: {sorted(grouped)}")
    reference = grouped[reference_lang]
    pairs = {}
    for lang in tested:
        pairs[lang] = [i for i in reference if i in grouped[lang]]
        if skipped := len(set(reference) ^ set(grouped[lang])):
            logger.warning("%s: %d id(s) not in both %s and %s are skipped.", lang, skipped, lang, reference_lang)
    return pairs


@takes_options(BackendOptions, InformationParityOptions)
def evaluate_parallel(
    rows: Iterable[Mapping[str, Any]],
    reference_lang: str = "eng_Latn",
    *,
    languages: Sequence[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Information Parity of each language against ``reference_lang`` on parallel ``{lang, id, text}`` rows.

    Returns ``{"model", "reference", "languages": {lang: stats}}`` where each language's stats are
    those of :func:`~hf_adapters.formulas.information_parity.compute_information_parity` (``scores`` replaced by
    ``pairs``: ``[{"id", "score"}]``) plus ``num_pairs``; languages are sorted by parity, highest
    first. Ids missing from either side are skipped with a warning. ``languages`` restricts the
    languages under test. The options are those of
    :class:`~hf_adapters.formulas.information_parity.InformationParityOptions` and
    :class:`~hf_adapters.backends.BackendOptions`.

    Example:
        >>> from hf_adapters.formulas.parallel_corpus import evaluate_parallel
        >>> rows = [{"lang": "eng_Latn", "id": 0, "text": "The cat sleeps."},
        ...         {"lang": "fra_Latn", "id": 0, "text": "Le chat dort."}]
        >>> list(evaluate_parallel(rows, "eng_Latn")["languages"])
        ['fra_Latn']
    """
    run, parity_options = split_options(options, BackendOptions, InformationParityOptions,
                                             caller="evaluate_parallel")
    grouped = group_by_language(rows)
    pairs = pair_ids(grouped, reference_lang, languages)
    reference = grouped[reference_lang]

    backend = run.load()
    texts = [reference[i] for ids in pairs.values() for i in ids]
    texts += [grouped[lang][i] for lang, ids in pairs.items() for i in ids]
    scores = score_texts(backend, texts, parity_options, batch_size=run.batch_size, progress=run.progress)

    results = {}
    for lang, ids in pairs.items():
        stats = summarize_information_parity([grouped[lang][i] for i in ids], [reference[i] for i in ids], scores)
        per_pair = stats.pop("scores")
        stats["num_pairs"] = sum(not math.isnan(score) for score in per_pair)
        stats["pairs"] = [{"id": i, "score": score} for i, score in zip(ids, per_pair, strict=True)]
        results[lang] = stats
    order = sorted(results, key=lambda lang: _sort_key(results[lang]["information_parity"]))
    return {"model": run.model_name, "reference": reference_lang, "languages": {lang: results[lang] for lang in order}}


def _sort_key(value: float) -> float:
    return math.inf if math.isnan(value) else -value


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
