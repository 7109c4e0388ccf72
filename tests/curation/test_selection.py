"""Selection after scoring: cut-offs, the top fraction of the input rows (rounded down), ties, order,
and the `select` command joining a score file to its data."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, DatasetDict

from hf_adapters import cli, select
from hf_adapters.cli import main
from hf_adapters.core.wording import noun_for
from hf_adapters.curation.ranking import selection_indices
from tests.conftest import instruction_rows, ppl_config, read_jsonl

SCORES = [0.9, 1.3, math.nan, 0.7, None, 0.9, 0.2, 1.0, 0.95, 0.5]


def test_rules_apply_in_order_and_count_what_they_removed():
    indices, removed = selection_indices(SCORES, top=0.3, max_score=1.0)
    # 10 input rows -> top 3 of the 7 left: 1.0 (7), 0.95 (8), then of the tied 0.9s the first in input order (0).
    assert indices == [0, 7, 8]
    assert removed == {"no score": 2, "above max_score": 1, "below min_score": 0, "outside the top": 4}


def test_the_fraction_is_of_the_input_rows_rounded_down():
    assert len(selection_indices([1.0] * 19, top=0.1)[0]) == 1
    assert len(selection_indices([1.0] * 20, top=0.1)[0]) == 2


def test_score_order_lowest_first_and_top_n():
    indices, _ = selection_indices(SCORES, top_n=3, highest=False, order="score", min_score=0.3)
    assert indices == [9, 3, 0]


@pytest.mark.parametrize(("options", "message"), [({"top": 0}, "fraction"), ({"top": 1.5}, "fraction"),
                                                  ({"top_n": -1}, "non-negative"),
                                                  ({"top": 0.1, "top_n": 3}, "not both"),
                                                  ({"order": "random"}, "order")])
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        selection_indices(SCORES, **options)


def test_select_returns_the_kept_rows_of_a_dataset():
    ds = Dataset.from_dict({"id": [f"r{i}" for i in range(len(SCORES))], "ifd": SCORES})
    assert select(ds, "ifd", top=0.3, max_score=1.0)["id"] == ["r0", "r7", "r8"]
    with pytest.raises(ValueError, match="Column 'score' not found"):
        select(ds, "score")


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def scored_data(tmp_path):
    """A data file of one row per SCORES entry, and its score file as `hf-adapters score` writes it."""
    rows = [{"id": f"r{i}", "instruction": f"q{i}", "output": f"a{i}"} for i in range(len(SCORES))]
    scores = [{"id": row["id"], "score": None if score is None or math.isnan(score) else score}
              for row, score in zip(rows, SCORES, strict=True)]
    return write_jsonl(tmp_path / "rows.jsonl", rows), write_jsonl(tmp_path / "scores.jsonl", scores)


def test_select_command_joins_scores_by_position_and_writes_the_best_rows(tmp_path, capsys):
    data, scores = scored_data(tmp_path)
    output = tmp_path / "selected.jsonl"
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top", "30%", "--max-score", "1",
                     "--output", str(output)]) == 0
    selected = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [row["id"] for row in selected] == ["r0", "r7", "r8"] and selected[2]["score"] == 0.95
    printed = capsys.readouterr().out
    assert "2 rows removed: no score" in printed and "3 of 10 rows selected" in printed


@pytest.mark.parametrize("convention", ["cherry", "superfiltering"])
def test_select_command_with_a_convention_picks_what_selection_indices_picks(tmp_path, capsys, convention):
    data, scores = scored_data(tmp_path)
    output = tmp_path / "selected.jsonl"
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top", "30%",
                     "--convention", convention, "--output", str(output)]) == 0
    indices, removed = selection_indices(SCORES, top=0.3, convention=convention)
    selected = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [row["id"] for row in selected] == [f"r{index}" for index in indices]
    printed = capsys.readouterr().out
    assert all(f"{count:>9} {noun_for(count, 'row')} removed: {rule}\n" in printed for rule, count in removed.items())


def test_select_command_refuses_a_score_file_of_other_data(tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "output": "x"}, {"id": "b", "output": "y"}])
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": 1.0}, {"id": "c", "score": 2.0}])
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1",
                     "--output", str(tmp_path / "out.jsonl")]) == 2
    assert "Row 1: the data's id 'b' differs from the score file's 'c'" in capsys.readouterr().err


def test_select_by_rule_imports_from_the_package():
    """The README names `select_by_rule` beside the package's top-level helpers.
    Round five, item 20."""
    from hf_adapters import select_by_rule

    ds = Dataset.from_dict({"id": ["a", "b", "c"], "perplexity": [3.0, 1.5, 2.0]})
    assert select_by_rule(ds, "perplexity", top_n=2)["id"] == ["b", "c"]


# --- From the round-three review ---------------------------------------------------------------------------

def test_select_writes_passed_through_floats_with_every_digit(tmp_path):
    """From the round-three review: data lost or changed in what we write."""
    reward, score = 0.123456789012345678, 1.0316780754743269
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "instruction": "q", "output": "a", "reward": reward},
                                                 {"id": "b", "instruction": "q", "output": "b", "reward": 0.5}])
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": score}, {"id": "b", "score": 0.25}])
    output = tmp_path / "selected.jsonl"
    assert main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1", "--output", str(output)]) == 0
    [row] = read_jsonl(output)
    assert row["reward"] == reward
    assert row["score"] == score


def test_select_writes_the_rows_nan_infinity_and_integers_above_2_63_as_they_were_read(tmp_path):
    """Issue 59: a selected row's NaN and infinities were written as ``null``, a column of integers
    holding one above ``2**63`` as floats, and a whole-number id among fractional ones as ``2.0``."""
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": 2, "output": "a", "big": 1, "x": NaN}\n'
                    '{"id": 1.5, "output": "b", "big": 18446744073709551615, "x": -Infinity}\n', encoding="utf-8")
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": 2, "score": 0.5}, {"id": 1.5, "score": 0.25}])
    output = tmp_path / "selected.jsonl"
    assert main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "2", "--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8").split("\n") == [
        '{"id": 2, "output": "a", "big": 1, "x": NaN, "score": 0.5}',
        '{"id": 1.5, "output": "b", "big": 18446744073709551615, "x": -Infinity, "score": 0.25}', ""]


def test_select_echoes_csv_ids_as_they_are_written(tmp_path):
    """From the round-three review: data lost or changed in what we write."""
    data = tmp_path / "rows.csv"
    data.write_text("id,instruction,output\n001,Say a.,aa\n002,Say b.,bb\n1e3,Say c.,cc\n", encoding="utf-8")
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "001", "score": 0.5}, {"id": "002", "score": 0.7},
                                                     {"id": "1e3", "score": 0.6}])
    output = tmp_path / "selected.jsonl"
    assert main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "3",
                 "--output", str(output)]) == 0
    assert [row["id"] for row in read_jsonl(output)] == ["001", "002", "1e3"]


@pytest.mark.parametrize("kind", ["timestamp", "bytes"])
def test_select_accepts_the_score_file_score_wrote_for_parquet_ids(tmp_path, model_dir, capsys, kind):
    """From the round-three review: data lost or changed in what we write."""
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


@pytest.mark.parametrize("bound", ["max_score", "min_score"])
def test_select_refuses_a_nan_bound(bound):
    """From the round-three review: silently wrong."""
    ds = Dataset.from_dict({"id": ["a", "b"], "ifd": [0.5, 2.0]})
    with pytest.raises(ValueError, match="NaN|nan"):
        select(ds, "ifd", **{bound: float("nan")})


def test_select_command_refuses_a_nan_max_score(tmp_path, capsys):
    """From the round-three review: silently wrong."""
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


@pytest.mark.parametrize("column", ["turn_ifd", "text"])
def test_select_on_a_column_that_is_not_numbers_is_a_message(column):
    ds = Dataset.from_dict({"ifd": [0.5, 0.7], "turn_ifd": [[0.5], [0.7, 0.2]], "text": ["a", "b"]})
    with pytest.raises(ValueError, match=column):
        select(ds, column, top_n=1)


def test_select_refuses_a_bound_that_is_not_a_number_with_a_message():
    ds = Dataset.from_dict({"ifd": [0.5, 1.7]})
    with pytest.raises(ValueError, match="max_score"):
        select(ds, "ifd", max_score="1")


@pytest.mark.parametrize(("option", "value", "plain"), [("top_n", np.int64(1), 1), ("top_n", np.int32(1), 1),
                                                        ("top", np.float32(0.5), 0.5)])
def test_select_accepts_numpy_numbers_for_the_sizes(option, value, plain):
    ds = Dataset.from_dict({"id": ["a", "b"], "ifd": [0.5, 0.7]})
    assert list(select(ds, "ifd", **{option: value})["id"]) == list(select(ds, "ifd", **{option: plain})["id"])


def test_select_accepts_a_dataset_dict_split_by_split():
    ds = DatasetDict(train=Dataset.from_dict({"id": ["a", "b"], "ifd": [0.5, 0.7]}),
                     test=Dataset.from_dict({"id": ["c", "d"], "ifd": [0.9, 0.1]}))
    kept = select(ds, "ifd", top_n=1)
    assert isinstance(kept, DatasetDict)
    assert {split: list(part["id"]) for split, part in kept.items()} == {"train": ["b"], "test": ["c"]}


def test_a_selection_that_keeps_no_row_warns(caplog):
    ds = Dataset.from_dict({"instruction": ["Name a primary colour.", "Add the numbers."], "ifd": [1.2, 0.8]})
    with caplog.at_level(logging.WARNING):
        kept = select(ds, "ifd", top=0.5, convention="cherry")  # the README's example
    assert len(kept) == 0
    assert any(record.levelno >= logging.WARNING for record in caplog.records), caplog.text


def select_files(tmp_path: Path, scores: list) -> list[str]:
    """``select`` arguments for two data rows and a score file holding ``scores`` (raw JSON values)."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "instruction": "q", "output": "x"},
                                                 {"id": "b", "instruction": "q", "output": "y"}])
    path = tmp_path / "scores.jsonl"
    lines = [f'{{"id": "{row_id}", "score": {score}}}\n' for row_id, score in zip("ab", scores, strict=True)]
    path.write_text("".join(lines), encoding="utf-8")
    return ["select", "--data", str(data), "--scores", str(path), "--output", str(tmp_path / "selected.jsonl")]


def refused_with_a_message(argv: list[str], capsys) -> str:
    """Run the command line; it must exit 2 with an ``error:`` line and no traceback. Returns stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_select_command_refuses_a_score_column_that_the_data_has(tmp_path, capsys):
    refused_with_a_message([*select_files(tmp_path, [0.5, 0.7]), "--top-n", "1", "--column", "id"], capsys)


def test_select_command_refuses_a_score_that_is_a_list(tmp_path, capsys):
    refused_with_a_message([*select_files(tmp_path, ["[0.5]", 0.7]), "--top-n", "1"], capsys)


def test_select_command_refuses_a_scores_directory(tmp_path, capsys):
    argv = select_files(tmp_path, [0.5, 0.7])
    folder = tmp_path / "scores_dir"
    folder.mkdir()
    argv[argv.index("--scores") + 1] = str(folder)
    refused_with_a_message([*argv, "--top-n", "1"], capsys)


def test_select_command_refuses_a_boolean_score(tmp_path, capsys):
    refused_with_a_message([*select_files(tmp_path, ["true", 0.7]), "--top-n", "1"], capsys)


# --- Selection on more than one score (issue 59) -----------------------------------------------------------------

#: A score set's file for six rows: IFD, the answer's perplexity and an entropy.
SET_SCORES = {"ifd": [0.9, 1.2, 0.8, 0.5, None, 0.95], "perplexity": [40.0, 10.0, 70.0, 20.0, 5.0, 30.0],
              "answer_entropy": [1.5, 0.5, 2.5, 1.0, 0.2, 1.25]}


def set_files(tmp_path: Path, ids: bool = True) -> list[str]:
    """``select`` arguments for six data rows (with ids ``r0``... or without) and their score set's file."""
    rows = [{"instruction": f"q{i}", "output": f"a{i}"} for i in range(6)]
    if ids:
        rows = [{"id": f"r{i}", **row} for i, row in enumerate(rows)]
    lines = [{"id": f"r{i}" if ids else i, **{name: values[i] for name, values in SET_SCORES.items()}}
             for i in range(6)]
    data, scores = write_jsonl(tmp_path / "rows.jsonl", rows), write_jsonl(tmp_path / "scores.jsonl", lines)
    return ["select", "--data", str(data), "--scores", str(scores), "--output", str(tmp_path / "selected.jsonl")]


def test_select_keeps_only_the_rows_within_every_where_bound_and_counts_what_each_removed(tmp_path, capsys):
    argv = set_files(tmp_path)
    assert main([*argv, "--score-column", "ifd", "--where", "ifd<1", "--where", "perplexity < 50"]) == 0
    assert [row["id"] for row in read_jsonl(tmp_path / "selected.jsonl")] == ["r0", "r3", "r5"]
    printed = capsys.readouterr().out
    assert "        1 row removed: no score in ifd\n" in printed
    assert "        1 row removed: ifd at or above 1\n" in printed
    assert "        1 row removed: perplexity at or above 50\n" in printed
    assert "        0 rows removed: no score\n" in printed and "3 of 6 rows selected" in printed


def test_where_bounds_apply_before_the_top_and_through_a_diversity_rule(tmp_path):
    argv = set_files(tmp_path)
    assert main([*argv, "--score-column", "ifd", "--top-n", "2", "--where", "perplexity<=30"]) == 0
    assert [row["id"] for row in read_jsonl(tmp_path / "selected.jsonl")] == ["r1", "r5"]
    vectors = np.eye(6)
    vectors[5] = vectors[1]  # r5 repeats r1: DEITA walks on, past r0 (perplexity 40), to r3
    np.save(embeddings := tmp_path / "vectors.npy", vectors)
    assert main([*argv, "--score-column", "ifd", "--top-n", "2", "--where", "perplexity<=30", "--diversity", "deita",
                 "--embeddings", str(embeddings)]) == 0
    assert [row["id"] for row in read_jsonl(tmp_path / "selected.jsonl")] == ["r1", "r3"]


def test_the_selected_file_keeps_every_score_column_of_the_score_file(tmp_path):
    assert main([*set_files(tmp_path), "--score-column", "ifd", "--top-n", "1"]) == 0
    assert read_jsonl(tmp_path / "selected.jsonl") == [
        {"id": "r1", "instruction": "q1", "output": "a1", "perplexity": 10.0, "answer_entropy": 0.5, "ifd": 1.2}]
    assert main([*set_files(tmp_path), "--score-column", "ifd", "--column", "chosen_by", "--top-n", "1"]) == 0
    [row] = read_jsonl(tmp_path / "selected.jsonl")
    assert row["chosen_by"] == 1.2 and "ifd" not in row and row["perplexity"] == 10.0


def test_the_selected_rows_of_data_without_ids_carry_their_row_number_and_no_id(tmp_path):
    assert main([*set_files(tmp_path, ids=False), "--score-column", "ifd", "--where", "ifd<1", "--top-n", "2"]) == 0
    selected = read_jsonl(tmp_path / "selected.jsonl")
    assert [row["row_number"] for row in selected] == [0, 5] and "id" not in selected[0]
    assert list(selected[0]) == ["instruction", "output", "row_number", "perplexity", "answer_entropy", "ifd"]


def test_a_score_column_the_data_also_has_keeps_the_datas_value_and_says_so(tmp_path, capsys):
    argv = set_files(tmp_path)
    data = Path(argv[argv.index("--data") + 1])
    write_jsonl(data, [{**row, "perplexity": "the data's"} for row in read_jsonl(data)])
    assert main([*argv, "--score-column", "ifd", "--top-n", "1"]) == 0
    assert read_jsonl(tmp_path / "selected.jsonl")[0]["perplexity"] == "the data's"
    assert "note: not written from the score file: 'perplexity'" in capsys.readouterr().err


def test_a_data_column_the_score_file_kept_as_it_was_goes_unsaid(tmp_path, capsys):
    argv = set_files(tmp_path)
    scores = Path(argv[argv.index("--scores") + 1])
    write_jsonl(scores, [{**line, "instruction": f"q{i}"} for i, line in enumerate(read_jsonl(scores))])
    assert main([*argv, "--score-column", "ifd", "--top-n", "2"]) == 0
    assert "note" not in capsys.readouterr().err
    assert read_jsonl(tmp_path / "selected.jsonl")[0]["instruction"] == "q1"


def test_the_rank_product_is_the_geometric_mean_of_the_ranks_over_the_rows_ranked():
    from hf_adapters.curation.score_bounds import rank_product

    ifd, perplexity = [0.9, 0.5, 0.7, math.nan], [10.0, 2.0, 3.0, 1.0]
    product = rank_product([ifd, perplexity], highest=[True, False])
    # ranks in IFD (highest first) 1, 3, 2 and in perplexity (lowest first) 3, 1, 2, of the 3 rows ranked
    assert product[:3] == pytest.approx([math.sqrt(3) / 3, math.sqrt(3) / 3, 2 / 3], rel=1e-15)
    assert product[0] == product[1] and math.isnan(product[3])
    assert rank_product([[1.0, 2.0, 2.0]], highest=[True]) == [1.0, 0.5, 0.5]  # the tied best share rank 1.5
    assert math.isnan(rank_product([ifd, perplexity], [True, False], candidates=[True, False, True, True])[1])


def test_select_by_rank_product_keeps_the_rows_best_in_every_column_together(tmp_path, capsys):
    argv = set_files(tmp_path)
    assert main([*argv, "--rank-product", "ifd", "perplexity:lowest", "--where", "ifd<1", "--top-n", "2",
                 "--order", "score"]) == 0
    selected = read_jsonl(tmp_path / "selected.jsonl")
    # among the rows with ifd below 1 (r0, r2, r3, r5): ifd ranks 2, 3, 4, 1 and perplexity ranks 3, 4, 1, 2
    assert [row["id"] for row in selected] == ["r5", "r3"]
    assert selected[0]["rank_product"] == pytest.approx(math.sqrt(1 * 2) / 4)
    assert selected[1]["rank_product"] == pytest.approx(math.sqrt(4 * 1) / 4)
    assert {"ifd", "perplexity", "answer_entropy"} <= selected[0].keys()
    assert "1 row removed: ifd at or above 1" in capsys.readouterr().out


def test_select_by_score_product_keeps_the_rows_whose_scores_multiply_highest(tmp_path):
    argv = set_files(tmp_path)
    assert main([*argv, "--score-product", "ifd", "answer_entropy", "--top-n", "2", "--order", "score"]) == 0
    selected = read_jsonl(tmp_path / "selected.jsonl")
    # ifd x answer_entropy: 1.35, 0.6, 2.0, 0.5, (no ifd), 1.1875
    assert [row["id"] for row in selected] == ["r2", "r0"]
    assert selected[0]["score_product"] == pytest.approx(0.8 * 2.5)
    assert {"ifd", "perplexity", "answer_entropy"} <= selected[0].keys()


@pytest.mark.parametrize(("extra", "message"), [
    (["--rank-product", "ifd"], "two or more columns"),
    (["--rank-product", "ifd", "perplexity", "--score-column", "ifd"], "takes no --score-column"),
    (["--rank-product", "ifd", "perplexity", "--max-score", "1"], "takes no --max-score"),
    (["--rank-product", "ifd", "perplexity", "--convention", "cherry"], "takes no --convention"),
    (["--rank-product", "ifd", "nope"], "--rank-product takes one of ['ifd', 'perplexity', 'answer_entropy']"),
    (["--where", "nope<1"], "--where takes one of ['ifd', 'perplexity', 'answer_entropy']"),
    (["--score-product", "ifd"], "--score-product multiplies two or more columns"),
    (["--score-product", "ifd", "perplexity", "--score-column", "ifd"], "takes no --score-column"),
    (["--score-product", "ifd", "perplexity", "--rank-product", "ifd", "perplexity"], "takes no --rank-product"),
])
def test_select_on_several_columns_refuses_what_it_cannot_do_in_one_line(tmp_path, capsys, extra, message):
    assert message in refused_with_a_message([*set_files(tmp_path), *extra], capsys)


@pytest.mark.parametrize(("text", "message"), [("ifd", "A bound is COLUMN<VALUE"), ("ifd<", "A bound is"),
                                               ("ifd=1", "A bound is"), ("ifd<one", "'one', which is not a number"),
                                               ("ifd<nan", "compares with NaN")])
def test_a_where_bound_that_is_not_a_comparison_with_a_number_is_refused(tmp_path, capsys, text, message):
    with pytest.raises(SystemExit) as stopped:
        main([*set_files(tmp_path), "--where", text])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "argument --where" in err and message in err and "Traceback" not in err


def test_select_from_python_keeps_only_the_rows_within_every_where_bound():
    ds = Dataset.from_dict({"id": [f"r{i}" for i in range(6)], **SET_SCORES})
    kept = select(ds, "ifd", top_n=2, where=["ifd<1", "perplexity <= 30"])
    assert list(kept["id"]) == ["r3", "r5"]
    streamed = select(ds.to_iterable_dataset(), "ifd", where="perplexity<=30", max_score=1.0)
    assert [row["id"] for row in streamed] == ["r3", "r5"]
    split = select(DatasetDict({"train": ds}), "ifd", top_n=1, where=["perplexity<25"])
    assert list(split["train"]["id"]) == ["r1"]
    with pytest.raises(ValueError, match="Column 'nope' not found"):
        select(ds, "ifd", where=["nope<1"])


def test_select_counts_one_row_in_the_singular(tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}])
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": 1.0}])
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "1", "--max-score", "0.5",
                     "--output", str(tmp_path / "kept.jsonl")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ +1 row removed: ", out, re.M) and "0 of 1 row selected" in out, out
