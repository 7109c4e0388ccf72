"""DeitaCScorer, DeitaQScorer, AskLlmScorer and SelectitTokenScorer: OpenDataArena-Tool's configs as they
are, the seed configs, the same numbers as the formulas, and a score set with IFD."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from hf_adapters import cli
from hf_adapters.formulas.ask_llm import compute_ask_llm
from hf_adapters.formulas.deita import compute_deita
from hf_adapters.formulas.selectit import compute_selectit
from hf_adapters.scorers import (
    AskLlmScorer,
    ConfigError,
    DeitaCScorer,
    DeitaQScorer,
    ScoreSet,
    SelectitTokenScorer,
    build_scorer,
    load_config,
)
from tests.conftest import build_model, read_jsonl, saved_model, write_config, write_jsonl
from tests.formulas import test_reward
from tests.formulas.test_judgment_scores import INPUTS, INSTRUCTIONS, OUTPUTS, ROWS

CONFIGS = Path(__file__).resolve().parents[2] / "hf_adapters" / "configs"
#: The tiny reward model's fixtures (a sequence classifier and its chat-templated tokenizer), as a folder.
reward_tokenizer, reward_model = test_reward.reward_tokenizer, test_reward.reward_model
reward_dir = test_reward.reward_dir
RECORDS = [{"instruction": i, "input": n, "output": o} for i, n, o in ROWS]
#: The scorer entries of OpenDataArena-Tool's configs, verbatim but for the rating prompts' file.
OPENDATAARENA_YAML = {
    "DeitaCScorer": "name: DeitaCScorer\nmodel: hkust-nlp/deita-complexity-scorer\nmax_length: 2048\nbatch_size: 8\n",
    "DeitaQScorer": "name: DeitaQScorer\nmodel: hkust-nlp/deita-quality-scorer\nmax_length: 2048\nbatch_size: 8\n",
    "AskLlmScorer": "name: AskLlmScorer\nmodel: Qwen/Qwen3-8B\nmax_length: 2048\nprompt: 'Is the following data high "
                    "quality? Please answer yes or no.\n\n\n    '\nyes_token: 'yes'\nbatch_size: 8\n",
    "SelectitTokenScorer": "name: SelectitTokenScorer\nmodel: Qwen/Qwen3-8B\nmax_length: 512\nbatch_size: 8\n"
                           "rp_file: {rp_file}\nk: 2\nalpha: 0.2\n",
}


@pytest.mark.parametrize("name", sorted(OPENDATAARENA_YAML))
def test_opendataarenas_config_runs_as_it_is_and_scores_like_the_formula(name, tmp_path, model, tokenizer,
                                                                          load_calls):
    rp_file = tmp_path / "rp.txt"
    rp_file.write_text("Rate it from 1 to 5.\nScore it 1-5.\n", encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(OPENDATAARENA_YAML[name].replace("{rp_file}", str(rp_file)), encoding="utf-8")
    scores = build_scorer(load_config(config)).score_rows(RECORDS)
    assert len(load_calls) == 1
    loaded = {"model": model, "tokenizer": tokenizer}
    expected = {
        "DeitaCScorer": lambda: compute_deita(INSTRUCTIONS, inputs=INPUTS, max_length=2048, **loaded)["deita_scores"],
        "DeitaQScorer": lambda: compute_deita(INSTRUCTIONS, OUTPUTS, INPUTS, aspect="quality", max_length=2048,
                                              **loaded)["deita_scores"],
        "AskLlmScorer": lambda: compute_ask_llm(INSTRUCTIONS, OUTPUTS, INPUTS, max_length=2048, prompt=(
            "Is the following data high quality? Please answer yes or no.\n\n"), **loaded)["ask_llm_scores"],
        "SelectitTokenScorer": lambda: compute_selectit(INSTRUCTIONS, OUTPUTS, INPUTS, rp_file=str(rp_file), k=2,
                                                        max_length=512, **loaded)["selectit_scores"],
    }[name]()
    assert all(math.isfinite(score) for score in scores)
    assert scores == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(("file", "cls"), [
    ("deita_complexity.yaml", DeitaCScorer), ("deita_quality.yaml", DeitaQScorer), ("ask_llm.yaml", AskLlmScorer),
    ("selectit.yaml", SelectitTokenScorer)])
def test_the_seed_configs_of_the_judgment_scorers_build_on_the_default_model(file, cls):
    assert isinstance(build_scorer(load_config(CONFIGS / file)), cls)


def test_a_selectit_scorer_reads_its_rating_prompts_file_once(model_dir, tmp_path, monkeypatch):
    """Its check and every batch share one read of ``rp_file``."""
    rp_file = tmp_path / "rp.txt"
    rp_file.write_text("Rate it from 1 to 5.\nScore it 1-5.\n", encoding="utf-8")
    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda path, *args, **kwargs: (
        reads.append(path) if path == rp_file else None, read_text(path, *args, **kwargs))[1])
    scorer = build_scorer({"name": "SelectitTokenScorer", "model": model_dir, "rp_file": str(rp_file), "k": 2})
    batch = {key: [row[key] for row in RECORDS] for key in RECORDS[0]}
    first, second = scorer.score_batch(batch), scorer.score_batch(batch)
    assert first == second and all(math.isfinite(score) for score in first["selectit"])
    assert reads == [rp_file]


def test_a_deita_scorer_refuses_the_other_aspect():
    with pytest.raises(ConfigError, match="DeitaCScorer rates complexity; DeitaQScorer rates quality"):
        build_scorer({"name": "DeitaCScorer", "aspect": "quality"})


def test_the_judgment_set_equals_each_scorer_alone(model_dir):
    score_set = build_scorer(load_config(CONFIGS / "judgment_set.yaml"), model=model_dir)
    assert isinstance(score_set, ScoreSet)
    batch = {key: [row[key] for row in RECORDS] for key in RECORDS[0]}
    together = score_set.score_batch(batch)
    for name in ("IFDScorer", "DeitaCScorer", "DeitaQScorer", "AskLlmScorer"):
        alone = build_scorer({"name": name, "model": model_dir}).score_batch(batch)
        for column, values in alone.items():
            assert together[column] == pytest.approx(values, rel=1e-5), column


def test_deitas_pipeline_from_raw_rows_scores_multiplies_and_selects_a_diverse_subset(model_dir, tmp_path):
    """DEITA's whole pipeline: complexity and quality in one job, their product (the evol score) and its
    diversity filter on the model's own embeddings."""
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", **row} for i, row in enumerate(RECORDS)])
    config = write_config(tmp_path / "deita.yaml", "scores:\n  - name: DeitaCScorer\n  - name: DeitaQScorer\n")
    scores, vectors, selected = tmp_path / "scores.jsonl", tmp_path / "vectors.npy", tmp_path / "selected.jsonl"
    assert cli.main(["score", config, "--data", str(data), "--output", str(scores), "--model", model_dir]) == 0
    assert cli.main(["embed", "--data", str(data), "--output", str(vectors), "--model", model_dir,
                     "--pooling", "last"]) == 0
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--output", str(selected),
                     "--score-product", "deita_complexity", "deita_quality", "--diversity", "deita",
                     "--embeddings", str(vectors), "--similarity-threshold", "0.999", "--top-n", "2",
                     "--order", "score"]) == 0
    lines = read_jsonl(scores)
    products = {line["id"]: line["deita_complexity"] * line["deita_quality"] for line in lines}
    kept = read_jsonl(selected)
    assert [row["id"] for row in kept] == sorted(products, key=products.get, reverse=True)[:2]
    assert kept[0]["score_product"] == pytest.approx(products[kept[0]["id"]])


@pytest.fixture(scope="module")
def second_model_dir(tmp_path_factory, tokenizer) -> str:
    """Another tiny model (other weights, the same tokenizer): a second scorer model."""
    return saved_model(tmp_path_factory.mktemp("second-model"), build_model(len(tokenizer), seed=7), tokenizer)


def test_a_member_with_a_model_of_its_own_scores_with_it_and_each_model_loads_once(model_dir, second_model_dir,
                                                                                   monkeypatch):
    """DEITA's two scorer models and IFD's model in one job: each member equals its scorer alone on its model."""
    from hf_adapters.backends import loading

    loads = []
    original = loading.load_model
    monkeypatch.setattr(loading, "load_model",
                        lambda model_id, **options: loads.append(model_id) or original(model_id, **options))
    loading.clear_model_cache()
    config = {"model": model_dir, "scores": ["IFDScorer", {"name": "DeitaCScorer", "model": second_model_dir},
                                             {"name": "DeitaQScorer", "model": second_model_dir}]}
    score_set = build_scorer(config)
    batch = {key: [row[key] for row in RECORDS] for key in RECORDS[0]}
    together = score_set.score_batch(batch)
    assert sorted(loads) == sorted([model_dir, second_model_dir])
    assert score_set.config["model"] == model_dir and score_set.config["scores"][1]["model"] == second_model_dir
    for member, model in (("IFDScorer", model_dir), ("DeitaCScorer", second_model_dir),
                          ("DeitaQScorer", second_model_dir)):
        alone = build_scorer({"name": member, "model": model}).score_batch(batch)
        for column, values in alone.items():
            assert together[column] == pytest.approx(values, rel=1e-5), column
    assert together["deita_complexity"] != pytest.approx(
        build_scorer({"name": "DeitaCScorer", "model": model_dir}).score_batch(batch)["deita_complexity"], rel=1e-3)


def test_judgment_scores_are_columns_through_dataset_map(model_dir):
    from datasets import Dataset

    from hf_adapters import add_score_columns

    ds = add_score_columns(Dataset.from_list(RECORDS), ScoreSet(["DeitaCScorer", "AskLlmScorer"], model=model_dir))
    alone = build_scorer({"name": "DeitaCScorer", "model": model_dir}).score_rows(RECORDS)
    assert ds["deita_complexity"] == pytest.approx(alone, rel=1e-6) and len(ds["ask_llm"]) == len(RECORDS)


def test_a_reward_models_values_are_a_column_through_dataset_map(reward_dir):
    from datasets import Dataset

    from hf_adapters import add_score_columns

    scorer = build_scorer({"name": "SkyworkRewardScorer", "model": reward_dir})
    ds = add_score_columns(Dataset.from_list(RECORDS), scorer)
    assert ds["reward"] == pytest.approx(scorer.score_rows(RECORDS), rel=1e-6)


#: A score set of every judgment of one causal LM beside IFD: a DEITA pair, Ask-LLM and SelectIT.
JUDGMENT_SET = ["IFDScorer", "DeitaCScorer", "DeitaQScorer", "AskLlmScorer", {"name": "SelectitTokenScorer", "k": 2}]


def id_rows(copies: int = 1) -> list[dict]:
    """:data:`RECORDS` with ids, ``copies`` times."""
    return [{"id": f"r{copy}-{i}", **row} for copy in range(copies) for i, row in enumerate(RECORDS)]


@pytest.mark.parametrize("stopped", ["set", "reward"])
def test_a_stopped_judgment_job_resumes_to_the_bytes_of_an_uninterrupted_run(model_dir, reward_dir, tmp_path,
                                                                              monkeypatch, stopped):
    from datasets import Dataset

    from hf_adapters.scorers import RewardModelScorer
    from tests.scorers.test_score_sets import assert_a_stopped_job_resumes_to_the_whole_runs_bytes

    config, cls = {"set": ({"scores": JUDGMENT_SET, "model": model_dir, "batch_size": 2}, ScoreSet),
                   "reward": ({"name": "SkyworkRewardScorer", "model": reward_dir, "batch_size": 2},
                              RewardModelScorer)}[stopped]
    data = Dataset.from_list(id_rows(3))
    assert_a_stopped_job_resumes_to_the_whole_runs_bytes(data, config, cls, tmp_path, monkeypatch)


def test_summary_and_compare_read_the_judgment_columns_of_a_jobs_output(model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "rows.jsonl", id_rows(2))
    config = tmp_path / "judgments.yaml"
    config.write_text(yaml.safe_dump({"scores": JUDGMENT_SET}), encoding="utf-8")
    scores = tmp_path / "scores.jsonl"
    assert cli.main(["score", str(config), "--data", str(data), "--output", str(scores), "--model", model_dir,
                     "--no-progress"]) == 0
    lines = read_jsonl(scores)
    columns = ["ifd", "deita_complexity", "deita_quality", "ask_llm", "selectit"]
    capsys.readouterr()
    assert cli.main(["summary", str(scores), "--json"]) == 0
    summary = {entry["column"]: entry for entry in json.loads(capsys.readouterr().out)["columns"]}
    assert list(summary) == columns
    for column in columns:
        assert summary[column]["valid"] == len(lines), column
        assert summary[column]["mean"] == pytest.approx(sum(line[column] for line in lines) / len(lines))
    assert cli.main(["compare", str(scores), "--columns", "deita_complexity", "deita_quality", "--top-k", "2",
                     "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert compared["compared"] == len(lines) and -1 <= compared["spearman"] <= 1


@pytest.mark.parametrize("file", ["deita_complexity.yaml", "deita_quality.yaml", "ask_llm.yaml", "selectit.yaml",
                                  "judgment_set.yaml"])
def test_a_seed_config_runs_offline_with_model_naming_a_local_folder(file, model_dir, tmp_path, monkeypatch):
    """Each shipped config, its ``model:`` line pointed at a local model folder, runs as a command with the
    hub unreachable and gives the scorer's numbers."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = (CONFIGS / file).read_text(encoding="utf-8")
    config = tmp_path / file
    config.write_text(text.replace("model: HuggingFaceTB/SmolLM2-135M-Instruct", f"model: {model_dir}"),
                      encoding="utf-8")
    assert f"model: {model_dir}" in config.read_text(encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", id_rows())
    output = tmp_path / "scores.jsonl"
    assert cli.main(["score", str(config), "--data", str(data), "--output", str(output), "--no-progress"]) == 0
    lines = read_jsonl(output)
    scorer = build_scorer(load_config(config))
    if isinstance(scorer, ScoreSet):
        expected = scorer.score_batch({key: [row[key] for row in RECORDS] for key in RECORDS[0]})
        assert list(lines[0]) == ["id", "ifd", "deita_complexity", "deita_quality", "ask_llm"]
    else:
        expected = {"score": scorer.score_rows(RECORDS)}
    for column in list(lines[0])[1:]:
        assert [line[column] for line in lines] == pytest.approx(expected[column], rel=1e-6), column


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("job", ["set", "reward"])
def test_judgments_on_ray_write_the_local_files_bytes_and_a_stopped_ray_job_resumes_to_them(
        job, model_dir, reward_dir, tmp_path, monkeypatch, capsys):
    """A DEITA pair, Ask-LLM and SelectIT beside IFD: two Ray workers write the default engine's file byte for
    byte (the CPU kernel pinned); a reward model's values, whose float rounding depends on the rows that
    share a batch, within that rounding. A Ray job stopped before its merge, one part lost, resumes to the
    uninterrupted Ray run's bytes."""
    from hf_adapters.engines import ray as ray_engine

    def stopped_before_the_merge(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setenv("HF_ADAPTERS_CPU_LINEAR", "default")
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"set": {"model": model_dir, "batch_size": 4, "scores": JUDGMENT_SET},
                                      "reward": {"name": "SkyworkRewardScorer", "model": reward_dir,
                                                 "batch_size": 4}}[job]), encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", id_rows(6))

    def score(output: str, *flags: str) -> int:
        return cli.main(["score", str(config), "--data", str(data), "--output", str(tmp_path / output),
                         "--score-columns", "all", "--no-progress", *flags])

    on_ray = ("--engine", "ray", "--num-workers", "2", "--rows-per-block", "8")
    assert score("local.jsonl") == 0
    assert score("ray.jsonl", *on_ray) == 0
    expected = (tmp_path / "ray.jsonl").read_bytes()
    if job == "set":
        assert expected == (tmp_path / "local.jsonl").read_bytes()
    local, on_workers = read_jsonl(tmp_path / "local.jsonl"), read_jsonl(tmp_path / "ray.jsonl")
    assert [line["id"] for line in on_workers] == [line["id"] for line in local]
    for column in list(local[0])[1:]:
        assert [line[column] for line in on_workers] == pytest.approx([line[column] for line in local], rel=1e-5)
    with monkeypatch.context() as patch:
        patch.setattr(ray_engine, "merge_parts", stopped_before_the_merge)
        assert score("resumed.jsonl", *on_ray) == 130
    parts = sorted((tmp_path / "resumed.jsonl.parts").glob("*.done"))
    assert len(parts) == 3
    parts[1].unlink()
    capsys.readouterr()
    assert score("resumed.jsonl", *on_ray) == 0
    assert "this run scored 8" in capsys.readouterr().out
    assert (tmp_path / "resumed.jsonl").read_bytes() == expected
