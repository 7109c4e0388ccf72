"""What a curator asks of score files: their distribution (:func:`summarize`, :func:`histogram`) and
how two scorings of the same rows agree (:func:`compare_scores`). The numbers only; the command
line's ``summary`` and ``compare`` print them.

A score that is not a finite number (null, NaN, infinite) is counted, never averaged or ranked.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hf_adapters.curation.ranking import check_scores
from hf_adapters.files.data_io import data_files, jsonl_objects, read_records, written_id

#: The quantiles a summary gives, by the name it prints.
QUANTILES = {"5%": 0.05, "25%": 0.25, "median": 0.5, "75%": 0.75, "95%": 0.95}


@dataclass(frozen=True)
class ScoreColumn:
    """One column of numbers read from a file, row by row.

    Attributes:
        source: the file, folder or glob it was read from.
        column: the column's name.
        ids: each row's ``id`` (None where the rows have none).
        values: each row's score as a float; NaN for null.
    """

    source: str
    column: str
    ids: list
    values: np.ndarray


@dataclass(frozen=True)
class Summary:
    """The distribution of one column: counts of all rows, then numbers over the finite scores
    (NaN where there are none; ``std`` is the sample standard deviation, as pandas gives it)."""

    count: int
    valid: int
    missing: int
    infinite: int
    mean: float
    std: float
    minimum: float
    quantiles: dict[str, float]
    maximum: float


@dataclass(frozen=True)
class Histogram:
    """Counts of the finite scores in ``len(counts)`` bins; bin ``i`` is ``[edges[i], edges[i + 1])``,
    the last one closed. No finite score: no bins."""

    edges: list[float]
    counts: list[int]


@dataclass(frozen=True)
class TopOverlap:
    """How many rows the top ``k`` of two scorings share (``share``: of ``k``), and how many two
    random picks of ``k`` rows would share on average."""

    k: int
    overlap: int
    share: float
    by_chance: float


@dataclass(frozen=True)
class RankMove:
    """A row's scores and best-first ranks (1: best) in two scorings."""

    row: int
    id: Any
    score_a: float
    score_b: float
    rank_a: int
    rank_b: int


@dataclass(frozen=True)
class Comparison:
    """Two scorings of the same rows compared.

    Attributes:
        rows: rows in each file.
        compared: rows with a finite score in both; the correlations and ranks are over them.
        left_out_a: rows without a finite score in A (likewise ``left_out_b``).
        spearman: Spearman's rank correlation (ties get their average rank).
        pearson: Pearson's correlation.
        highest: whether the best score is the highest.
        top_k: the overlap of each file's own top k (as ``select --top-n k`` keeps them), for each k
            up to ``rows``.
        moved: the rows whose rank moved most, largest move first.
    """

    rows: int
    compared: int
    left_out_a: int
    left_out_b: int
    spearman: float
    pearson: float
    highest: bool
    top_k: list[TopOverlap]
    moved: list[RankMove]


def read_score_column(source: str | Path, column: str = "score") -> ScoreColumn:
    """The ``column`` (and ``id``, if there is one) of every row of a JSONL, JSON, CSV or Parquet
    file, or of a folder or glob of such shards in name order (a ``hf-adapters score --output-format
    parquet`` folder). A cell must hold a number or null (in CSV: a number's text or nothing); a
    ValueError names the file without the column, or the row with something else."""
    return read_score_columns(source, [column])[0][0]


def read_score_columns(source: str | Path, columns: Sequence[str] | None = None) -> tuple[list[ScoreColumn], list[str]]:
    """The ``columns`` of ``source`` as :func:`read_score_column` reads one, and the names of those left
    out: none when ``columns`` are named; without names, every column but ``id`` (of the first file),
    less those that do not hold one number (or null) per row, such as the kept text of
    ``--keep-columns``, which are left out."""
    shards = data_files(source)
    if shards is None:
        raise FileNotFoundError(f"No file, folder or glob {str(source)!r}.")
    loader, files = shards
    columns_named = columns is not None
    ids, values = [], {column: [] for column in columns or ()}
    for file in files:
        file_ids, file_values = _READERS[loader](file, columns)
        columns = list(file_values) or columns  # every file of a folder must have the first one's columns
        ids += file_ids
        for name, column_values in file_values.items():
            values.setdefault(name, []).extend(column_values)
    read, left_out = [], []
    for name, column_values in values.items():
        try:
            scores = check_scores(column_values, f"the column {name!r}")
        except ValueError:
            if len(values) == 1 or columns_named:
                raise
            left_out.append(name)
            continue
        read.append(ScoreColumn(str(source), name, ids, np.array(scores, dtype=float)))
    if not read:
        raise ValueError(f"{source} has no column of scores (one number or null per row) beside `id`"
                         + (f"; its columns: {', '.join(left_out)}" if left_out else "") + ".")
    return read, left_out


def _no_column(file: Path, column: str, columns: Sequence[str]) -> ValueError:
    return ValueError(f"{file} has no column {column!r} (its columns: {', '.join(sorted(columns))}); "
                      "name the scores' column with --column.")


def _all_but_id(names: Sequence[str], columns: Sequence[str] | None) -> list[str]:
    """The ``columns`` named, or every one of ``names`` but ``id``."""
    return list(columns) if columns is not None else [name for name in names if name != "id"]


def _parquet_column(file: Path, columns: Sequence[str] | None) -> tuple[list, dict[str, list]]:
    import pyarrow.parquet as pq

    names = pq.read_schema(file).names
    columns = _all_but_id(names, columns)
    for column in columns:
        if column not in names:
            raise _no_column(file, column, names)
    table = pq.read_table(file, columns=[name for name in ("id", *columns) if name in names])
    ids = table.column("id").to_pylist() if "id" in names else [None] * table.num_rows
    return ids, {column: table.column(column).to_pylist() for column in columns}


def _json_column(file: Path, columns: Sequence[str] | None) -> tuple[list, dict[str, list]]:
    ids, values = [], {column: [] for column in columns or ()}
    for number, record in enumerate(_json_records(file)):
        if number == 0:
            columns = _all_but_id(list(record), columns)
            values = {column: [] for column in columns}
        for column in columns:
            if column not in record:
                raise _no_column(file, column, record) if number == 0 else ValueError(
                    f"Record {number} of {file} has no {column!r}.")
            values[column].append(record[column])
        ids.append(record.get("id"))
    return ids, values


def _json_records(file: Path) -> Iterator[dict]:
    """The objects of a JSON Lines file, one line at a time; those of a ``.json`` file (lines or a list)."""
    if file.suffix.lower() == ".json":
        yield from read_records(file)
        return
    with open(file, encoding="utf-8-sig") as handle:
        yield from jsonl_objects(handle, str(file))


def _csv_column(file: Path, columns: Sequence[str] | None) -> tuple[list, dict[str, list]]:
    records = read_records(file)
    columns = _all_but_id(list(records[0]) if records else [], columns)
    for column in columns:
        if not records or column not in records[0]:
            raise _no_column(file, column, records[0] if records else [])
    return ([record.get("id") for record in records],
            {column: [_csv_number(record[column]) for record in records] for column in columns})


def _csv_number(text: str) -> Any:
    """A CSV cell as a score: nothing is null, a number's text its float; other text stays (and is refused)."""
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return text


#: Each loader's reader of one file's ids and the scores of some columns (None: all but ``id``).
_READERS = {"parquet": _parquet_column, "json": _json_column, "csv": _csv_column}


def summarize(values: np.ndarray) -> Summary:
    """Counts of all ``values`` and the distribution of the finite ones.

    Example:
        >>> summary = summarize(np.array([1.0, 2.0, 3.0, 4.0, float("nan"), float("inf")]))
        >>> summary.count, summary.valid, summary.missing, summary.infinite
        (6, 4, 1, 1)
        >>> summary.mean, summary.quantiles["median"], summary.maximum
        (2.5, 2.5, 4.0)
    """
    finite = values[np.isfinite(values)]
    return Summary(count=int(values.size), valid=int(finite.size), missing=int(np.isnan(values).sum()),
                   infinite=int(np.isinf(values).sum()), **_distribution(finite))


def safe_exponent(finite: np.ndarray, power: int = 1) -> int:
    """The k for which sums (and differences) of ``power``-th powers of ``finite * 2**-k`` cannot
    overflow: 0 unless the scores are near the largest float. Scaling by a power of two is exact,
    so sums, means and quantiles of the scaled scores, scaled back, are those of the scores.

    Example:
        >>> safe_exponent(np.array([1.0, -3.5])), safe_exponent(np.array([1e308, -1e308])) > 0
        (0, True)
    """
    largest = float(np.abs(finite).max(initial=0.0))
    bits = math.frexp(largest)[1] + 1  # any difference of two scores is below 2**bits
    return max(0, bits - (1023 - finite.size.bit_length()) // power)


def _scaled_back(value: float, exponent: int) -> float:
    """``value * 2**exponent``; infinite where that is beyond the largest float."""
    try:
        return math.ldexp(value, exponent)
    except OverflowError:
        return math.copysign(math.inf, value)


def _distribution(finite: np.ndarray) -> dict[str, Any]:
    """The mean, sample standard deviation, minimum, quantiles and maximum of ``finite``; NaN for none.
    Scores near the largest float are scaled by a power of two first (:func:`safe_exponent`), so no sum
    overflows; a standard deviation beyond the largest float is infinite."""
    if not finite.size:
        return {"mean": math.nan, "std": math.nan, "minimum": math.nan, "quantiles": dict.fromkeys(QUANTILES, math.nan),
                "maximum": math.nan}
    shift, square_shift = safe_exponent(finite), safe_exponent(finite, power=2)
    scaled = np.ldexp(finite, -shift)
    quantiles = [_scaled_back(value, shift) for value in np.quantile(scaled, list(QUANTILES.values())).tolist()]
    std = _scaled_back(float(np.std(np.ldexp(finite, -square_shift), ddof=1)), square_shift) if finite.size > 1 \
        else math.nan
    return {"mean": _scaled_back(float(np.mean(scaled)), shift), "std": std, "minimum": float(finite.min()),
            "quantiles": dict(zip(QUANTILES, quantiles, strict=True)), "maximum": float(finite.max())}


def histogram(values: np.ndarray, bins: int = 10, log: bool = False) -> Histogram:
    """Counts of the finite ``values`` in ``bins`` equal bins from the smallest to the largest; with
    ``log``, bins of equal width in log10 (the values must then be positive).

    Example:
        >>> histogram(np.array([1.0, 2.0, 2.5, 4.0, float("nan")]), bins=3)
        Histogram(edges=[1.0, 2.0, 3.0, 4.0], counts=[1, 2, 1])
        >>> histogram(np.array([1.0, 10.0, 20.0, 100.0]), bins=2, log=True).counts
        [1, 3]
    """
    finite = values[np.isfinite(values)]
    if not finite.size:
        return Histogram([], [])
    if not log:
        shift = safe_exponent(finite)  # scores near the largest float: the bins of the scores scaled by 2**-shift
        counts, edges = np.histogram(np.ldexp(finite, -shift), bins=bins)
        return Histogram(np.ldexp(edges, shift).tolist(), counts.tolist())
    check_positive(finite, "finite scores")
    counts, log_edges = np.histogram(np.log10(finite), bins=bins)
    # The outer edges are the smallest and largest scores: 10 ** log10(largest) may round past the largest float.
    inner = (10.0 ** log_edges[1:-1]).tolist()
    return Histogram([float(finite.min()), *inner, float(finite.max())], counts.tolist())


def check_positive(values: np.ndarray, name: str) -> None:
    """Refuse ``values`` that a log scale cannot show (any at or below 0), saying how many there are."""
    if (below := int((values <= 0).sum())) > 0:
        raise ValueError(f"A log scale needs positive scores: {below} of the {values.size} {name} are at or below 0.")


def average_ranks(values: np.ndarray) -> np.ndarray:
    """The rank of each value, 1 for the smallest; tied values share the average of their ranks.

    Example:
        >>> average_ranks(np.array([10.0, 20.0, 20.0, 5.0])).tolist()
        [2.0, 3.5, 3.5, 1.0]
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], values.size]
    group = np.repeat(np.arange(starts.size), ends - starts)
    ranks = np.empty(values.size)
    ranks[order] = ((starts + 1 + ends) / 2)[group]
    return ranks


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's correlation of two equally long arrays; NaN for fewer than two values or a constant one.

    Example:
        >>> pearson(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 7.0]))
        0.9933992677987828
    """
    if a.size < 2:
        return math.nan
    # The correlation does not change when a column is scaled by a power of two (exactly): huge scores are scaled
    # down before their mean is taken, and the deviations to below 1, so no sum or product overflows.
    a, b = (values - values.mean() for values in (np.ldexp(a, -safe_exponent(a)), np.ldexp(b, -safe_exponent(b))))
    a, b = (np.ldexp(values, -math.frexp(float(np.abs(values).max(initial=0.0)))[1]) for values in (a, b))
    scale = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float(np.clip((a * b).sum() / scale, -1.0, 1.0)) if scale > 0 else math.nan


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's of the average ranks.

    Example:
        >>> spearman(np.array([1.0, 2.0, 3.0]), np.array([1.0, 8.0, 27.0]))
        1.0
    """
    return pearson(average_ranks(a), average_ranks(b)) if a.size else math.nan


def best_first_ranks(values: np.ndarray, highest: bool = True) -> np.ndarray:
    """Each value's rank, 1 for the best (the highest, or the lowest); ties in input order, as
    ``select`` breaks them.

    Example:
        >>> best_first_ranks(np.array([0.5, 0.9, 0.5])).tolist()
        [2, 1, 3]
    """
    order = np.argsort(-values if highest else values, kind="stable")
    ranks = np.empty(values.size, dtype=int)
    ranks[order] = np.arange(1, values.size + 1)
    return ranks


def check_same_rows(a: ScoreColumn, b: ScoreColumn) -> None:
    """Refuse two score files that are not of the same rows in the same order, naming the first row
    (counting from 0) whose ids differ; ids are compared as JSON score files write them (a null id as
    ``""``), so a JSONL file and a Parquet folder of the same rows agree."""
    if len(a.ids) != len(b.ids):
        raise ValueError(f"{a.source} has {len(a.ids)} rows and {b.source} {len(b.ids)}: they score other rows.")
    for row, (id_a, id_b) in enumerate(zip(a.ids, b.ids, strict=True)):
        if written_id(id_a) != written_id(id_b):
            raise ValueError(f"The files score other rows, or the rows in another order: row {row} has the id "
                             f"{id_a!r} in {a.source} and {id_b!r} in {b.source}.")


def top_k_overlaps(a: np.ndarray, b: np.ndarray, ks: Sequence[int], highest: bool = True) -> list[TopOverlap]:
    """For each k up to the number of rows, how many rows the top k of ``a`` and of ``b`` share,
    each file's top k kept as ``select --top-n k`` keeps them (rows without a score left out).

    Example:
        >>> top_k_overlaps(np.array([4.0, 3.0, 2.0, 1.0]), np.array([4.0, 1.0, 3.0, 2.0]), [1, 2, 5])
        [TopOverlap(k=1, overlap=1, share=1.0, by_chance=0.25), TopOverlap(k=2, overlap=1, share=0.5, by_chance=1.0)]
    """
    ranked_a, ranked_b = (_best_first(values, highest) for values in (a, b))
    overlaps = []
    for k in (k for k in ks if k <= a.size):
        overlap = len(set(ranked_a[:k]) & set(ranked_b[:k]))
        overlaps.append(TopOverlap(k, overlap, overlap / k, k * k / a.size))
    return overlaps


def _best_first(values: np.ndarray, highest: bool) -> list[int]:
    """The rows with a score, best first, as ``select`` orders them (NaN left out, infinities kept)."""
    kept = np.flatnonzero(~np.isnan(values))
    return kept[np.argsort(-values[kept] if highest else values[kept], kind="stable")].tolist()


def rank_moves(a: ScoreColumn, b: ScoreColumn, rows: np.ndarray, count: int, highest: bool = True) -> list[RankMove]:
    """The ``count`` of ``rows`` whose best-first rank among ``rows`` moved most from A to B (ties in input order)."""
    rank_a, rank_b = (best_first_ranks(column.values[rows], highest) for column in (a, b))
    largest = np.argsort(-np.abs(rank_a - rank_b), kind="stable")[:count]
    return [RankMove(int(rows[i]), a.ids[rows[i]], float(a.values[rows[i]]), float(b.values[rows[i]]),
                     int(rank_a[i]), int(rank_b[i])) for i in largest]


def compare_scores(a: ScoreColumn, b: ScoreColumn, top_k: Sequence[int] = (10, 100, 1000), moved: int = 10,
                   highest: bool = True) -> Comparison:
    """Compare two scorings of the same rows (a ValueError if they are not): correlations and rank
    moves over the rows with a finite score in both, and the overlap of their top-k selections.

    Example:
        >>> a = ScoreColumn("a.jsonl", "score", ["x", "y", "z"], np.array([1.0, 2.0, 3.0]))
        >>> b = ScoreColumn("b.jsonl", "score", ["x", "y", "z"], np.array([2.0, 1.0, float("nan")]))
        >>> result = compare_scores(a, b, top_k=[1], moved=1)
        >>> result.compared, result.left_out_b, result.spearman, result.moved[0].id
        (2, 1, -1.0, 'x')
    """
    check_same_rows(a, b)
    finite_a, finite_b = np.isfinite(a.values), np.isfinite(b.values)
    rows = np.flatnonzero(finite_a & finite_b)
    return Comparison(
        rows=len(a.ids), compared=int(rows.size), left_out_a=int((~finite_a).sum()), left_out_b=int((~finite_b).sum()),
        spearman=spearman(a.values[rows], b.values[rows]), pearson=pearson(a.values[rows], b.values[rows]),
        highest=highest, top_k=top_k_overlaps(a.values, b.values, top_k, highest),
        moved=rank_moves(a, b, rows, moved, highest),
    )
