"""Regressions from the outside test run "Nothing lost, nothing silently wrong, every job finishes: round three".

One test per reported case, through public entry points only (the ``hf-adapters`` command line via
``hf_adapters.cli.main``, top-level ``hf_adapters`` names, the evaluate modules); each failed on the code it
was written against.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import logging
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
from datasets import Dataset, load_dataset

from hf_adapters import (
    add_ifd_column,
    add_perplexity_column,
    clear_model_cache,
    compute_ifd,
    compute_perplexity,
    load_model,
    model_identity,
    select,
)
from hf_adapters.cli import main
from tests.conftest import build_model, build_tokenizer, read_jsonl, write_jsonl

ISSUE = "issue: round three"

#: No white space at all: one "word" of many tokens, so the word perplexity is exp(total NLL) (> e^709 here).
LONG_CJK = "敏捷的棕色狐狸跳过了懒狗。猫在沙发上睡觉。" * 24


# --------------------------------------------------------------------------------------------------- helpers



def write_config(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def instruction_rows(count: int = 4) -> list[dict]:
    return [{"id": f"r{i}", "instruction": f"Say {i}.", "input": "", "output": "ab" * (i + 1)} for i in range(count)]


def saved_data(tmp_path: Path) -> Path:
    folder = tmp_path / "saved"
    Dataset.from_list(instruction_rows()).save_to_disk(str(folder))
    return folder


def ppl_config(tmp_path: Path) -> str:
    return write_config(tmp_path / "ppl.yaml", "name: PPLScorer\nmax_length: 64\nbatch_size: 2\n")


def table_rows(out: str, header: str) -> list[list[str]]:
    """The data lines of the text table whose header line starts with ``header``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


# ---------------------------------------------------------------- 1. data lost or changed in what we write


def test_select_writes_passed_through_floats_with_every_digit(tmp_path):
    reward, score = 0.123456789012345678, 1.0316780754743269
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "instruction": "q", "output": "a", "reward": reward},
                                                 {"id": "b", "instruction": "q", "output": "b", "reward": 0.5}])
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": score}, {"id": "b", "score": 0.25}])
    output = tmp_path / "selected.jsonl"
    assert main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1", "--output", str(output)]) == 0
    [row] = read_jsonl(output)
    assert row["reward"] == reward
    assert row["score"] == score


def test_score_echoes_csv_ids_as_they_are_written(tmp_path, model_dir):
    data = tmp_path / "rows.csv"
    data.write_text("id,instruction,input,output\n001,Say a.,,aa\n002,Say b.,,bb\n1e3,Say c.,,cc\n", encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    assert main(["score", ppl_config(tmp_path), "--data", str(data), "--output", str(output), "--model", model_dir,
                 "--no-progress"]) == 0
    assert [line["id"] for line in read_jsonl(output)] == ["001", "002", "1e3"]


def test_select_echoes_csv_ids_as_they_are_written(tmp_path):
    data = tmp_path / "rows.csv"
    data.write_text("id,instruction,output\n001,Say a.,aa\n002,Say b.,bb\n1e3,Say c.,cc\n", encoding="utf-8")
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "001", "score": 0.5}, {"id": "002", "score": 0.7},
                                                     {"id": "1e3", "score": 0.6}])
    output = tmp_path / "selected.jsonl"
    assert main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "3",
                 "--output", str(output)]) == 0
    assert [row["id"] for row in read_jsonl(output)] == ["001", "002", "1e3"]


@pytest.mark.parametrize("inside", ["data-00000-of-00001.arrow", "state.json"])
def test_score_refuses_an_output_inside_the_saved_data_folder(tmp_path, model_dir, capsys, inside):
    folder = saved_data(tmp_path)
    before = tree_digest(folder)
    assert (folder / inside).is_file()
    code = main(["score", ppl_config(tmp_path), "--data", str(folder), "--output", str(folder / inside),
                 "--model", model_dir, "--no-progress"])
    assert tree_digest(folder) == before
    assert code == 2 and "input" in capsys.readouterr().err


def test_select_refuses_an_output_inside_the_saved_data_folder(tmp_path, capsys):
    # state.json, not the .arrow file: select memory-maps the .arrow file and truncating it would crash pytest.
    folder = saved_data(tmp_path)
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": row["id"], "score": 0.5} for row in instruction_rows()])
    before = tree_digest(folder)
    code = main(["select", "--data", str(folder), "--scores", str(scores), "--top-n", "1",
                 "--output", str(folder / "state.json")])
    assert tree_digest(folder) == before
    assert code == 2 and "input" in capsys.readouterr().err


def test_score_refuses_the_config_as_its_output(tmp_path, model_dir, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows())
    config = ppl_config(tmp_path)
    before = Path(config).read_bytes()
    code = main(["score", config, "--data", str(data), "--output", config, "--model", model_dir, "--no-progress"])
    assert Path(config).read_bytes() == before
    err = capsys.readouterr().err
    assert code == 2 and ("config" in err or "input" in err)


def test_select_refuses_the_score_file_as_its_output(tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows())
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": row["id"], "score": 0.5} for row in instruction_rows()])
    before = scores.read_bytes()
    code = main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1", "--output", str(scores)])
    assert scores.read_bytes() == before
    err = capsys.readouterr().err
    assert code == 2 and ("score" in err or "input" in err)


@pytest.mark.parametrize("kind", ["timestamp", "bytes"])
def test_select_accepts_the_score_file_score_wrote_for_parquet_ids(tmp_path, model_dir, capsys, kind):
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = instruction_rows(3)
    ids = ([datetime.datetime(2024, 1, day) for day in (1, 2, 3)] if kind == "timestamp"
           else [f"r{i}".encode() for i in range(3)])
    table = pa.table({"id": pa.array(ids, type=pa.timestamp("us") if kind == "timestamp" else pa.binary()),
                      **{key: [row[key] for row in rows] for key in ("instruction", "input", "output")}})
    data = tmp_path / "rows.parquet"
    pq.write_table(table, data)
    scores, selected = tmp_path / "scores.jsonl", tmp_path / "selected.jsonl"
    code = main(["score", ppl_config(tmp_path), "--data", str(data), "--output", str(scores), "--model", model_dir,
                 "--no-progress"])
    if code != 0:  # refusing such ids up front, with a message, is also a fix
        assert "id" in capsys.readouterr().err
        return
    assert main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "2",
                 "--output", str(selected)]) == 0
    assert len(read_jsonl(selected)) == 2


# ----------------------------------------------------------------------------------------- 2. silently wrong

#: Two chat templates that render the same history differently; A refuses (raises) on a user turn holding
#: "BOOM", which stands in for a kill -9 of the first run after its first chunk.
TEMPLATE_A = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
              "{% if 'BOOM' in m.content %}{{ raise_exception('killed') }}{% endif %}{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEMPLATE_B = ("{% for m in messages %}### {{ m.role | upper }}: {{ m.content }}\n\n{% endfor %}"
              "{% if add_generation_prompt %}### ASSISTANT: {% endif %}")
CONVERSATIONS = [
    [{"role": "user", "content": "Write a short poem about the sea."}, {"role": "assistant", "content": "Waves."}],
    [{"role": "user", "content": "BOOM"}, {"role": "assistant", "content": "The quick brown fox."}],
]


def chat_model_dir(folder: Path, model, template: str) -> str:
    """The tiny model with a tokenizer whose chat template is ``template`` (saved as chat_template.jinja)."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = template
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert (folder / "chat_template.jinja").is_file()
    return str(folder)


@pytest.mark.parametrize("name", ["chat_template.jinja", "special_tokens_map.json", "added_tokens.json",
                                  "tokenizer_config.json"])
def test_model_identity_covers_every_file_that_changes_the_tokens(tmp_path, model, name):
    folder = Path(chat_model_dir(tmp_path / "m", model, TEMPLATE_A))
    before = model_identity(str(folder), dtype="float32", device="cpu")
    path = folder / name
    if name == "chat_template.jinja":
        path.write_text(TEMPLATE_B, encoding="utf-8")
    elif name == "tokenizer_config.json":
        config = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**config, "chat_template": TEMPLATE_B}), encoding="utf-8")
    else:
        path.write_text(json.dumps({"additional_special_tokens": ["<x>"]} if name.startswith("special")
                                   else {"<x>": 400}), encoding="utf-8")
    assert model_identity(str(folder), dtype="float32", device="cpu") != before


def test_a_conversation_job_does_not_resume_across_a_chat_template_change(tmp_path, model, capsys):
    folder = tmp_path / "chat-model"
    model_dir = chat_model_dir(folder, model, TEMPLATE_A)
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"c{i}", "messages": c} for i, c in enumerate(CONVERSATIONS)])
    config = write_config(tmp_path / "ifd.yaml", "name: IFDScorer\nturns: last\nmax_length: 128\nbatch_size: 1\n")
    output, fresh = tmp_path / "scores.jsonl", tmp_path / "fresh.jsonl"

    def score(path: Path) -> int:
        return main(["score", config, "--data", str(data), "--output", str(path), "--model", model_dir,
                     "--no-progress"])

    try:
        with pytest.raises(Exception, match="killed"):  # the first run dies after its first chunk
            score(output)
        assert not output.exists()
        (folder / "chat_template.jinja").write_text(TEMPLATE_B, encoding="utf-8")
        clear_model_cache()  # the next run is a new process
        code = score(output)
        if code != 0:  # refusing to mix with the old job's results is a fix
            assert "changed" in capsys.readouterr().err
            return
        assert score(fresh) == 0
        assert read_jsonl(output) == read_jsonl(fresh)
    finally:
        clear_model_cache(model_dir)


def test_load_model_sees_a_changed_chat_template_in_the_same_process(tmp_path, model):
    model_dir = chat_model_dir(tmp_path / "m", model, TEMPLATE_A)
    try:
        assert load_model(model_dir, dtype="float32", device="cpu")[1].chat_template == TEMPLATE_A
        (Path(model_dir) / "chat_template.jinja").write_text(TEMPLATE_B, encoding="utf-8")
        assert load_model(model_dir, dtype="float32", device="cpu")[1].chat_template == TEMPLATE_B
    finally:
        clear_model_cache(model_dir)


def test_add_ifd_column_recomputes_conversations_after_a_chat_template_change(tmp_path, model):
    model_dir = chat_model_dir(tmp_path / "m", model, TEMPLATE_B)
    source = write_jsonl(tmp_path / "rows.jsonl", [{"messages": CONVERSATIONS[0]}])
    ds = load_dataset("json", data_files=str(source), split="train", cache_dir=str(tmp_path / "cache"))
    options = {"messages_column": "messages", "model_id": model_dir, "dtype": "float32", "device": "cpu",
               "max_length": 128}
    try:
        first = add_ifd_column(ds, **options)["ifd"]
        (Path(model_dir) / "chat_template.jinja").write_text(
            TEMPLATE_B.replace("### ", ">> ").replace(": ", " says "), encoding="utf-8")
        clear_model_cache(model_dir)  # not what this test is about (see the load_model test)
        again = add_ifd_column(ds, **options)["ifd"]
        fresh = add_ifd_column(ds, load_from_cache_file=False, **options)["ifd"]
        assert fresh != pytest.approx(first)  # the template does change the score
        assert again == pytest.approx(fresh)
    finally:
        clear_model_cache(model_dir)


def cli_perplexity(model_dir: str, *files: str, extra: tuple[str, ...] = ()) -> int:
    return main(["perplexity", *files, "--model", model_dir, "--max-length", "64", "--no-progress", *extra])


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_perplexity_scores_the_bytes_of_a_file_as_they_are(tmp_path, model_dir, capsys, newline):
    text = newline.join(["The quick brown fox jumps over the lazy dog.", "Write a short poem about the sea.",
                         "Cats are small mammals.", ""])
    path = tmp_path / "doc.txt"
    path.write_bytes(text.encode("utf-8"))
    assert cli_perplexity(model_dir, str(path)) == 0
    [[_, size, tokens, perplexity, _]] = table_rows(capsys.readouterr().out, "file")
    expected = compute_perplexity([text], model_id=model_dir, max_length=64, stride=64, return_token_losses=True)
    as_lf = compute_perplexity([text.replace(newline, "\n")], model_id=model_dir, max_length=64, stride=64)
    assert f"{as_lf['perplexities'][0]:.3f}" != f"{expected['perplexities'][0]:.3f}"  # the test can tell them apart
    assert int(size) == len(text.encode("utf-8"))
    assert int(tokens) == len(expected["token_losses"][0])
    assert perplexity == f"{expected['perplexities'][0]:.3f}"


def test_perplexity_refuses_invalid_utf8_on_stdin_with_a_message(model_dir, capsys, monkeypatch):
    stdin = io.TextIOWrapper(io.BytesIO(b"valid text \xff\xfe then more"), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert cli_perplexity(model_dir, "-") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "UTF-8" in err


@pytest.mark.parametrize("bound", ["max_score", "min_score"])
def test_select_refuses_a_nan_bound(bound):
    ds = Dataset.from_dict({"id": ["a", "b"], "ifd": [0.5, 2.0]})
    with pytest.raises(ValueError, match="NaN|nan"):
        select(ds, "ifd", **{bound: float("nan")})


def test_select_command_refuses_a_nan_max_score(tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", instruction_rows(2))
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "r0", "score": 0.5}, {"id": "r1", "score": 2.0}])
    output = tmp_path / "selected.jsonl"
    try:
        code = main(["select", "--data", str(data), "--scores", str(scores), "--max-score", "nan",
                     "--output", str(output)])
    except SystemExit as exit_:  # refused by argparse
        code = exit_.code
    assert code == 2 and not output.exists()
    assert "nan" in capsys.readouterr().err.lower()


def test_a_template_without_input_is_refused_for_rows_with_an_input(model, tokenizer):
    with pytest.raises(ValueError, match=r"\{input\}"):
        compute_ifd(["Translate.", "Translate."], ["Bonjour.", "Bonjour."], ["Good morning.", "Hello."],
                    template="Q: {instruction}\nA: ", model=model, tokenizer=tokenizer)


def test_a_reverse_template_without_output_is_refused(model, tokenizer):
    with pytest.raises(ValueError, match=r"\{output\}"):
        compute_ifd(["Say hi."], ["Hi!"], direction="reverse", reverse_template="Write the instruction: ",
                    model=model, tokenizer=tokenizer)


def test_add_ifd_column_refuses_output_names_that_collide(model, tokenizer):
    ds = Dataset.from_dict({"instruction": ["Say hi."], "input": [""], "output": ["Hi!"]})
    with pytest.raises(ValueError, match="ppl_direct"):
        add_ifd_column(ds, ifd_column="ppl_direct", model=model, tokenizer=tokenizer)


def test_bfloat16_slower_than_float32_here_warns_with_the_measured_ratio(monkeypatch, tokenizer):
    from hf_adapters.backends.transformers import cpu_kernels

    # Proposed: the speed-up of bfloat16 over float32 on the model's own shapes, measured once per process.
    monkeypatch.setattr(cpu_kernels, "bfloat16_speedup", lambda *args, **kwargs: 0.54)
    for cached in ("warn_slow_bfloat16",):
        getattr(getattr(cpu_kernels, cached, None), "cache_clear", lambda: None)()
    model = build_model(len(tokenizer), seed=3).to(torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compute_perplexity(["The quick brown fox jumps over the lazy dog."], model=model, tokenizer=tokenizer)
    messages = [str(warning.message) for warning in caught]
    assert any("0.54" in message for message in messages), messages


# ---------------------------------------------------------------------------------- 3. jobs that never finish


def test_perplexity_of_a_long_text_without_white_space_gives_inf_word_perplexity(tmp_path, model_dir, capsys):
    path = tmp_path / "zho.txt"
    path.write_text(LONG_CJK, encoding="utf-8")
    assert cli_perplexity(model_dir, str(path), extra=("--stride", "32")) == 0
    [[word]] = [[row[1]] for row in table_rows(capsys.readouterr().out, "token perplexity")]
    assert word.lower() in ("inf", "infinity")


def test_corpus_perplexity_past_float_range_is_inf(model, tokenizer):
    sharp = copy.deepcopy(model)
    with torch.no_grad():
        sharp.get_output_embeddings().weight.mul_(1e4)  # confident and wrong: mean NLL far above 709
    result = compute_perplexity(["The quick brown fox jumps over the lazy dog."], model=sharp, tokenizer=tokenizer)
    assert result["perplexities"][0] == math.inf
    assert result["corpus_perplexity"] == math.inf


def test_a_score_job_with_stride_finishes_on_text_without_white_space(tmp_path, model_dir):
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "zh", "text": LONG_CJK}, {"id": "en", "text": "Cats."}])
    config = write_config(tmp_path / "ppl.yaml",
                          "name: PerplexityScorer\ntext_column: text\nmax_length: 64\nstride: 32\n")
    output = tmp_path / "scores.jsonl"
    assert main(["score", config, "--data", str(data), "--output", str(output), "--model", model_dir,
                 "--no-progress"]) == 0
    assert all(math.isfinite(line["score"]) for line in read_jsonl(output))


def test_token_loss_columns_survive_a_first_batch_of_empty_rows(model, tokenizer):
    ds = Dataset.from_dict({"text": [""] * 1000 + ["The quick brown fox."]})
    scored = add_perplexity_column(ds, text_column="text", return_token_losses=True, model=model,
                                   tokenizer=tokenizer)
    assert scored[1000]["token_losses"] and scored[1000]["tokens"]
    assert scored[0]["token_losses"] == []


def test_turn_ifd_survives_a_first_batch_of_unscorable_conversations(model, tokenizer, caplog):
    no_assistant = [{"role": "user", "content": "Hello?"}]
    ds = Dataset.from_dict({"messages": [no_assistant] * 1000 + [CONVERSATIONS[0]]})
    with caplog.at_level(logging.ERROR):  # 1,000 warnings, one per unscorable row
        scored = add_ifd_column(ds, messages_column="messages", model=model, tokenizer=tokenizer)
    assert len(scored[1000]["turn_ifd"]) == 1 and math.isfinite(scored[1000]["ifd"])
    assert scored[0]["turn_ifd"] == []


def test_perplexity_with_stride_caps_max_length_at_the_model_positions(tmp_path, model_dir, tokenizer, capsys):
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 80)
    assert len(tokenizer(text).input_ids) > 600  # longer than the model's 512 positions
    path = tmp_path / "long.txt"
    path.write_text(text, encoding="utf-8")
    code = main(["perplexity", str(path), "--model", model_dir, "--max-length", "2048", "--stride", "256",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Item" not in err


def test_stride_zero_has_one_meaning_on_the_command_line_and_in_the_metric(tmp_path, model_dir, capsys):
    import evaluate

    path = tmp_path / "doc.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. " * 10, encoding="utf-8")
    try:
        code = cli_perplexity(model_dir, str(path), extra=("--stride", "0"))
    except SystemExit as exit_:
        code = exit_.code
    metric = evaluate.load("./metrics/perplexity")
    try:
        metric.compute(predictions=[path.read_text(encoding="utf-8")], model_id=model_dir, max_length=64, stride=0)
        metric_refuses = False
    except (ValueError, TypeError):
        metric_refuses = True
    assert (code != 0) == metric_refuses, (code, metric_refuses, capsys.readouterr().err)
