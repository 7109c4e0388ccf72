"""Issue "The command line a curator lives in": every output of a scorer as columns of a job's output
(``--score-columns``), Ctrl-C as one line and exit status 130, progress bars with a total where it
is cheap to know, ``--engine local`` and ``--device``, and a Ray engine that prints no false alarms."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from hf_adapters import add_ifd_column, cli
from hf_adapters.columns import dataset_columns as columns
from hf_adapters.engines.local import run_scoring_job, saved_rows
from hf_adapters.engines.work_folder import JobConflictError, work_dir_for
from hf_adapters.files.score_files import OutputFormat
from hf_adapters.scorers import RowScorer, register_scorer
from tests.conftest import read_jsonl, write_jsonl
from tests.engines.test_local import REPO, launcher, run_env

TEXTS = ["ab", "", "a b", "xyz", "hello", " "]


@register_scorer
class ShapeScorer(RowScorer):
    """Outputs of each kind, without a model: the output's length (NaN when empty), half of it, its
    letters (a list of strings) and each letter's code point / 100 (a list of floats, NaN for a space)."""

    name = "ShapeScorer"
    options = {"batch_size": 2}
    roles = {"output": "output"}
    text_roles = ("output",)
    outputs = ("length", "half", "letters", "codes")
    output_types = {"letters": ["string"], "codes": ["float64"]}

    def score_batch(self, batch, first_row=0):
        texts = self.read_texts(batch, first_row)["output"]
        lengths = [float(len(text)) if text else math.nan for text in texts]
        return {"length": lengths, "half": [length / 2 for length in lengths],
                "letters": [list(text) for text in texts],
                "codes": [[math.nan if letter == " " else ord(letter) / 100 for letter in text] for text in texts]}


class ShapeCrashAfter(ShapeScorer):
    """Dies (like a killed process) once it has scored ``rows`` rows; same name and config as its parent."""

    def __init__(self, rows: int, **config):
        super().__init__(**config)
        self.limit, self.scored = rows, 0

    def score_batch(self, batch, first_row=0):
        if self.scored >= self.limit:
            raise KeyboardInterrupt
        self.scored += len(batch["output"])
        return super().score_batch(batch, first_row)


def expected_all(texts=TEXTS) -> list[dict]:
    """The lines of ``--score-columns all`` for rows of ``texts``."""
    return [{"id": f"r{i}", "score": float(len(text)) if text else None, "half": len(text) / 2 if text else None,
             "letters": list(text), "codes": [None if letter == " " else ord(letter) / 100 for letter in text]}
            for i, text in enumerate(texts)]


@pytest.fixture
def data(tmp_path) -> Path:
    return write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "output": text} for i, text in enumerate(TEXTS)])


def shape_config(tmp_path, extra: str = "") -> str:
    path = tmp_path / "shape.yaml"
    path.write_text(f"name: ShapeScorer\n{extra}", encoding="utf-8")
    return str(path)


def score(config: str, data, output, *flags: str) -> int:
    return cli.main(["score", config, "--data", str(data), "--output", str(output), "--no-progress", *flags])


# ------------------------------------------------------------------------ 2: every output, as columns


def test_the_default_output_is_the_first_output_as_score_byte_for_byte(tmp_path, data):
    assert score(shape_config(tmp_path), data, tmp_path / "default.jsonl") == 0
    assert read_jsonl(tmp_path / "default.jsonl") == [{"id": line["id"], "score": line["score"]}
                                                     for line in expected_all()]
    assert score(shape_config(tmp_path), data, tmp_path / "first.jsonl", "--score-columns", "length") == 0
    assert (tmp_path / "first.jsonl").read_bytes() == (tmp_path / "default.jsonl").read_bytes()


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_all_columns_are_written_in_jsonl_with_nan_as_null_in_lists_too(tmp_path, data, streaming):
    output = tmp_path / "all.jsonl"
    assert score(shape_config(tmp_path), data, output, "--score-columns", "all", *streaming) == 0
    assert read_jsonl(output) == expected_all()
    assert "NaN" not in output.read_text()


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
@pytest.mark.parametrize("keep", [[], ["--keep-columns"]])
def test_all_columns_are_written_in_parquet_with_their_types(tmp_path, data, streaming, keep):
    output = tmp_path / "all"
    flags = ["--score-columns", "all", "--output-format", "parquet", "--rows-per-shard", "4", *keep, *streaming]
    assert score(shape_config(tmp_path), data, output, *flags) == 0
    table = pa.concat_tables([pq.read_table(path) for path in sorted(output.glob("part-*.parquet"))])
    kept = [pa.field("output", pa.string())] if keep else []
    assert table.schema.remove_metadata() == pa.schema([
        pa.field("id", pa.string()), *kept, pa.field("score", pa.float64()), pa.field("half", pa.float64()),
        pa.field("letters", pa.list_(pa.string())), pa.field("codes", pa.list_(pa.float64()))])
    want = [{**line, **({"output": text} if keep else {})} for line, text in zip(expected_all(), TEXTS, strict=True)]
    assert table.to_pylist() == [{key: line[key] for key in table.column_names} for line in want]


def test_the_config_names_columns_in_its_order_and_the_option_overrides_it(tmp_path, data):
    config = shape_config(tmp_path, "score_columns: [codes, half]\n")
    assert score(config, data, tmp_path / "named.jsonl") == 0
    assert [list(line) for line in read_jsonl(tmp_path / "named.jsonl")] == [["id", "score", "codes", "half"]] * 6
    assert score(config, data, tmp_path / "override.jsonl", "--score-columns", "letters") == 0
    assert list(read_jsonl(tmp_path / "override.jsonl")[0]) == ["id", "score", "letters"]


@pytest.mark.parametrize("flags,message", [
    (["--score-columns", "half,nope"], "error: The scorer has no output 'nope'; its outputs are length, half, "
                                       "letters, codes (the first is written as `score`)."),
    (["--score-columns", "half,,codes"], None),
])
def test_an_output_the_scorer_lacks_is_refused_before_anything_is_read(tmp_path, data, capsys, flags, message):
    output = tmp_path / "o.jsonl"
    if message is None:
        with pytest.raises(SystemExit):
            score(shape_config(tmp_path), data, output, *flags)
        assert "expected all or output names separated by commas" in capsys.readouterr().err
        return
    assert score(shape_config(tmp_path), data, output, *flags) == 2
    assert capsys.readouterr().err.strip() == message
    assert not output.exists() and not work_dir_for(output).exists()


def test_a_data_column_named_like_an_output_is_refused_with_keep_columns(tmp_path, capsys):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "output": "ab", "half": 0.5}])
    assert score(shape_config(tmp_path), rows, tmp_path / "o.jsonl", "--score-columns", "all", "--keep-columns") == 2
    assert "The data has a column 'half': with keep_columns the scores would replace it." in capsys.readouterr().err


def test_a_job_of_all_columns_resumes_and_one_of_other_columns_is_refused(tmp_path):
    rows = Dataset.from_list([{"id": f"r{i}", "output": text} for i, text in enumerate(TEXTS)])
    output, every = tmp_path / "all.jsonl", OutputFormat(score_columns="all")
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, ShapeCrashAfter(rows=4, batch_size=2), output, progress=False, output=every,
                        save_every=2)
    work_dir = work_dir_for(output)
    parts = read_jsonl(work_dir / "rank-00000.jsonl")
    assert [list(line) for line in parts] == [["i", "id", "score", "half", "letters", "codes"]] * 4
    manifest = json.loads((work_dir / "manifest.json").read_text())
    assert manifest["columns"] == ["score", "half", "letters", "codes"]
    assert saved_rows(output) == (4, 6)
    with open(work_dir / "rank-00000.jsonl", "ab") as part:  # a kill in the middle of writing a chunk
        part.write(b'{"i": 4, "id": "r4", "score": 5.0, "half": 2.5, "letters": [], "codes": []}\n{"i": 5, "id')
    assert saved_rows(output) == (4, 6)

    with pytest.raises(JobConflictError, match=r"the score columns changed \(were score, half, letters, codes, "
                                               r"now score, half\)"):
        run_scoring_job(rows, ShapeScorer(), output, progress=False, output=OutputFormat(score_columns=["half"]))
    summary = run_scoring_job(rows, ShapeScorer(), output, progress=False, output=every)
    assert summary.scored == 2 and read_jsonl(output) == expected_all()


def test_ifd_writes_both_perplexities_and_the_token_losses(tmp_path, model_dir):
    rows = [{"id": f"r{i}", "instruction": "Say something.", "input": "", "output": "The quick brown fox. " * (i % 3)}
            for i in range(5)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = tmp_path / "ifd.yaml"
    config.write_text(f"name: IFDScorer\nmodel: {model_dir}\nmax_length: 64\nreturn_token_losses: true\n")
    assert score(str(config), data, tmp_path / "default.jsonl") == 0
    assert score(str(config), data, tmp_path / "all.jsonl", "--score-columns", "all") == 0
    lines = read_jsonl(tmp_path / "all.jsonl")
    assert list(lines[1]) == ["id", "score", "ppl_conditional", "ppl_direct", "tokens", "conditional_token_losses",
                              "direct_token_losses"]
    assert [line["score"] for line in lines] == [line["score"] for line in read_jsonl(tmp_path / "default.jsonl")]
    want = add_ifd_column(Dataset.from_list(rows), model_id=model_dir, max_length=64)
    for line, ifd, conditional, direct in zip(lines, want["ifd"], want["ppl_conditional"], want["ppl_direct"],
                                              strict=True):
        if math.isnan(ifd):
            assert line["score"] is None and line["tokens"] == []
            continue
        assert (line["score"], line["ppl_conditional"], line["ppl_direct"]) == \
            pytest.approx((ifd, conditional, direct), rel=1e-6)
        assert len(line["tokens"]) == len(line["conditional_token_losses"]) == len(line["direct_token_losses"]) > 0


# ----------------------------------------------------------------------------------- 4: Ctrl-C


#: Runs ``hf-adapters ARGS`` (or, after ``--script PATH``, that script with ARGS) in a child process
#: where Ctrl-C raises KeyboardInterrupt, as in a terminal, and SIGTERM has its default action, whatever
#: this process hands down: a suite started as a background job of a shell without job control has
#: SIGINT ignored (CI may ignore others), and a child would inherit that and never be stopped.
#: ``{prelude}`` runs first.
INTERRUPTIBLE = """import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
{prelude}
if sys.argv[1:2] == ["--script"]:
    import runpy
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    sys.argv = ["hf-adapters", *sys.argv[1:]]
    from hf_adapters.cli import main
    sys.exit(main())
"""


def interrupt(command: list[str], ready, *, prelude: str = "", signals: int = 1, delay: float = 0.0,
              env: dict[str, str] | None = None, sent: int = signal.SIGINT) -> tuple[int, str, str]:
    """Start ``hf-adapters COMMAND`` (:data:`INTERRUPTIBLE`), wait until ``ready()`` and ``delay`` more
    seconds, send it ``signals`` signals ``sent`` (SIGINTs); its exit status, stdout and stderr.

    Round five, item 19."""
    process = subprocess.Popen([sys.executable, "-c", INTERRUPTIBLE.format(prelude=prelude), *command], cwd=REPO,
                               env=env or run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not ready():
            assert process.poll() is None and time.monotonic() < deadline, \
                f"the command ended before it could be stopped: {process.communicate()}"
            time.sleep(0.02)
        time.sleep(delay)
        for _ in range(signals):
            process.send_signal(sent)
            time.sleep(0.01)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    return process.returncode, stdout, stderr


def lines_in(path: Path, count: int):
    """A ``ready`` test: ``path`` holds at least ``count`` lines."""
    return lambda: path.exists() and path.read_bytes().count(b"\n") >= count


@pytest.mark.parametrize(("sent", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["Ctrl-C", "SIGTERM"])
def test_ctrl_c_or_sigterm_prints_one_line_exits_130_or_143_and_the_same_command_resumes(tmp_path, sent, status):
    """The child is started with its own SIGINT handler: the test also holds when the suite runs as a
    background job of a shell without job control (SIGINT ignored, and inherited as ignored). A SIGTERM
    (Slurm, Kubernetes, ``timeout``) stopped the job with no word: it says what a Ctrl-C says.

    Round five, item 19; round six: SIGTERM."""
    rows = [{"id": f"r{i}", "instruction": "x" * (1 + i % 7), "input": "", "output": "y" * (i % 11)} for i in range(40)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    (tmp_path / "slow.yaml").write_text("name: LengthRatioScorer\nbatch_size: 4\ndelay: 0.3\n")
    output = tmp_path / "out.jsonl"
    args = ["score", str(tmp_path / "slow.yaml"), "--data", str(data), "--output", str(output), "--no-progress"]
    part = work_dir_for(output) / "rank-00000.jsonl"
    returncode, stdout, stderr = interrupt(["--script", str(launcher(tmp_path)), *args], lines_in(part, 4), sent=sent)
    saved = part.read_bytes().count(b"\n")
    assert returncode == status, stderr
    assert stderr.splitlines() == [f"Interrupted: {saved} of 40 rows are saved in {work_dir_for(output)}; run the "
                                   "same command again to resume."] and stdout == ""
    assert saved % 4 == 0 and 4 <= saved < 40

    assert cli.main(args) == 0
    assert read_jsonl(output) == [{"id": row["id"], "score": len(row["output"]) / len(row["instruction"])
                                   if row["output"] else None} for row in rows]


@pytest.fixture
def sigint_ignored_here():
    """This process ignores SIGINT, as a background job of a shell without job control does; its
    children inherit that."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def sigint_handled_here():
    """This process turns SIGINT into KeyboardInterrupt, as Python does at startup unless it was started
    with SIGINT ignored (a background job of a shell without job control, as CI may run the suite)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


#: A plugin module that says it is being imported, then takes its time.
SLOW_PLUGIN = "import pathlib, time\npathlib.Path({marker!r}).touch()\ntime.sleep(120)\n"


@pytest.mark.parametrize("here", ["SIGINT handled here", "SIGINT ignored here"])
def test_ctrl_c_while_a_plugin_module_is_imported_is_one_line_and_130(tmp_path, here, request):
    """Ctrl-C while ``score`` starts (here: importing a plugin) printed a traceback or a plugin error.

    Round five, items 15 and 19."""
    if here == "SIGINT ignored here":
        request.getfixturevalue("sigint_ignored_here")
    marker = tmp_path / "importing"
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN.format(marker=str(marker)), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    returncode, stdout, stderr = interrupt(
        ["score", "c.yaml", "--data", "d.jsonl", "--output", str(output), "--plugin", "slow_plugin"], marker.exists,
        env={**run_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])})
    assert (returncode, stdout) == (130, "")
    assert stderr.splitlines() == [cli.INTERRUPTED_STARTING] and not output.exists()


#: Stalls the import of torch (which a command's libraries load) in its own code, until a Ctrl-C.
STALLED_TORCH = """import importlib.util, sys
class StallTorch:
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "torch" else None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        code = "import pathlib, time\\npathlib.Path({marker!r}).touch()\\ntime.sleep(120)"
        exec(compile(code, "torch/__init__.py", "exec"), module.__dict__)
sys.meta_path.insert(0, StallTorch())
"""


def test_ctrl_c_while_the_libraries_load_is_one_line_and_imports_nothing_more(tmp_path):
    """A Ctrl-C inside an import can leave a library's compiled part half set up (importing torch
    again then crashed the process): the message is given without importing anything more (here
    the stalled torch would stall it again).

    Round five, item 15."""
    marker = tmp_path / "importing-torch"
    returncode, stdout, stderr = interrupt(
        ["score", "c.yaml", "--data", "d.jsonl", "--output", str(tmp_path / "out.jsonl")], marker.exists,
        prelude=STALLED_TORCH.format(marker=str(marker)))
    assert (returncode, stdout) == (130, "")
    assert stderr.splitlines() == ["Interrupted while `hf-adapters score` was loading its libraries, before it wrote "
                                   "anything; run the same command again."]


#: A plugin registering a scorer that takes 0.3 s per batch of 4 rows.
SLOW_SCORER_PLUGIN = """import time
from hf_adapters.scorers import RowScorer, register_scorer


@register_scorer
class SlowLength(RowScorer):
    name = "SlowLength"
    options = {"batch_size": 4}
    roles = {"output": "output"}
    text_roles = ("output",)

    def score_batch(self, batch, first_row=0):
        time.sleep(0.3)
        return {"score": [float(len(text)) for text in self.read_texts(batch, first_row)["output"]]}
"""


@pytest.mark.parametrize(("delay", "signals"), [(0.0, 1), (0.5, 1), (1.5, 2)])
def test_ctrl_c_at_any_moment_of_a_score_job_is_one_line_and_130(tmp_path, delay, signals):
    """From the moment the command line is imported to the end of the job, one Ctrl-C gives one line
    and exit status 130, never a traceback; two in a row never end the process by the signal.

    Round five, item 15."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "output": "y" * (i % 11)} for i in range(200)])
    (tmp_path / "slow.yaml").write_text("name: SlowLength\n")
    (tmp_path / "slow_scorer.py").write_text(SLOW_SCORER_PLUGIN, encoding="utf-8")
    marker = tmp_path / "imported"
    returncode, stdout, stderr = interrupt(
        ["score", str(tmp_path / "slow.yaml"), "--data", str(data), "--output", str(tmp_path / "out.jsonl"),
         "--no-progress", "--plugin", "slow_scorer"], marker.exists, delay=delay, signals=signals,
        prelude=f"import hf_adapters.cli, pathlib\npathlib.Path({str(marker)!r}).touch()",
        env={**run_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])})
    lines = stderr.splitlines()
    assert returncode == 130 and stdout == "", stderr
    assert lines[0].startswith("Interrupted") and "Traceback" not in stderr, stderr
    assert lines[1:] in ([], ["Interrupted again: stopped at once."])  # a second Ctrl-C while the first is handled


def slow_score_job(tmp_path: Path, rows: int = 200) -> tuple[list[str], Path, dict[str, str]]:
    """``score`` of ``rows`` rows by :data:`SLOW_SCORER_PLUGIN` (0.3 s a batch of 4): its arguments
    (those of the engine to add), its output, and the environment that finds the plugin."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "output": "y" * (i % 11)} for i in range(rows)])
    (tmp_path / "slow.yaml").write_text("name: SlowLength\n")
    (tmp_path / "slow_scorer.py").write_text(SLOW_SCORER_PLUGIN, encoding="utf-8")
    output = tmp_path / "out.jsonl"
    args = ["score", str(tmp_path / "slow.yaml"), "--data", str(data), "--output", str(output), "--no-progress",
            "--plugin", "slow_scorer"]
    return args, output, {**run_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}


def test_sigterm_stops_a_command_started_with_sigint_ignored_saying_what_is_saved(tmp_path):
    """A batch job (Slurm, a background job of a shell without job control) starts with SIGINT ignored:
    SIGTERM still stops it with one line and 143, and a second SIGTERM ends it at once.

    Round six: SIGTERM."""
    args, output, env = slow_score_job(tmp_path)
    part = work_dir_for(output) / "rank-00000.jsonl"
    returncode, stdout, stderr = interrupt(args, lines_in(part, 4), prelude="signal.signal(signal.SIGINT, "
                                           "signal.SIG_IGN)", env=env, sent=signal.SIGTERM)
    saved = part.read_bytes().count(b"\n")
    assert (returncode, stdout) == (143, ""), stderr
    assert stderr.splitlines() == [f"Interrupted: {saved} of 200 rows are saved in {work_dir_for(output)}; run the "
                                   "same command again to resume."]
    returncode, stdout, stderr = interrupt(args, lines_in(part, saved + 4), env=env, sent=signal.SIGTERM, signals=2)
    assert (returncode, stdout) == (143, "") and "Traceback" not in stderr, stderr


def test_sigterm_stops_a_ray_job_with_the_line_a_ctrl_c_prints_and_143(tmp_path):
    """``ray.init`` puts in its own SIGTERM handler, which ended the command with status 15 and no word.

    Round six: SIGTERM."""
    pytest.importorskip("ray")
    args, output, env = slow_score_job(tmp_path)
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"})
    work_dir = work_dir_for(output)
    returncode, stdout, stderr = interrupt([*args, "--engine", "ray", "--rows-per-block", "8"],
                                           lambda: any(work_dir.glob("*.done")), env=env, sent=signal.SIGTERM)
    assert (returncode, stdout) == (143, "") and "Traceback" not in stderr, stderr
    assert re.fullmatch(rf"Interrupted: \d+ of 200 rows are saved in {re.escape(str(work_dir))}; run the same command "
                        "again to resume.", stderr.splitlines()[-1]), stderr


@pytest.mark.parametrize(("sent", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["Ctrl-C", "SIGTERM"])
def test_ctrl_c_or_sigterm_while_embedding_saves_nothing_and_says_so(tmp_path, model_dir, sent, status):
    """``embed`` printed 35-80 lines and exited 1 or died by the signal; a SIGTERM stopped it with no word.

    Round five, item 15; round six: SIGTERM."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"instruction": f"Row {i}", "output": "words " * (i % 9)}
                                                 for i in range(4000)])
    output, started = tmp_path / "vectors.npy", tmp_path / "embedding"
    prelude = ("import pathlib\nfrom hf_adapters.formulas import embeddings\nembed_texts = embeddings.embed_texts\n"
               "def started(*args, **kwargs):\n"
               f"    pathlib.Path({str(started)!r}).touch()\n"
               "    return embed_texts(*args, **kwargs)\n"
               "embeddings.embed_texts = started\n"
               "import hf_adapters.cli.embed_command as command\ncommand.CHUNK_ROWS = 64\n")
    returncode, stdout, stderr = interrupt(["embed", "--data", str(data), "--output", str(output), "--model",
                                            model_dir, "--no-progress"], started.exists, prelude=prelude, delay=1.0,
                                           sent=sent)
    assert (returncode, stdout) == (status, ""), stderr
    assert stderr.splitlines() == ["Interrupted: `hf-adapters embed` stopped before it finished, so it saved nothing "
                                   "complete; run the same command again."]
    assert not output.exists()


def test_a_full_disk_while_embedding_says_so_in_one_line_and_saves_nothing(tmp_path, model_dir, capsys, monkeypatch):
    """A full disk while ``embed`` wrote its vectors was an OSError, not a line saying so and where.

    Round six: a full disk."""
    import numpy as np

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    data = write_jsonl(tmp_path / "rows.jsonl", [{"instruction": f"Row {i}", "output": "words"} for i in range(4)])
    output = tmp_path / "vectors.npy"
    monkeypatch.setattr(np.lib.format, "open_memmap", full)
    assert cli.main(["embed", "--data", str(data), "--output", str(output), "--model", model_dir,
                     "--no-progress"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: no space left on a device this job writes to, such as the one holding {tmp_path} (free some space "
        "there): `hf-adapters embed` saved nothing complete; run the same command again."]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["rows.jsonl"]


def test_a_command_interrupted_in_process_says_what_is_saved_and_returns_130(monkeypatch, capsys, tmp_path):
    """``cli.main`` called from Python answers a KeyboardInterrupt as the process does, and leaves the
    SIGINT handler as it was.

    Round five, item 15."""
    from hf_adapters.cli import summary_command

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(summary_command, "run", interrupted)
    handler = signal.getsignal(signal.SIGINT)
    assert cli.main(["summary", str(tmp_path / "scores.jsonl")]) == cli.INTERRUPTED
    assert capsys.readouterr().err.splitlines() == [
        "Interrupted: `hf-adapters summary` stopped before it finished, so it saved nothing complete; run the same "
        "command again."]
    assert signal.getsignal(signal.SIGINT) is handler


class SendsCtrlCWhenCollected:
    """Sends this process a SIGINT from its finalizer and waits for it there, as a Ctrl-C coming
    while the garbage collector runs a library's ``__del__`` (seen in ``regex``'s, as torch loads)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


@pytest.mark.usefixtures("sigint_handled_here")
def test_a_ctrl_c_raised_inside_a_finalizer_still_stops_the_command(monkeypatch, capsys, tmp_path):
    """Python reports an exception a finalizer raises as "Exception ignored" and goes on: the Ctrl-C
    was lost, and the command ran to its end with status 0 (seen once in a fresh-clone run)."""
    from hf_adapters.cli import summary_command

    def collects_then_works(args):
        SendsCtrlCWhenCollected()
        time.sleep(10)
        return 0

    monkeypatch.setattr(summary_command, "run", collects_then_works)
    hook = sys.unraisablehook
    started = time.monotonic()
    assert cli.main(["summary", str(tmp_path / "scores.jsonl")]) == cli.INTERRUPTED
    assert time.monotonic() - started < 5
    assert capsys.readouterr().err.splitlines() == [
        "Interrupted: `hf-adapters summary` stopped before it finished, so it saved nothing complete; run the same "
        "command again."]
    assert sys.unraisablehook is hook


THE_CTRL_C_TURNED_INTO_AN_ERROR = """import os, signal, time
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    raise SystemError("initialization of _C raised unreported exception") from None
"""


@pytest.mark.usefixtures("sigint_handled_here")
def test_an_error_a_ctrl_c_turned_into_while_a_plugin_loads_is_reported_as_the_ctrl_c(tmp_path, capsys,
                                                                                     monkeypatch):
    """A compiled module stopped by Ctrl-C while it is imported can raise another error (SystemError):
    it was reported as the plugin's failure.

    Round five, item 15."""
    (tmp_path / "turns_ctrl_c.py").write_text(THE_CTRL_C_TURNED_INTO_AN_ERROR, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "turns_ctrl_c", raising=False)
    args = ["score", "c.yaml", "--data", "d.jsonl", "--output", str(tmp_path / "o.jsonl"), "--plugin", "turns_ctrl_c"]
    assert cli.main(args) == cli.INTERRUPTED
    assert capsys.readouterr().err.splitlines() == [cli.INTERRUPTED_STARTING]


def test_a_command_started_with_sigint_ignored_keeps_it_and_says_so_when_verbose(tmp_path, capsys, caplog,
                                                                               sigint_ignored_here):
    """A background job of a shell without job control starts with SIGINT ignored: the command leaves
    it so (the shell meant the job to outlive a Ctrl-C in the terminal), and ``--verbose`` says so.

    Round five, item 19."""
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": "a", "score": 1.0}, {"id": "b", "score": 2.0}])
    ignored = "SIGINT is ignored in this process (as a shell starts a background job): Ctrl-C does not stop this " \
              "command."
    for flags, said in (([], False), (["--verbose"], True)):
        caplog.clear()
        assert cli.main(["summary", str(scores), *flags]) == 0
        assert (ignored in caplog.messages) == said
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_ctrl_c_on_ray_says_nothing_was_saved(tmp_path, data, capsys, monkeypatch):
    from hf_adapters.engines import ray as ray_jobs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ray_jobs, "run_ray_scoring_job", interrupted)
    assert score(shape_config(tmp_path), data, tmp_path / "o.jsonl", "--engine", "ray") == 130
    assert capsys.readouterr().err.splitlines() == [
        "Interrupted before any row was saved; the same command starts again."]


def test_ctrl_c_before_any_row_is_saved_says_so(tmp_path, data, capsys, monkeypatch):
    from hf_adapters.engines import local as jobs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "run_scoring_job", interrupted)
    assert score(shape_config(tmp_path), data, tmp_path / "o.jsonl") == 130
    assert capsys.readouterr().err.splitlines() == [
        "Interrupted before any row was saved; the same command starts again."]


# ------------------------------------------------------------------------- 5: totals of long jobs


def scoring_bar(err: str) -> str:
    """The last state of the job's bar, as tqdm drew it on stderr."""
    return [state for state in err.replace("\r", "\n").splitlines() if state.startswith("Scoring")][-1]


def progress_score(config: str, data, output, *flags: str) -> int:
    return cli.main(["score", config, "--data", str(data), "--output", str(output), "--streaming", *flags])


def test_a_streamed_parquet_folder_shows_its_total_from_the_metadata(tmp_path, capsys):
    folder = tmp_path / "shards"
    folder.mkdir()
    for number, texts in enumerate([TEXTS, TEXTS[:3]]):
        pq.write_table(pa.table({"id": [f"s{number}-{i}" for i in range(len(texts))], "output": texts}),
                       folder / f"part-{number}.parquet")
    assert progress_score(shape_config(tmp_path), folder, tmp_path / "o.jsonl") == 0
    assert "| 9/9 [" in scoring_bar(capsys.readouterr().err)


def test_a_streamed_save_to_disk_folder_shows_its_total(tmp_path, capsys):
    saved = Dataset.from_list([{"id": f"r{i}", "output": text} for i, text in enumerate(TEXTS)])
    saved.save_to_disk(tmp_path / "saved")
    assert progress_score(shape_config(tmp_path), tmp_path / "saved", tmp_path / "o.jsonl") == 0
    assert "| 6/6 [" in scoring_bar(capsys.readouterr().err)


def test_a_streamed_jsonl_file_shows_rows_without_a_total(tmp_path, data, capsys):
    assert progress_score(shape_config(tmp_path), data, tmp_path / "o.jsonl") == 0
    assert scoring_bar(capsys.readouterr().err).startswith("Scoring: 6row [")


def test_a_stream_scored_from_python_shows_a_bar_only_when_it_takes_a_while(capsys, monkeypatch):
    stream = Dataset.from_list([{"output": text} for text in TEXTS * 3]).to_iterable_dataset()
    assert len(list(columns.add_score_columns(stream, ShapeScorer(), batch_size=4))) == 18
    assert capsys.readouterr().err == ""  # quicker than the bar's delay
    monkeypatch.setattr(columns, "STREAM_BAR_DELAY", 0)
    scored = columns.add_score_columns(stream, ShapeScorer(), desc="Shapes", batch_size=4)
    assert len(list(scored)) == len(list(scored)) == 18  # two passes, two bars
    bars = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("Shapes")]
    assert sum(line.startswith("Shapes: 18row [") for line in bars) == 2


# ------------------------------------------------------------------------- 7: engine names, --device


def test_the_default_engine_is_called_local_and_accelerate_still_names_it(capsys):
    parse = cli.build_parser().parse_args
    base = ["score", "c.yaml", "--data", "d.jsonl", "--output", "o.jsonl"]
    assert parse(base).engine == parse([*base, "--engine", "accelerate"]).engine == "local"
    with pytest.raises(SystemExit):
        parse(["score", "--help"])
    assert "--engine {local,ray}" in capsys.readouterr().out


def test_device_goes_to_a_scorer_that_runs_a_model_and_is_refused_otherwise(tmp_path, data, capsys, model_dir):
    from hf_adapters.engines import ScoringJob

    scorer = ScoringJob.plan({"name": "PPLScorer", "model": model_dir}, data="d.jsonl", output="o.jsonl",
                             device="cuda").build_scorer()
    assert scorer.run.device == "cuda" and scorer.model_identity()["device_type"] == "cuda"
    assert score(shape_config(tmp_path), data, tmp_path / "o.jsonl", "--device", "cpu") == 2
    assert capsys.readouterr().err.strip() == "error: --device: ShapeScorer runs no model."
    assert score(shape_config(tmp_path), data, tmp_path / "o.jsonl", "--device", "cpu", "--engine", "ray") == 2
    assert "--device does not apply to --engine ray" in capsys.readouterr().err


def test_device_cpu_scores_a_model_config(tmp_path, model_dir):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "text": "The quick brown fox."}])
    (tmp_path / "ppl.yaml").write_text(f"name: PerplexityScorer\nmodel: {model_dir}\n")
    assert score(str(tmp_path / "ppl.yaml"), rows, tmp_path / "o.jsonl", "--device", "cpu") == 0
    assert read_jsonl(tmp_path / "o.jsonl")[0]["score"] > 1


# ------------------------------------------------------------------ 2 and 7 on a real Ray cluster


@pytest.mark.usefixtures("ray_cluster")
def test_ray_writes_the_local_engines_file_of_every_column(tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")
    rows = [{"id": f"r{i}", "instruction": f"Say {i}.", "input": "", "output": "The quick brown fox. " * (i % 3)}
            for i in range(12)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = tmp_path / "ifd.yaml"
    config.write_text(f"name: IFDScorer\nmodel: {model_dir}\nbatch_size: 4\nmax_length: 64\n"
                      "return_token_losses: true\nscore_columns: all\n")
    for kind in ["jsonl", "parquet"]:
        flags = ["--output-format", kind]
        assert score(str(config), data, tmp_path / f"local.{kind}", *flags) == 0
        assert score(str(config), data, tmp_path / f"ray.{kind}", *flags, "--engine", "ray") == 0
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert pq.read_table(tmp_path / "ray.parquet").equals(pq.read_table(tmp_path / "local.parquet"))


def test_a_ray_run_from_the_command_line_prints_no_false_alarm(tmp_path, model_dir):
    pytest.importorskip("ray")
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": f"Sentence {i}."} for i in range(8)])
    (tmp_path / "ppl.yaml").write_text(f"name: PerplexityScorer\nmodel: {model_dir}\nbatch_size: 4\n")
    command = [sys.executable, "-m", "hf_adapters", "score", str(tmp_path / "ppl.yaml"), "--data", str(data),
               "--output", str(tmp_path / "o.jsonl"), "--engine", "ray", "--no-progress"]
    env = {**run_env(), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("8 rows, 8 valid scores, ")
    # Ray's C++ log says, once, at info level, that the job kept it to fatal errors; nothing else is printed.
    assert len(done.stderr.splitlines()) <= 1 and all(
        " I " in line and "RAY_BACKEND_LOG_LEVEL" in line for line in done.stderr.splitlines()), done.stderr


def test_what_a_library_prints_while_a_ctrl_c_cuts_its_import_short_is_not_shown(capsys):
    """huggingface_hub prints "Error importing ..." on stdout when a Ctrl-C cuts its import short (seen
    on a cold start, with the Ctrl-C 1.5 s in); what the plugins' import prints otherwise still shows."""
    from hf_adapters.cli import _SignalWatch, _stdout_held_unless

    watch = _SignalWatch(process=False)
    with pytest.raises(KeyboardInterrupt), _stdout_held_unless(watch):
        print("Error importing huggingface_hub.hf_api: Error calling __set_name__ ...")
        watch.received = True
        raise KeyboardInterrupt
    assert capsys.readouterr().out == ""
    with _stdout_held_unless(_SignalWatch(process=False)):
        print("a plugin's own line")
    assert capsys.readouterr().out == "a plugin's own line\n"


def test_output_piped_into_a_reader_that_stops_early_ends_quietly_as_a_shells_tools_do(tmp_path):
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": i, "score": i / 7} for i in range(2000)])
    reader = subprocess.Popen([sys.executable, "-m", "hf_adapters", "summary", str(scores), "--bins", "5000"],
                              cwd=REPO, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.readline()
    reader.stdout.close()  # as `| head -1` does
    stderr = reader.stderr.read().decode()
    assert reader.wait(timeout=120) == cli.BROKEN_PIPE and "Traceback" not in stderr and "Broken" not in stderr
