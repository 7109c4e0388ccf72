"""The ``information_parity`` task: per sentence pair, the total log-likelihood of both texts; per
language, the numbers of ``metrics/information_parity``.

A document is one sentence in a language under test with its parallel sentence in the reference
language. It asks for two ``loglikelihood_rolling`` requests, the reference first: each scores every
token of the text, the first one after the model's prefix token. Each language ``<lang>`` gets:

- ``<lang>_information_parity``: the mean over pairs of NLL(reference) / NLL(text), lm-eval's
  ``mean`` (so its standard error too);
- ``<lang>_corpus_information_parity``: total reference NLL / total NLL (lm-eval's ``weighted_mean``);
- ``<lang>_bits_per_byte`` and ``<lang>_reference_bits_per_byte``: total NLL in bits / UTF-8 bytes of
  the texts and of their references (lm-eval's ``bits_per_byte``).

A pair where either text has no token (a log-likelihood of 0) is left out, as the metric leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import datasets
from lm_eval.api.instance import Instance
from lm_eval.api.metrics import bits_per_byte, mean, weighted_mean
from lm_eval.api.task import ConfigurableTask

from hf_adapters.formulas.parallel_corpus import group_by_language, pair_ids, read_parallel_files
from hf_adapters.integrations.lm_eval_harness.errors import TaskDataError

#: Each language's metrics: lm-eval's aggregation of the per-pair values, and whether higher is better.
METRICS: dict[str, tuple[Callable, bool]] = {
    "information_parity": (mean, True),
    "corpus_information_parity": (weighted_mean, True),
    "bits_per_byte": (bits_per_byte, False),
    "reference_bits_per_byte": (bits_per_byte, False),
}


def parallel_pairs(data_files: str | list[str] | None = None, reference_lang: str = "eng_Latn",
                   languages: str | list[str] | None = None, **_: Any) -> datasets.DatasetDict:
    """The task's ``custom_dataset``: a ``test`` split of ``{lang, id, reference, text}`` pairs, id by id
    (so ``--limit`` takes the first sentences of every language), the languages of
    :func:`~hf_adapters.formulas.parallel_corpus.pair_ids` in its order.

    lm-eval calls it with the task's metadata, ``--metadata`` over the YAML's: ``data_files`` (a file,
    a folder or a list of them, as :func:`~hf_adapters.formulas.parallel_corpus.read_parallel_files` reads),
    ``reference_lang`` and ``languages`` (a list, or a string of codes separated by commas); the other
    keys (the model's arguments, the version) are not this function's. Missing or unreadable files are a
    :class:`~hf_adapters.integrations.lm_eval_harness.errors.TaskDataError` (one ``error:`` line from
    ``hf-adapters lm-eval``).
    """
    if not data_files:
        raise TaskDataError("information_parity: pass the parallel files, e.g. "
                            "--metadata '{\"data_files\": \"/path/to/flores200_dataset/dev\"}'")
    if isinstance(languages, str):
        languages = [lang.strip() for lang in languages.split(",") if lang.strip()]
    try:
        grouped = group_by_language(read_parallel_files(data_files))
        pairs = pair_ids(grouped, reference_lang, languages)
    except (OSError, ValueError) as error:
        raise TaskDataError(f"information_parity: {error} (--metadata data_files={data_files!r})") from error
    shared = {lang: set(ids) for lang, ids in pairs.items()}
    reference = grouped[reference_lang]
    docs = [{"lang": lang, "id": str(i), "reference": reference[i], "text": grouped[lang][i]}
            for i in reference for lang in pairs if i in shared[lang]]
    if not docs:
        raise TaskDataError(f"information_parity: no sentence of {list(pairs)} has a {reference_lang} parallel.")
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


class InformationParityTask(ConfigurableTask):
    """lm-eval's configurable task with two requests per document and four metrics per language."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config={key: value for key, value in config.items() if key != "class"})
        self.languages = list(dict.fromkeys(self.eval_docs["lang"]))

    def construct_requests(self, doc: dict, ctx: str, metadata: tuple, **_: Any) -> list[Instance]:
        """The rolling log-likelihood of the reference (``idx`` 0) and of the text (``idx`` 1)."""
        if ctx:
            raise ValueError("information_parity scores each text alone: no few-shot examples, description, "
                             "system instruction or chat template.")
        return [Instance("loglikelihood_rolling", doc, (doc[field],), idx, metadata)
                for idx, field in enumerate(("reference", "text"))]

    def process_results(self, doc: dict, results: list[float]) -> dict[str, Any]:
        reference, text = results
        if not reference or not text:
            return {}
        values = {
            "information_parity": reference / text,
            "corpus_information_parity": (reference, text),
            "bits_per_byte": (text, len(doc["text"].encode("utf-8"))),
            "reference_bits_per_byte": (reference, len(doc["reference"].encode("utf-8"))),
        }
        return {f"{doc['lang']}_{name}": value for name, value in values.items()}

    def aggregation(self) -> dict[str, Callable]:
        return {f"{lang}_{name}": aggregate for lang in self.languages for name, (aggregate, _) in METRICS.items()}

    def higher_is_better(self) -> dict[str, bool]:
        return {f"{lang}_{name}": higher for lang in self.languages for name, (_, higher) in METRICS.items()}
