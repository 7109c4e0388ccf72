"""``hf-adapters score CONFIG --data FILE --output FILE``: output file, overrides, summary line and errors."""

from __future__ import annotations

import datetime
import decimal
import errno
import json
import logging
import math
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hf_adapters import cli
from hf_adapters.cli import main
from hf_adapters.core.texts import ppl_text
from hf_adapters.engines.work_folder import work_dir_for
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.scorers import RowScorer, register_scorer
from tests.conftest import job_rows, read_jsonl, write_jsonl
from tests.curation.test_selection import refused_with_a_message
from tests.engines.test_local import make_rows


@register_scorer
class OutputLengthScorer(RowScorer):
    """len(output), NaN when it is empty; records the chunk sizes it is given, and its batch size."""

    name = "OutputLengthScorer"
    options = {"model": "none", "batch_size": 4}
    required_fields = ("output",)
    chunks: list[int] = []
    batch_sizes: list[int] = []

    def score_rows(self, rows):
        OutputLengthScorer.chunks.append(len(rows))
        OutputLengthScorer.batch_sizes.append(self.config["batch_size"])
        return [float(len(row["output"])) if row["output"] else float("nan") for row in rows]


@pytest.fixture
def data(tmp_path):
    rows = [{"id": i, "instruction": "Repeat.", "input": "", "output": "ab" * (i % 3)} for i in range(10)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def config(tmp_path, text="name: OutputLengthScorer\n"):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_writes_one_line_per_row_and_prints_a_summary(tmp_path, data, capsys):
    output = tmp_path / "out" / "scores.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 0
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert lines == [{"id": i, "score": [None, 2.0, 4.0][i % 3]} for i in range(10)]
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("10 rows, 6 valid scores, ") and summary.endswith(" rows/s")
    assert sorted(p.name for p in output.parent.iterdir()) == ["scores.jsonl"]


def test_batch_size_and_model_flags_override_the_config(tmp_path, data):
    OutputLengthScorer.chunks.clear()
    OutputLengthScorer.batch_sizes.clear()
    args = ["score", config(tmp_path), "--data", str(data), "--output", str(tmp_path / "o.jsonl"), "--no-progress"]
    assert cli.main([*args, "--batch-size", "3", "--model", "other", "--save-every", "4"]) == 0
    assert OutputLengthScorer.chunks == [4, 4, 2] and OutputLengthScorer.batch_sizes == [3, 3, 3]


@pytest.mark.parametrize(
    "config_text,flags,message",
    [
        ("name: NoSuchScorer\n", [], r"error: Unknown scorer 'NoSuchScorer'; valid scorers: .*'OutputLengthScorer'"),
        ("name: OutputLengthScorer\ntemperature: 2\n", [], r"error: Unknown key\(s\) \['temperature'\] .*valid keys"),
        ("- just a list\n", [], r"error: .*a config is a YAML mapping with a `name` key"),
        ("name: OutputLengthScorer\n", ["--data", "missing.jsonl"], r"error: Data file .*missing.jsonl. does not"),
    ],
)
def test_config_and_data_errors_exit_2_with_a_message_and_no_traceback(tmp_path, data, capsys, config_text,
                                                                       flags, message):
    output = tmp_path / "o.jsonl"
    argv = ["score", config(tmp_path, config_text), "--data", str(data), "--output", str(output), *flags]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(message, err)
    assert not output.exists()


def test_a_row_missing_a_field_is_named_and_nothing_is_written(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "x1", "output": "a"}\n{"id": "x2", "instruction": "b"}\n', encoding="utf-8")
    output = tmp_path / "o.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(path), "--output", str(output)]) == 2
    assert "error: Row 1 (id='x2') has no field 'output'." in capsys.readouterr().err
    assert not output.exists() and not (tmp_path / "o.jsonl.parts").exists()


def test_a_changed_config_is_refused_until_overwrite(tmp_path, data, capsys):
    output = tmp_path / "o.jsonl"
    parts = tmp_path / "o.jsonl.parts"
    parts.mkdir()
    (parts / "manifest.json").write_text(json.dumps({"scorer": {"name": "OutputLengthScorer", "batch_size": 9},
                                                     "rows": 10, "chunk_size": 9}))
    (parts / "rank-00000.jsonl").write_text("".join(json.dumps({"i": i, "id": i, "score": 1.0}) + "\n"
                                                    for i in range(9)))  # one chunk saved
    args = ["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "holds partial results of a different job: the scorer config changed" in err and "--overwrite" in err
    assert cli.main([*args, "--overwrite"]) == 0 and output.exists() and not parts.exists()


def test_batch_size_must_be_positive(tmp_path, data, capsys):
    with pytest.raises(SystemExit):
        cli.main(["score", config(tmp_path), "--data", str(data), "--output", "o.jsonl", "--batch-size", "0"])
    assert "must be at least 1" in capsys.readouterr().err


def test_batch_size_none_lifts_the_configs_row_cap_and_max_batch_tokens_sets_the_token_budget(tmp_path, data,
                                                                                               model_dir, capsys):
    """Issue 59: the seed configs' ``batch_size: 16`` capped rows on a GPU and the command line could not
    lift it (``none`` and 0 were refused); the token budget could not be given there at all."""
    from hf_adapters.cli import build_parser
    from hf_adapters.cli.score_command import planned

    seed = config(tmp_path, f"name: PPLScorer\nmodel: {model_dir}\nbatch_size: 16\n")
    args = ["score", seed, "--data", str(data), "--output", str(tmp_path / "o.jsonl"), "--no-progress"]
    _, as_configured = planned(build_parser().parse_args(args))
    _, lifted = planned(build_parser().parse_args([*args, "--batch-size", "none", "--max-batch-tokens", "64"]))
    assert as_configured.config["batch_size"] == 16 and "batch_size" not in lifted.config
    backend = lifted.build_scorer().load()
    assert backend.batch_limits().rows == 16 and backend.batch_limits().tokens == 64  # the CPU's default rows
    assert cli.main([*args, "--batch-size", "none", "--max-batch-tokens", "64"]) == 0
    capsys.readouterr()
    assert cli.main([*args, "--max-batch-tokens", "128"]) == 0  # neither is part of the job
    assert "nothing to do" in capsys.readouterr().out


def test_batch_size_zero_is_refused_saying_none_lifts_the_cap(tmp_path, data, capsys):
    with pytest.raises(SystemExit):
        cli.main(["score", config(tmp_path), "--data", str(data), "--output", "o.jsonl", "--batch-size", "0"])
    assert "must be at least 1, got 0, or none (no row cap" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["IFDScorer", "PPLScorer"])
def test_seed_configs_on_the_command_line_give_the_metric_numbers(tmp_path, model, tokenizer, name):
    model_dir = tmp_path / "tiny"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = [
        {"id": "a", "instruction": "Write a poem about the sea.", "input": "", "output": "The sea is wide."},
        {"id": "b", "instruction": "Summarise:", "input": "Cats are small mammals.", "output": "Cats."},
        {"id": "c", "instruction": "Say nothing.", "input": "", "output": ""},
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    args = ["score", config(tmp_path, f"name: {name}\nmax_length: 256\nbatch_size: 2\n"), "--data", str(data),
            "--output", str(output), "--model", str(model_dir), "--no-progress"]
    assert cli.main(args) == 0
    scores = [json.loads(line)["score"] for line in output.read_text().splitlines()]
    if name == "IFDScorer":
        expected = compute_ifd([r["instruction"] for r in rows], [r["output"] for r in rows],
                               [r["input"] for r in rows], max_length=256, model=model, tokenizer=tokenizer)
        expected = expected["ifd_scores"]
    else:
        texts = [ppl_text(r["instruction"], r["input"], r["output"]) for r in rows]
        expected = compute_perplexity(texts, max_length=256, model=model, tokenizer=tokenizer)["perplexities"]
    assert scores[:2] == pytest.approx(expected[:2], rel=1e-5)
    assert (scores[2] is None) == (name == "IFDScorer")


def test_a_config_convention_reaches_the_ifd_scorer(tmp_path, model, tokenizer):
    model_dir = tmp_path / "tiny"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = [{"id": "a", "instruction": "Write a poem about the sea.", "input": "", "output": "The sea is wide."},
            {"id": "b", "instruction": "Summarise:", "input": "Cats are small mammals.", "output": "Cats."}]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    args = ["score", config(tmp_path, "name: IFDScorer\nconvention: superfiltering\nmax_length: 256\n"),
            "--data", str(data), "--output", str(output), "--model", str(model_dir), "--no-progress"]
    assert cli.main(args) == 0
    expected = compute_ifd([r["instruction"] for r in rows], [r["output"] for r in rows], [r["input"] for r in rows],
                           max_length=256, convention="superfiltering", model=model, tokenizer=tokenizer)
    scores = [json.loads(line)["score"] for line in output.read_text().splitlines()]
    assert scores == pytest.approx(expected["ifd_scores"], rel=1e-5)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_an_output_that_is_not_a_regular_file_is_refused_and_left_alone(tmp_path, data, capsys, kind):
    output = Path("/dev/null") if kind == "device" else tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(output)
    elif kind == "directory":
        output.mkdir()
    before = output.stat().st_mode
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert output.stat().st_mode == before


@pytest.mark.parametrize("through_link", [False, True])
def test_the_input_data_as_output_is_refused_before_anything_is_scored(tmp_path, data, capsys, through_link):
    before = data.read_bytes()
    output = data
    if through_link:
        output = tmp_path / "link.jsonl"
        output.symlink_to(data)
    OutputLengthScorer.chunks.clear()
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 2
    assert "is the input data" in capsys.readouterr().err
    assert data.read_bytes() == before and OutputLengthScorer.chunks == []


def test_an_output_folder_that_is_a_file_is_a_clear_error(tmp_path, data, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    output = blocker / "sub" / "scores.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_a_leftover_work_folder_without_a_saved_row_does_not_refuse_another_job(tmp_path, data, capsys):
    """A work folder whose job saved no row (killed while scoring its first chunk, or left by an
    earlier version's refusal) holds nothing to lose: a different job starts afresh over it.

    Round five, item 10.
    """
    parts = tmp_path / "o.jsonl.parts"
    parts.mkdir()
    (parts / "manifest.json").write_text(json.dumps({"scorer": {"name": "OutputLengthScorer", "batch_size": 9},
                                                     "rows": 10, "chunk_size": 9}))
    (parts / "rank-00000.jsonl").write_text('{"i": 0, "id": 0, "score": 1.0}\n')  # a torn first chunk
    output = tmp_path / "o.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]) == 0
    assert len(output.read_text().splitlines()) == 10 and not parts.exists()


def test_an_excess_loss_job_refused_for_its_reference_leaves_nothing_behind(tmp_path, data, model_dir, capsys):
    """A reference model with another tokenizer is refused before any row is scored, and leaves no work
    folder, so the corrected command runs instead of being refused as "a different job".

    Round five, item 10.
    """
    from tests.conftest import build_model, build_tokenizer

    other = build_tokenizer(bos=False)
    reference = tmp_path / "reference"
    build_model(len(other)).save_pretrained(reference)
    other.save_pretrained(reference)
    output = tmp_path / "o.jsonl"

    def run(reference_model: str) -> int:
        settings = f"name: ExcessLossScorer\nmodel: {model_dir}\nreference_model: {reference_model}\nmax_length: 32\n"
        return cli.main(["score", config(tmp_path, settings), "--data", str(data), "--output", str(output),
                         "--no-progress"])

    assert run(str(reference)) == 2
    assert "different vocabularies" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config.yaml", "reference", "rows.jsonl"]
    assert run(model_dir) == 0, capsys.readouterr().err
    assert len(output.read_text().splitlines()) == 10


@pytest.mark.parametrize("value", ["5", "true", "{ppl_direct: 1}", "[1, 2]"])
def test_a_config_score_columns_of_another_type_is_one_error_naming_the_key(tmp_path, data, capsys, value):
    """``score_columns: 5`` (or ``true``) in a config was a TypeError traceback: it is one error line
    naming the key and what it takes.

    Round five, item 20.
    """
    path = config(tmp_path, f"name: OutputLengthScorer\nscore_columns: {value}\n")
    assert cli.main(["score", path, "--data", str(data), "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: `score_columns` takes all, an output name or a list of the scorer's "
                          "output names") and len(err.splitlines()) == 1, err


def test_a_config_score_columns_may_name_outputs_as_the_flag_does(tmp_path, data, capsys):
    """``score_columns: all``, names separated by commas or a list of them read as ``--score-columns``
    reads them (a name the scorer lacks is then refused as such).

    Round five, item 20.
    """
    path = config(tmp_path, "name: OutputLengthScorer\nscore_columns: all\n")
    assert cli.main(["score", path, "--data", str(data), "--output", str(tmp_path / "o.jsonl"), "--no-progress"]) == 0
    for value in ("ppl_direct, extra", "[ppl_direct, extra]"):
        path = config(tmp_path, f"name: OutputLengthScorer\nscore_columns: {value}\n")
        assert cli.main(["score", path, "--data", str(data), "--output", str(tmp_path / "o.jsonl")]) == 2
        assert "The scorer has no output 'ppl_direct', 'extra'" in capsys.readouterr().err


def test_a_rerun_of_a_finished_job_skips_it_saying_so_and_overwrite_scores_it_again(tmp_path, data, capsys):
    """The same command on its finished, unchanged output does nothing, in one line, exit 0;
    ``--overwrite`` scores it again, and so does a rerun once the output or the data changed.

    Round five, item 21.
    """
    output = tmp_path / "o.jsonl"
    args = ["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress"]
    assert cli.main(args) == 0
    first = output.read_bytes()
    capsys.readouterr()
    OutputLengthScorer.chunks.clear()
    assert cli.main([*args, "--batch-size", "3"]) == 0  # the batch size is no part of the job
    assert OutputLengthScorer.chunks == [] and output.read_bytes() == first
    assert capsys.readouterr().out.splitlines() == [
        f"{output} is already this job's complete output (10 rows, 6 valid scores): nothing to do. "
        "Pass --overwrite to score it again."]
    assert cli.main([*args, "--overwrite"]) == 0 and OutputLengthScorer.chunks == [10]
    assert capsys.readouterr().out.startswith("10 rows, 6 valid scores, ")
    OutputLengthScorer.chunks.clear()
    output.write_bytes(first.replace(b"2.0", b"7.0"))  # the output edited since: scored again
    assert cli.main(args) == 0 and OutputLengthScorer.chunks == [10] and output.read_bytes() == first
    OutputLengthScorer.chunks.clear()
    data.write_text(data.read_text() + json.dumps({"id": 10, "output": "abc"}) + "\n")
    assert cli.main(args) == 0 and OutputLengthScorer.chunks == [11]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
@pytest.mark.parametrize("streaming", [[], ["--streaming"]], ids=["in_memory", "streaming"])
def test_rows_without_ids_are_written_with_their_row_numbers_and_kept_rows_get_no_id(tmp_path, capsys, kind,
                                                                                      streaming):
    """Rows without an id were written with ``"id": ""`` (no label in ``compare``, no join by id
    possible): they get their row number. ``--keep-columns`` writes the rows as they are, without an
    ``id`` they never had.

    Round five, items 6 and 20.
    """
    import pyarrow.parquet as pq

    rows = [{"instruction": "Repeat.", "output": "ab" * (i % 3)} for i in range(5)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    def scored(*extra: str) -> list[dict]:
        output = tmp_path / f"o{len(list(tmp_path.glob('o*')))}"
        args = ["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress",
                "--output-format", kind, "--rows-per-shard", "2", *streaming, *extra]
        assert cli.main(args) == 0, capsys.readouterr().err
        if kind == "parquet":
            return [row for shard in sorted(output.iterdir()) for row in pq.read_table(shard).to_pylist()]
        return [json.loads(line) for line in output.read_text().splitlines()]

    scores = [None, 2.0, 4.0, None, 2.0]
    assert scored() == [{"id": i, "score": score} for i, score in enumerate(scores)]
    assert scored("--keep-columns") == [{**row, "score": score} for row, score in zip(rows, scores, strict=True)]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
@pytest.mark.parametrize("streaming", [[], ["--streaming"]], ids=["in_memory", "streaming"])
def test_an_id_above_2_63_in_jsonl_is_written_back_exactly_and_the_others_stay_integers(tmp_path, capsys, kind,
                                                                                         streaming):
    """One id above ``2**63`` turned the whole id column into floats (``12345678901234567890`` ->
    ``1.2345678901234567e+19``, ``5`` -> ``5.0``): every id is written as it was, with the rows'
    columns too.

    Round five, item 7.
    """
    import pyarrow.parquet as pq

    ids = [5, 12345678901234567890, 7]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": value, "output": "ab"}) + "\n" for value in ids), encoding="utf-8")
    for keep in ([], ["--keep-columns"]):
        output = tmp_path / f"o{len(keep)}"
        assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress",
                         "--output-format", kind, *streaming, *keep]) == 0, capsys.readouterr().err
        if kind == "jsonl":
            assert [line.split(",")[0] for line in output.read_text().splitlines()] == [
                '{"id": 5', '{"id": 12345678901234567890', '{"id": 7']
        else:
            assert pq.read_table(output).column("id").to_pylist() == ids


def test_a_score_file_of_rows_without_ids_joins_to_its_data_by_row_number(tmp_path, capsys):
    """``select`` joins a score file to rows without ids by their numbers, and writes the selected
    rows as they were read (without an ``id`` they never had), with their row number (issue 59).

    Round five, item 6.
    """
    rows = [{"instruction": "Repeat.", "output": "ab" * i} for i in range(1, 5)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    scores, selected = tmp_path / "scores.jsonl", tmp_path / "selected.jsonl"
    assert cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(scores), "--no-progress"]) == 0
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "2",
                     "--output", str(selected)]) == 0, capsys.readouterr().err
    assert [json.loads(line) for line in selected.read_text().splitlines()] == [
        {**rows[2], "row_number": 2, "score": 6.0}, {**rows[3], "row_number": 3, "score": 8.0}]
    shuffled = [json.loads(line) for line in scores.read_text().splitlines()][::-1]
    scores.write_text("".join(json.dumps(line) + "\n" for line in shuffled), encoding="utf-8")
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "2",
                     "--output", str(selected)]) == 2
    assert "Row 0: the data's id 0 differs from the score file's 3" in capsys.readouterr().err


# --- From the round-four review: what ``--keep-columns`` writes, where a job may write, and rows named in
# warnings ------------------------------------------------------------------------------------------------------

def parquet_rows(tmp_path, table: pa.Table, name: str = "rows.parquet"):
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    pq.write_table(table, folder / name)
    return folder / name


def score(tmp_path, data, output, *extra) -> int:
    return cli.main(["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress", *extra])


def read_parquet_folder(folder) -> pa.Table:
    return pa.concat_tables([pq.read_table(path) for path in sorted(folder.glob("part-*.parquet"))])


TYPED = pa.table({
    "id": pa.array(["a", "b", "c"]),
    "output": pa.array(["xx", "", "yyy"]),
    "when": pa.array([1_000_000_001, 2_000_000_002, 3], pa.timestamp("ns")),
    "small": pa.array([1, -2, 3], pa.int8()),
    "counts": pa.array([[1], [2, 3], []], pa.list_(pa.int32())),
    "price": pa.array([decimal.Decimal("1.50"), decimal.Decimal("22.25"), None], pa.decimal128(10, 2)),
    "label": pa.array(["cat", "dog", "cat"]).dictionary_encode(),
    "big": pa.array([2**63 + 5, 1, 2**64 - 1], pa.uint64()),
})


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_kept_parquet_columns_keep_their_types_and_values(tmp_path, streaming):
    """From the round-four review, cases 2 and 3."""
    data = parquet_rows(tmp_path, TYPED)
    output = tmp_path / "scores"
    assert score(tmp_path, data, output, "--output-format", "parquet", "--keep-columns", "--rows-per-shard", "2",
                 *streaming) == 0
    table = read_parquet_folder(output)
    assert table.schema.remove_metadata() == TYPED.schema.append(pa.field("score", pa.float64()))
    assert table.drop_columns(["score"]).to_pylist() == TYPED.to_pylist()
    assert table.column("score").to_pylist() == [2.0, None, 3.0]


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
@pytest.mark.parametrize("late", [["x"], {"k": 1}, "text"])
def test_a_column_empty_in_the_first_shard_and_filled_later_is_written(tmp_path, streaming, late):
    """From the round-four review, cases 2 and 3."""
    rows = [{"id": f"r{i}", "output": "ab", "extra": (late if i >= 5 else None)} for i in range(8)]
    rows[1]["extra"] = [] if isinstance(late, list) else rows[1]["extra"]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    output = tmp_path / "scores"
    assert score(tmp_path, data, output, "--output-format", "parquet", "--keep-columns", "--rows-per-shard", "2",
                 *streaming) == 0
    assert read_parquet_folder(output).column("extra").to_pylist() == [row["extra"] for row in rows]
    assert not (tmp_path / "scores.tmp").exists()


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_jsonl_keeps_the_rows_columns_both_ways(tmp_path, streaming):
    """From the round-four review, cases 2 and 3."""
    rows = [{"id": f"r{i}", "output": "ab", "extra": (["x"] if i >= 5 else None)} for i in range(8)]
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, write_jsonl(tmp_path / "rows.jsonl", rows), output, "--keep-columns", *streaming) == 0
    assert read_jsonl(output) == [{**row, "score": 2.0} for row in rows]


@pytest.mark.parametrize("streaming", [[], ["--streaming"]], ids=["in_memory", "streaming"])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_kept_columns_keep_integers_above_2_63_and_nan_and_infinity_as_they_were_read(tmp_path, streaming, kind):
    """``--keep-columns`` turned a column of integers holding one above ``2**63`` into floats (``1`` ->
    ``1.0``) and a kept NaN or infinity into ``null``: every value is written as it was read (NaN and
    infinities as JSON's ``NaN``/``Infinity`` tokens, which Python's json reads back), while a missing
    score stays ``null``.

    Issue 59.
    """
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "output": "ab", "big": 1, "x": NaN}\n'
                    '{"id": "b", "output": "", "big": 18446744073709551615, "x": Infinity}\n'
                    '{"id": "c", "output": "ab", "big": 3, "x": -Infinity}\n', encoding="utf-8")
    output = tmp_path / "scores"
    assert score(tmp_path, data, output, "--keep-columns", "--output-format", kind, *streaming) == 0
    if kind == "jsonl":
        lines = output.read_text(encoding="utf-8").split("\n")
        assert lines[:3] == ['{"id": "a", "output": "ab", "big": 1, "x": NaN, "score": 2.0}',
                             '{"id": "b", "output": "", "big": 18446744073709551615, "x": Infinity, "score": null}',
                             '{"id": "c", "output": "ab", "big": 3, "x": -Infinity, "score": 2.0}']
    else:
        table = read_parquet_folder(output)
        assert table.column("big").to_pylist() == [1, 2**64 - 1, 3]
        assert str(table.column("x").to_pylist()) == "[nan, inf, -inf]"


@pytest.mark.parametrize("keep", [[], ["--keep-columns"]], ids=["ids", "kept_rows"])
def test_a_whole_number_id_among_fractional_ones_is_written_as_the_integer_it_was(tmp_path, keep):
    """Ids ``1.5`` and ``2`` in one column were written as ``1.5`` and ``2.0``.

    Issue 59.
    """
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": value, "output": "ab"} for value in (1.5, 2, -3)])
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, data, output, *keep) == 0
    assert [line.split(",")[0] for line in output.read_text().splitlines()] == ['{"id": 1.5', '{"id": 2', '{"id": -3']


@pytest.mark.parametrize("streaming", [[], ["--streaming"]], ids=["in_memory", "streaming"])
@pytest.mark.parametrize("kind,place", [("jsonl", "Line 2"), ("parquet", "Row 1 of the file")])
@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_or_infinite_id_is_refused_before_scoring_naming_its_file_and_row(tmp_path, capsys, streaming, kind,
                                                                                  place, bad):
    """A NaN or infinite id passed the checks, then stopped every run at the same chunk with ``Out of
    range float values are not JSON compliant``, naming no row.

    Issue 59.
    """
    OutputLengthScorer.chunks.clear()
    text = f'{{"id": 1.5, "output": "ab"}}\n{{"id": {bad}, "output": "ab"}}\n'
    data = tmp_path / "rows.jsonl"
    data.write_text(text, encoding="utf-8")
    if kind == "parquet":
        data = parquet_rows(tmp_path, pa.Table.from_pylist([json.loads(line) for line in text.splitlines()]))
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, data, output, *streaming) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: Cannot read {str(data)!r} as {'json' if kind == 'jsonl' else kind}: {place}: the id {bad} is not a "
        "number (NaN and infinities name no row); give the row an id."]
    assert OutputLengthScorer.chunks == [] and not output.exists()


@pytest.mark.parametrize("streaming", [[], ["--streaming"]], ids=["in_memory", "streaming"])
def test_a_nan_id_of_a_saved_data_set_is_refused_naming_its_row(tmp_path, capsys, streaming):
    """Issue 59: a ``save_to_disk`` folder's NaN id, named by its row (in memory before scoring)."""
    from datasets import Dataset

    Dataset.from_dict({"id": [1.0, math.nan], "output": ["ab", "ab"]}).save_to_disk(str(tmp_path / "saved"))
    assert score(tmp_path, tmp_path / "saved", tmp_path / "scores.jsonl", *streaming) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: Row 1 of the data: the id NaN is not a number (NaN and infinities name no row); give the row an id.")


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_select_reads_the_score_file_score_wrote_for_ids_holding_line_separators(tmp_path, capsys, separator):
    """``select`` split the score file with ``str.splitlines()``, which ends a line at U+2028 or
    U+0085 that ``score`` writes raw inside an id: JSON Lines end only at ``\\n``.

    Issue 59.
    """
    rows = [{"id": f"a{separator}{i}", "output": "ab" * i} for i in range(1, 4)]
    data, scores, selected = write_jsonl(tmp_path / "rows.jsonl", rows), tmp_path / "s.jsonl", tmp_path / "sel.jsonl"
    assert score(tmp_path, data, scores) == 0
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1",
                     "--output", str(selected)]) == 0, capsys.readouterr().err
    assert [json.loads(line) for line in selected.read_text(encoding="utf-8").split("\n") if line] == [
        {**rows[2], "score": 6.0}]


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_data_column_named_score_is_refused_both_ways(tmp_path, capsys, streaming, kind):
    """From the round-four review, case 4."""
    rows = [{"id": f"r{i}", "output": "ab", "score": 0.5} for i in range(6)]
    data = (write_jsonl(tmp_path / "rows.jsonl", rows) if kind == "jsonl"
            else parquet_rows(tmp_path, pa.Table.from_pylist(rows)))
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, data, output, "--keep-columns", *streaming) == 2
    assert "column 'score'" in capsys.readouterr().err
    assert not output.exists() and not work_dir_for(output).exists()


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_output_whose_work_files_the_data_glob_would_match_is_refused(tmp_path, capsys, kind):
    """From the round-four review, case 8."""
    folder = tmp_path / "ee"
    (folder / "sub").mkdir(parents=True)
    if kind == "jsonl":
        write_jsonl(folder / "sub" / "rows.jsonl", make_rows(6))
        pattern, output = f"{folder}/**/*.jsonl", folder / "scores.out"
        extra = []
    else:
        pq.write_table(pa.Table.from_pylist(make_rows(6)), folder / "sub" / "rows.parquet")
        pattern, output = f"{folder}/**/*.parquet", folder / "scores"
        extra = ["--output-format", "parquet"]
    assert score(tmp_path, pattern, output, *extra) == 2
    assert "matches the input data" in capsys.readouterr().err
    assert not output.exists() and not work_dir_for(output).exists()


def test_scores_of_kept_rows_are_finite_or_null(tmp_path):
    """From the round-four review."""
    rows = [{"id": "a", "output": ""}, {"id": "b", "output": "x"}]
    output = tmp_path / "scores"
    assert score(tmp_path, write_jsonl(tmp_path / "rows.jsonl", rows), output, "--output-format", "parquet",
                 "--keep-columns") == 0
    scores = read_parquet_folder(output).column("score").to_pylist()
    assert scores[0] is None and scores[1] == 1.0 and not any(isinstance(s, float) and math.isnan(s) for s in scores)


def test_timestamps_in_kept_jsonl_columns_are_iso_text(tmp_path):
    """From the round-four review."""
    table = pa.table({"id": ["a"], "output": ["x"], "when": pa.array([datetime.datetime(2024, 5, 1, 12)])})
    output = tmp_path / "scores.jsonl"
    assert score(tmp_path, parquet_rows(tmp_path, table), output, "--keep-columns") == 0
    assert read_jsonl(output)[0]["when"] == "2024-05-01T12:00:00"


def conversation_rows() -> list[dict]:
    """24 conversations ``sample-1``... whose row 21 (``sample-22``) has an empty assistant turn."""
    rows = [{"id": f"sample-{i + 1}", "messages": [{"role": "user", "content": f"Repeat {i}."},
                                                   {"role": "assistant", "content": f"Done {i}."}]}
            for i in range(24)]
    rows[21]["messages"][1]["content"] = ""
    return rows


@pytest.mark.parametrize(("config", "rows", "message"), [
    ("name: IFDScorer\n", job_rows(), "Row 21 (id='sample-22') has an empty output"),
    ("name: IFDScorer\ndirection: reverse\n", job_rows("instruction"),
     "Row 21 (id='sample-22') has an empty instruction"),
    ("name: IFDScorer\nconvention: superfiltering\n", job_rows(), "Row 21 (id='sample-22')"),
    ("name: IFDScorer\nturns: last\n", conversation_rows(), "Row 21 (id='sample-22'), turn 0 has an empty output"),
], ids=["forward", "reverse", "peer", "conversation"])
def test_a_job_warning_names_the_row_by_its_index_in_the_data_and_its_id(tmp_path, model_dir, caplog, config,
                                                                         rows, message):
    """From the round-four review, case 15."""
    path = tmp_path / "config.yaml"
    path.write_text(config + "max_length: 256\nbatch_size: 16\n", encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        assert main(["score", str(path), "--data", str(data), "--output", str(tmp_path / "scores.jsonl"),
                     "--model", model_dir, "--no-progress"]) == 0
    assert message in caplog.text
    assert "Row 5" not in caplog.text


def test_score_refuses_a_config_that_is_a_directory(tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "instruction": "q", "output": "x"}])
    folder = tmp_path / "config_dir"
    folder.mkdir()
    refused_with_a_message(["score", str(folder), "--data", str(data), "--output", str(tmp_path / "o.jsonl")],
                           capsys)


@pytest.mark.parametrize(("code", "said"), [(errno.ENOSPC, "no space left"),
                                           (errno.EDQUOT, "the disk quota is exceeded")])
def test_a_full_disk_says_so_and_how_many_rows_are_saved_and_the_same_command_resumes(tmp_path, capsys, monkeypatch,
                                                                                  code, said):
    """A full disk printed a 40-line OSError, though the parts were kept and the resume was right.

    Round six: a full disk."""
    from hf_adapters.engines import local

    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": i, "output": "ab" * (i % 3)} for i in range(10)])
    output = tmp_path / "out.jsonl"
    args = ["score", config(tmp_path), "--data", str(data), "--output", str(output), "--no-progress",
            "--save-every", "4"]
    appended = local.append_durably

    def full_after_a_chunk(handle, data_):
        if handle.tell():
            raise OSError(code, os.strerror(code))
        appended(handle, data_)

    monkeypatch.setattr(local, "append_durably", full_after_a_chunk)
    assert main(args) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {said} on a device this job writes to, such as the one holding {tmp_path} (free some space there): "
        f"4 of 10 rows are saved in {work_dir_for(output)}; run the same command again to resume."]
    monkeypatch.setattr(local, "append_durably", appended)
    assert main(args) == 0
    assert read_jsonl(output) == [{"id": i, "score": float(2 * (i % 3)) if i % 3 else None} for i in range(10)]


def test_the_compile_option_sets_the_backends_compile_setting_for_the_job_and_its_workers(tmp_path, data, model_dir,
                                                                                           monkeypatch, capsys):
    from hf_adapters.backends.transformers.compilation import COMPILE_ENV, compile_setting

    monkeypatch.setenv(COMPILE_ENV, "auto")  # restored after the test, whatever the command sets
    text = f"name: PPLScorer\nmodel: {model_dir}\n"
    output = tmp_path / "scores.jsonl"
    assert cli.main(["score", config(tmp_path, text), "--data", str(data), "--output", str(output), "--no-progress",
                     "--compile", "off"]) == 0
    assert os.environ[COMPILE_ENV] == "off" and compile_setting() == "off"
    with pytest.raises(SystemExit):
        cli.main(["score", config(tmp_path, text), "--data", str(data), "--output", str(output),
                  "--compile", "sometimes"])
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err
