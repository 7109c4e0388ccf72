"""Gradio demo of hf_adapters: perplexity, IFD, Information Parity and IFEval in four tabs.

Each tab turns pasted text or an uploaded JSONL/CSV file into rows (:mod:`space_inputs`), scores
them with its metric's scorer from the library, and shows a per-row table, the summary numbers, a
chart and the scored file for download (:mod:`space_outputs`).

Run locally with ``python spaces_demo/app.py`` where ``hf_adapters`` is installed (in the Space,
its folder sits beside this file); ``GRADIO_SERVER_NAME`` and ``GRADIO_SERVER_PORT`` are honoured.
Script it with ``gradio_client`` through ``/perplexity``, ``/ifd``, ``/information_parity`` and
``/ifeval``. Which models the model box accepts: :mod:`space_models`. Where vLLM is installed a
*Backend* choice (``transformers`` or ``vllm``, the model endpoints' last input) says what runs the model.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

import gradio as gr
import pandas as pd
from space_diversity import diverse_select_scored
from space_generation import DEFAULT_NEW_TOKENS, MAX_NEW_TOKENS, MAX_PROMPTS, chosen_rows, generate_rows, prompt_choices
from space_inputs import (  # noqa: F401
    IFD,
    IFD_CONVENTION_INFO,
    IFEVAL,
    MAX_ROWS,
    PARITY,
    PERPLEXITY,
    InputError,
    Task,
    ifd_task,
    load_rows,
)
from space_models import DEFAULT_BACKEND, ModelRefused, backend_choices, load_allowed_backend
from space_outputs import clip, histogram, pass_rate_chart, write_scored  # noqa: F401
from space_tools import select_scored, token_losses

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, ModelLoadError
from hf_adapters.core.conventions import IFD_CONVENTIONS
from hf_adapters.files.json_values import json_safe
from hf_adapters.ifeval import RowResult, aggregate

logger = logging.getLogger(__name__)


def _model(model_id: str | None, progress: Callable | None,
           backend: str = DEFAULT_BACKEND) -> tuple[str, LikelihoodBackend]:
    """The model box's id and its model on ``backend``."""
    model_id = (model_id or "").strip()
    if not model_id:
        raise InputError("Enter a model id (e.g. HuggingFaceTB/SmolLM2-135M-Instruct) or a local path.")
    if progress is not None:
        progress(0, desc=f"Loading {model_id}")
    return model_id, load_allowed_backend(model_id, backend)


def score_with_model(task: Task, text: str | None, upload: str | None, model_id: str | None,
                     progress: Callable | None = None, backend: str = DEFAULT_BACKEND):
    """Score a model tab's rows on ``backend``: table, summary, histogram and scored file."""
    rows, fmt = load_rows(task, text, upload)
    task = task.for_rows(rows)
    model_id, scoring = _model(model_id, progress, backend)
    result = task.build_scorer(backend=scoring, progress=True).result_of_rows(rows)
    per_row = {name: result[key] for name, key in task.outputs.items()}
    first = next(iter(per_row))
    table = pd.DataFrame({
        "row": range(1, len(rows) + 1),
        **{column: [clip(row.get(column) or "", task.shown[column]) for row in rows]
           for column in shown_columns(task, rows)},
        **per_row,
    })
    summary = {"model": model_id, "backend": backend, "rows": len(rows),
               "valid_rows": sum(not math.isnan(value) for value in per_row[first]),
               **{key: json_safe(result[key]) for key in task.summary_keys}}
    scored = [{**row, **{name: values[i] for name, values in per_row.items()}} for i, row in enumerate(rows)]
    return table, summary, histogram(per_row[first], *task.chart), write_scored(scored, fmt, task.name)


def shown_columns(task: Task, rows: list[dict]) -> list[str]:
    """The input columns of a model tab's table: those the task shows that the rows have."""
    return [column for column in task.shown if any(column in row for row in rows)]


#: The columns of the IFEval tab's table (``prompt`` where the rows have one).
IFEVAL_COLUMNS = ("row", "key", "prompt", "response", "instructions", "strict", "loose",
                  "follow_all_instructions_strict", "follow_all_instructions_loose")


def table_headers(task: Task) -> list[str]:
    """The columns of a tab's table for its example rows: what the table shows before anything is scored."""
    if task is IFEVAL:
        return list(IFEVAL_COLUMNS)
    return ["row", *shown_columns(task, task.parse_text(task.example)), *task.outputs]


score_perplexity = functools.partial(score_with_model, PERPLEXITY)
score_ifd = functools.partial(score_with_model, IFD)
score_information_parity = functools.partial(score_with_model, PARITY)


def ifeval_outputs(rows: list[dict], fmt: str, extra_summary: dict | None = None):
    """IFEval strict and loose results of rows holding a ``response``: table, summary, per-instruction
    chart and scored file."""
    scorer = IFEVAL.scorer()
    results = scorer.score_batch(scorer.rows_to_batch(rows))
    scores = aggregate([RowResult(tuple(row["instruction_id_list"]), tuple(strict), tuple(loose))
                        for row, strict, loose in zip(rows, results["strict"], results["loose"], strict=True)],
                       detailed=True)
    marks = {True: "✓", False: "✗"}
    table = pd.DataFrame({
        "row": range(1, len(rows) + 1),
        "key": [str(row.get("key", "")) for row in rows],
        **({"prompt": [clip(row.get("prompt", ""), 40) for row in rows]} if any("prompt" in row for row in rows)
           else {}),
        "response": [clip(row["response"], 50) for row in rows],
        "instructions": [", ".join(row["instruction_id_list"]) for row in rows],
        "strict": [" ".join(marks[s] for s in strict) for strict in results["strict"]],
        "loose": [" ".join(marks[s] for s in loose) for loose in results["loose"]],
        "follow_all_instructions_strict": results["prompt_strict"],
        "follow_all_instructions_loose": results["prompt_loose"],
    })
    scored = [
        {**row, "follow_instruction_list_strict": strict, "follow_all_instructions_strict": all(strict),
         "follow_instruction_list_loose": loose, "follow_all_instructions_loose": all(loose)}
        for row, strict, loose in zip(rows, results["strict"], results["loose"], strict=True)
    ]
    summary = {**(extra_summary or {}), "rows": len(rows), "instructions": sum(len(s) for s in results["strict"])}
    summary.update({name: json_safe(v) for name, v in scores.items() if isinstance(v, float)})
    summary["per_instruction"] = scores["per_instruction"]
    return table, summary, pass_rate_chart(scores["per_instruction"]), write_scored(scored, fmt, IFEVAL.name)


def score_ifeval(text: str | None, upload: str | None, progress: Callable | None = None):
    """IFEval strict and loose results of each pasted or uploaded row (an ``hf-adapters ifeval``
    ``samples.jsonl`` too): table, summary, per-instruction chart and scored file."""
    rows, fmt = load_rows(IFEVAL, text, upload)
    if progress is not None:
        progress(0, desc="Checking instructions")
    return ifeval_outputs(rows, fmt)


def generate_ifeval(key: Any, first_n: Any, max_new_tokens: Any, strip: bool, model_id: str | None,
                    progress: Callable | None = None, backend: str = DEFAULT_BACKEND):
    """Generate the model's greedy responses on ``backend`` to a chosen packaged IFEval prompt (or the
    first N) and check them: the IFEval tab's outputs, the file in ``hf-adapters ifeval``'s samples format."""
    rows = chosen_rows(key, first_n)
    model_id, generating = _model(model_id, progress, backend)
    if progress is not None:
        progress(0, desc=f"Generating for {len(rows)} prompt(s)")
    rows = generate_rows(rows, generating, max_new_tokens, strip=bool(strip))
    return ifeval_outputs(rows, "jsonl", {"model": model_id, "backend": backend, "max_new_tokens": int(max_new_tokens),
                                          "generated_tokens": sum(row["generated_tokens"] for row in rows)})


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
            if isinstance(error, (ValueError, TypeError, ModelLoadError, ModelRefused)):
                logger.warning("%s: %s", function.__name__, message)
            else:
                logger.exception("%s failed", function.__name__)
                message = f"{type(error).__name__}: {message}"
            raise gr.Error(message, print_exception=False) from None

    return wrapper


# Gradio injects the progress tracker through a default argument of type gr.Progress.
def _model_handler(task: Task) -> Callable:
    @readable_errors
    def handler(text, upload, model_id, backend=DEFAULT_BACKEND, progress=gr.Progress(track_tqdm=True)):  # noqa: B008
        return score_with_model(task, text, upload, model_id, progress, backend)

    handler.__name__ = f"{task.name}_handler"
    return handler


perplexity_handler, parity_handler = (_model_handler(task) for task in (PERPLEXITY, PARITY))


@readable_errors
def ifd_handler(text, upload, model_id, direction="IFD", convention="exact", backend=DEFAULT_BACKEND,
                progress=gr.Progress(track_tqdm=True)):  # noqa: B008
    """The IFD tab's outputs, then the settings they were scored with, which Select rows follows
    whatever the controls say by then (a ``gr.State``: not part of the API endpoint's outputs)."""
    scored_with = {"direction": direction, "convention": convention}
    return *score_with_model(ifd_task(direction, convention), text, upload, model_id, progress, backend), scored_with


@readable_errors
def ifeval_handler(text, upload, progress=gr.Progress(track_tqdm=True)):  # noqa: B008
    return score_ifeval(text, upload, progress)


@readable_errors
def ifeval_generate_handler(key, first_n, max_new_tokens, strip, model_id, backend=DEFAULT_BACKEND,
                            progress=gr.Progress(track_tqdm=True)):  # noqa: B008
    return generate_ifeval(key, first_n, max_new_tokens, strip, model_id, progress, backend)


@readable_errors
def select_handler(scored_file, top_percent, below_one, scored_with=None):
    """The selected rows of the scored file, by the direction and convention it was scored with."""
    scored_with = scored_with or {}
    column = "r_ifd" if scored_with.get("direction") == "r-IFD" else "ifd"
    return select_scored(scored_file, top_percent, below_one, column, scored_with.get("convention", "exact"))


@readable_errors
def diverse_select_handler(scored_file, top_percent, below_one, threshold, model_id, scored_with=None,
                           backend=DEFAULT_BACKEND):
    """DEITA's diverse selection of the scored file on the model's embeddings (transformers only),
    and their 2-D picture."""
    if backend != DEFAULT_BACKEND:
        raise InputError(f"The diverse selection needs the model's embeddings, which the {backend} backend does not "
                         f"return: choose {DEFAULT_BACKEND} for it.")
    scored_with = scored_with or {}
    column = "r_ifd" if scored_with.get("direction") == "r-IFD" else "ifd"
    return diverse_select_scored(scored_file, top_percent, below_one, threshold, _model(model_id, None)[1],
                                 column=column, convention=scored_with.get("convention", "exact"))


@readable_errors
def tokens_handler(text, upload, model_id, row, backend=DEFAULT_BACKEND):
    return token_losses(text, upload, row, _model(model_id, None, backend)[1])


INTRO = """# hf_adapters: data-quality scores for language data
Exact, batched scores from one causal language model: **Perplexity** of texts, **IFD**
(Instruction-Following Difficulty) of instruction/response pairs, **Information Parity** of
translations against a reference, and **IFEval** instruction-following checks (no model needed; or
generate the model's responses to IFEval prompts first).
Paste a few rows or upload a JSONL/CSV file; an uploaded file is used instead of the text box.
"""

#: What the backend choice means.
BACKEND_INFO = ("vllm: the same scores, within float32 rounding, on a vLLM engine started once per model (some "
                "30 s on a CPU); the diverse selection needs transformers.")

TABS = [(PERPLEXITY, perplexity_handler), (IFD, ifd_handler), (PARITY, parity_handler), (IFEVAL, ifeval_handler)]


def _ifeval_generation(model_box: gr.Textbox, backend: list) -> tuple[gr.Button, list]:
    """The IFEval tab's second way in: the model in the model box answers packaged IFEval prompts.
    Returns its button and the button's inputs; the tab wires it to its outputs."""
    with gr.Accordion("…or generate responses with the model, then check them", open=False):
        gr.Markdown("Greedy responses of the model in the *Model* box to IFEval prompts shipped with the library "
                    "(one user turn of its chat template, stopping at the end of turn), checked as above: the same "
                    "generation as `hf-adapters ifeval`. The download is in that command's `samples.jsonl` format; "
                    "upload a `samples.jsonl` it wrote above to see its verdicts.")
        with gr.Row():
            choice = gr.Dropdown(prompt_choices(), value=prompt_choices()[0][1], label="IFEval prompt", scale=3,
                                 elem_id="ifeval-prompt")
            first_n = gr.Number(value=0, precision=0, minimum=0, maximum=MAX_PROMPTS, scale=1,
                                label=f"…or the first N prompts (0: the chosen one; at most {MAX_PROMPTS})",
                                elem_id="ifeval-first-n")
        with gr.Row():
            max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS, value=DEFAULT_NEW_TOKENS, step=1,
                                       label="Max new tokens (lm-eval's IFEval: 1280)", elem_id="ifeval-max-new-tokens")
            strip = gr.Checkbox(value=False, label="Remove a leading <think>…</think> block (reasoning models)",
                                elem_id="ifeval-strip-thinking")
        button = gr.Button("Generate and check", elem_id="ifeval-generate")
    return button, [choice, first_n, max_new_tokens, strip, model_box, *backend]


def _tab(task: Task, handler: Callable, model_box: gr.Textbox, backend: list) -> None:
    """One tab; ``backend`` holds the backend choice, where the Space offers one (the last input of
    everything that runs the model)."""
    with gr.Tab(task.title, id=task.name):
        gr.Markdown(f"{task.description}\n\n**Input:** {task.help}")
        with gr.Row():
            text = gr.Textbox(value=task.example, label="Rows", lines=8, max_lines=20, scale=3,
                              elem_id=f"{task.name}-input")
            upload = gr.File(label="…or upload a .jsonl / .csv file", file_types=[".jsonl", ".json", ".csv"],
                             scale=1, elem_id=f"{task.name}-upload")
        button = gr.Button("Score", variant="primary", elem_id=f"{task.name}-run")
        generation = _ifeval_generation(model_box, backend) if task is IFEVAL else None
        with gr.Row():
            summary = gr.JSON(label="Summary", elem_id=f"{task.name}-summary", scale=1)
            chart = gr.Plot(label="Chart", elem_id=f"{task.name}-chart", scale=2)
        table = gr.Dataframe(label="Scores per row", headers=table_headers(task), elem_id=f"{task.name}-table",
                             interactive=False, wrap=True)
        download = gr.File(label="Scored file", elem_id=f"{task.name}-download", interactive=False)
        inputs = [text, upload] + ([model_box] if task is not IFEVAL else [])
        if task is IFD:
            direction = gr.Radio(["IFD", "r-IFD"], value="IFD", elem_id="ifd-direction",
                                 label="IFD: how much the instruction helps predict the answer; r-IFD: how much "
                                       "the answer helps predict the instruction")
            convention = gr.Dropdown(list(IFD_CONVENTIONS), value="exact", label="Convention", info=IFD_CONVENTION_INFO,
                                     elem_id="ifd-convention")
            inputs += [direction, convention]
        if task is not IFEVAL:
            inputs += backend
        outputs = [table, summary, chart, download]
        if task is IFD:
            scored_with = gr.State(None)
            outputs.append(scored_with)
        button.click(handler, inputs=inputs, outputs=outputs, api_name=task.name)
        if generation is not None:
            generate, generate_inputs = generation
            generate.click(ifeval_generate_handler, inputs=generate_inputs, outputs=outputs, api_name=False)
        if task is IFD:
            with gr.Row():
                top = gr.Slider(1, 100, value=25, step=1, label="Keep the top % of rows by IFD", elem_id="ifd-top")
                below_one = gr.Checkbox(value=True, label="Drop rows with IFD above 1 first (Cherry_LLM; the "
                                        "cherry and superfiltering conventions always do)", elem_id="ifd-below-one")
                pick = gr.Button("Select rows", elem_id="ifd-select")
            selected = gr.File(label="Selected rows", elem_id="ifd-selected", interactive=False)
            pick.click(select_handler, inputs=[download, top, below_one, scored_with], outputs=selected,
                       api_name=False)
            with gr.Row():
                threshold = gr.Slider(0.5, 1.0, value=0.9, step=0.01, elem_id="ifd-threshold",
                                      label="Diverse: skip a row whose cosine similarity to a kept row is above this "
                                            "(DEITA: 0.9)")
                pick_diverse = gr.Button("Select a diverse subset (DEITA)", elem_id="ifd-select-diverse")
            with gr.Row():
                diverse = gr.File(label="Diverse rows", elem_id="ifd-diverse", interactive=False, scale=1)
                picture = gr.Plot(label="The rows' embeddings in 2-D, kept rows filled", elem_id="ifd-projection",
                                  scale=2)
            pick_diverse.click(diverse_select_handler,
                               inputs=[download, top, below_one, threshold, model_box, scored_with, *backend],
                               outputs=[diverse, picture], api_name=False)
        if task is PERPLEXITY:
            with gr.Row():
                row = gr.Number(value=1, precision=0, minimum=1, label="Row whose tokens to show")
                show = gr.Button("Show its tokens, coloured by loss", elem_id="perplexity-tokens")
            tokens = gr.HighlightedText(label="Tokens (darker: harder for the model)", elem_id="perplexity-token-view",
                                        show_legend=False)
            show.click(tokens_handler, inputs=[text, upload, model_box, row, *backend], outputs=tokens,
                       api_name=False)


def build_demo(default_model: str = DEFAULT_MODEL_ID) -> gr.Blocks:
    """The four-tab app; each Score button is an API endpoint named after its tab. The backend choice
    is there only where the Space offers more than transformers."""
    with gr.Blocks(title="hf_adapters scores") as demo:
        gr.Markdown(INTRO)
        choices = backend_choices()
        with gr.Row():
            model_box = gr.Textbox(value=default_model, elem_id="model-id", scale=3,
                                   label="Model for Perplexity, IFD, Information Parity and IFEval's generation")
            backend = [gr.Radio(choices, value=DEFAULT_BACKEND, label="Backend", elem_id="backend", scale=1,
                                info=BACKEND_INFO)] if len(choices) > 1 else []
        with gr.Tabs():
            for task, handler in TABS:
                _tab(task, handler, model_box, backend)
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
