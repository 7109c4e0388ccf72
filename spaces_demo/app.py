"""Gradio demo of hf_adapters: perplexity, IFD, Information Parity and IFEval in four tabs.

Each tab turns pasted text or an uploaded JSONL/CSV file into rows, scores them with the library,
and shows a per-row table, the summary numbers, a chart and the scored file for download. Every
step is a small function so it can be tested without a browser; ``build_demo`` wires them up.

Run locally with ``python spaces_demo/app.py`` (``GRADIO_SERVER_NAME`` and ``GRADIO_SERVER_PORT``
are honoured); script it with ``gradio_client`` through ``/perplexity``, ``/ifd``,
``/information_parity`` and ``/ifeval``.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import json
import logging
import math
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# In the Space, hf_adapters is installed or copied beside this file; in a checkout of the
# library's repository it is the parent folder's package.
if importlib.util.find_spec("hf_adapters") is None and (HERE.parent / "hf_adapters" / "__init__.py").is_file():
    sys.path.insert(0, str(HERE.parent))

import gradio as gr  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from hf_adapters.ifd import compute_ifd  # noqa: E402
from hf_adapters.ifeval import aggregate, score_rows  # noqa: E402
from hf_adapters.models import DEFAULT_MODEL_ID, ModelLoadError, load_model  # noqa: E402
from hf_adapters.parity import compute_information_parity  # noqa: E402
from hf_adapters.perplexity import compute_perplexity  # noqa: E402

logger = logging.getLogger(__name__)

#: Most rows one request may score (a Space has a few CPU cores).
MAX_ROWS = 2000
#: Widest text shown in a table cell; the download keeps full texts.
CELL_CHARS = 120


class InputError(ValueError):
    """The pasted text or uploaded file cannot be turned into rows; the message says why."""


# --------------------------------------------------------------------------- parsing


def parse_jsonl(text: str) -> list[dict[str, Any]]:
    """One JSON object per non-blank line."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"Line {number} is not valid JSON ({error.msg}): {line[:80]!r}") from None
        if not isinstance(row, dict):
            raise InputError(f"Line {number} is JSON but not an object: {line[:80]!r}")
        rows.append(row)
    return rows


def parse_csv(text: str) -> list[dict[str, str]]:
    """Rows of a CSV file with a header line."""
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        if None in row:
            raise InputError(f"CSV line {len(rows) + 2} has more cells than the header.")
        rows.append(row)
    return rows


def decode_json_cells(rows: list[dict[str, Any]], fields: Sequence[str]) -> None:
    """Decode, in place, the CSV cells of ``fields`` that hold JSON (lists and objects)."""
    for number, row in enumerate(rows, start=1):
        for field in fields:
            if isinstance(row.get(field), str):
                try:
                    row[field] = json.loads(row[field])
                except json.JSONDecodeError as error:
                    raise InputError(f"Row {number}: the {field!r} cell is not valid JSON ({error.msg}).") from None


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
            raise InputError(
                f"Line {number} has {len(cells)} tab-separated cell(s), expected {expected} "
                f"({' <TAB> '.join(columns)}): {line[:80]!r}"
            )
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def parse_lines(text: str) -> list[dict[str, str]]:
    """One text per non-blank line."""
    return [{"text": line} for line in text.splitlines() if line.strip()]


def read_upload(path: str | None) -> tuple[list[dict[str, Any]], str]:
    """Rows of an uploaded ``.jsonl``/``.json`` or ``.csv`` file, and its format (``jsonl`` or ``csv``)."""
    suffix = Path(path).suffix.lower()
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{Path(path).name} is not UTF-8 text.") from None
    if suffix == ".csv":
        return parse_csv(text), "csv"
    if suffix in {".jsonl", ".json"}:
        stripped = text.lstrip()
        if suffix == ".json" and stripped.startswith("["):
            try:
                rows = json.loads(stripped)
            except json.JSONDecodeError as error:
                raise InputError(f"{Path(path).name} is not valid JSON ({error.msg}).") from None
            if not all(isinstance(row, dict) for row in rows):
                raise InputError(f"{Path(path).name} must be a JSON list of objects.")
            return rows, "jsonl"
        return parse_jsonl(text), "jsonl"
    raise InputError(f"Upload a .jsonl or .csv file, not {Path(path).name!r}.")


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Task:
    """One tab: how pasted text becomes rows, which fields each row needs, and a short help text."""

    name: str
    required: tuple[str, ...]
    parse_text: Callable[[str], list[dict[str, Any]]]
    help: str
    example: str
    string_fields: tuple[str, ...] = ()
    json_fields: tuple[str, ...] = ()  # hold JSON in a CSV cell


def _parse_perplexity_text(text: str) -> list[dict]:
    return parse_jsonl(text) if looks_like_jsonl(text) else parse_lines(text)


def _parse_ifd_text(text: str) -> list[dict]:
    if looks_like_jsonl(text):
        return parse_jsonl(text)
    return parse_tab_separated(text, ("instruction", "input", "output"), {2: ("instruction", "output")})


def _parse_parity_text(text: str) -> list[dict]:
    if looks_like_jsonl(text):
        return parse_jsonl(text)
    return parse_tab_separated(text, ("reference", "prediction"), {})


def _jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(json.dumps(row, ensure_ascii=False) for row in rows)


PERPLEXITY = Task(
    name="perplexity",
    required=("text",),
    string_fields=("text",),
    parse_text=_parse_perplexity_text,
    help="One text per line, or JSONL rows with a `text` field (for texts with line breaks).",
    example="\n".join([
        "The cat sat on the mat.",
        "Paris is the capital of France.",
        "colorless green ideas sleep furiously",
        "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    ]),
)

IFD = Task(
    name="ifd",
    required=("instruction", "output"),
    string_fields=("instruction", "input", "output"),
    parse_text=_parse_ifd_text,
    help="JSONL rows with `instruction`, optional `input`, and `output`; "
    "or one row per line as `instruction<TAB>output` or `instruction<TAB>input<TAB>output`.",
    example=_jsonl([
        {"instruction": "What is the capital of Australia?", "input": "",
         "output": "The capital of Australia is Canberra."},
        {"instruction": "Translate the sentence into French.", "input": "The library opens at nine.",
         "output": "La bibliothèque ouvre à neuf heures."},
        {"instruction": "Write a haiku about autumn.", "input": "",
         "output": "Red leaves drift and fall\ncool wind hums through empty trees\nthe year exhales slow"},
    ]),
)

PARITY = Task(
    name="information_parity",
    required=("reference", "prediction"),
    string_fields=("reference", "prediction"),
    parse_text=_parse_parity_text,
    help="One pair per line as `reference<TAB>prediction` (the reference is usually English), "
    "or JSONL rows with `reference` and `prediction` fields.",
    example="\n".join([
        "The weather is nice today.\tIl fait beau aujourd'hui.",
        "Where is the train station?\t¿Dónde está la estación de tren?",
        "I would like a cup of tea.\tIch hätte gern eine Tasse Tee.",
    ]),
)

IFEVAL = Task(
    name="ifeval",
    required=("response", "instruction_id_list", "kwargs"),
    string_fields=("response",),
    json_fields=("instruction_id_list", "kwargs"),
    parse_text=parse_jsonl,
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
)


def load_rows(task: Task, text: str | None, upload: str | None) -> tuple[list[dict[str, Any]], str]:
    """The rows to score, from the uploaded file if there is one, else the pasted text; and their format.

    Raises an ``InputError`` naming the first bad row.
    """
    if upload:
        rows, fmt = read_upload(upload)
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
    for number, row in enumerate(rows, start=1):
        missing = [field for field in task.required if row.get(field) is None]
        if missing:
            raise InputError(f"Row {number} has no field {missing[0]!r}; its fields are {sorted(row)}. {task.help}")
        for field in task.string_fields:
            if field in row and row[field] is not None and not isinstance(row[field], str):
                raise InputError(f"Row {number}: {field!r} must be a string, got {type(row[field]).__name__}.")
    return rows, fmt


# --------------------------------------------------------------------------- outputs


def clip(text: Any, width: int = CELL_CHARS) -> str:
    """``text`` as one table cell: at most ``width`` characters, line breaks shown as ⏎."""
    text = str(text).replace("\n", " ⏎ ")
    return text if len(text) <= width else text[: width - 1] + "…"


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN: a NaN or infinite summary number becomes null."""
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def histogram(values: Sequence[float], title: str, xlabel: str):
    """A histogram of the finite ``values`` with their mean marked."""
    # A bare Figure, not pyplot: tabs may draw at the same time in different threads.
    figure = Figure(figsize=(6, 3.2), layout="constrained")
    axes = figure.subplots()
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if finite:
        axes.hist(finite, bins=min(30, max(5, len(finite))), color="#4C72B0", edgecolor="white")
        mean = sum(finite) / len(finite)
        axes.axvline(mean, color="#DD8452", linestyle="--", label=f"mean {mean:.4g}")
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no finite scores", ha="center", va="center", transform=axes.transAxes)
    axes.set(title=title, xlabel=xlabel, ylabel="rows")
    return figure


def pass_rate_chart(per_instruction: Mapping[str, Mapping[str, float]]):
    """Horizontal bars of each instruction id's strict and loose pass rate."""
    ids = list(per_instruction)
    figure = Figure(figsize=(7, 1.2 + 0.45 * max(1, len(ids))), layout="constrained")
    axes = figure.subplots()
    positions = range(len(ids))
    strict = [per_instruction[i]["strict_acc"] for i in ids]
    loose = [per_instruction[i]["loose_acc"] for i in ids]
    axes.barh([p - 0.2 for p in positions], strict, height=0.4, label="strict", color="#4C72B0")
    axes.barh([p + 0.2 for p in positions], loose, height=0.4, label="loose", color="#55A868")
    axes.set_yticks(list(positions), [f"{i} (n={per_instruction[i]['count']})" for i in ids])
    axes.invert_yaxis()
    axes.set(xlim=(0, 1), xlabel="pass rate", title="IFEval pass rate per instruction")
    axes.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0))
    return figure


def write_scored(rows: Sequence[Mapping[str, Any]], fmt: str, name: str) -> str:
    """Write the scored rows (input fields plus scores) to a new file; return its path."""
    folder = Path(tempfile.mkdtemp(prefix="hf_adapters_"))
    if fmt == "csv":
        path = folder / f"{name}_scores.csv"
        fields = list(dict.fromkeys(key for row in rows for key in row))
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
    else:
        path = folder / f"{name}_scores.jsonl"
        path.write_text(_jsonl([_json_safe(row) for row in rows]) + "\n", encoding="utf-8")
    return str(path)


def _json_safe(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: finite_or_none(v) if isinstance(v, float) else v for key, v in row.items()}


# --------------------------------------------------------------------------- scoring


def _model(model_id: str | None, progress: Callable | None):
    model_id = (model_id or "").strip()
    if not model_id:
        raise InputError("Enter a model id (e.g. HuggingFaceTB/SmolLM2-135M-Instruct) or a local path.")
    if progress is not None:
        progress(0, desc=f"Loading {model_id}")
    model, tokenizer = load_model(model_id)
    return model_id, model, tokenizer


def score_perplexity(text: str | None, upload: str | None, model_id: str | None, progress: Callable | None = None):
    """Perplexity of each row: table, summary, histogram and scored file."""
    rows, fmt = load_rows(PERPLEXITY, text, upload)
    model_id, model, tokenizer = _model(model_id, progress)
    result = compute_perplexity(
        [row["text"] for row in rows], model_id=model_id, model=model, tokenizer=tokenizer, progress=True
    )
    scored = [{**row, "perplexity": p} for row, p in zip(rows, result["perplexities"], strict=True)]
    table = pd.DataFrame({
        "row": range(1, len(rows) + 1),
        "text": [clip(row["text"]) for row in rows],
        "perplexity": result["perplexities"],
    })
    summary = {
        "model": model_id,
        "rows": len(rows),
        "valid_rows": sum(not math.isnan(p) for p in result["perplexities"]),
        "mean_perplexity": finite_or_none(result["mean_perplexity"]),
        "corpus_perplexity": finite_or_none(result["corpus_perplexity"]),
    }
    plot = histogram(result["perplexities"], "Perplexity per row", "perplexity")
    return table, summary, plot, write_scored(scored, fmt, PERPLEXITY.name)


def score_ifd(text: str | None, upload: str | None, model_id: str | None, progress: Callable | None = None):
    """Instruction-Following Difficulty of each row: table, summary, histogram and scored file."""
    rows, fmt = load_rows(IFD, text, upload)
    model_id, model, tokenizer = _model(model_id, progress)
    result = compute_ifd(
        [row["instruction"] for row in rows],
        [row["output"] for row in rows],
        [row.get("input") or "" for row in rows],
        model_id=model_id, model=model, tokenizer=tokenizer, progress=True,
    )
    columns = {
        "ifd": result["ifd_scores"],
        "conditional_perplexity": result["conditional_perplexities"],
        "direct_perplexity": result["direct_perplexities"],
    }
    scored = [{**row, **{name: values[i] for name, values in columns.items()}} for i, row in enumerate(rows)]
    table = pd.DataFrame({
        "row": range(1, len(rows) + 1),
        "instruction": [clip(row["instruction"], 60) for row in rows],
        "input": [clip(row.get("input") or "", 40) for row in rows],
        "output": [clip(row["output"], 60) for row in rows],
        **columns,
    })
    summary = {
        "model": model_id,
        "rows": len(rows),
        "valid_rows": result["num_valid"],
        "mean_ifd": finite_or_none(result["mean_ifd"]),
    }
    plot = histogram(result["ifd_scores"], "IFD per row (above 1: the instruction does not help)", "IFD")
    return table, summary, plot, write_scored(scored, fmt, IFD.name)


def score_information_parity(
    text: str | None, upload: str | None, model_id: str | None, progress: Callable | None = None
):
    """Information Parity of each (reference, prediction) pair: table, summary, histogram and scored file."""
    rows, fmt = load_rows(PARITY, text, upload)
    model_id, model, tokenizer = _model(model_id, progress)
    result = compute_information_parity(
        [row["prediction"] for row in rows],
        [row["reference"] for row in rows],
        model_id=model_id, model=model, tokenizer=tokenizer, progress=True,
    )
    per_row = {name: values for name, values in result.items() if _is_per_row(values, len(rows))}
    scored = [{**row, **{name: values[i] for name, values in per_row.items()}} for i, row in enumerate(rows)]
    table = pd.DataFrame({
        "row": range(1, len(rows) + 1),
        "reference": [clip(row["reference"], 60) for row in rows],
        "prediction": [clip(row["prediction"], 60) for row in rows],
        "information_parity": result["scores"],
        **{name: values for name, values in per_row.items() if name != "scores"},
    })
    summary = {"model": model_id, "rows": len(rows)}
    summary.update({name: finite_or_none(v) for name, v in result.items() if isinstance(v, (int, float))})
    plot = histogram(result["scores"], "Information Parity per pair (1: as efficient as the reference)",
                     "information parity")
    scored = [{("information_parity" if k == "scores" else k): v for k, v in row.items()} for row in scored]
    return table, summary, plot, write_scored(scored, fmt, PARITY.name)


def _is_per_row(values: Any, count: int) -> bool:
    return isinstance(values, (list, tuple)) and len(values) == count


def score_ifeval(text: str | None, upload: str | None, progress: Callable | None = None):
    """IFEval strict and loose results of each row: table, summary, per-instruction chart and scored file."""
    rows, fmt = load_rows(IFEVAL, text, upload)
    if progress is not None:
        progress(0, desc="Checking instructions")
    results = score_rows([row["response"] for row in rows], rows)
    scores = aggregate(results, detailed=True)
    marks = {True: "✓", False: "✗"}
    table = pd.DataFrame({
        "row": range(1, len(rows) + 1),
        "key": [str(row.get("key", "")) for row in rows],
        "response": [clip(row["response"], 50) for row in rows],
        "instructions": [", ".join(r.instruction_ids) for r in results],
        "strict": [" ".join(marks[s] for s in r.strict) for r in results],
        "loose": [" ".join(marks[s] for s in r.loose) for r in results],
        "follow_all_instructions_strict": [all(r.strict) for r in results],
        "follow_all_instructions_loose": [all(r.loose) for r in results],
    })
    scored = [
        {**row, "follow_instruction_list_strict": list(r.strict), "follow_all_instructions_strict": all(r.strict),
         "follow_instruction_list_loose": list(r.loose), "follow_all_instructions_loose": all(r.loose)}
        for row, r in zip(rows, results, strict=True)
    ]
    summary = {"rows": len(rows), "instructions": sum(len(r.strict) for r in results)}
    summary.update({name: finite_or_none(v) for name, v in scores.items() if isinstance(v, float)})
    summary["per_instruction"] = scores["per_instruction"]
    return table, summary, pass_rate_chart(scores["per_instruction"]), write_scored(scored, fmt, IFEVAL.name)


# --------------------------------------------------------------------------- UI


def readable_errors(function: Callable) -> Callable:
    """Show any failure as a short message in the UI (a ``gr.Error``) instead of a stack trace."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as error:  # every failure reaches the user as a message
            message = str(error).strip() or type(error).__name__
            if isinstance(error, (ValueError, TypeError, ModelLoadError)):
                logger.warning("%s: %s", function.__name__, message)
            else:
                logger.exception("%s failed", function.__name__)
                message = f"{type(error).__name__}: {message}"
            raise gr.Error(message, print_exception=False) from None

    return wrapper


# Gradio injects the progress tracker through a default argument of type gr.Progress.
@readable_errors
def perplexity_handler(text, upload, model_id, progress=gr.Progress(track_tqdm=True)):  # noqa: B008
    return score_perplexity(text, upload, model_id, progress)


@readable_errors
def ifd_handler(text, upload, model_id, progress=gr.Progress(track_tqdm=True)):  # noqa: B008
    return score_ifd(text, upload, model_id, progress)


@readable_errors
def parity_handler(text, upload, model_id, progress=gr.Progress(track_tqdm=True)):  # noqa: B008
    return score_information_parity(text, upload, model_id, progress)


@readable_errors
def ifeval_handler(text, upload, progress=gr.Progress(track_tqdm=True)):  # noqa: B008
    return score_ifeval(text, upload, progress)


INTRO = """# hf_adapters: data-quality scores for language data
Exact, batched scores from one causal language model: **Perplexity** of texts, **IFD**
(Instruction-Following Difficulty) of instruction/response pairs, **Information Parity** of
translations against a reference, and **IFEval** instruction-following checks (no model needed).
Paste a few rows or upload a JSONL/CSV file; an uploaded file is used instead of the text box.
"""


def _tab(task: Task, title: str, handler: Callable, model_box: gr.Textbox | None, description: str) -> None:
    with gr.Tab(title, id=task.name):
        gr.Markdown(f"{description}\n\n**Input:** {task.help}")
        with gr.Row():
            text = gr.Textbox(value=task.example, label="Rows", lines=8, max_lines=20, scale=3,
                              elem_id=f"{task.name}-input")
            upload = gr.File(label="…or upload a .jsonl / .csv file", file_types=[".jsonl", ".json", ".csv"],
                             scale=1, elem_id=f"{task.name}-upload")
        button = gr.Button("Score", variant="primary", elem_id=f"{task.name}-run")
        with gr.Row():
            summary = gr.JSON(label="Summary", elem_id=f"{task.name}-summary", scale=1)
            chart = gr.Plot(label="Chart", elem_id=f"{task.name}-chart", scale=2)
        table = gr.Dataframe(label="Scores per row", elem_id=f"{task.name}-table", interactive=False, wrap=True)
        download = gr.File(label="Scored file", elem_id=f"{task.name}-download", interactive=False)
        inputs = [text, upload] + ([model_box] if model_box is not None else [])
        button.click(handler, inputs=inputs, outputs=[table, summary, chart, download], api_name=task.name)


def build_demo(default_model: str = DEFAULT_MODEL_ID) -> gr.Blocks:
    """The four-tab app; each Score button is an API endpoint named after its tab."""
    with gr.Blocks(title="hf_adapters scores") as demo:
        gr.Markdown(INTRO)
        model_box = gr.Textbox(
            value=default_model, label="Model (hub id or local path) for Perplexity, IFD and Information Parity",
            elem_id="model-id",
        )
        with gr.Tabs():
            _tab(PERPLEXITY, "Perplexity", perplexity_handler, model_box,
                 "Perplexity of each text: exp of the mean negative log-likelihood of its tokens. Lower means "
                 "the model finds the text more predictable.")
            _tab(IFD, "IFD", ifd_handler, model_box,
                 "IFD of each row: perplexity of the output given the instruction, divided by the perplexity of "
                 "the output alone. Low IFD: the instruction makes the output much easier to predict.")
            _tab(PARITY, "Information Parity", parity_handler, model_box,
                 "Information Parity of each pair: the reference's negative log-likelihood divided by the "
                 "prediction's. Near 1: the model encodes the prediction as efficiently as the reference.")
            _tab(IFEVAL, "IFEval", ifeval_handler, None,
                 "IFEval: does each response follow its verifiable instructions? Strict and loose scoring "
                 "as in Google's IFEval; the chart shows the pass rate of each instruction id.")
    return demo


def launch(app: gr.Blocks | None = None, **kwargs: Any):
    """Queue one scoring job at a time (they share the model) and start the server.

    Server name and port come from ``kwargs`` or, as in any Gradio app, ``GRADIO_SERVER_NAME``
    and ``GRADIO_SERVER_PORT``.
    """
    app = demo if app is None else app
    return app.queue(default_concurrency_limit=1).launch(theme=gr.themes.Soft(), max_file_size="10mb", **kwargs)


demo = build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    launch()
