"""The engines behind ``hf-adapters score``: their registry, and the guide docs/guides/adding_an_engine.md
followed once. A throwaway engine (this process, last chunk first), registered in a test, writes through
``hf-adapters score --engine NAME`` the very file the local engine writes; a Python caller plans a job
and runs it without the command line."""

from __future__ import annotations

import sys
import time

import pytest

from hf_adapters import cli
from hf_adapters.core.options import DEFAULT_BATCH_SIZE, positive_int
from hf_adapters.engines import (
    BUILTIN_ENGINES,
    ENGINES,
    Engine,
    JobSummary,
    LocalEngine,
    RayEngine,
    ScoringJob,
    engine_class,
    engine_names,
    register_engine,
)
from hf_adapters.engines.chunks import score_chunk
from hf_adapters.engines.job_files import (
    check_dataset,
    iter_rows,
    output_schema,
    rows_of,
    score_schema,
    scored_record,
)
from hf_adapters.files.score_files import records, write_output
from tests.engines.test_local import LengthRatioScorer, make_rows, write_jsonl  # noqa: F401  (registers the scorer)


class ReversedChunksEngine(Engine):
    """Step 1: an engine that scores the job's chunks in this process, the last one first, and writes
    them in input order."""

    name = "reversed-chunks-test"
    summary = "this process, last chunk first (a test's engine)"
    title = "Reversed-chunks engine"
    description = "a test's engine: scores the last chunk first"

    def __init__(self, chunk_rows: int | None = None) -> None:
        self.chunk_rows = chunk_rows

    @classmethod
    def add_arguments(cls, group):
        """Step 3: its own option, default None."""
        group.add_argument("--chunk-rows", type=positive_int, default=None, metavar="N",
                           help="rows per chunk (default: the config's batch_size)")

    @classmethod
    def from_arguments(cls, args):
        return cls(args.chunk_rows)

    def run(self, job: ScoringJob) -> JobSummary:
        """Step 2: check, score, write what every engine writes."""
        started = time.perf_counter()
        if job.streaming:
            raise ValueError("--streaming does not apply to --engine reversed-chunks-test.")
        job.check_output()
        scorer = job.build_scorer()
        job = job.with_stored_types()
        dataset = job.read_rows()
        columns = job.output_format.columns_of(scorer.outputs)
        check_dataset(dataset, scorer, job.output_format, columns)
        schema = output_schema(dataset, job.output_format, score_schema(scorer, columns))
        size = self.chunk_rows or scorer.config.get("batch_size") or DEFAULT_BATCH_SIZE
        starts = range(0, len(dataset), size)
        cells = {}
        for start in reversed(starts):
            rows = rows_of(dataset, start, min(start + size, len(dataset)))
            cells[start] = score_chunk(scorer, rows, start, columns)
        in_order = (row_cells for start in starts for row_cells in cells[start])
        scored = (scored_record(row, index, row_cells)
                  for index, (row, row_cells) in enumerate(zip(iter_rows(dataset), in_order, strict=True)))
        rows = iter_rows(dataset) if job.output_format.keep_columns else None
        valid = write_output(job.output_path, job.output_format, records(scored, rows, list(columns.values())),
                             schema)
        return JobSummary(len(dataset), valid, time.perf_counter() - started, len(dataset))

    def interrupted_message(self, job: ScoringJob) -> str:
        return "Interrupted: nothing was saved (this engine does not resume); the same command starts again."


@pytest.fixture
def registered():
    """Step 4: the engine registered under its name, and taken out again after the test."""
    register_engine(ReversedChunksEngine)
    yield ReversedChunksEngine.name
    ENGINES.pop(ReversedChunksEngine.name)


@pytest.fixture
def job_files(tmp_path):
    """Ten rows, four of them in a last, short chunk of one, and a config of chunks of three."""
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(10))
    config = tmp_path / "ratio.yaml"
    config.write_text("name: LengthRatioScorer\nbatch_size: 3\n", encoding="utf-8")
    return str(config), str(data)


def score(config: str, data: str, output, *extra: str) -> int:
    return cli.main(["score", config, "--data", data, "--output", str(output), "--no-progress", *extra])


def written(output) -> bytes | dict[str, bytes]:
    """The bytes of an output: of its file, or of each file of its folder of Parquet shards."""
    if output.is_dir():
        return {file.name: file.read_bytes() for file in sorted(output.iterdir())}
    return output.read_bytes()


def test_the_built_in_engines_are_registered_by_name_and_accelerate_names_the_local_one():
    assert BUILTIN_ENGINES == {"local": LocalEngine, "ray": RayEngine}
    assert engine_class("local") is engine_class("accelerate") is LocalEngine and engine_class("ray") is RayEngine
    with pytest.raises(ValueError, match=r"Unknown engine 'slurm'; valid engines: \['local', 'ray'\]"):
        engine_class("slurm")


@pytest.mark.parametrize("name", ["local", "accelerate", "ray"])
def test_a_built_in_engines_name_cannot_be_taken(name):
    impostor = type("Impostor", (ReversedChunksEngine,), {"name": name})
    with pytest.raises(ValueError, match=f"cannot be registered as the engine '{name}'"):
        register_engine(impostor)
    assert ENGINES == BUILTIN_ENGINES


def test_an_engine_without_a_name_cannot_be_registered():
    with pytest.raises(ValueError, match="needs a `name`"):
        register_engine(type("Nameless", (ReversedChunksEngine,), {"name": ""}))


@pytest.mark.parametrize("flags", [[], ["--output-format", "parquet", "--keep-columns", "--score-columns", "all"]])
def test_a_registered_engine_writes_the_local_engines_file_from_the_command_line(registered, job_files, tmp_path,
                                                                                 flags, capsys):
    config, data = job_files
    assert score(config, data, tmp_path / "local.out", *flags) == 0
    assert score(config, data, tmp_path / "reversed.out", *flags, "--engine", registered) == 0
    assert score(config, data, tmp_path / "pairs.out", *flags, "--engine", registered, "--chunk-rows", "2") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("10 rows, 7 valid scores")
    local = written(tmp_path / "local.out")
    assert written(tmp_path / "reversed.out") == local and written(tmp_path / "pairs.out") == local


def test_the_help_lists_a_registered_engine_and_its_options(registered, capsys):
    with pytest.raises(SystemExit):
        cli.main(["score", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"--engine {{local,ray,{registered}}}" in help_text
    assert f"{registered}: this process, last chunk first" in help_text
    assert "Reversed-chunks engine: a test's engine" in help_text and "--chunk-rows N" in help_text


def test_an_engines_options_are_refused_with_another_engine(registered, job_files, tmp_path, capsys):
    config, data = job_files
    assert score(config, data, tmp_path / "o.jsonl", "--chunk-rows", "2") == 2
    assert capsys.readouterr().err.strip() == f"error: --chunk-rows: only with --engine {registered}."
    assert not (tmp_path / "o.jsonl").exists()


def test_a_python_caller_plans_a_job_and_runs_it_into_the_command_lines_file(job_files, tmp_path):
    config, data = job_files
    assert score(config, data, tmp_path / "cli.jsonl") == 0
    job = ScoringJob.plan(config, data=data, output=tmp_path / "python.jsonl", progress=False)
    summary = LocalEngine().run(job)
    assert (summary.rows, summary.valid, summary.scored) == (10, 7, 10)
    assert (tmp_path / "python.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()


def test_a_job_takes_the_commands_overrides_over_its_config():
    job = ScoringJob.plan({"name": "LengthRatioScorer", "batch_size": 3, "score_columns": "all"}, data="d.jsonl",
                          output="o.parquet", output_format="parquet", batch_size=5)
    assert job.config == {"name": "LengthRatioScorer", "batch_size": 5}
    assert (job.output_format.kind, job.output_format.score_columns) == ("parquet", "all")
    with pytest.raises(ValueError, match=r"the config: `score_columns` takes all"):
        ScoringJob.plan({"name": "LengthRatioScorer", "score_columns": 3}, data="d.jsonl", output="o.jsonl")


@pytest.fixture
def engines_kept():
    """The registry of engines as it was, and no user module imported, after the test."""
    before = dict(ENGINES)
    yield
    ENGINES.clear()
    ENGINES.update(before)
    for module in ("plugin_engine", "installed_engine"):
        sys.modules.pop(module, None)


def test_an_engine_a_plugin_module_registers_is_taken_by_engine_with_its_options(job_files, tmp_path, monkeypatch,
                                                                                  engines_kept):
    (tmp_path / "plugin_engine.py").write_text(
        "from hf_adapters.engines import register_engine\n"
        "from tests.engines.test_engines import ReversedChunksEngine\n\n"
        "register_engine(type('PluginEngine', (ReversedChunksEngine,), {'name': 'plugin-reversed'}))\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    config, data = job_files
    assert score(config, data, tmp_path / "local.jsonl") == 0
    assert score(config, data, tmp_path / "plugin.jsonl", "--plugin", "plugin_engine", "--engine", "plugin-reversed",
                 "--chunk-rows", "2") == 0
    assert written(tmp_path / "plugin.jsonl") == written(tmp_path / "local.jsonl")


def test_an_engine_an_installed_package_declares_is_found_by_its_entry_point(job_files, tmp_path, monkeypatch,
                                                                             engines_kept, capsys):
    (tmp_path / "installed_engine.py").write_text(
        "from tests.engines.test_engines import ReversedChunksEngine\n\n"
        "class InstalledEngine(ReversedChunksEngine):\n    name = 'installed-reversed'\n", encoding="utf-8")
    info = tmp_path / "installed_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: installed-engine\nVersion: 1.0\n", encoding="utf-8")
    declared = "[hf_adapters.engines]\ninstalled-reversed = installed_engine:InstalledEngine\n"
    (info / "entry_points.txt").write_text(declared, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "installed-reversed" in engine_names() and "installed-reversed" not in ENGINES  # nothing imported yet
    config, data = job_files
    assert score(config, data, tmp_path / "local.jsonl") == 0
    assert score(config, data, tmp_path / "installed.jsonl", "--engine", "installed-reversed", "--chunk-rows", "2") == 0
    assert written(tmp_path / "installed.jsonl") == written(tmp_path / "local.jsonl")
    assert score(config, data, tmp_path / "none.jsonl", "--engine", "slurm") == 2
    assert "Unknown engine 'slurm'; valid engines: ['installed-reversed', 'local', 'ray'" in capsys.readouterr().err


def test_a_job_summary_of_one_row_speaks_in_the_singular():
    assert str(JobSummary(rows=1, valid=1, seconds=2.0, scored=1)) == "1 row, 1 valid score, 0.5 rows/s"
    assert str(JobSummary(rows=2, valid=0, seconds=1.0, scored=2)).startswith("2 rows, 0 valid scores, ")
