"""The Spaces demo's building blocks without a server: input parsing, validation, outputs, Space files."""

from __future__ import annotations

import configparser
import csv
import importlib.util
import json
import math
import re
from pathlib import Path

import gradio
import pytest
import yaml

from tests.core.test_conversations import GOOD
from tests.spaces.spaces_fixtures import ROOT, SPACE, app_fixture, tiny_model_dir_fixture  # noqa: F401  (fixtures)


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_perplexity_text_is_one_text_per_line_or_jsonl(app):
    assert app.load_rows(app.PERPLEXITY, "first text\n\n second text \n", None) == (
        [{"text": "first text"}, {"text": " second text "}], "jsonl")
    rows, _ = app.load_rows(app.PERPLEXITY, '{"text": "two\\nlines", "id": 7}\n', None)
    assert rows == [{"text": "two\nlines", "id": 7}]


def test_ifd_text_accepts_jsonl_or_tab_separated_rows(app):
    rows, _ = app.load_rows(app.IFD, "Say hi.\tHi!\nTranslate.\tchat\tcat\n", None)
    assert rows == [{"instruction": "Say hi.", "output": "Hi!"},
                    {"instruction": "Translate.", "input": "chat", "output": "cat"}]
    rows, _ = app.load_rows(app.IFD, '{"instruction": "Say hi.", "output": "Hi!"}', None)
    assert rows == [{"instruction": "Say hi.", "output": "Hi!"}]


def test_parity_text_is_reference_tab_prediction(app):
    rows, _ = app.load_rows(app.PARITY, "Hello.\tBonjour.\n", None)
    assert rows == [{"reference": "Hello.", "prediction": "Bonjour."}]


def test_every_default_example_parses(app):
    for task in (app.PERPLEXITY, app.IFD, app.PARITY, app.IFEVAL):
        rows, fmt = app.load_rows(task, task.example, None)
        assert len(rows) >= 3 and fmt == "jsonl"


def test_an_upload_is_used_instead_of_the_text_box(app, tmp_path):
    path = write(tmp_path, "rows.jsonl", '{"text": "from the file"}\n')
    assert app.load_rows(app.PERPLEXITY, "from the box", path) == ([{"text": "from the file"}], "jsonl")


def test_csv_text_cells_stay_text_even_when_they_look_like_json(app, tmp_path):
    path = write(tmp_path, "rows.csv", 'text,id\n"[1, 2]",a\n"{not json",b\n')
    rows, _ = app.load_rows(app.PERPLEXITY, None, path)
    assert rows == [{"text": "[1, 2]", "id": "a"}, {"text": "{not json", "id": "b"}]


def test_csv_upload_decodes_the_ifeval_json_cells(app, tmp_path):
    row = app.IFEVAL.parse_text(app.IFEVAL.example)[0]
    with (tmp_path / "rows.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    rows, fmt = app.load_rows(app.IFEVAL, None, str(tmp_path / "rows.csv"))
    assert fmt == "csv" and rows == [row]


@pytest.mark.parametrize(
    ("task", "text", "message"),
    [
        ("PERPLEXITY", "", "Paste some rows"),
        ("PERPLEXITY", '{"text": "ok"}\n{broken', "Line 2 is not valid JSON"),
        ("PERPLEXITY", '{"prediction": "x"}', "Row 1 has no field 'text'"),
        ("PERPLEXITY", '{"text": 3}', "'text' must be a string"),
        ("IFD", "only one cell", "Line 1 has 1 tab-separated cell(s), expected 2 or 3"),
        ("PARITY", "a\tb\tc", "expected 2"),
        ("IFEVAL", '{"response": "hi", "kwargs": [{}]}', "Row 1 has no field 'instruction_id_list'"),
        ("IFEVAL", '["not", "an object"]', "is JSON but not an object"),
    ],
)
def test_bad_input_gets_a_message_naming_the_problem(app, task, text, message):
    with pytest.raises(app.InputError, match=re.escape(message)):
        app.load_rows(getattr(app, task), text, None)


def test_unsupported_upload_type_is_refused(app, tmp_path):
    with pytest.raises(app.InputError, match="Upload a .jsonl or .csv"):
        app.load_rows(app.PERPLEXITY, None, write(tmp_path, "rows.txt", "hello"))


def test_too_many_rows_are_refused(app):
    with pytest.raises(app.InputError, match="more than this demo scores"):
        app.load_rows(app.PERPLEXITY, "x\n" * (app.MAX_ROWS + 1), None)


def test_handler_turns_any_failure_into_a_short_ui_message(app):
    with pytest.raises(gradio.Error, match="Paste some rows"):
        app.perplexity_handler("", None, "any-model")
    with pytest.raises(gradio.Error, match="Enter a model id"):
        app.ifd_handler("Say hi.\tHi!", None, "  ")

    @app.readable_errors
    def broken():
        raise RuntimeError("the model ran out of memory")

    with pytest.raises(gradio.Error) as caught:
        broken()
    assert caught.value.message == "RuntimeError: the model ran out of memory"


def test_ifeval_unknown_instruction_is_a_ui_message(app):
    row = '{"response": "hi", "instruction_id_list": ["no:such_check"], "kwargs": [{}]}'
    with pytest.raises(gradio.Error, match="no:such_check"):
        app.ifeval_handler(row, None)


def test_scored_file_keeps_the_upload_format_and_writes_nan_as_null(app):
    rows = [{"text": "a", "perplexity": 2.5}, {"text": "", "perplexity": math.nan}]
    jsonl = app.write_scored(rows, "jsonl", "perplexity")
    assert [json.loads(line) for line in open(jsonl, encoding="utf-8")] == [
        {"text": "a", "perplexity": 2.5}, {"text": "", "perplexity": None}]
    with open(app.write_scored([{"ids": ["a", "b"], "ok": True}], "csv", "ifeval"), encoding="utf-8") as handle:
        assert list(csv.DictReader(handle)) == [{"ids": '["a", "b"]', "ok": "True"}]


def test_ifeval_outputs_agree_with_the_library(app):
    from hf_adapters.ifeval import compute_ifeval

    table, summary, chart, path = app.score_ifeval(app.IFEVAL.example, None)
    rows = app.IFEVAL.parse_text(app.IFEVAL.example)
    expected = compute_ifeval([row["response"] for row in rows], rows, detailed=True)
    for name in ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"):
        assert summary[name] == expected[name]
    assert summary["per_instruction"] == expected["per_instruction"]
    assert list(table["follow_all_instructions_strict"]) == [all(s) for s in expected["strict_follow_instruction_list"]]
    scored = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert [row["follow_instruction_list_loose"] for row in scored] == expected["loose_follow_instruction_list"]
    assert len(chart.axes[0].patches) == 2 * len(expected["per_instruction"])


def test_histogram_handles_rows_without_a_score(app):
    figure = app.histogram([math.nan, math.inf], "t", "x")
    assert "no finite scores" in [text.get_text() for text in figure.axes[0].texts]


def test_the_histogram_counts_rows_in_whole_numbers(app):
    figure = app.histogram([1.0, 2.0, 2.5], "t", "x")
    figure.canvas.draw()
    ticks = [tick for tick in figure.axes[0].get_yticks() if 0 <= tick <= figure.axes[0].get_ylim()[1]]
    assert len(ticks) >= 2 and all(tick == int(tick) for tick in ticks), ticks


def test_each_empty_score_table_shows_the_columns_its_example_is_scored_into(app, tiny_model_dir):
    tables = {block.elem_id: block for block in app.demo.blocks.values() if isinstance(block, gradio.Dataframe)}
    scored = [(task, app.score_with_model(task, task.example, None, tiny_model_dir)[0])
              for task in (app.PERPLEXITY, app.IFD, app.PARITY)]
    scored.append((app.IFEVAL, app.score_ifeval(app.IFEVAL.example, None)[0]))
    for task, table in scored:
        assert tables[f"{task.name}-table"].headers == app.table_headers(task) == list(table.columns)


def read_space_header() -> tuple[dict, str]:
    text = (SPACE / "README.md").read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n(.*)", text, re.DOTALL)
    assert match, "README.md must start with a YAML header between --- lines"
    return yaml.safe_load(match.group(1)), match.group(2)


def test_space_readme_has_the_spaces_header_for_the_tested_gradio(app):
    header, body = read_space_header()
    for key in ("title", "emoji", "colorFrom", "colorTo", "pinned", "license"):
        assert key in header
    assert header["sdk"] == "gradio" and header["app_file"] == "app.py"
    assert header["sdk_version"] == gradio.__version__
    assert {"evaluate", "metric"} <= set(header["tags"])
    for endpoint in ("/perplexity", "/ifd", "/information_parity", "/ifeval"):
        assert endpoint in body


def test_space_requirements_cover_the_library_runtime_dependencies():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    needed = {re.split(r"[<>=!~ \[]", line.strip())[0].lower().replace("_", "-")
              for line in setup["options"]["install_requires"].splitlines() if line.strip()}
    lines = (SPACE / "requirements.txt").read_text().splitlines()
    listed = {re.split(r"[<>=!~ \[]", line.strip())[0].lower().replace("_", "-")
              for line in lines if line.strip() and not line.startswith("#")}
    assert needed <= listed, f"missing from spaces_demo/requirements.txt: {sorted(needed - listed)}"
    assert "gradio" not in listed, "the Space installs gradio from sdk_version; do not pin it twice"


def test_scoring_reports_model_loading_to_the_progress_bar(app, tiny_model_dir):
    calls = []
    app.score_perplexity("Hello.", None, tiny_model_dir, lambda *args, **kwargs: calls.append((args, kwargs)))
    assert calls[0] == ((0,), {"desc": f"Loading {tiny_model_dir}"})


@pytest.fixture
def public_space(monkeypatch, tiny_model_dir):
    """The app as a public Space that lists the tiny model, keeping one model loaded."""
    monkeypatch.setenv("SPACE_ID", "someone/hf-adapters")
    monkeypatch.setenv("HF_ADAPTERS_SPACE_MODELS", tiny_model_dir)
    monkeypatch.setenv("HF_ADAPTERS_SPACE_MAX_MODELS", "1")
    return tiny_model_dir


def test_a_public_space_refuses_server_paths_with_one_message_that_reveals_nothing(app, public_space, tmp_path):
    messages = set()
    for path in ("/etc/passwd", "/etc", str(tmp_path / "no-such-model"), "../" + public_space):
        with pytest.raises(gradio.Error) as caught:
            app.perplexity_handler("Hello.", None, path)
        messages.add(caught.value.message.replace(repr(path), "PATH"))
    assert len(messages) == 1 and "Could not load model" in messages.pop()


def test_a_public_space_loads_listed_models_and_keeps_only_the_most_recent(app, public_space, monkeypatch):
    import space_models

    from hf_adapters.backends import loading as models

    space_models.check_allowed("HuggingFaceTB/SmolLM2-360M-Instruct")  # a hub id is accepted
    earlier = ("earlier/model", "float32", "cpu", False, ())
    monkeypatch.setitem(models._CACHE, earlier, (None, None))  # a model loaded by an earlier request
    monkeypatch.setitem(space_models._RECENT, "earlier/model", None)
    table, *_ = app.score_perplexity("Hello there.", None, public_space)
    assert len(table) == 1 and list(space_models._RECENT) == [public_space]
    assert earlier not in models._CACHE


def test_the_backend_choice_is_there_only_where_vllm_is_installed(app):
    offered = importlib.util.find_spec("vllm") is not None
    assert app.backend_choices() == ["transformers", "vllm"][:1 + offered]
    endpoints = {fn.api_name: [block.elem_id for block in fn.inputs] for fn in app.demo.fns.values()}
    assert endpoints["perplexity"] == ["perplexity-input", "perplexity-upload", "model-id", *["backend"] * offered]
    assert sum(inputs.count("backend") for inputs in endpoints.values()) == 6 * offered  # all that run the model


def test_a_backend_the_space_does_not_offer_is_refused_with_a_message(app, tiny_model_dir):
    with pytest.raises(gradio.Error, match="This Space has no 'ray' backend; choose transformers"):
        app.perplexity_handler("Hello.", None, tiny_model_dir, "ray")


def test_the_diverse_selection_on_vllm_says_it_needs_transformers(app, tiny_model_dir):
    path = app.write_scored([{"instruction": "Hi?", "input": "", "output": "Hello.", "ifd": 0.5}], "jsonl", "ifd")
    with pytest.raises(gradio.Error, match="needs the model's embeddings, which the vllm backend does not return"):
        app.diverse_select_handler(path, 50, True, 0.9, tiny_model_dir, None, "vllm")


def test_a_public_space_runs_only_its_listed_models_on_vllm(app, public_space, monkeypatch):
    import space_models

    monkeypatch.setattr(space_models, "backend_choices", lambda: ["transformers", "vllm"])
    with pytest.raises(gradio.Error, match="runs there only the models it lists"):
        app.perplexity_handler("Hello.", None, "HuggingFaceTB/SmolLM2-360M-Instruct", "vllm")


def test_the_ifd_tab_scores_pasted_conversations_turn_by_turn(app, tiny_model_dir):
    from hf_adapters.scorers import ConversationIFDScorer

    conversations = [[{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
                      {"role": "user", "content": "Another?"}, {"role": "assistant", "content": "Red."}],
                     [{"from": "human", "value": "Hi!"}, {"from": "gpt", "value": "Hello there."}]]
    pasted = "\n".join(json.dumps({"messages": conversation}) for conversation in conversations)
    table, summary, _, path = app.score_ifd(pasted, None, tiny_model_dir)
    expected = ConversationIFDScorer(model=tiny_model_dir, turns="all").result(conversations)
    assert list(table["ifd"]) == pytest.approx(expected["ifd_scores"], rel=1e-6)
    assert [len(turns) for turns in table["turn_ifd"]] == [2, 1] and summary["valid_rows"] == 2


def test_selected_rows_are_the_top_share_below_one_in_the_scored_files_format(app, tmp_path):
    rows = [{"instruction": f"q{i}", "ifd": score} for i, score in enumerate([0.5, 1.2, 0.9, None, 0.7])]
    scored = app.write_scored(rows, "jsonl", "ifd")
    picked = [json.loads(line) for line in open(app.select_scored(scored, 40, True), encoding="utf-8")]
    assert [row["instruction"] for row in picked] == ["q2", "q4"]  # 40% of 5 rows: the best two below 1
    with pytest.raises(app.InputError, match="Score some rows first"):
        app.select_scored(None, 25, True)


def test_token_view_colours_each_token_of_the_chosen_row_by_its_loss(app, tiny_model_dir):
    from hf_adapters.formulas.perplexity import compute_perplexity

    shown = app.tokens_handler("First text.\nSecond, longer text.", None, tiny_model_dir, 2)
    expected = compute_perplexity(["Second, longer text."], model_id=tiny_model_dir, return_token_losses=True)
    assert [token for token, _ in shown] == expected["tokens"][0]
    assert max(score for _, score in shown) == 1.0 and min(score for _, score in shown) > 0
    with pytest.raises(gradio.Error, match="pick a row from 1 to 2"):
        app.tokens_handler("a\nb", None, tiny_model_dir, 5)


def test_the_ifd_tab_gives_reverse_ifd_on_request(app, tiny_model_dir):
    from hf_adapters.formulas.ifd import compute_ifd

    rows = [{"instruction": "Name a colour.", "input": "", "output": "Blue."},
            {"instruction": "Translate.", "input": "chat", "output": "cat"}]
    table, summary, _, path, _ = app.ifd_handler("\n".join(json.dumps(row) for row in rows), None, tiny_model_dir,
                                                 "r-IFD")
    expected = compute_ifd([r["instruction"] for r in rows], [r["output"] for r in rows], [r["input"] for r in rows],
                           model_id=tiny_model_dir, direction="reverse")["ifd_scores"]
    assert list(table["r_ifd"]) == pytest.approx(expected, rel=1e-6)
    assert [json.loads(line)["r_ifd"] for line in open(path, encoding="utf-8")] == pytest.approx(expected, rel=1e-6)


def test_the_ifd_tab_passes_its_convention_to_the_scorer(app, tiny_model_dir):
    from hf_adapters.formulas.ifd import compute_ifd

    rows = [{"instruction": "Name a colour.", "input": "", "output": "Blue."},
            {"instruction": "Translate.", "input": "chat", "output": "cat"}]
    table, *_ = app.ifd_handler("\n".join(json.dumps(row) for row in rows), None, tiny_model_dir, "IFD",
                                "superfiltering")
    expected = compute_ifd([r["instruction"] for r in rows], [r["output"] for r in rows], [r["input"] for r in rows],
                           model_id=tiny_model_dir, convention="superfiltering")["ifd_scores"]
    assert list(table["ifd"]) == pytest.approx(expected, rel=1e-6)


def test_a_peer_convention_refuses_conversations_and_r_ifd_with_a_message(app, tiny_model_dir):
    pasted = json.dumps({"messages": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]})
    with pytest.raises(gradio.Error, match="does not score conversations: pick exact"):
        app.ifd_handler(pasted, None, tiny_model_dir, "IFD", "cherry")
    with pytest.raises(gradio.Error, match="need convention='exact'"):
        app.ifd_handler("Say hi.\tHi!", None, tiny_model_dir, "r-IFD", "cherry")


# 40% of the 7 rows, the checkbox off: exact takes 1.2 and 1.0; cherry drops 1.2 and takes 40% of the 5 rows
# left, of the tied 0.9s the later; superfiltering keeps only scores below 1, best first; opendataarena has no
# selection script of its own.
@pytest.mark.parametrize(("convention", "expected"), [("exact", ["q1", "q6"]), ("cherry", ["q1", "q5"]),
                                                      ("superfiltering", ["q2", "q5"]),
                                                      ("opendataarena", ["q1", "q6"])])
def test_selected_rows_follow_the_selection_convention_matching_the_ifd_convention(app, convention, expected):
    rows = [{"instruction": f"q{i}", "ifd": score} for i, score in enumerate([0.5, 1.0, 0.9, None, 0.7, 0.9, 1.2])]
    selected = app.select_handler(app.write_scored(rows, "jsonl", "ifd"), 40, False,
                                  {"direction": "IFD", "convention": convention})
    assert [json.loads(line)["instruction"] for line in open(selected, encoding="utf-8")] == expected


def test_select_rows_follows_the_settings_the_file_was_scored_with(app, tiny_model_dir):
    rows = [{"instruction": f"Question {i}?", "input": "", "output": f"Answer number {i}."} for i in range(4)]
    *_, path, scored_with = app.ifd_handler("\n".join(json.dumps(row) for row in rows), None, tiny_model_dir,
                                            "r-IFD", "exact")
    assert scored_with == {"direction": "r-IFD", "convention": "exact"}
    scores = [json.loads(line)["r_ifd"] for line in open(path, encoding="utf-8")]
    selected = app.select_handler(path, 50, False, scored_with)
    best_two = sorted(range(4), key=lambda i: -scores[i])[:2]
    assert [json.loads(line)["instruction"] for line in open(selected, encoding="utf-8")] == [
        rows[i]["instruction"] for i in sorted(best_two)]


def test_the_ifeval_tab_generates_for_a_chosen_prompt_and_checks_each_instruction(app, tiny_model_dir):
    from hf_adapters.backends import TransformersBackend
    from hf_adapters.backends.loading import load_model
    from hf_adapters.ifeval import compute_ifeval
    from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts

    table, summary, _, path = app.ifeval_generate_handler(1001, 0, 6, False, tiny_model_dir)
    [row] = [row for row in read_prompts() if row["key"] == 1001]
    backend = TransformersBackend(*load_model(tiny_model_dir))
    tokenizer = backend.tokenizer
    [tokens] = backend.generate(prompt_token_ids(tokenizer, [row]), max_new_tokens=6, progress=False)
    [scored] = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert scored["key"] == 1001 and scored["response"] == tokenizer.decode(tokens, skip_special_tokens=True)
    expected = compute_ifeval([scored["response"]], [row], detailed=True)
    assert scored["follow_instruction_list_strict"] == expected["strict_follow_instruction_list"][0]
    assert list(table["strict"]) == [" ".join("✓" if s else "✗" for s in expected["strict_follow_instruction_list"][0])]
    assert summary["model"] == tiny_model_dir and summary["generated_tokens"] == len(tokens) == 6


def test_the_ifeval_tab_generates_for_the_first_n_packaged_prompts_up_to_a_limit(app, tiny_model_dir):
    table, summary, *_ = app.ifeval_generate_handler(None, 3, 2, False, tiny_model_dir)
    assert list(table["key"]) == ["1000", "1001", "1005"] and summary["rows"] == 3
    with pytest.raises(gradio.Error, match="at most 20 prompts"):
        app.ifeval_generate_handler(None, 21, 2, False, tiny_model_dir)


def test_an_ifeval_command_samples_file_opens_in_the_ifeval_tab(app, tiny_model_dir, tmp_path):
    from hf_adapters import cli

    output = tmp_path / "run"
    assert cli.main(["ifeval", "--model", tiny_model_dir, "--limit", "3", "--max-new-tokens", "4",
                     "--output", str(output), "--no-progress"]) == 0
    samples = [json.loads(line) for line in open(output / "samples.jsonl", encoding="utf-8")]
    table, summary, _, path = app.ifeval_handler(None, str(output / "samples.jsonl"))
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    assert list(table["follow_all_instructions_strict"]) == [s["follow_all_instructions_strict"] for s in samples]
    assert summary["prompt_level_loose_acc"] == results["prompt_level_loose_acc"]
    rescored = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert [r["follow_instruction_list_loose"] for r in rescored] == [
        s["follow_instruction_list_loose"] for s in samples]


def test_diverse_selection_keeps_deitas_rows_and_draws_them(app, tiny_model_dir):
    from hf_adapters.backends.loading import load_model
    from hf_adapters.curation.diversity import diverse_selection
    from hf_adapters.formulas.embeddings import embed_texts

    rows = [{"instruction": f"Question {i}?", "input": "", "output": f"Answer {i}.", "ifd": score}
            for i, score in enumerate([0.9, 0.8, 0.7, 0.6])]
    path = app.write_scored(rows, "jsonl", "ifd")
    selected, figure = app.diverse_select_handler(path, 50, True, 0.5, tiny_model_dir, None)
    vectors = embed_texts([f"Question {i}?\nAnswer {i}." for i in range(4)], pooling="last",
                          model_id=tiny_model_dir)
    expected, _ = diverse_selection([0.9, 0.8, 0.7, 0.6], vectors, "deita", top=0.5, similarity_threshold=0.5,
                                    max_score=1.0)
    assert [json.loads(line)["instruction"] for line in open(selected, encoding="utf-8")] == [
        rows[i]["instruction"] for i in expected]
    assert len(figure.axes[0].collections) == 2 and load_model(tiny_model_dir)


def test_the_space_scores_sharegpt_conversations(app, tiny_model_dir):
    row = {"conversations": [{"from": "human", "value": GOOD[0]["content"]},
                             {"from": "gpt", "value": GOOD[1]["content"]}]}
    _, summary, _, _ = app.score_ifd(json.dumps(row), None, tiny_model_dir)
    assert summary["rows"] == 1 and summary["valid_rows"] == 1


def test_the_space_download_is_json_even_with_nan_turn_scores(app, tiny_model_dir):
    conversation = [GOOD[0], {"role": "assistant", "content": ""}, {"role": "user", "content": "Again."}, GOOD[1]]
    *_, path = app.score_ifd(json.dumps({"messages": conversation}), None, tiny_model_dir)

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    [row] = [json.loads(line, parse_constant=refuse) for line in Path(path).read_text().splitlines() if line]
    assert row["turn_ifd"][0] is None and math.isfinite(row["turn_ifd"][1])
