"""What every engine of a scoring job shares: the summary it returns, what a job is (its manifest, and
what makes two manifests two jobs), the record of finished jobs, the rows' checks and the output's schema.

A job writing ``OUTPUT`` keeps its partial results in its work folder, ``OUTPUT.parts/``
(:class:`~hf_adapters.engines.work_folder.WorkFolder`). A finished job is recorded
in the cache folder (:func:`hf_adapters.backends.loading.cache_folder`, under ``jobs/``), by the
output's path: what the job is (its manifest, :func:`job_manifest`), and the size and modification
time of what it wrote, so that any engine running the same job again finds its output unchanged and
does nothing (:func:`finished_job`).

Importing this module imports neither torch nor ``datasets``: the command line's ``--help`` builds the
engines' options without them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_adapters.core.options import DEFAULT_ENGINE
from hf_adapters.core.wording import plural
from hf_adapters.files.data_io import row_id
from hf_adapters.files.json_values import json_safe, jsonable, remove_temporary_files, to_json_value, write_atomically
from hf_adapters.files.score_files import SCORE, OutputFormat

if TYPE_CHECKING:
    from datasets import Dataset, IterableDataset

    from hf_adapters.scorers import RowScorer

logger = logging.getLogger(__name__)

#: Rows converted to dicts at a time when checking a data set before scoring.
CHECK_CHUNK_SIZE = 10_000
#: The folder of the cache (:func:`~hf_adapters.backends.loading.cache_folder`) recording finished jobs.
FINISHED_JOBS = "jobs"
#: The key of a Ray job's manifest saying how its parts hold the output's records (:func:`part_layout`).
PARTS = "parts"
#: The key of a Ray job's manifest saying whether its Parquet output is the parts themselves, a file per block.
FILE_PER_BLOCK = "file_per_block"
#: The key of a job's completion record (``complete.json``) giving the format its output was written in.
WRITTEN_FORMAT = "format"


@dataclass(frozen=True)
class JobSummary:
    """What a scoring job did.

    Attributes:
        rows: rows in the data set (all of them are in the output).
        valid: rows with a finite score (the others are written as ``null``).
        seconds: wall time of this run.
        scored: rows scored by this run; the others came from an earlier run (interrupted, or finished).
        skipped: the output was already this job's, complete and unchanged: this run did nothing.

    Example:
        >>> print(JobSummary(rows=23, valid=20, seconds=2.0, scored=23))
        23 rows, 20 valid scores, 11.5 rows/s
    """

    rows: int
    valid: int
    seconds: float
    scored: int
    skipped: bool = False

    @property
    def rows_per_second(self) -> float:
        """The rows this run scored per second of it (rows an earlier run saved are not counted)."""
        return self.scored / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        done = f"{plural(self.rows, 'row')}, {plural(self.valid, 'valid score')}"
        if self.scored == self.rows:
            return f"{done}, {self.rows_per_second:.1f} rows/s"
        if not self.scored:
            return f"{done}, all scored by an earlier run"
        return f"{done}; this run scored {self.scored} of them, {self.rows_per_second:.1f} rows/s"


def job_manifest(scorer: RowScorer, data: str, rows: int | None, chunk_size: int | None,
                 columns: Mapping[str, str]) -> dict[str, Any]:
    """What a job is, as its manifest records it: the scorer's config (less the batch size and token
    budget) and columns, the model's identity, the data's fingerprint and row count (None for a stream),
    the chunk size it starts with and the score ``columns`` it writes. Batch size, token budget and
    process count are not part of the job: scores do not depend on them. A model the job cannot identify (an object, a
    backend whose identity() is None) makes results no run ever reuses."""
    identity = scorer.model_identity()
    return jsonable({
        "scorer": {key: value for key, value in scorer.fingerprint().items()
                   if key not in ("batch_size", "max_batch_tokens")},
        "model": identity,
        "identified": identity is not None or not scorer.runs_model,
        "data": data,
        "rows": rows,
        "chunk_size": chunk_size,
        **({"columns": list(columns.values())} if len(columns) > 1 else {}),
    })


def same_job(old: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether two manifests describe one job: its rows read as a stream (whose count is not known
    up front) or not make no difference."""
    same = all(old.get(key) == manifest[key] for key in ("scorer", "model", "data")) and same_rows(old, manifest)
    return same and old.get("identified", True) and manifest["identified"] and same_columns(old, manifest)


def same_rows(old: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether two jobs' row counts agree, where both are known."""
    return old.get("rows") is None or manifest["rows"] is None or old.get("rows") == manifest["rows"]


def same_columns(old: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether two jobs write the same score columns, in whatever order."""
    return sorted(manifest_columns(old)) == sorted(manifest_columns(manifest))


def manifest_columns(manifest: Mapping[str, Any]) -> list[str]:
    """The score columns a manifest's job writes: ``score``, and those it records beside it."""
    return manifest.get("columns") or [SCORE]


def job_changes(old: Mapping[str, Any], manifest: Mapping[str, Any]) -> str:
    """What makes the job of the manifest ``old`` another than that of ``manifest``, in words, for the
    message refusing to mix their results: its scorer (a score set's members), model, data (its row
    count, or its content where the count is the same) or score columns (what :func:`same_job`
    compares), what a Ray job's parts hold (:func:`part_changes`), or the engine that started it
    (``its manifest differs`` where none of them does)."""
    reasons = [*_scorer_changes(old.get("scorer"), manifest["scorer"])]
    if not (old.get("identified", True) and manifest["identified"]):
        reasons.append("the model has no identity (a model object, or a backend whose identity() is None), so "
                       "nothing can tell that its results are this model's")
    elif _models(old.get("model")) != _models(manifest["model"]):
        reasons.append("the model changed (its weight files, or the dtype or device type it scores in)")
    if not same_rows(old, manifest):
        reasons.append(f"the input data changed ({old.get('rows')} rows before, {manifest['rows']} now)")
    elif old.get("data") != manifest["data"]:
        rows = manifest["rows"]
        same = f", the same {plural(rows, 'row')}" if rows is not None and old.get("rows") == rows else ""
        reasons.append(f"the input data changed: its content differs (another fingerprint{same})")
    if not same_columns(old, manifest):
        reasons.append(f"the score columns changed (were {', '.join(manifest_columns(old))}, now "
                       f"{', '.join(manifest_columns(manifest))})")
    if PARTS in manifest:
        reasons += part_changes(old.get(PARTS), manifest[PARTS])
    if (engine := old.get("engine", DEFAULT_ENGINE)) != manifest.get("engine", DEFAULT_ENGINE):
        reasons.append(f"it was started with --engine {engine}, whose partial results this engine cannot resume")
    return "; ".join(reasons) or "its manifest differs"


def _scorer_changes(old: Any, new: Mapping[str, Any]) -> list[str]:
    """How the scorer config ``old`` differs from ``new``: for two score sets, which members came or went
    (by name), or which member's config or the shared options changed; else the whole configs."""
    if old == new:
        return []
    if not (isinstance(old, dict) and _is_score_set(old) and _is_score_set(new)):
        return [f"the scorer config changed (was {old}, now {new})"]
    names = [[member.get("name") for member in config["scores"]] for config in (old, new)]
    if names[0] != names[1]:
        return [f"the score set's members changed (were {', '.join(map(str, names[0]))}, now "
                f"{', '.join(map(str, names[1]))})"]
    reasons = [f"the config of its member {name} changed (was {before}, now {after})"
               for name, before, after in zip(names[1], old["scores"], new["scores"], strict=True) if before != after]
    shared = [{key: value for key, value in config.items() if key != "scores"} for config in (old, new)]
    if shared[0] != shared[1]:
        reasons.append(f"the score set's shared options changed (were {shared[0]}, now {shared[1]})")
    return reasons


def _is_score_set(config: Mapping[str, Any]) -> bool:
    return isinstance(config.get("scores"), list) and all(isinstance(member, dict) for member in config["scores"])


def _models(identity: Any) -> list[Any]:
    """The distinct models an identity names: a score set's members' (``{"members": [...]}``), each once,
    so that a set that drops a member is not taken for one of another model."""
    if not (isinstance(identity, dict) and set(identity) == {"members"} and isinstance(identity["members"], list)):
        return [identity]
    return sorted({json.dumps(member, sort_keys=True) for member in identity["members"]})


def part_changes(old: Any, parts: Mapping[str, Any]) -> list[str]:
    """What of a Ray job's output its parts (:func:`part_layout`) hold otherwise than this run writes it,
    in words, each naming the option: the format, the rows' own columns, the score columns' order
    (its parts hold the output's records as written); none where they hold it as this run does."""
    if old == parts:
        return []
    if not isinstance(old, dict):
        return ["its parts do not say how they hold the output's records (an earlier version wrote them)"]
    reasons = []
    if old.get("format") != parts["format"]:
        reasons.append(f"it was started with --output-format {old.get('format')}, and its parts hold the records "
                       "as that format writes them")
    if bool(old.get("keep_columns")) != parts["keep_columns"]:
        reasons.append(f"it was started {'with' if old.get('keep_columns') else 'without'} --keep-columns, and its "
                       f"parts hold the records {'with' if old.get('keep_columns') else 'without'} the rows' columns")
    if old.get("columns") != parts["columns"] and sorted(old.get("columns") or []) == sorted(parts["columns"]):
        reasons.append(f"it was started with the score columns in another order ({', '.join(old['columns'])}; "
                       f"--score-columns), and its parts hold them in that order")
    return reasons


def part_layout(output: OutputFormat, columns: Mapping[str, str]) -> dict[str, Any]:
    """How a Ray job's parts hold the output's records (recorded in its manifest as :data:`PARTS`): the
    output's format, with the rows' own columns or not, and the score ``columns`` (output -> column) in
    order. A run that would write them otherwise does not resume the job."""
    return {"format": output.kind, "keep_columns": output.keep_columns, "columns": list(columns.values())}


def finished_job(output_path: Path, output: OutputFormat, manifest: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(rows, valid scores)`` of ``output_path`` where it is the complete output of the job
    ``manifest`` describes, written in the format ``output`` asks for (the score columns in the
    manifest's order; a Parquet output as shards, or as a file per block where the manifest says
    :data:`FILE_PER_BLOCK`) and unchanged since (its size and modification time are those recorded
    when it was written); else None."""
    record = _finished_record_of(output_path, output, manifest)
    if record is None or bool(record["job"].get(FILE_PER_BLOCK)) != bool(manifest.get(FILE_PER_BLOCK)):
        return None
    return record["rows"], record["valid"]


def finished_in_other_layout(output_path: Path, output: OutputFormat, manifest: Mapping[str, Any]) -> str | None:
    """The message refusing to score the job ``manifest`` describes again only because its complete,
    unchanged Parquet output is a file per block (``--engine ray --file-per-block``) where shards are
    asked for, or the reverse: it says which it is, and how to keep it or get the other; else None."""
    record = _finished_record_of(output_path, output, manifest)
    if record is None or (per_block := bool(record["job"].get(FILE_PER_BLOCK))) == bool(manifest.get(FILE_PER_BLOCK)):
        return None
    if per_block:
        return (f"{output_path} is already this job's complete output, as one Parquet file per block (written with "
                "--engine ray --file-per-block): add --file-per-block to leave it so, or pass --overwrite to score it "
                "again into shards of --rows-per-shard rows.")
    return (f"{output_path} is already this job's complete output, as Parquet shards of --rows-per-shard rows: run "
            "without --file-per-block to leave it so, or pass --overwrite to score it again as one file per block.")


def _finished_record_of(output_path: Path, output: OutputFormat, manifest: Mapping[str, Any]) -> dict | None:
    """The record of ``output_path`` as the finished job ``manifest`` describes wrote it in the format
    ``output`` asks for (the score columns in the manifest's order), unchanged since; None where it is not."""
    record = read_json(_finished_record(output_path))
    if not (isinstance(record, dict) and isinstance(record.get("job"), dict) and output.is_complete(output_path)):
        return None
    try:
        unchanged = record.get("format") == format_record(output) and record.get("stamp") == _stamp(output_path)
    except OSError:  # removed meanwhile
        return None
    same = same_job(record["job"], manifest) and manifest_columns(record["job"]) == manifest_columns(manifest)
    return record if unchanged and same else None


def record_finished_job(output_path: Path, output: OutputFormat, manifest: Mapping[str, Any], rows: int,
                        valid: int) -> None:
    """Record that ``output_path`` is now the complete output of the job ``manifest`` describes (for
    :func:`finished_job`). Where the cache folder cannot be written, nothing is recorded: a rerun
    then scores the rows again."""
    path = _finished_record(output_path)
    try:
        record = {"output": str(output_path.absolute()), "job": {**manifest, "rows": rows},
                  "format": format_record(output), "stamp": _stamp(output_path), "rows": rows, "valid": valid}
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_temporary_files(path.parent, of=path.name)  # a killed write's (this output's lock is held)
        write_atomically(path, json.dumps(record, sort_keys=True))
    except OSError as error:
        logger.debug("cannot record the finished job in %s: %s", path, error)


def _finished_record(output_path: Path) -> Path:
    """Where the record of the finished job writing ``output_path`` is kept: by its absolute path."""
    from hf_adapters.backends.loading import cache_folder

    key = hashlib.sha256(str(output_path.resolve()).encode()).hexdigest()[:32]
    return cache_folder() / FINISHED_JOBS / f"{key}.json"


def format_record(output: OutputFormat) -> dict[str, Any]:
    """What of an output's format changes the output (the score columns are in the manifest): what a
    job's completion record (``complete.json``) says of its output, under :data:`WRITTEN_FORMAT`."""
    return {"kind": output.kind, "keep_columns": output.keep_columns, "rows_per_shard": output.rows_per_shard}


def written_in(complete: Mapping[str, Any], output: OutputFormat) -> bool:
    """Whether the output a job's completion record ``complete`` describes was written in the format
    ``output`` asks for (a record of an earlier version, which does not say, is taken at its word)."""
    return complete.get(WRITTEN_FORMAT, format_record(output)) == format_record(output)


def _stamp(path: Path) -> list[list[Any]]:
    """The name, size and modification time of the output file (of each file of an output folder)."""
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    return [[file.name, (stat := file.stat()).st_size, stat.st_mtime_ns] for file in files]


def read_json(path: Path) -> Any:
    """The value of a JSON file a job wrote (atomically); None where there is none."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_stream(dataset: Dataset | IterableDataset) -> bool:
    """Whether ``dataset`` is read as it goes (an ``IterableDataset``: no length, no random access)."""
    from datasets import IterableDataset

    return isinstance(dataset, IterableDataset)


def column_names(dataset: Dataset | IterableDataset) -> list[str]:
    """The data's columns (of a stream that does not say them, those of its first row)."""
    names = dataset.column_names
    return list(next(iter(dataset), {})) if names is None else names


def check_dataset(dataset: Dataset | IterableDataset, scorer: RowScorer, output: OutputFormat,
                  columns: Mapping[str, str]) -> None:
    """Before anything is scored: adapt ``scorer`` to the data's columns, refuse a data column that
    ``output`` would overwrite with one of the score ``columns`` (output -> column), and check every
    row of a ``Dataset`` with ``scorer.check_rows`` (a ValueError names the first bad row). A
    stream's rows are checked as they are read."""
    names = column_names(dataset)
    scorer.use_columns(names)
    if output.keep_columns and (taken := [column for column in columns.values() if column in names]):
        raise ValueError(f"The data has a column {taken[0]!r}: with keep_columns the scores would replace it.")
    if not is_stream(dataset):
        for start in range(0, len(dataset), CHECK_CHUNK_SIZE):
            scorer.check_rows(rows_of(dataset, start, min(start + CHECK_CHUNK_SIZE, len(dataset))), start)


def rows_of(dataset: Dataset, start: int, stop: int) -> list[dict[str, Any]]:
    """Rows ``start`` to ``stop`` (excluded) of ``dataset``, each as a dict."""
    columns = dataset[start:stop]
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def iter_rows(dataset: Dataset | IterableDataset) -> Iterator[dict[str, Any]]:
    """Every row of ``dataset`` as a dict, in order, read a chunk of columns at a time."""
    for batch in dataset.iter(batch_size=CHECK_CHUNK_SIZE):
        yield from (dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True))


def scored_record(row: Mapping[str, Any], index: int, cells: Mapping[str, Any]) -> dict[str, Any]:
    """What an output holds of row ``index``: its id as JSON holds it (its row number where it has none)
    and its score ``cells`` (column -> value), NaN and infinities as None.

    Example:
        >>> scored_record({"text": "Hi."}, 3, {"score": float("nan")})
        {'id': 3, 'score': None}
    """
    return {"id": to_json_value(row_id(row, index)), **json_safe(dict(cells))}


def score_schema(scorer: RowScorer, columns: Mapping[str, str]) -> Any:
    """The Parquet types of the score ``columns`` (output -> column): a float64 ``score``, the other
    outputs of the types the scorer declares (:meth:`~hf_adapters.scorers.RowScorer.output_features`)."""
    from datasets import Features, Value

    features = scorer.output_features()
    first = next(iter(columns))
    return Features({column: Value("float64") if output == first else features[output]
                     for output, column in columns.items()}).arrow_schema.remove_metadata()


def output_schema(dataset: Dataset | IterableDataset, output: OutputFormat, scores: Any) -> Any:
    """The Parquet schema of an output: keeping the rows' columns, theirs, of the types the data holds
    (those ``output.column_types`` names, as the source stores them), then the score columns of the
    types ``scores`` gives (:func:`score_schema`); without them, the id's type (:func:`id_type`)
    and ``scores``. A stream that does not say its types is read once to learn them, so that a
    column empty in its first rows still gets the type of its later values; types that cannot be
    reconciled are a ValueError. None for JSONL."""
    if output.kind != "parquet":
        return None
    import pyarrow as pa

    columns = dataset.features.arrow_schema if dataset.features is not None else _stream_schema(dataset)
    if not output.keep_columns:
        written = id_type(columns.field("id").type if "id" in columns.names else None)
        return pa.schema([pa.field("id", written), *scores]) if written is not None else scores
    if output.column_types is not None:
        source = output.column_types
        columns = pa.schema([source.field(field.name) if field.name in source.names else field
                             for field in columns])
    return pa.schema([*columns.remove_metadata(), *scores])


def id_type(stored: Any) -> Any:
    """The Parquet type of the ids a job writes, for an id column of the pyarrow type ``stored``
    (None: the data has none, and its rows are written with their numbers, int64): a number, a
    boolean, text or nulls as they are; other scalars (dates, bytes, decimals) as the text
    :func:`~hf_adapters.files.json_values.to_json_value` makes of them; None (the first shard's type) for
    nested values."""
    import pyarrow as pa

    if stored is None:
        return pa.int64()
    if pa.types.is_nested(stored):
        return None
    plain = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
             pa.types.is_large_string, pa.types.is_null)
    return stored if any(kind(stored) for kind in plain) else pa.string()


def _stream_schema(dataset: IterableDataset) -> Any:
    """The types of a stream's columns, unified over all its rows (null promoted to any type)."""
    import pyarrow as pa

    schema = None
    for start, batch in enumerate(dataset.iter(batch_size=CHECK_CHUNK_SIZE)):
        try:
            types = pa.Table.from_pydict(batch).schema
            schema = types if schema is None else pa.unify_schemas([schema, types], promote_options="permissive")
        except (pa.ArrowException, OverflowError) as error:
            raise ValueError(f"The rows' columns cannot be kept in Parquet: from row {start * CHECK_CHUNK_SIZE} on, "
                             f"{error}") from None
    return schema if schema is not None else pa.schema([])
