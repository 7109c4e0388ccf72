"""Our scores as datatrove pipeline steps (needs ``pip install 'hf_adapters[datatrove]'``).

:class:`LikelihoodScores` scores the documents that pass through it with a scorer config (one scorer or a
score set, the YAML files ``hf-adapters score`` reads) and writes each score into ``doc.metadata`` under
the column name of the command's score files (``score`` for one scorer's score, each member's name for
a score set); :class:`LikelihoodFilter` scores them the same way and keeps those whose score lies in a
range, handing the others to datatrove's ``exclusion_writer``. Each step scores its rank's documents a
chunk at a time, as the command scores its rows, so the numbers are the command's for the same rows.

A document becomes the scorer's row by ``adapter`` (default :func:`document_row`): its metadata, its
text under ``text_column`` and its ``id``. datatrove's readers put every field of a data row other
than the text and the id into the metadata, so an Alpaca file read with ``text_key="output"`` gives
IFD's ``instruction``, ``input`` and ``output``; chat rows keep their ``messages`` there
(:func:`conversation_document` is a reader adapter for rows that have no text field). A document whose
metadata already has a score column's key (a data field, or an earlier step's score) stops the rank with a
ValueError naming it, as ``hf-adapters score`` refuses a data column its scores would overwrite.

The model is loaded in the worker, on the first document it scores, once per process (datatrove copies
the steps for each rank; loaded models are kept process-wide). A rerun skips the ranks datatrove marked
complete; a killed rank starts again from its first document (see docs/pipelines.md). As the command does
for itself, a step makes OpenMP's threads wait passively (``OMP_WAIT_POLICY``, unless it is set) where it
first imports torch: when it is built (it builds its scorer to check the config) and when a worker that has
not imported torch yet starts to run it. Importing this module changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.utils.batching import batched

from hf_adapters.core.openmp import wait_passively
from hf_adapters.integrations.pipeline_scores import PipelineScores, ScoreRange

#: A function from a document to the scorer's row.
RowAdapter = Callable[[Document], Mapping[str, Any]]


def document_row(document: Document, text_column: str = "text") -> dict[str, Any]:
    """The scorer's row of ``document``: its metadata, its text under ``text_column`` and its ``id``.

    Example:
        >>> doc = Document(text="Blue.", id="r1", metadata={"instruction": "Name a colour.", "input": ""})
        >>> document_row(doc, "output")
        {'instruction': 'Name a colour.', 'input': '', 'output': 'Blue.', 'id': 'r1'}
    """
    return {**document.metadata, text_column: document.text, "id": document.id}


def conversation_document(reader: Any, data: dict, path: str, id_in_file: int | str) -> dict[str, Any]:
    """A datatrove reader's ``adapter`` for chat rows (``messages`` or ShareGPT's ``conversations``) that
    have no text field: the last message's text as the document's text (a reader drops documents without
    text), every field of the row, the messages included, in its metadata.

    Example:
        >>> messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        >>> conversation_document(None, {"id": "c1", "messages": messages}, "chats.jsonl", 0)["text"]
        'Hello'
    """
    messages = data.get("messages", data.get("conversations")) or [{}]
    last = messages[-1] if isinstance(messages[-1], Mapping) else {}
    text = last.get("content", last.get("value"))
    return {"text": text if isinstance(text, str) and text else " ", "id": data.pop("id", f"{path}/{id_in_file}"),
            "metadata": data}


class _DocumentScores:
    """The scoring both steps do: documents to rows (``adapter``), rows to scores, scores into the metadata."""

    def _set_up_scores(self, config: str | Path | Mapping[str, Any], text_column: str, adapter: RowAdapter | None,
                       score_columns: str | Sequence[str] | None, device: str | None,
                       rows_per_call: int | None) -> None:
        # Before the scorer imports torch, as the command does: spinning threads slow scoring on a busy machine.
        wait_passively()
        self.scores = PipelineScores(config, score_columns=score_columns, device=device, rows_per_call=rows_per_call)
        self.adapter = adapter or functools.partial(document_row, text_column=text_column)
        self.documents_scored = 0

    def score_documents(self, documents: Sequence[Document]) -> None:
        """Write each document's scores into its metadata (NaN, with a warning, where a row is refused)."""
        wait_passively()  # a worker's first batch, before its model loads (a no-op once torch is imported)
        for document in documents:
            self.scores.refuse_taken_columns(document.metadata, f"Document {document.id!r} has the metadata key")
        rows = [self.adapter(document) for document in documents]
        scores = self.scores.columns_for(rows, self.documents_scored)
        self.documents_scored += len(documents)
        first = next(iter(scores))
        for position, document in enumerate(documents):
            document.metadata.update({column: values[position] for column, values in scores.items()})
            if scores[first][position] != scores[first][position]:
                self.stat_update("nan_scores")


class LikelihoodScores(_DocumentScores, PipelineStep):
    """Add a scorer config's scores to every document's metadata (see the module's docstring).

    Args:
        config: a YAML config's path or a config dict, as ``hf-adapters score`` takes it.
        text_column: the row field that holds the document's text (``output`` for IFD on Alpaca rows read
            with ``text_key="output"``).
        adapter: builds the scorer's row from a document instead of :func:`document_row`.
        score_columns: more outputs to write (``"all"`` or their names), over the config's.
        device: where the model runs (None: as the command chooses).
        rows_per_call: documents scored together (None: 16 on the CPU, 4,096 on an accelerator, as the
            command's chunks).

    Example:
        >>> from datatrove.pipeline.readers import JsonlReader
        >>> pipeline = [JsonlReader("rows/", text_key="output"),  # doctest: +SKIP
        ...             LikelihoodScores("hf_adapters/configs/ifd.yaml", text_column="output")]
    """

    name = "🤗 hf_adapters scores"
    type = "📊 - STATS"

    def __init__(self, config: str | Path | Mapping[str, Any], *, text_column: str = "text",
                 adapter: RowAdapter | None = None, score_columns: str | Sequence[str] | None = None,
                 device: str | None = None, rows_per_call: int | None = None):
        super().__init__()
        self._set_up_scores(config, text_column, adapter, score_columns, device, rows_per_call)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for documents in batched(data or (), self.scores.rows_per_call):
            with self.track_time("batch"):
                self.score_documents(documents)
            self.stat_update("documents", value=len(documents))
            yield from documents


class LikelihoodFilter(_DocumentScores, BaseFilter):
    """Score documents as :class:`LikelihoodScores` does and keep those whose ``column`` lies between
    ``min_score`` and ``max_score`` (bounds included); the others, and those that could not be scored
    (NaN), go to ``exclusion_writer`` if one is given, with the reason ``score_out_of_range`` or ``no_score``.

    ``column`` is one of the written columns (default: the first, ``score`` for one scorer); the other
    arguments are :class:`LikelihoodScores`'.

    Example:
        >>> from datatrove.pipeline.writers import JsonlWriter
        >>> keep = LikelihoodFilter("hf_adapters/configs/ifd.yaml", text_column="output",  # doctest: +SKIP
        ...                         max_score=1.0, exclusion_writer=JsonlWriter("removed/"))
    """

    name = "🤗 hf_adapters score filter"

    def __init__(self, config: str | Path | Mapping[str, Any], *, min_score: float | None = None,
                 max_score: float | None = None, column: str | None = None,
                 exclusion_writer: DiskWriter | None = None, text_column: str = "text",
                 adapter: RowAdapter | None = None, score_columns: str | Sequence[str] | None = None,
                 device: str | None = None, rows_per_call: int | None = None):
        self._set_up_scores(config, text_column, adapter, score_columns, device, rows_per_call)
        super().__init__(exclusion_writer, batch_size=self.scores.rows_per_call)
        self.keep = ScoreRange(min_score, max_score)
        written = list(self.scores.columns.values())
        self.column = column or written[0]
        if self.column not in written:
            raise ValueError(f"column {self.column!r} is not written by this config; it writes {written}.")

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return self.filter_batch([doc])[0]

    def filter_batch(self, batch: list[Document]) -> list[bool | tuple[bool, str]]:
        self.score_documents(batch)
        return [True if self.keep(doc.metadata[self.column])
                else (False, "no_score" if doc.metadata[self.column] != doc.metadata[self.column]
                      else "score_out_of_range")
                for doc in batch]
