"""The datatrove step and filter (hf_adapters.integrations.datatrove_steps) in real datatrove pipelines on the
local executor, against ``hf-adapters score`` on the same rows, on the tiny model."""

from __future__ import annotations

import json
import logging
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("datatrove", reason="datatrove is not installed (pip install 'hf_adapters[datatrove]')")

from datatrove.executor import LocalPipelineExecutor  # noqa: E402
from datatrove.pipeline.readers import JsonlReader  # noqa: E402
from datatrove.pipeline.writers import JsonlWriter  # noqa: E402

from hf_adapters.backends import loading  # noqa: E402
from hf_adapters.cli import main  # noqa: E402
from hf_adapters.integrations.datatrove_steps import (  # noqa: E402
    LikelihoodFilter,
    LikelihoodScores,
    conversation_document,
)
from hf_adapters.integrations.pipeline_scores import worker_environment  # noqa: E402
from tests.conftest import ROOT, read_jsonl, write_config, write_jsonl  # noqa: E402


def alpaca_shards(folder: Path) -> list[Path]:
    """Two shards of five instruction rows; row a2 has an empty output (IFD: NaN, with a warning)."""
    rows = [{"id": f"a{i}", "instruction": f"Repeat {i} twice.", "input": "" if i % 2 else f"{i}",
             "output": f"{i} {i}, done" + " ok" * i} for i in range(10)]
    rows[2]["output"] = ""
    folder.mkdir()
    return [write_jsonl(folder / f"part{n}.jsonl", rows[5 * n:5 * n + 5]) for n in range(2)]


def ifd_config(folder: Path, model_dir: str) -> str:
    return write_config(folder / "ifd.yaml", f"name: IFDScorer\nmodel: {model_dir}\nmax_length: 256\nbatch_size: 2\n"
                                             "template: '{instruction}\\n{input}\\n'\n"
                                             "template_no_input: '{instruction}\\n'\nscore_columns: all\n")


def run_pipeline(steps: list, logs: Path, tasks: int = 2) -> None:
    LocalPipelineExecutor(steps, tasks=tasks, workers=1, logging_dir=str(logs)).run()


def written(folder: Path) -> dict[str, dict]:
    """The documents a JsonlWriter wrote into ``folder``, by id."""
    return {row["id"]: row for path in sorted(folder.glob("*.jsonl")) for row in read_jsonl(path)}


def bits(value: float | None) -> bytes | None:
    return None if value is None else struct.pack("<d", value)


@pytest.fixture
def exact_kernel(monkeypatch):
    """One float32 CPU kernel for the pipeline and the command, so that their numbers compare to the bit."""
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")


def test_a_two_task_pipeline_writes_the_score_commands_numbers_into_the_metadata(tmp_path, model_dir, exact_kernel):
    shards = alpaca_shards(tmp_path / "rows")
    config = ifd_config(tmp_path, model_dir)
    run_pipeline([JsonlReader(str(tmp_path / "rows"), text_key="instruction"),
                  LikelihoodScores(config, text_column="instruction"),
                  JsonlWriter(str(tmp_path / "scored"), compression=None)], tmp_path / "logs")
    documents = written(tmp_path / "scored")
    assert len(documents) == 10
    for shard in shards:
        output = tmp_path / f"{shard.stem}-scores.jsonl"
        assert main(["score", config, "--data", str(shard), "--output", str(output), "--no-progress"]) in (0, None)
        for expected in read_jsonl(output):
            metadata = documents[expected["id"]]["metadata"]
            for column in ("score", "ppl_conditional", "ppl_direct"):
                assert bits(metadata[column]) == bits(expected[column]), (expected["id"], column)
    assert documents["a2"]["metadata"]["score"] is None  # NaN, which JSON writes as null
    assert all(documents[f"a{i}"]["metadata"]["score"] > 0 for i in (0, 1, 3, 4, 5, 9))


def test_the_model_loads_once_per_process_for_all_the_ranks_it_runs(tmp_path, model_dir, monkeypatch):
    alpaca_shards(tmp_path / "rows")
    loading.clear_model_cache(model_dir)
    loads = []
    load_from = loading._load_from
    monkeypatch.setattr(loading, "_load_from", lambda *args: loads.append(args[0]) or load_from(*args))
    step = LikelihoodScores(ifd_config(tmp_path, model_dir), text_column="instruction")
    assert loads == []  # building the step loads nothing: datatrove copies it to each rank
    run_pipeline([JsonlReader(str(tmp_path / "rows"), text_key="instruction"), step], tmp_path / "logs")
    assert len(loads) == 1


def test_a_score_set_writes_each_members_score_under_its_own_name_as_the_command_does(tmp_path, model_dir,
                                                                                     exact_kernel):
    shard = alpaca_shards(tmp_path / "rows")[0]
    config = write_config(tmp_path / "set.yaml", f"model: {model_dir}\nbatch_size: 2\nscores:\n"
                                                 "  - name: IFDScorer\n    template: '{instruction}\\n{input}\\n'\n"
                                                 "    template_no_input: '{instruction}\\n'\n"
                                                 "  - name: PerplexityScorer\n    text_column: output\n")
    run_pipeline([JsonlReader(str(tmp_path / "rows"), glob_pattern=shard.name, text_key="instruction"),
                  LikelihoodScores(config, text_column="instruction"),
                  JsonlWriter(str(tmp_path / "scored"), compression=None)], tmp_path / "logs", tasks=1)
    documents = written(tmp_path / "scored")
    output = tmp_path / "scores.jsonl"
    assert main(["score", config, "--data", str(shard), "--output", str(output), "--no-progress"]) in (0, None)
    for expected in read_jsonl(output):
        assert sorted(expected) == ["id", "ifd", "perplexity"]
        metadata = documents[expected["id"]]["metadata"]
        assert [bits(metadata["ifd"]), bits(metadata["perplexity"])] == [bits(expected["ifd"]),
                                                                         bits(expected["perplexity"])]


def test_a_rerun_skips_the_ranks_datatrove_marked_complete(tmp_path, model_dir):
    alpaca_shards(tmp_path / "rows")
    config = ifd_config(tmp_path, model_dir)
    steps = [JsonlReader(str(tmp_path / "rows"), text_key="instruction"),
             LikelihoodScores(config, text_column="instruction"),
             JsonlWriter(str(tmp_path / "scored"), compression=None)]
    run_pipeline(steps, tmp_path / "logs")
    assert sorted(path.name for path in (tmp_path / "logs" / "completions").iterdir()) == ["00000", "00001"]
    (tmp_path / "logs" / "completions" / "00001").unlink()  # as if rank 1 had been killed
    finished = (tmp_path / "scored" / "00000.jsonl").stat().st_mtime_ns
    run_pipeline(steps, tmp_path / "logs")
    assert (tmp_path / "scored" / "00000.jsonl").stat().st_mtime_ns == finished
    assert len(written(tmp_path / "scored")) == 10


def test_a_row_the_scorer_refuses_gets_nan_and_a_warning_and_the_pipeline_goes_on(tmp_path, model_dir, caplog):
    rows = [{"id": "ok", "instruction": "Say hi.", "input": "", "output": "hi"},
            {"id": "no-instruction", "input": "", "output": "hi"},
            {"id": "not-text", "instruction": ["Say", "hi"], "input": "", "output": "hi"}]
    (tmp_path / "rows").mkdir()
    write_jsonl(tmp_path / "rows" / "rows.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="hf_adapters"):
        run_pipeline([JsonlReader(str(tmp_path / "rows"), text_key="output"),
                      LikelihoodScores(ifd_config(tmp_path, model_dir), text_column="output"),
                      JsonlWriter(str(tmp_path / "scored"), compression=None)], tmp_path / "logs", tasks=1)
    documents = written(tmp_path / "scored")
    assert documents["ok"]["metadata"]["score"] > 0
    assert documents["no-instruction"]["metadata"]["score"] is None
    assert documents["not-text"]["metadata"]["score"] is None
    assert "Row 1 (id='no-instruction') has no field 'instruction'. Its scores are NaN." in caplog.text
    assert "id='not-text'" in caplog.text


def test_the_filter_keeps_rows_in_the_range_and_hands_the_others_to_the_exclusion_writer(tmp_path, model_dir,
                                                                                         exact_kernel):
    alpaca_shards(tmp_path / "rows")
    config = ifd_config(tmp_path, model_dir)
    run_pipeline([JsonlReader(str(tmp_path / "rows"), text_key="instruction"),
                  LikelihoodScores(config, text_column="instruction"),
                  JsonlWriter(str(tmp_path / "scored"), compression=None)], tmp_path / "logs-scores")
    scores = {key: row["metadata"]["score"] for key, row in written(tmp_path / "scored").items()}
    bound = sorted(score for score in scores.values() if score is not None)[4]
    run_pipeline([JsonlReader(str(tmp_path / "rows"), text_key="instruction"),
                  LikelihoodFilter(config, text_column="instruction", max_score=bound,
                                   exclusion_writer=JsonlWriter(str(tmp_path / "removed"), compression=None)),
                  JsonlWriter(str(tmp_path / "kept"), compression=None)], tmp_path / "logs-filter")
    kept, removed = written(tmp_path / "kept"), written(tmp_path / "removed")
    assert sorted(kept) == sorted(key for key, score in scores.items() if score is not None and score <= bound)
    assert sorted(kept) + sorted(removed) == sorted(kept) + sorted(set(scores) - set(kept))
    assert removed["a2"]["metadata"]["filter_reason"] == "no_score"
    assert {row["metadata"]["filter_reason"] for key, row in removed.items() if key != "a2"} == {"score_out_of_range"}


def test_chat_rows_are_scored_from_their_messages(tmp_path, model_dir, exact_kernel):
    chats = [{"id": f"c{i}", "messages": [{"role": "user", "content": f"Count to {i}."},
                                          {"role": "assistant", "content": " ".join(map(str, range(1, i + 2)))}]}
             for i in range(3)]
    (tmp_path / "chats").mkdir()
    data = write_jsonl(tmp_path / "chats" / "chats.jsonl", chats)
    config = write_config(tmp_path / "conv.yaml", f"name: IFDScorer\nturns: last\nmodel: {model_dir}\nmax_length: 64\n"
                                                  "turn_template: '{role}: {content}\\n'\n")
    run_pipeline([JsonlReader(str(tmp_path / "chats"), adapter=conversation_document),
                  LikelihoodScores(config), JsonlWriter(str(tmp_path / "scored"), compression=None)],
                 tmp_path / "logs", tasks=1)
    output = tmp_path / "s.jsonl"
    assert main(["score", config, "--data", str(data), "--output", str(output), "--no-progress"]) in (0, None)
    documents = written(tmp_path / "scored")
    for expected in read_jsonl(output):
        assert bits(documents[expected["id"]]["metadata"]["score"]) == bits(expected["score"])


def test_datatroves_ray_executor_runs_the_step_in_its_workers_with_the_score_commands_numbers(tmp_path, model_dir,
                                                                                          exact_kernel, ray_cluster):
    from datatrove.executor.ray import RayPipelineExecutor

    shards = alpaca_shards(tmp_path / "rows")
    config = ifd_config(tmp_path, model_dir)
    RayPipelineExecutor([JsonlReader(str(tmp_path / "rows"), text_key="instruction"),
                         LikelihoodScores(config, text_column="instruction"),
                         JsonlWriter(str(tmp_path / "scored"), compression=None)],
                        tasks=2, workers=2, cpus_per_task=1, mem_per_cpu_gb=0.25, logging_dir=str(tmp_path / "logs"),
                        ray_remote_kwargs={"runtime_env": {"env_vars": worker_environment("cpu")}}).run()
    documents = written(tmp_path / "scored")
    for shard in shards:
        output = tmp_path / f"{shard.stem}-scores.jsonl"
        assert main(["score", config, "--data", str(shard), "--output", str(output), "--no-progress"]) in (0, None)
        assert [bits(documents[row["id"]]["metadata"]["score"]) for row in read_jsonl(output)] == \
            [bits(row["score"]) for row in read_jsonl(output)]
    assert sorted(path.name for path in (tmp_path / "logs" / "completions").iterdir()) == ["00000", "00001"]


def _wait_policies(code: str) -> list[str]:
    """What ``code`` prints, run in a fresh process whose environment has no OpenMP wait policy."""
    env = {name: value for name, value in os.environ.items() if name != "OMP_WAIT_POLICY"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_importing_the_steps_leaves_the_process_environment_alone():
    code = ("import os, sys\nimport hf_adapters.integrations.datatrove_steps\n"
            "assert 'torch' not in sys.modules\nprint(os.environ.get('OMP_WAIT_POLICY', 'unset'))")
    assert _wait_policies(code) == ["unset"]


def test_building_a_step_before_torch_makes_openmp_wait_passively_as_the_command_does():
    code = ("import os, sys\nfrom hf_adapters.integrations.datatrove_steps import LikelihoodScores\n"
            "LikelihoodScores({'name': 'IFEvalScorer'})\n"
            "assert 'torch' in sys.modules\nprint(os.environ.get('OMP_WAIT_POLICY'))")
    assert _wait_policies(code) == ["PASSIVE"]


def test_the_steps_pickle_without_a_model_as_the_slurm_and_ray_executors_send_them(tmp_path, model_dir):
    step = LikelihoodScores(ifd_config(tmp_path, model_dir), text_column="instruction")
    step.scores.load()
    copy = pickle.loads(pickle.dumps(step))
    assert copy.scores._scorer is None and copy.scores.columns == step.scores.columns
    assert json.dumps(copy.scores.config)  # the config travels, not the model


def test_a_config_that_names_no_written_column_for_the_filter_is_refused_when_the_pipeline_is_built(tmp_path,
                                                                                                   model_dir):
    with pytest.raises(ValueError, match="column 'ifd' is not written by this config; it writes"):
        LikelihoodFilter(ifd_config(tmp_path, model_dir), column="ifd", max_score=1.0)


def test_a_document_whose_metadata_has_a_score_columns_key_is_refused_naming_it(tmp_path, model_dir):
    from datatrove.data import Document

    step = LikelihoodScores(ifd_config(tmp_path, model_dir), text_column="output")
    documents = [Document(text="hi", id="d1", metadata={"instruction": "Say hi.", "input": "", "ppl_direct": 2.0})]
    with pytest.raises(ValueError, match="Document 'd1' has the metadata key 'ppl_direct': the scores would "
                                         "replace it"):
        list(step.run(documents))
