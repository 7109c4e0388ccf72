"""``hf-adapters summary`` and ``hf-adapters compare``: the numbers (against numpy and scipy), the
files they read, the text histogram, the PNG plots, and the errors."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from hf_adapters import cli
from hf_adapters.curation.ranking import selection_indices
from hf_adapters.curation.score_stats import (
    ScoreColumn,
    average_ranks,
    compare_scores,
    histogram,
    pearson,
    read_score_column,
    spearman,
    summarize,
)
from hf_adapters.files.score_files import OutputFormat, write_output

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HISTOGRAM_LINE = re.compile(r"^\s*\[\s*(\S+),\s*(\S+)[)\]]\s+(█*)\s+(\d+)$")


def column(values, ids=None, source="scores.jsonl") -> ScoreColumn:
    values = np.asarray(values, dtype=float)
    return ScoreColumn(source, "score", list(range(len(values))) if ids is None else ids, values)


def write_jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def score_file(path: Path, scores: list, kind: str = "jsonl", rows_per_shard: int = 1_000_000) -> str:
    records = [{"id": f"row-{i}", "score": score} for i, score in enumerate(scores)]
    write_output(path, OutputFormat(kind, rows_per_shard=rows_per_shard), records)
    return str(path)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# --- the numbers ---------------------------------------------------------------------------------


def test_summary_numbers_are_numpys_over_the_finite_values(rng):
    finite = rng.lognormal(3, 1, size=200)
    values = np.concatenate([finite, [math.nan, math.nan, math.inf, -math.inf]])
    summary = summarize(values)
    assert (summary.count, summary.valid, summary.missing, summary.infinite) == (204, 200, 2, 2)
    assert summary.mean == pytest.approx(np.mean(finite), rel=1e-12)
    assert summary.std == pytest.approx(np.std(finite, ddof=1), rel=1e-12)
    assert (summary.minimum, summary.maximum) == (finite.min(), finite.max())
    expected = np.quantile(finite, [0.05, 0.25, 0.5, 0.75, 0.95])
    assert list(summary.quantiles) == ["5%", "25%", "median", "75%", "95%"]
    assert list(summary.quantiles.values()) == pytest.approx(expected, rel=1e-12)


def test_a_summary_without_finite_values_counts_them_and_gives_nan():
    summary = summarize(np.array([math.nan, math.inf]))
    assert (summary.count, summary.valid, summary.missing, summary.infinite) == (2, 0, 1, 1)
    assert all(math.isnan(value) for value in [summary.mean, summary.std, *summary.quantiles.values()])


def test_the_histogram_counts_each_finite_value_once_in_integer_counts(rng):
    values = np.concatenate([rng.normal(size=500), [math.nan, math.inf]])
    result = histogram(values, bins=12)
    expected_counts, expected_edges = np.histogram(values[np.isfinite(values)], bins=12)
    assert result.counts == expected_counts.tolist() and all(type(count) is int for count in result.counts)
    assert result.edges == pytest.approx(expected_edges.tolist())


def test_a_log_histogram_has_log_spaced_bins_holding_every_value_and_refuses_non_positive_scores():
    values = np.array([1.0, 10.0, 100.0, 1000.0, 734.35129702371])
    result = histogram(values, bins=3, log=True)
    assert result.edges == pytest.approx([1, 10, 100, 1000])
    assert result.counts == [1, 1, 3]
    with pytest.raises(ValueError, match="1 of the 2 finite scores are at or below 0"):
        histogram(np.array([0.0, 2.0]), bins=3, log=True)


def test_average_ranks_are_scipys_rankdata(rng):
    values = rng.integers(0, 20, size=300).astype(float)  # many ties
    assert average_ranks(values) == pytest.approx(stats.rankdata(values))


def test_spearman_and_pearson_match_scipy_with_ties(rng):
    a = rng.normal(size=400)
    b = a + rng.normal(size=400)
    a[::7] = 1.0  # ties
    assert pearson(a, b) == pytest.approx(stats.pearsonr(a, b).statistic, abs=1e-12)
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert math.isnan(pearson(np.ones(5), b[:5])) and math.isnan(spearman(a[:1], b[:1]))


def test_rows_without_a_finite_score_in_either_file_are_left_out_and_counted(rng):
    a, b = rng.normal(size=50), rng.normal(size=50)
    a[[3, 10]], b[[10, 20]], b[30] = math.nan, math.nan, math.inf
    result = compare_scores(column(a), column(b), top_k=[5])
    kept = np.isfinite(a) & np.isfinite(b)
    assert (result.rows, result.compared, result.left_out_a, result.left_out_b) == (50, 46, 2, 3)
    assert result.spearman == pytest.approx(stats.spearmanr(a[kept], b[kept]).statistic, abs=1e-12)
    assert result.pearson == pytest.approx(stats.pearsonr(a[kept], b[kept]).statistic, abs=1e-12)


@pytest.mark.parametrize("highest", [True, False])
def test_the_top_k_overlap_is_that_of_two_select_runs(rng, highest):
    a = rng.normal(size=200)
    b = a + rng.normal(size=200)
    a[5] = math.nan
    result = compare_scores(column(a), column(b), top_k=[10, 50, 1000], highest=highest)
    assert [overlap.k for overlap in result.top_k] == [10, 50]
    for overlap in result.top_k:
        chosen = [set(selection_indices(scores.tolist(), top_n=overlap.k, highest=highest)[0]) for scores in (a, b)]
        assert overlap.overlap == len(chosen[0] & chosen[1])
        assert overlap.share == overlap.overlap / overlap.k
        assert overlap.by_chance == pytest.approx(overlap.k ** 2 / 200)


def test_the_rows_that_moved_most_come_with_their_scores_and_ranks():
    a = column([5.0, 4.0, 3.0, 2.0, 1.0, math.nan], ids=list("uvwxyz"))
    b = column([1.0, 4.0, 3.0, 2.0, 5.0, 0.0], ids=list("uvwxyz"))
    moved = compare_scores(a, b, top_k=[], moved=3).moved
    assert [(m.id, m.score_a, m.score_b, m.rank_a, m.rank_b) for m in moved] == [
        ("u", 5.0, 1.0, 1, 5), ("y", 1.0, 5.0, 5, 1), ("v", 4.0, 4.0, 2, 2)]
    lowest = compare_scores(a, b, top_k=[], moved=1, highest=False).moved
    assert [(m.id, m.rank_a, m.rank_b) for m in lowest] == [("u", 5, 1)]


def test_files_of_other_rows_are_refused_naming_the_first_row_that_differs():
    with pytest.raises(ValueError, match=r"row 2 has the id 'c' in a\.jsonl and 'x' in b\.jsonl"):
        compare_scores(column([1, 2, 3, 4], list("abcd"), "a.jsonl"), column([1, 2, 3, 4], list("abxd"), "b.jsonl"))
    compare_scores(column([1, 2], [None, b"id"]), column([1, 2], ["", "id"]))  # as a JSONL score file writes them
    with pytest.raises(ValueError, match=r"a\.jsonl has 4 rows and b\.jsonl 3"):
        compare_scores(column([1, 2, 3, 4], source="a.jsonl"), column([1, 2, 3], source="b.jsonl"))


# --- reading score files -------------------------------------------------------------------------


def test_a_jsonl_score_file_and_a_parquet_folder_read_alike(tmp_path):
    scores = [1.5, None, 3.0, 1e-5, 0.25]
    jsonl = read_score_column(score_file(tmp_path / "scores.jsonl", scores))
    parquet = read_score_column(score_file(tmp_path / "scores", scores, "parquet", rows_per_shard=2))
    assert len(list((tmp_path / "scores").glob("part-*.parquet"))) == 3
    for read in (jsonl, parquet):
        assert read.ids == [f"row-{i}" for i in range(5)]
        assert read.values.tolist()[:1] + read.values.tolist()[2:] == [1.5, 3.0, 1e-5, 0.25]
        assert math.isnan(read.values[1])


def test_any_jsonl_or_csv_with_the_column_reads_and_a_missing_column_is_named(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"id": 1, "text": "a", "ppl": 2.0}, {"id": 2, "text": "b", "ppl": 4}])
    assert read_score_column(path, "ppl").values.tolist() == [2.0, 4.0]
    csv = tmp_path / "rows.csv"
    csv.write_text("text,ifd\na,0.5\nb,\nc,nan\n", encoding="utf-8")
    read = read_score_column(str(csv), "ifd")
    assert read.ids == [None, None, None] and read.values[0] == 0.5 and np.isnan(read.values[1:]).all()
    with pytest.raises(ValueError, match="has no column 'score'.*id, ppl, text"):
        read_score_column(path)
    with pytest.raises(ValueError, match="has no column 'score'.*ifd, text"):
        read_score_column(str(csv))


def test_a_score_that_is_not_a_number_is_refused_naming_the_row(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "score": 1.0}, {"id": "b", "score": "high"}])
    with pytest.raises(ValueError, match="Row 1: .*got str: 'high'"):
        read_score_column(path)


# --- the commands --------------------------------------------------------------------------------


def histogram_lines(output: str) -> list[tuple[float, float, int, int]]:
    """(low edge, high edge, bar length, count) of each text histogram line."""
    lines = [HISTOGRAM_LINE.match(line) for line in output.splitlines()]
    return [(float(m[1]), float(m[2]), len(m[3]), int(m[4])) for m in lines if m]


def test_summary_prints_the_numbers_and_a_text_histogram(tmp_path, capsys, rng):
    scores = [*rng.lognormal(2, 1, size=97).tolist(), None, None, float("inf")]  # inf written as Infinity
    path = write_jsonl(tmp_path / "scores.jsonl", [{"id": i, "score": score} for i, score in enumerate(scores)])
    assert cli.main(["summary", path, "--bins", "8"]) == 0
    output = capsys.readouterr().out
    finite = np.array(scores[:97])
    for name, value in [("count", "100"), ("valid", "97"), ("NaN/null", "2"), ("inf", "1"),
                        ("mean", f"{finite.mean():.4g}"), ("median", f"{np.median(finite):.4g}"),
                        ("max", f"{finite.max():.4g}")]:
        assert re.search(rf"^{re.escape(name)}\s+{re.escape(value)}$", output, re.M), (name, output)
    bars = histogram_lines(output)
    counts, _ = np.histogram(finite, bins=8)
    assert [count for *_, count in bars] == counts.tolist()
    assert max(length for _, _, length, _ in bars) == 40
    assert all((length > 0) == (count > 0) for _, _, length, count in bars)
    assert bars[0][0] == pytest.approx(finite.min(), rel=1e-3) and bars[-1][1] == pytest.approx(finite.max(), rel=1e-3)


def test_summary_as_json(tmp_path, capsys):
    path = score_file(tmp_path / "scores.jsonl", [1.0, 2.0, None])
    assert cli.main(["summary", path, "--json", "--bins", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["count"] == 3 and result["missing"] == 1 and result["mean"] == 1.5
    assert result["histogram"] == {"edges": [1.0, 1.5, 2.0], "counts": [1, 1]}


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_summary_plots_a_png_histogram(tmp_path, capsys, rng):
    path = score_file(tmp_path / "scores.jsonl", rng.lognormal(2, 1, size=50).tolist())
    assert cli.main(["summary", path, "--plot", str(tmp_path / "plots" / "histogram.png"), "--log"]) == 0
    assert_png(tmp_path / "plots" / "histogram.png")
    assert "histogram.png" in capsys.readouterr().out


def test_compare_prints_correlations_overlaps_and_moved_rows_and_plots(tmp_path, capsys, rng):
    a = rng.lognormal(2, 1, size=30)
    b = a * rng.lognormal(0, 0.5, size=30)
    first = score_file(tmp_path / "a.jsonl", [*a.tolist()[:-1], None])
    second = score_file(tmp_path / "b", b.tolist(), "parquet")
    plot = tmp_path / "scatter.png"
    assert cli.main(["compare", first, second, "--top-k", "5,10,100", "--moved", "4", "--plot", str(plot),
                     "--log"]) == 0
    output = capsys.readouterr().out
    rho = stats.spearmanr(a[:-1], b[:-1]).statistic
    assert re.search(rf"^Spearman\s+{rho:.4f}$", output, re.M), output
    assert "30 rows: 29 compared, 1 left out" in output and "highest scores first" in output
    assert re.search(r"^\s*5\s+\d+\s", output, re.M) and re.search(r"^\s*10\s+\d+\s", output, re.M)
    assert "k above the 30 rows: 100" in output
    moved = output.split("rank moved most:")[1].strip().split("\n\n")[0].splitlines()
    assert len(moved) == 2 + 4 and moved[0].split() == ["id", "score", "A", "score", "B", "rank", "A", "rank", "B",
                                                         "moved"]
    assert_png(plot)


def test_compare_as_json_says_the_direction(tmp_path, capsys):
    first = score_file(tmp_path / "a.jsonl", [1.0, 2.0, 3.0])
    second = score_file(tmp_path / "b.jsonl", [3.0, 2.0, 1.0])
    assert cli.main(["compare", first, second, "--json", "--lowest", "--top-k", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["spearman"] == pytest.approx(-1) and result["highest"] is False
    assert result["top_k"] == [{"k": 1, "overlap": 0, "share": 0.0, "by_chance": pytest.approx(1 / 3)}]


def test_compare_refuses_files_of_other_rows(tmp_path, capsys):
    first = score_file(tmp_path / "a.jsonl", [1.0, 2.0])
    second = write_jsonl(tmp_path / "b.jsonl", [{"id": "row-0", "score": 1.0}, {"id": "other", "score": 2.0}])
    assert cli.main(["compare", first, second]) == 2
    assert "row 1 has the id 'row-1' in" in capsys.readouterr().err


def test_a_missing_file_is_an_error_naming_it(tmp_path, capsys):
    assert cli.main(["summary", str(tmp_path / "nothing.jsonl")]) == 2
    assert "nothing.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["summary", "--help"], ["compare", "--help"]])
def test_help_imports_neither_torch_nor_datasets_nor_matplotlib(argv):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_adapters", *argv], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"torch", "datasets", "matplotlib"}


# --- scores near the largest float, files with nothing in common, the summary's wording (round five) -------

HUGE = [1e308, -1e308, 0.5, 1.7976931348623157e308, -1.5e308, 3.0, 2.5e307]


def exact_quantile(values, q):
    """NumPy's linear quantile, computed in fractions."""
    from fractions import Fraction

    ordered = sorted(Fraction(value) for value in values)
    position = (len(ordered) - 1) * Fraction(q).limit_denominator(1000)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def test_the_summary_of_scores_near_the_largest_float_is_exact_without_overflow(tmp_path, capsys):
    """Finite scores spanning ±1e308 printed numpy overflow warnings and "Too many bins for data range":
    sums and ranges overflowed. Computed scaled by a power of two (exactly), they are the numbers of the
    scores. Round five, item 17."""
    import warnings
    from fractions import Fraction

    values = np.array(HUGE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = summarize(values)
        bins = histogram(values, bins=10)
        path = score_file(tmp_path / "scores.jsonl", HUGE)
        assert cli.main(["summary", path, "--plot", str(tmp_path / "h.png")]) == 0
        assert cli.main(["summary", path, "--json"]) == 0
    captured = capsys.readouterr()
    assert "Too many bins" not in captured.err and "overflow" not in captured.err
    exact = [Fraction(value) for value in HUGE]
    mean = sum(exact) / len(exact)
    variance = sum((value - mean) ** 2 for value in exact) / (len(exact) - 1)
    assert summary.mean == pytest.approx(float(mean), rel=1e-15)
    assert summary.std == pytest.approx(math.ldexp(math.sqrt(float(variance / 2 ** 2048)), 1024), rel=1e-15)
    for name, q in {"5%": 0.05, "25%": 0.25, "median": 0.5, "75%": 0.75, "95%": 0.95}.items():
        assert summary.quantiles[name] == pytest.approx(exact_quantile(HUGE, q), rel=1e-15)
    assert sum(bins.counts) == len(HUGE) and (bins.edges[0], bins.edges[-1]) == (min(HUGE), max(HUGE))
    assert bins.counts == np.histogram(values / 2 ** 20, bins=10)[0].tolist()
    assert_png(tmp_path / "h.png")


def test_a_standard_deviation_beyond_the_largest_float_is_infinite():
    """Round five, item 17."""
    summary = summarize(np.array([-1.7e308, 1.7e308]))
    assert summary.std == math.inf and summary.mean == 0.0


def test_compare_of_scores_near_the_largest_float_needs_no_overflow(tmp_path, capsys):
    """Round five, item 17."""
    import warnings

    first = score_file(tmp_path / "a.jsonl", HUGE)
    second = score_file(tmp_path / "b.jsonl", [value / 2 for value in HUGE])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.main(["compare", first, second, "--plot", str(tmp_path / "s.png")]) == 0
        assert pearson(np.array(HUGE), np.array(HUGE) * -0.5) == -1.0
    assert re.search(r"^Pearson\s+1.0000$", capsys.readouterr().out, re.M)


@pytest.mark.parametrize("extra", [[], ["--json"], ["--plot", "scatter.png"]])
def test_compare_of_files_with_no_row_scored_in_both_says_so_in_one_line(tmp_path, capsys, extra):
    """Two files with no row scored in both crashed in format_table (TypeError, exit 1). There is
    nothing to compare: one `error:` line says why, exit 2. Round five, item 17."""
    first = score_file(tmp_path / "a.jsonl", [1.0, None, math.nan])
    second = score_file(tmp_path / "b.jsonl", [None, 2.0, 3.0])
    assert cli.main(["compare", first, second, *extra]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith("error: no row has a finite score in both files") and captured.out == ""
    assert "of the 3 rows, 2 have none in" in line


def test_a_table_without_rows_is_its_header():
    """Round five, item 17."""
    from hf_adapters.cli.tables import format_table

    assert format_table(["id", "score"], []).splitlines() == ["id  score", "--  -----"]


def test_summary_without_log_does_not_mention_log(tmp_path, capsys):
    """Without --log the histogram line said "(--log: in log10)": noise. Round five, item 22."""
    path = score_file(tmp_path / "scores.jsonl", [1.0, 2.0, 4.0])
    assert cli.main(["summary", path, "--bins", "2"]) == 0
    output = capsys.readouterr().out
    assert "Histogram of the finite scores, 2 bins of equal width:" in output
    assert "--log" not in output and "log10" not in output
    assert cli.main(["summary", path, "--bins", "2", "--log"]) == 0
    assert "2 bins of equal width in log10:" in capsys.readouterr().out


# --- Several columns of one score set's file (issue 59) ----------------------------------------------------------

def set_file(tmp_path: Path) -> str:
    """A score set's file of five rows: ifd, perplexity, and an entropy that is not finite in one row."""
    return write_jsonl(tmp_path / "scores.jsonl", [
        {"id": f"row-{i}", "ifd": ifd, "perplexity": ppl, "answer_entropy": entropy}
        for i, (ifd, ppl, entropy) in enumerate(zip([0.9, 0.5, 0.7, 0.2, 1.1], [40.0, 10.0, 30.0, 5.0, 50.0],
                                                    [1.0, None, 2.0, 0.5, 3.0], strict=True))])


def test_compare_two_columns_of_one_file(tmp_path, capsys):
    path = set_file(tmp_path)
    assert cli.main(["compare", path, "--columns", "ifd", "perplexity", "--top-k", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["a"], result["b"], result["column"], result["column_b"]) == (path, path, "ifd", "perplexity")
    assert result["spearman"] == pytest.approx(1.0) and result["compared"] == 5
    assert cli.main(["compare", path, "--columns", "ifd", "perplexity", "--plot", str(tmp_path / "s.png")]) == 0
    output = capsys.readouterr().out
    assert f"A  {path}, column 'ifd'\nB  {path}, column 'perplexity'" in output
    assert_png(tmp_path / "s.png")


def test_compare_a_column_of_one_file_with_another_column_of_a_second_file(tmp_path, capsys):
    first = set_file(tmp_path)
    second = score_file(tmp_path / "ppl.jsonl", [40.0, 10.0, 30.0, 5.0, 50.0])
    assert cli.main(["compare", first, second, "--columns", "perplexity", "score", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pearson"] == pytest.approx(1.0)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "give two score files (A B), or two columns of A with --columns"),
    (["--columns", "ifd", "perplexity", "--column", "ifd"], "not both"),
    (["--columns", "ifd", "nope"], "has no column 'nope'"),
])
def test_compare_without_a_second_file_or_column_says_what_to_give(tmp_path, capsys, argv, message):
    assert cli.main(["compare", set_file(tmp_path), *argv]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and message in line


def test_compare_of_two_columns_with_no_row_scored_in_both_says_so(tmp_path, capsys):
    path = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "x": 1.0, "y": None}, {"id": "b", "x": None, "y": 2.0}])
    assert cli.main(["compare", path, "--columns", "x", "y"]) == 2
    assert "no row has a finite score in both columns" in capsys.readouterr().err


def test_summary_without_a_column_gives_every_column_side_by_side(tmp_path, capsys):
    path = write_jsonl(tmp_path / "scores.jsonl", [
        {"id": i, "ifd": ifd, "perplexity": ppl, "instruction": f"kept text {i}", "token_losses": [0.5, 1.0]}
        for i, (ifd, ppl) in enumerate([(0.5, 10.0), (0.7, None), (0.9, 30.0)])])
    assert cli.main(["summary", path]) == 0
    output = capsys.readouterr().out
    assert output.startswith(f"{path}: 2 columns of 3 rows\n")
    assert re.search(r"^\s+ifd\s+perplexity$", output, re.M)
    assert re.search(r"^valid\s+3\s+2$", output, re.M) and re.search(r"^NaN/null\s+0\s+1$", output, re.M)
    assert re.search(r"^mean\s+0\.7\s+20$", output, re.M) and re.search(r"^max\s+0\.9\s+30$", output, re.M)
    assert "Left out (not one number or null per row): instruction, token_losses" in output
    assert cli.main(["summary", path, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [column["column"] for column in result["columns"]] == ["ifd", "perplexity"]
    assert result["columns"][1]["mean"] == 20.0 and result["left_out"] == ["instruction", "token_losses"]
    assert cli.main(["summary", path, "--plot", str(tmp_path / "all.png"), "--log"]) == 0
    assert_png(tmp_path / "all.png")


def test_summary_of_a_file_with_one_column_of_scores_is_that_columns_as_before(tmp_path, capsys):
    path = score_file(tmp_path / "scores.jsonl", [1.0, 2.0, None])
    assert cli.main(["summary", path, "--bins", "2"]) == 0
    alone = capsys.readouterr().out
    assert cli.main(["summary", path, "--bins", "2", "--column", "score"]) == 0
    assert capsys.readouterr().out == alone and alone.startswith(f"{path}, column 'score'\n")


def test_summary_of_every_column_on_a_log_scale_names_the_column_that_cannot_be_shown(tmp_path, capsys):
    path = write_jsonl(tmp_path / "scores.jsonl", [{"id": 0, "a": 1.0, "b": -1.0}, {"id": 1, "a": 2.0, "b": 1.0}])
    assert cli.main(["summary", path, "--log"]) == 2
    assert capsys.readouterr().err.startswith("error: column 'b': A log scale needs positive scores")
