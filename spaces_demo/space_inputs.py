"""The Space's inputs: pasted text or an uploaded file turned into checked rows, one task per tab."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hf_adapters.core.conventions import IFD_CONVENTIONS, SELECTION_CONVENTIONS, describe
from hf_adapters.files.data_io import parse_jsonl, read_records
from hf_adapters.formulas.information_parity import RESULT_KEYS
from hf_adapters.scorers import (
    ConversationIFDScorer,
    IFDScorer,
    IFEvalScorer,
    InformationParityScorer,
    PerplexityScorer,
    RowScorer,
)

#: Most rows one request may score (a Space has a few CPU cores).
MAX_ROWS = 2000


class InputError(ValueError):
    """The pasted text or uploaded file cannot be turned into rows; the message says why."""


def looks_like_jsonl(text: str) -> bool:
    """True when the first non-blank line starts a JSON object."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return first.lstrip().startswith("{")


def parse_tab_separated(text: str, columns: Sequence[str], optional: Mapping[int, Sequence[str]]) -> list[dict]:
    """Non-blank lines of tab-separated cells, named ``columns``; other cell counts map via ``optional``."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split("\t")
        names = columns if len(cells) == len(columns) else optional.get(len(cells))
        if names is None:
            expected = " or ".join(str(n) for n in sorted({len(columns), *optional}))
            raise InputError(f"Line {number} has {len(cells)} tab-separated cell(s), expected {expected} "
                             f"({' <TAB> '.join(columns)}): {line[:80]!r}")
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def _jsonl_or(parse: Callable[[str], list[dict]]) -> Callable[[str], list[dict]]:
    return lambda text: parse_jsonl(text) if looks_like_jsonl(text) else parse(text)


def _jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(json.dumps(row, ensure_ascii=False) for row in rows)


@dataclass(frozen=True)
class Task:
    """One tab: its scorer, how pasted text becomes rows, what the table and summary show."""

    name: str
    scorer: type[RowScorer]
    parse_text: Callable[[str], list[dict[str, Any]]]
    help: str
    example: str
    title: str = ""
    description: str = ""
    #: Input columns shown in the table, with their cell width.
    shown: Mapping[str, int] = None
    #: Per-row output name -> key of the scorer's result.
    outputs: Mapping[str, str] = None
    #: Result keys copied into the summary.
    summary_keys: tuple[str, ...] = ()
    chart: tuple[str, str] = ("", "")
    json_fields: tuple[str, ...] = ()  # hold JSON in a CSV cell
    #: Options the tab's scorer is built with.
    scorer_options: Mapping[str, Any] = None
    #: The task rows holding conversations (``messages`` or ``conversations``) are scored as, if any.
    conversations: Task | None = None

    def for_rows(self, rows: Sequence[Mapping[str, Any]]) -> Task:
        """This task, or its conversation variant when the first row holds a conversation."""
        if self.conversations is not None and rows and ("messages" in rows[0] or "conversations" in rows[0]):
            return self.conversations
        return self

    def build_scorer(self, **options: Any) -> RowScorer:
        return self.scorer(**{**(self.scorer_options or {}), **options})


PERPLEXITY = Task(
    name="perplexity", scorer=PerplexityScorer, title="Perplexity",
    description="Perplexity of each text: exp of the mean negative log-likelihood of its tokens. Lower means the "
    "model finds the text more predictable.",
    parse_text=_jsonl_or(lambda text: [{"text": line} for line in text.splitlines() if line.strip()]),
    help="One text per line, or JSONL rows with a `text` field (for texts with line breaks).",
    example="\n".join(["The cat sat on the mat.", "Paris is the capital of France.",
                       "colorless green ideas sleep furiously",
                       "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen."]),
    shown={"text": 120}, outputs={"perplexity": "perplexities"},
    summary_keys=("mean_perplexity", "corpus_perplexity"), chart=("Perplexity per row", "perplexity"),
)

IFD_CONVERSATIONS = Task(
    name="ifd", scorer=ConversationIFDScorer, scorer_options={"turns": "all"}, parse_text=parse_jsonl,
    help="JSONL rows with a conversation in `messages` ({role, content}) or `conversations` ({from, value}).",
    example="", shown={"messages": 80, "conversations": 80},
    outputs={"ifd": "ifd_scores", "turn_ifd": "turn_ifd_scores", "conditional_perplexity": "conditional_perplexities",
             "direct_perplexity": "direct_perplexities"},
    summary_keys=("mean_ifd",), chart=("IFD per conversation, over all assistant turns", "IFD"),
)

#: The IFD tab's instruction rows, as its input help describes them.
IFD_ROWS_HELP = ("JSONL rows with `instruction`, optional `input`, and `output`; "
                 "or one row per line as `instruction<TAB>output` or `instruction<TAB>input<TAB>output`")

IFD = Task(
    name="ifd", scorer=IFDScorer, conversations=IFD_CONVERSATIONS, title="IFD",
    description="IFD of each row: perplexity of the output given the instruction, divided by the perplexity of the "
    "output alone. Low IFD: the instruction makes the output much easier to predict.",
    parse_text=_jsonl_or(lambda text: parse_tab_separated(text, ("instruction", "input", "output"),
                                                          {2: ("instruction", "output")})),
    help=IFD_ROWS_HELP + "; or JSONL conversations in `messages` (OpenAI) or `conversations` (ShareGPT), "
    "scored turn by turn.",
    example=_jsonl([
        {"instruction": "What is the capital of Australia?", "input": "",
         "output": "The capital of Australia is Canberra."},
        {"instruction": "Translate the sentence into French.", "input": "The library opens at nine.",
         "output": "La bibliothèque ouvre à neuf heures."},
        {"instruction": "Write a haiku about autumn.", "input": "",
         "output": "Red leaves drift and fall\ncool wind hums through empty trees\nthe year exhales slow"},
    ]),
    shown={"instruction": 60, "input": 40, "output": 60},
    outputs={"ifd": "ifd_scores", "conditional_perplexity": "conditional_perplexities",
             "direct_perplexity": "direct_perplexities"},
    summary_keys=("mean_ifd",), chart=("IFD per row (above 1: the instruction does not help)", "IFD"),
)

IFD_REVERSE = Task(
    name="ifd", scorer=IFDScorer, scorer_options={"direction": "reverse"}, parse_text=IFD.parse_text,
    help=IFD.help, example=IFD.example, shown=IFD.shown,
    outputs={"r_ifd": "ifd_scores", "conditional_perplexity": "conditional_perplexities",
             "direct_perplexity": "direct_perplexities"},
    summary_keys=("mean_ifd",), chart=("r-IFD per row (below 1: the answer helps predict the instruction)", "r-IFD"),
)

#: What the IFD tab's conventions mean: the library's table, and how Select rows follows them.
IFD_CONVENTION_INFO = (f"{describe(IFD_CONVENTIONS)}. A peer's convention scores instruction rows, IFD only; with "
                       f"{' or '.join(name for name in SELECTION_CONVENTIONS if name != 'exact')}, Select rows "
                       "follows that project's selection script.")


def ifd_task(direction: str = "IFD", convention: str = "exact") -> Task:
    """The IFD tab's task for its direction (``"IFD"`` or ``"r-IFD"``) and convention; a peer's
    convention scores instruction rows only, forward (the scorer refuses r-IFD)."""
    task = IFD_REVERSE if direction == "r-IFD" else IFD
    if convention == "exact":
        return task
    return replace(task, scorer_options={**(task.scorer_options or {}), "convention": convention}, conversations=None,
                   help=f"{IFD_ROWS_HELP} (convention {convention!r} does not score conversations: pick exact).")


PARITY = Task(
    name="information_parity", scorer=InformationParityScorer, title="Information Parity",
    description="Information Parity of each pair: the reference's negative log-likelihood divided by the "
    "prediction's. Near 1: the model encodes the prediction as efficiently as the reference.",
    parse_text=_jsonl_or(lambda text: parse_tab_separated(text, ("reference", "prediction"), {})),
    help="One pair per line as `reference<TAB>prediction` (the reference is usually English), "
    "or JSONL rows with `reference` and `prediction` fields.",
    example="\n".join(["The weather is nice today.\tIl fait beau aujourd'hui.",
                       "Where is the train station?\t¿Dónde está la estación de tren?",
                       "I would like a cup of tea.\tIch hätte gern eine Tasse Tee."]),
    shown={"reference": 60, "prediction": 60}, outputs={"information_parity": "scores"},
    summary_keys=RESULT_KEYS[1:],
    chart=("Information Parity per pair (1: as efficient as the reference)", "information parity"),
)

IFEVAL = Task(
    name="ifeval", scorer=IFEvalScorer, parse_text=parse_jsonl, title="IFEval",
    description="IFEval: does each response follow its verifiable instructions? Strict and loose scoring as in "
    "Google's IFEval; the chart shows the pass rate of each instruction id.",
    help="JSONL rows with the model's `response`, and the IFEval `instruction_id_list` and `kwargs` "
    "(optional `key` and `prompt`). In a CSV upload, the list columns hold JSON.",
    example=_jsonl([
        {"key": "demo-1", "prompt": "Describe a sunrise in at most 3 sentences without using any commas.",
         "instruction_id_list": ["length_constraints:number_sentences", "punctuation:no_comma"],
         "kwargs": [{"num_sentences": 4, "relation": "less than"}, {}],
         "response": "The sky turns pink. The sun climbs slowly over the hills."},
        {"key": "demo-2", "prompt": "Answer in lowercase letters only and include the word 'river'.",
         "instruction_id_list": ["change_case:english_lowercase", "keywords:existence"],
         "kwargs": [{}, {"keywords": ["river"]}],
         "response": "The River flows to the sea, carrying silt from the mountains."},
        {"key": "demo-3", "prompt": "List exactly 2 markdown bullet points and wrap the answer in double quotes.",
         "instruction_id_list": ["detectable_format:number_bullet_lists", "startend:quotation"],
         "kwargs": [{"num_bullets": 2}, {}],
         "response": "\"* apples\n* pears\""},
    ]),
    json_fields=("instruction_id_list", "kwargs"),
)


def decode_json_cells(rows: list[dict[str, Any]], fields: Sequence[str]) -> None:
    """Decode, in place, the CSV cells of ``fields`` that hold JSON (lists and objects)."""
    for number, row in enumerate(rows, start=1):
        for field in fields:
            if isinstance(row.get(field), str):
                try:
                    row[field] = json.loads(row[field])
                except json.JSONDecodeError as error:
                    raise InputError(f"Row {number}: the {field!r} cell is not valid JSON ({error.msg}).") from None


def load_rows(task: Task, text: str | None, upload: str | None) -> tuple[list[dict[str, Any]], str]:
    """The rows to score, from the uploaded file if there is one, else the pasted text; and their
    format (``jsonl`` or ``csv``). Raises an ``InputError`` naming the first bad row (counting from 1)."""
    try:
        if upload:
            fmt = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(Path(upload).suffix.lower())
            if fmt is None:
                raise InputError(f"Upload a .jsonl or .csv file, not {Path(upload).name!r}.")
            rows = read_records(upload)
            if fmt == "csv":
                decode_json_cells(rows, task.json_fields)
        elif text and text.strip():
            rows, fmt = task.parse_text(text), "jsonl"
        else:
            raise InputError("Paste some rows into the text box or upload a .jsonl/.csv file.")
        if not rows:
            raise InputError("No rows found: the input is empty.")
        if len(rows) > MAX_ROWS:
            raise InputError(f"{len(rows)} rows is more than this demo scores at once ({MAX_ROWS}).")
        task.for_rows(rows).build_scorer().check_rows(rows, offset=1)
    except InputError:
        raise
    except ValueError as error:
        raise InputError(f"{error} {task.help}" if "has no field" in str(error) else str(error)) from None
    return rows, fmt
