"""A job's work folder (:class:`~hf_adapters.engines.work_folder.WorkFolder`), through the local engine:
the lock, resuming only the same job and refusing another's partial results (what makes another job,
and what the refusal names), nothing left behind by a run that saved nothing, and a finished job
recorded so that running it again does nothing. The Ray engine's own: ``test_ray.py``."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from datasets import Dataset

from hf_adapters import cli
from hf_adapters.backends import TransformersBackend
from hf_adapters.engines.local import run_scoring_job
from hf_adapters.engines.work_folder import COMPLETE, MANIFEST, JobConflictError, WorkFolder, work_dir_for
from hf_adapters.scorers import PerplexityScorer, PPLScorer, build_scorer
from tests.engines.test_local import (  # noqa: F401  (chunks_of_four_rows: the chunks these tests were written for)
    IFD_COLUMNS,
    CrashAfter,
    LengthRatioScorer,
    chunks_of_four_rows,
    expected_lines,
    ifd_rows,
    killed_after_one_chunk,
    make_rows,
    read_jsonl,
)


@pytest.mark.parametrize("change", ["config", "data"])
def test_partial_results_of_a_different_job_are_refused_unless_overwrite(tmp_path, change):
    rows, output = make_rows(20), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=8, batch_size=4), output)
    scorer = LengthRatioScorer(batch_size=4, delay=0.001 if change == "config" else 0.0)
    if change == "data":
        rows[15]["output"] = "changed"
    expected = {"config": "the scorer config changed", "data": "the input data changed"}[change]
    with pytest.raises(JobConflictError, match=f"{expected}.*--overwrite"):
        run_scoring_job(Dataset.from_list(rows), scorer, output)
    assert scorer.scored_rows == []

    run_scoring_job(Dataset.from_list(rows), scorer, output, overwrite=True)
    assert scorer.scored_rows == [row["id"] for row in rows]
    assert read_jsonl(output) == expected_lines(rows)


def test_a_second_job_on_the_same_output_stops_at_once_while_the_first_holds_the_lock(tmp_path):
    import fcntl

    rows = Dataset.from_list(make_rows(9))
    output = tmp_path / "out.jsonl"
    work_dir = work_dir_for(output)
    work_dir.mkdir()
    with open(work_dir / "lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        scorer = LengthRatioScorer()
        with pytest.raises(JobConflictError, match="Another job is writing out.jsonl"):
            run_scoring_job(rows, scorer, output, progress=False)
        assert scorer.scored_rows == [] and not output.exists()
    assert run_scoring_job(rows, LengthRatioScorer(), output, progress=False).rows == 9
    assert not work_dir.exists()


def test_a_model_that_fails_to_load_leaves_no_work_directory(tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in make_rows(3)), encoding="utf-8")
    (tmp_path / "ppl.yaml").write_text("name: PPLScorer\n", encoding="utf-8")
    output = tmp_path / "scores.jsonl"
    args = ["score", str(tmp_path / "ppl.yaml"), "--data", str(data), "--output", str(output), "--no-progress"]
    assert cli.main([*args, "--model", str(tmp_path / "no-such-model")]) == 2
    assert "Could not load model" in capsys.readouterr().err
    assert not work_dir_for(output).exists()


class RefusesFirstChunk(LengthRatioScorer):
    """Refuses its first chunk as a scorer refuses what it finds only when it scores (a reference model
    with another tokenizer); raises ``error``."""

    def __init__(self, error: BaseException, **config):
        super().__init__(**config)
        self.error = error

    def score_rows(self, rows):
        raise self.error


@pytest.mark.parametrize("error", [ValueError("The reference model has another tokenizer."), KeyboardInterrupt()],
                         ids=["refused", "interrupted"])
@pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streaming"])
def test_a_refusal_or_stop_before_any_row_is_saved_leaves_nothing_behind(tmp_path, error, streaming):
    """A job refused (or stopped) before any row is saved leaves no work directory, lock or
    temporary output: the corrected command, another job, runs instead of being refused as "a
    different job".

    Round five, item 10.
    """
    rows = Dataset.from_list(make_rows(10))
    data = rows.to_iterable_dataset() if streaming else rows
    output = tmp_path / "out.jsonl"
    with pytest.raises(type(error)):
        run_scoring_job(data, RefusesFirstChunk(error, batch_size=4), output, data_fingerprint="rows", progress=False)
    assert list(tmp_path.iterdir()) == []
    corrected = LengthRatioScorer(batch_size=5)
    assert run_scoring_job(data, corrected, output, data_fingerprint="rows", progress=False).scored == 10


def test_a_streamed_row_refused_in_the_first_chunk_leaves_nothing_behind(tmp_path):
    """A stream's rows are checked chunk by chunk, after the work directory is made: a bad row in
    its first chunk leaves nothing behind.

    Round five, item 10.
    """
    rows = make_rows(6)
    del rows[1]["output"]
    output = tmp_path / "out.jsonl"
    with pytest.raises(ValueError, match=r"Row 1 \(id='r1'\) has no field 'output'"):
        run_scoring_job(Dataset.from_list(rows).to_iterable_dataset(), LengthRatioScorer(), output,
                        data_fingerprint="rows", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_failure_after_a_saved_chunk_keeps_the_work_directory_to_resume(tmp_path):
    """Only a run that saved nothing leaves nothing: saved chunks stay for the rerun.

    Round five, item 10.
    """
    output = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(make_rows(10)), CrashAfter(rows=4, batch_size=4), output, progress=False)
    assert (work_dir_for(output) / "manifest.json").is_file()


def test_running_a_finished_job_again_does_nothing_unless_its_output_would_differ(tmp_path):
    """A finished job run again is skipped; another output format, other score columns, another
    config or ``overwrite`` score it again.

    Round five, item 21.
    """
    from hf_adapters.files.score_files import OutputFormat

    rows = Dataset.from_list(make_rows(9))
    output = tmp_path / "out.jsonl"
    assert not run_scoring_job(rows, LengthRatioScorer(), output, progress=False).skipped
    again = LengthRatioScorer(batch_size=2)
    summary = run_scoring_job(rows, again, output, progress=False)
    assert summary.skipped and again.scored_rows == [] and (summary.rows, summary.scored) == (9, 0)
    assert summary.valid == sum(line["score"] is not None for line in read_jsonl(output))
    for changed in ({"output": OutputFormat(keep_columns=True)}, {"overwrite": True}):
        scorer = LengthRatioScorer()
        assert not run_scoring_job(rows, scorer, output, progress=False, **changed).skipped
        assert len(scorer.scored_rows) == 9
    scorer = LengthRatioScorer(delay=0.001)
    assert not run_scoring_job(rows, scorer, output, progress=False).skipped and len(scorer.scored_rows) == 9


def killed_during_the_cleanup(monkeypatch, removed: tuple[str, ...] = ()) -> Callable[..., None]:
    """Make a job's work folder stop (a Ctrl-C) during its final cleanup, once it has removed its
    manifest and the files ``removed`` (at the start, it cleans up as it does); the cleanup as it was."""
    remove = WorkFolder._remove

    def killed(self, keep):
        if COMPLETE not in keep:
            return remove(self, keep)
        for name in (MANIFEST, *removed):  # the cleanup got this far
            self.file(name).unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(WorkFolder, "_remove", killed)
    return remove


def test_a_kill_during_the_final_cleanup_leaves_a_complete_output_that_needs_no_work(tmp_path, monkeypatch):
    rows = Dataset.from_list(make_rows(10))
    output = tmp_path / "out.jsonl"
    killed_during_the_cleanup(monkeypatch, ("rank-00000.jsonl",))
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, LengthRatioScorer(), output, progress=False)
    monkeypatch.undo()
    complete = output.read_bytes()
    assert (work_dir_for(output) / "complete.json").is_file()

    rerun = LengthRatioScorer()
    summary = run_scoring_job(rows, rerun, output, progress=False)
    assert rerun.scored_rows == [] and summary.scored == 0
    assert summary.valid == sum(json.loads(line)["score"] is not None for line in complete.splitlines())
    assert output.read_bytes() == complete and not work_dir_for(output).exists()


def test_a_kill_during_the_cleanup_then_a_rerun_in_another_format_scores_it_again_in_that_format(tmp_path,
                                                                                                monkeypatch):
    """The output left in place by a kill during the cleanup is this job's only in the format it was
    written in: a rerun keeping the rows' columns writes them (it was taken as complete, recorded as
    finished in the new format, and every later rerun did nothing)."""
    from hf_adapters.files.score_files import OutputFormat

    rows, output = Dataset.from_list(make_rows(6)), tmp_path / "out.jsonl"
    remove = killed_during_the_cleanup(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, LengthRatioScorer(), output, progress=False)
    monkeypatch.setattr(WorkFolder, "_remove", remove)
    kept = OutputFormat(keep_columns=True)
    scorer = LengthRatioScorer()
    assert not run_scoring_job(rows, scorer, output, progress=False, output=kept).skipped
    assert len(scorer.scored_rows) == 6
    assert [list(line) for line in read_jsonl(output)][0] == ["id", "instruction", "input", "output", "score"]
    assert run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=kept).skipped


class PPLCrashAfterFirstChunk(PPLScorer):
    """The seed PPLScorer, killed (like kill -9) after its first chunk; same name and config."""

    calls = 0

    def score_rows(self, rows):
        PPLCrashAfterFirstChunk.calls += 1
        if PPLCrashAfterFirstChunk.calls > 1:
            raise KeyboardInterrupt
        return super().score_rows(rows)


def test_new_weights_at_the_same_model_path_are_another_job(tmp_path, tokenizer):
    from tests.conftest import build_model  # here: the subprocess launchers import this module without `tests`

    folder = tmp_path / "model"
    build_model(len(tokenizer), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rows, output = Dataset.from_list(make_rows(12)), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, PPLCrashAfterFirstChunk(model=str(folder), batch_size=4), output, progress=False)
    build_model(len(tokenizer), seed=1).save_pretrained(folder)  # same path, other weights
    with pytest.raises(JobConflictError, match="the model changed"):
        run_scoring_job(rows, PPLScorer(model=str(folder), batch_size=4), output, progress=False)
    manifest = json.loads((work_dir_for(output) / "manifest.json").read_text())
    assert manifest["model"]["dtype"] == "float32" and manifest["model"]["device_type"] == "cpu"


def test_the_manifest_tells_a_cpu_float32_job_from_a_gpu_bfloat16_one(tmp_path, model):
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    cpu = PPLScorer(model=str(folder), device="cpu").model_identity()
    gpu = PPLScorer(model=str(folder), device="cuda").model_identity()
    assert (cpu["dtype"], cpu["device_type"]) == ("float32", "cpu")
    assert (gpu["dtype"], gpu["device_type"]) == ("bfloat16", "cuda")


class Anonymous(TransformersBackend):
    """A backend that cannot say what it runs."""

    def identity(self):
        return None


def test_a_job_never_resumes_with_the_results_of_a_backend_without_identity(tmp_path, model, tokenizer):
    """From the round-four review, case 5."""
    rows = Dataset.from_list([{"id": f"r{i}", "text": "ab " * (i + 1)} for i in range(12)])
    output = tmp_path / "scores.jsonl"

    first = PerplexityScorer(backend=killed_after_one_chunk(Anonymous)(model, tokenizer), batch_size=4)
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(rows, first, output, progress=False)
    assert read_jsonl(work_dir_for(output) / "rank-00000.jsonl")  # the first chunk was kept
    second = PerplexityScorer(backend=Anonymous(model, tokenizer), batch_size=4)
    with pytest.raises(JobConflictError, match="identity"):
        run_scoring_job(rows, second, output, progress=False)
    summary = run_scoring_job(rows, second, output, progress=False, overwrite=True)
    assert summary.scored == 12


def test_a_changed_stream_is_refused_without_row_counts_nobody_knows(tmp_path):
    """From the round-four review, case 16."""
    rows = make_rows(12)
    output = tmp_path / "o.jsonl"
    stream = Dataset.from_list(rows).to_iterable_dataset()
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(stream, CrashAfter(rows=4, batch_size=4), output, data_fingerprint="before", progress=False)
    with pytest.raises(JobConflictError) as refusal:
        run_scoring_job(stream, LengthRatioScorer(batch_size=4), output, data_fingerprint="after", progress=False)
    assert "the input data changed" in str(refusal.value) and "None" not in str(refusal.value)


def test_an_in_memory_job_still_says_how_many_rows_changed(tmp_path):
    """From the round-four review, case 16."""
    rows = make_rows(12)
    output = tmp_path / "o.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=4, batch_size=4), output, progress=False)
    with pytest.raises(JobConflictError, match="12 rows before, 13 now"):
        run_scoring_job(Dataset.from_list(make_rows(13)), LengthRatioScorer(batch_size=4), output, progress=False)


def score_set_manifest(model: str, *members: dict) -> dict:
    from hf_adapters.engines.job_files import job_manifest
    from hf_adapters.files.score_files import OutputFormat

    scorer = build_scorer({"model": model, "scores": list(members)})
    return job_manifest(scorer, "data", 10, 4, OutputFormat().columns_of(scorer.outputs, scorer.named_outputs))


def test_a_score_set_resumed_without_a_member_is_refused_naming_its_members_not_the_model(model_dir):
    from hf_adapters.engines.job_files import job_changes

    ifd, ppl, upd = {"name": "IFDScorer"}, {"name": "PPLScorer"}, {"name": "UPDScorer"}
    reasons = job_changes(score_set_manifest(model_dir, ifd, ppl, upd), score_set_manifest(model_dir, ifd, ppl))
    assert reasons.startswith("the score set's members changed (were IFDScorer, PPLScorer, UPDScorer, now "
                              "IFDScorer, PPLScorer); the score columns changed"), reasons
    assert "model" not in reasons
    reasons = job_changes(score_set_manifest(model_dir, ifd, ppl), score_set_manifest(model_dir, ifd,
                                                                                      {**ppl, "max_length": 64}))
    assert reasons.startswith("the config of its member PPLScorer changed (was {"), reasons
    assert "IFDScorer" not in reasons and "model" not in reasons


def test_changed_data_of_the_same_row_count_is_refused_naming_its_content_not_a_row_count(tmp_path):
    rows, output = make_rows(20), tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_scoring_job(Dataset.from_list(rows), CrashAfter(rows=8, batch_size=4), output, progress=False)
    rows[15]["output"] = "changed"
    with pytest.raises(JobConflictError) as refusal:
        run_scoring_job(Dataset.from_list(rows), LengthRatioScorer(batch_size=4), output, progress=False)
    assert "the input data changed: its content differs (another fingerprint, the same 20 rows)." in \
        str(refusal.value)
    assert "rows before" not in str(refusal.value)


def test_a_finished_job_asked_for_its_score_columns_in_another_order_is_scored_again(tmp_path, model_dir):
    from hf_adapters.files.score_files import OutputFormat

    output = tmp_path / "out.jsonl"
    for columns in (IFD_COLUMNS, IFD_COLUMNS[::-1]):
        summary = run_scoring_job(ifd_rows(), build_scorer({"name": "IFDScorer", "model": model_dir}), output,
                                  progress=False, output=OutputFormat(score_columns=columns))
        assert not summary.skipped
        assert list(read_jsonl(output)[0]) == ["id", "score", *columns]


def test_a_finished_output_written_a_parquet_file_per_block_is_refused_naming_the_flag(tmp_path):
    """The default engine cannot write the layout ``--engine ray --file-per-block`` did: it says which
    layout the output has and how to get the other, instead of "nothing to do"."""
    from hf_adapters.engines.job_files import _finished_record
    from hf_adapters.files.score_files import OutputFormat

    rows, output, parquet = Dataset.from_list(make_rows(8)), tmp_path / "out", OutputFormat("parquet")
    run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=parquet)
    record = json.loads(_finished_record(output).read_text())
    _finished_record(output).write_text(json.dumps({**record, "job": {**record["job"], "file_per_block": True}}))
    with pytest.raises(ValueError, match=r"already this job's complete output, as one Parquet file per block "
                                         r"\(written with --engine ray --file-per-block\): add --file-per-block to "
                                         r"leave it so, or pass --overwrite to score it again into shards of "
                                         r"--rows-per-shard rows\."):
        run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=parquet)
    scorer = LengthRatioScorer()
    assert not run_scoring_job(rows, scorer, output, progress=False, output=parquet, overwrite=True).skipped
    assert run_scoring_job(rows, LengthRatioScorer(), output, progress=False, output=parquet).skipped


def test_another_engines_folder_is_started_afresh_where_it_saved_nothing_and_refused_where_it_did(tmp_path):
    """A work folder counts the saved rows of its own engine's jobs as that engine says; of another
    engine's job, any file with something in it beside the lock, the manifest and the stream's row
    count is a saved row (no engine reads another's files)."""
    from hf_adapters.files.score_files import OutputFormat

    def manifest(**changes):
        return {"scorer": {"name": "PPLScorer"}, "model": None, "identified": True, "data": "d", "rows": 4,
                **changes}

    output = tmp_path / "o.jsonl"
    other = WorkFolder(output, "other", lambda work_dir, manifest, rows: 0, ("rows_per_task",))
    local = WorkFolder(output, "local", lambda work_dir, manifest, rows: 0)
    assert other.open(manifest(engine="other", rows_per_task=2), OutputFormat(), False)[0] == "fresh"
    assert local.open(manifest(chunk_size=2), OutputFormat(), False) == ("fresh", manifest(chunk_size=2))
    other.open(manifest(engine="other", rows_per_task=2), OutputFormat(), False)
    (other.path / "task-0.jsonl").write_text('{"id": 0, "score": 1.0}\n')
    with pytest.raises(JobConflictError, match="it was started with --engine other, whose partial results"):
        local.open(manifest(chunk_size=2), OutputFormat(), False)
    assert local.open(manifest(chunk_size=2), OutputFormat(), True)[0] == "fresh"
    assert sorted(path.name for path in local.path.iterdir()) == ["manifest.json"]


def test_what_a_killed_write_left_in_the_work_folder_does_not_survive_its_next_open(tmp_path):
    from hf_adapters.files.score_files import OutputFormat

    manifest = {"scorer": {}, "model": "m", "data": "d", "rows": 8, "identified": True, "chunk_size": 4}
    folder = WorkFolder(tmp_path / "out.jsonl", "local", lambda path, manifest, rows: 4)
    with folder.locked():
        assert folder.open(manifest, OutputFormat(), overwrite=False)[0] == "fresh"
    (folder.path / "rank-00000.jsonl").write_text("{}\n")
    (folder.path / f"{MANIFEST}.tmp-0123abcd").write_text("{")  # a rerun's manifest, killed half written

    with folder.locked():
        assert folder.open(manifest, OutputFormat(), overwrite=False)[0] == "resume"

    assert sorted(entry.name for entry in folder.path.iterdir()) == ["lock", MANIFEST, "rank-00000.jsonl"]


def test_the_work_files_the_output_check_sees_are_the_engines_parts_and_the_folders_own(tmp_path):
    from hf_adapters.engines.local_parts import PART_FILES
    from hf_adapters.engines.ray_parts import part_files
    from hf_adapters.engines.work_folder import work_files
    from hf_adapters.files.score_files import OutputFormat

    output = tmp_path / "out.jsonl"
    names = [path.name for path in work_files(output, OutputFormat(), ("block.jsonl", "block.done"))]

    assert names == ["block.jsonl", "block.done", MANIFEST, COMPLETE, "rows.json", "choices.json", "lock",
                     "out.jsonl.tmp"]
    assert PART_FILES == ("rank-00000.jsonl", "rank-00000.done")
    assert part_files(OutputFormat("parquet"))[0].endswith(".parquet")
