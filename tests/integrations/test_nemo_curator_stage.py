"""The NeMo Curator stage and filter (hf_adapters.integrations.nemo_curator_stage), against ``hf-adapters score``
on the same rows, on the tiny model. NeMo Curator lives in .venv-nemo (``make nemo``: its hydra-core needs an
antlr4 runtime other than the one lighteval's math-verify needs in .venv), where ``make test`` runs this file."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

pytest.importorskip("nemo_curator", reason="NeMo Curator is not installed here: `make nemo` builds .venv-nemo, "
                                           "where `make test` runs this file")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from nemo_curator.backends.ray_actor_pool import RayActorPoolExecutor  # noqa: E402
from nemo_curator.pipeline import Pipeline  # noqa: E402
from nemo_curator.stages.text.io.reader import JsonlReader  # noqa: E402
from nemo_curator.stages.text.io.writer import ParquetWriter  # noqa: E402
from nemo_curator.tasks import DocumentBatch  # noqa: E402

from hf_adapters.cli import main  # noqa: E402
from hf_adapters.integrations.nemo_curator_stage import LikelihoodScoreFilter, LikelihoodScoreStage  # noqa: E402
from tests.conftest import read_jsonl, write_config, write_jsonl  # noqa: E402


def alpaca_rows() -> list[dict]:
    """Eight instruction rows; r3 has an empty output (IFD: NaN, with a warning)."""
    rows = [{"id": f"r{i}", "instruction": f"Repeat {i} twice.", "input": "" if i % 2 else f"{i}",
             "output": f"{i} {i}, done" + " ok" * i} for i in range(8)]
    rows[3]["output"] = ""
    return rows


def ifd_config(folder: Path, model_dir: str) -> str:
    return write_config(folder / "ifd.yaml", f"name: IFDScorer\nmodel: {model_dir}\nmax_length: 256\nbatch_size: 2\n"
                                             "template: '{instruction}\\n{input}\\n'\n"
                                             "template_no_input: '{instruction}\\n'\nscore_columns: all\n")


def bits(value: float | None) -> bytes | None:
    return None if value is None or value != value else struct.pack("<d", value)


def test_the_stage_asks_for_no_gpu_on_the_cpu_and_names_its_columns_as_the_score_files(tmp_path, model_dir):
    stage = LikelihoodScoreStage(ifd_config(tmp_path, model_dir), device="cpu")
    assert (stage.resources.gpus, stage.resources.cpus) == (0.0, 1.0)
    assert stage.outputs() == (["data"], ["score", "ppl_conditional", "ppl_direct"])
    assert stage.ray_stage_spec()["is_actor_stage"]
    assert LikelihoodScoreStage(ifd_config(tmp_path, model_dir), device="cuda").resources.gpus == 1.0


def test_the_workers_on_the_cpu_wait_passively_and_get_a_pinned_kernel_with_this_processs_threads(
        tmp_path, model_dir, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("HF_ADAPTERS_CPU_LINEAR", raising=False)
    assert LikelihoodScoreStage(ifd_config(tmp_path, model_dir), device="cpu").runtime_env == \
        {"env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}}
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "onednn")
    threads = str(torch.get_num_threads())
    assert LikelihoodScoreStage(ifd_config(tmp_path, model_dir), device="cpu").runtime_env["env_vars"] == \
        {"OMP_WAIT_POLICY": "PASSIVE", "HF_ADAPTERS_CPU_LINEAR": "onednn", "OMP_NUM_THREADS": threads}
    assert LikelihoodScoreStage(ifd_config(tmp_path, model_dir), device="cuda").runtime_env is None


def test_a_row_the_scorer_refuses_gets_nan_and_a_warning_and_the_batch_goes_on(tmp_path, model_dir, caplog):
    stage = LikelihoodScoreStage(ifd_config(tmp_path, model_dir))
    stage.setup()
    table = pa.Table.from_pylist([{"id": "ok", "instruction": "Say hi.", "input": "", "output": "hi"},
                                  {"id": "none", "instruction": None, "input": "", "output": "hi"}])
    with caplog.at_level(logging.WARNING, logger="hf_adapters"):
        scored = stage.process(DocumentBatch(dataset_name="rows", data=table)).to_pyarrow().to_pylist()
    assert scored[0]["score"] > 0 and scored[1]["score"] != scored[1]["score"]
    assert "Row 1 (id='none') has no field 'instruction'. Its scores are NaN." in caplog.text


def test_a_ray_pipeline_keeps_the_rows_in_range_with_the_score_commands_numbers(tmp_path, model_dir, monkeypatch,
                                                                              executors_ray):
    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")  # one float32 kernel, so numbers compare to the bit
    rows = alpaca_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = ifd_config(tmp_path, model_dir)
    assert main(["score", config, "--data", str(data), "--output", str(tmp_path / "s.jsonl"), "--no-progress"]) in \
        (0, None)
    expected = {row["id"]: row for row in read_jsonl(tmp_path / "s.jsonl")}
    bound = sorted(row["score"] for row in expected.values() if row["score"] is not None)[3]
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "rows.jsonl", [*rows, {"id": "refused", "input": "", "output": "no instruction"}])
    pipeline = Pipeline(name="ifd", stages=[JsonlReader(str(tmp_path / "in")),
                                            LikelihoodScoreFilter(config, max_score=bound),
                                            ParquetWriter(str(tmp_path / "kept"))])  # JSONL: 10 digits
    pipeline.run(RayActorPoolExecutor(show_progress=False))
    kept = {row["id"]: row for path in (tmp_path / "kept").glob("*.parquet") for row in pq.read_table(path).to_pylist()}
    assert sorted(kept) == sorted(key for key, row in expected.items() if row["score"] is not None
                                  and row["score"] <= bound)
    for key, row in kept.items():
        for column in ("score", "ppl_conditional", "ppl_direct"):
            assert bits(row[column]) == bits(expected[key][column]), (key, column)


def test_a_warning_names_a_row_by_its_place_among_the_rows_its_worker_scored(tmp_path, model_dir, caplog):
    stage = LikelihoodScoreStage(ifd_config(tmp_path, model_dir))
    stage.setup()
    batches = [[{"id": "a", "instruction": "Say hi.", "input": "", "output": "hi"}] * 2,
               [{"id": "b", "instruction": "Say hi.", "input": "", "output": "hi"},
                {"id": "c", "instruction": None, "input": "", "output": "hi"}]]
    with caplog.at_level(logging.WARNING, logger="hf_adapters"):
        for rows in batches:
            stage.process(DocumentBatch(dataset_name="rows", data=pa.Table.from_pylist(rows)))
    assert "Row 3 (id='c') has no field 'instruction'. Its scores are NaN." in caplog.text


def test_a_data_column_with_a_score_columns_name_is_refused_naming_it(tmp_path, model_dir):
    stage = LikelihoodScoreStage(ifd_config(tmp_path, model_dir))
    table = pa.Table.from_pylist([{"id": "a", "instruction": "Say hi.", "input": "", "output": "hi", "score": 1.0}])
    with pytest.raises(ValueError, match="The data has a column 'score': the scores would replace it"):
        stage.process(DocumentBatch(dataset_name="rows", data=table))
