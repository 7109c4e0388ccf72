"""Score sets: several scorers in one job, their likelihood calls in shared passes, each member's columns
those of the scorer alone; the config shape, its refusals, and jobs (resume, identity, columns)."""

from __future__ import annotations

import json
import logging
import math

import pytest
import yaml
from datasets import Dataset

from hf_adapters import cli
from hf_adapters.backends.base import LikelihoodBackend
from hf_adapters.backends.shared_passes import SharedPasses
from hf_adapters.columns.dataset_columns import add_score_columns
from hf_adapters.core.likelihood import ContinuationScore, prepare_items
from hf_adapters.engines.local import JobConflictError, run_scoring_job
from hf_adapters.scorers import ConfigError, ScoreSet, build_scorer, load_config
from tests.conftest import (
    EXACT_FLOOR,
    ROOT,
    build_model,
    build_tokenizer,
    read_jsonl,
    saved_model,
    write_config,
    write_jsonl,
)

ROWS = [
    {"id": "a", "instruction": "Name a colour.", "input": "", "output": "Blue is one.",
     "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}],
     "prediction": "the cat sat", "reference": "the cat sat on the mat"},
    {"id": "b", "instruction": "Add the numbers.", "input": "2 and 3", "output": "They make five, which is odd.",
     "messages": [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "one two three"},
                  {"role": "user", "content": "More."}, {"role": "assistant", "content": "four five"}],
     "prediction": "a dog ran", "reference": "a dog ran far away"},
    {"id": "c", "instruction": "Say nothing.", "input": "", "output": "",
     "messages": [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}],
     "prediction": "", "reference": "empty"},
    {"id": "d", "instruction": "Write a long answer about the sea and the sky.", "input": "",
     "output": "The sea is wide and the sky is wide; " * 6,
     "messages": [{"role": "user", "content": "Tell me."}, {"role": "assistant", "content": "It is so. " * 5}],
     "prediction": "x y z", "reference": "x y z w"},
]


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory) -> str:
    """Another tiny random model on the same tokenizer: the reference of excess loss."""
    tokenizer = build_tokenizer()
    return saved_model(tmp_path_factory.mktemp("reference"), build_model(len(tokenizer), seed=7), tokenizer)


def batch_of(rows: list[dict]) -> dict[str, list]:
    return {column: [row[column] for row in rows] for column in rows[0]}


def same(actual: list, alone: list) -> bool:
    """Equal values (NaN equal to NaN; lists element-wise), floats within the exactness floor of the value alone."""
    if isinstance(alone, (list, tuple)):
        return len(actual) == len(alone) and all(same(a, b) for a, b in zip(actual, alone, strict=True))
    if isinstance(alone, float):
        return (math.isnan(actual) and math.isnan(alone)) or actual == pytest.approx(alone, rel=EXACT_FLOOR, abs=1e-12)
    return actual == alone


#: Every scorer that can be a member, with the keys that make it read these rows.
MEMBERS = [
    {"name": "IFDScorer"},
    {"name": "IFDScorer", "convention": "cherry", "return_token_losses": False},
    {"name": "IFDScorer", "return_token_losses": True},
    {"name": "PPLScorer"},
    {"name": "PerplexityScorer", "text_column": "output", "return_entropy": True},
    {"name": "UPDScorer"},
    {"name": "UPDScorer", "convention": "exact"},
    {"name": "HESScorer"},
    {"name": "HESScorer", "convention": "exact"},
    {"name": "NormLossScorer", "input_column": "input"},
    {"name": "NormLossScorer", "convention": "exact"},
    {"name": "AnswerEntropyScorer"},
    {"name": "ExcessLossScorer", "reference_model": "REFERENCE"},
    {"name": "ConversationIFDScorer", "turns": "all"},
    {"name": "ConversationPerplexityScorer"},
    {"name": "InformationParityScorer"},
]
#: Companions that share sequences with most members; one that would clash with the member is left out.
COMPANIONS = [{"name": "IFDScorer"}, {"name": "PPLScorer"}, {"name": "AnswerEntropyScorer"},
              {"name": "UPDScorer", "convention": "exact"}]


def configured(config: dict, reference_dir: str) -> dict:
    return {key: reference_dir if value == "REFERENCE" else value for key, value in config.items()}


@pytest.mark.parametrize("member", MEMBERS, ids=lambda config: "-".join(str(value) for value in config.values()))
def test_each_member_of_a_set_equals_the_scorer_run_alone(member, model_dir, reference_dir):
    member = configured(member, reference_dir)
    alone = build_scorer({**member, "model": model_dir, "batch_size": 3})
    companions = [companion for companion in COMPANIONS
                  if not set(build_scorer({**companion, "model": model_dir}).outputs) & set(alone.outputs)]
    score_set = ScoreSet([member, *companions], model=model_dir, batch_size=3)
    batch = batch_of(ROWS)
    together, by_itself = score_set.score_batch(batch), alone.score_batch(batch)
    for output, values in by_itself.items():
        assert same(together[output], values), (output, together[output], values)
    assert score_set.work["forward_passes"] < score_set.work["items"]


def test_ifd_and_the_exact_answer_scores_run_on_ifds_two_passes_and_ppl_adds_one(model_dir):
    members = [{"name": "IFDScorer"}, {"name": "UPDScorer", "convention": "exact"},
               {"name": "HESScorer", "convention": "exact"}, {"name": "NormLossScorer", "convention": "exact"},
               {"name": "AnswerEntropyScorer"}]
    scored = [row for row in ROWS if row["output"]]
    score_set = ScoreSet(members, model=model_dir)
    score_set.score_batch(batch_of(scored))
    assert score_set.work == {"items": 6 * len(scored), "forward_passes": 2 * len(scored)}
    with_ppl = ScoreSet([*members, {"name": "PPLScorer"}], model=model_dir)
    with_ppl.score_batch(batch_of(scored))
    assert with_ppl.work["forward_passes"] == 3 * len(scored)


ALPACA = {"template": "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n",
          "template_no_input": "### Instruction:\n{instruction}\n\n### Response:\n"}


def test_the_exact_members_read_the_answer_after_ifds_prompt_when_they_give_none(model_dir):
    scored = batch_of([row for row in ROWS if row["output"]])
    members = [{"name": "IFDScorer", **ALPACA}, {"name": "UPDScorer", "convention": "exact"},
               {"name": "HESScorer", "convention": "exact"}, {"name": "AnswerEntropyScorer"}]
    score_set = ScoreSet(members, model=model_dir)
    together = score_set.score_batch(scored)
    for member in members[1:]:
        alone = build_scorer({**member, **ALPACA, "model": model_dir}).score_batch(scored)
        assert all(same(together[output], values) for output, values in alone.items()), member
    assert score_set.work["forward_passes"] == 2 * len(scored["id"])


def test_a_member_that_gives_its_own_template_keeps_it_and_a_set_on_the_default_prompt_keeps_its_configs(model_dir):
    own = {"name": "UPDScorer", "convention": "exact", "template": "Q: {instruction} {input}\nA: "}
    score_set = ScoreSet([{"name": "IFDScorer", **ALPACA}, own], model=model_dir)
    assert score_set.members[1].spec.template == own["template"]
    assert score_set.members[1].spec.template_no_input is None
    on_default = ScoreSet(["IFDScorer", {"name": "HESScorer", "convention": "exact"}], model=model_dir)
    assert on_default.config["scores"][1] == ScoreSet([{"name": "HESScorer", "convention": "exact"}],
                                                      model=model_dir).config["scores"][0]


def the_pages_chat_set() -> dict:
    """The set config for a chat model that docs/score_sets.md prints."""
    page = (ROOT / "docs" / "score_sets.md").read_text(encoding="utf-8")
    return yaml.safe_load(page.partition("### A chat model")[2].partition("```yaml\n")[2].partition("```")[0])


def test_the_pages_chat_model_set_reads_every_answer_after_the_chat_prompt_in_ifds_passes(tmp_path, model):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = ("{% for m in messages %}<bos>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}assistant: {% endif %}")
    chat_model = saved_model(tmp_path, model, tokenizer)
    config = {**the_pages_chat_set(), "model": chat_model}
    score_set = build_scorer(config)
    scored = batch_of([row for row in ROWS if row["output"]])
    together = score_set.score_batch(scored)
    upd_alone = build_scorer({"name": "UPDScorer", "convention": "exact", "template": "chat", "model": chat_model})
    assert same(together["upd"], upd_alone.score_batch(scored)["upd"])
    assert all(member.spec.prompt.prompt_template == "chat" for member in score_set.members[2:])
    assert score_set.work["forward_passes"] == 2 * len(scored["id"])


def test_peer_conventions_cost_their_own_passes(model_dir):
    members = [{"name": "IFDScorer", "convention": "opendataarena"}, {"name": "UPDScorer"}, {"name": "HESScorer"},
               {"name": "NormLossScorer", "input_column": "input"}]
    score_set = ScoreSet(members, model=model_dir)
    score_set.score_batch(batch_of(ROWS[:2]))
    assert score_set.work["forward_passes"] > 2 * 2


def test_a_set_holds_one_model_for_all_its_members(model_dir):
    score_set = ScoreSet(["IFDScorer", "PPLScorer", {"name": "UPDScorer", "convention": "exact"}], model=model_dir)
    backend = score_set.load()
    assert all(member.load() is backend for member in score_set.members)


def test_a_rows_warning_is_given_once_per_member(model_dir, caplog):
    score_set = ScoreSet(["IFDScorer", {"name": "HESScorer", "convention": "exact"}], model=model_dir)
    with caplog.at_level(logging.WARNING):
        score_set.score_batch(batch_of(ROWS))
    empty = [message for message in caplog.messages if "has an empty output" in message]
    assert sorted(empty) == ["Row 2 (id='c') has an empty output; its HES is NaN.",
                             "Row 2 (id='c') has an empty output; its IFD is NaN."]


@pytest.mark.parametrize("config, message", [
    ({"scores": ["PPLScorer", {"name": "PerplexityScorer", "text_column": "output"}]},
     "Two members of the score set write the column 'perplexity': PPLScorer and PerplexityScorer"),
    ({"scores": [{"name": "IFDScorer", "dtype": "float32"}]}, "gives ['dtype']: the members share these"),
    ({"scores": [{"scores": ["PPLScorer"]}]}, "must be a scorer config with a `name`"),
    ({"scores": [{"name": "ScoreSet", "scores": ["PPLScorer"]}]}, "is a score set; list its members instead"),
    ({"scores": []}, "must be a list of scorer configs"),
    ({"scores": ["IFDScorer"], "max_length": 64}, "Unknown key(s) ['max_length'] for a score set"),
    ({"scores": [{"name": "IFDScorer", "colour": 1}]}, "Unknown key(s) ['colour'] for IFDScorer"),
])
def test_a_bad_set_config_is_refused_saying_what_to_change(config, message):
    with pytest.raises(ConfigError) as error:
        build_scorer(config)
    assert message in str(error.value)


def test_a_members_unknown_key_lists_only_what_a_member_may_give_and_says_where_score_columns_goes():
    with pytest.raises(ConfigError) as error:
        build_scorer({"scores": ["IFDScorer", {"name": "UPDScorer", "score_columns": "all"}]})
    message = str(error.value)
    assert message.startswith("Unknown key(s) ['score_columns'] for UPDScorer (member 1 of the score set); a member "
                              "may give ['name', 'max_length'], and the optional ['convention', ")
    assert "'model'" not in message and "'batch_size'" not in message and "'backend'" not in message
    assert "`score_columns` is the job's: give it once, beside `scores`" in message


def test_a_config_file_with_scores_and_no_name_is_a_set(tmp_path):
    path = write_config(tmp_path / "set.yaml", "batch_size: 4\nscores:\n  - name: IFDScorer\n  - PPLScorer\n")
    scorer = build_scorer(load_config(path))
    assert isinstance(scorer, ScoreSet) and scorer.named_outputs == ("ifd", "perplexity")


def test_the_exact_convention_takes_ifds_template_and_the_peers_refuse_it():
    with pytest.raises(ConfigError, match="only convention='exact' reads"):
        build_scorer({"name": "UPDScorer", "template": "Q: {instruction} {input}\nA: "})
    with pytest.raises(ConfigError, match="must use"):
        build_scorer({"name": "HESScorer", "convention": "exact", "template": "no fields"})


def set_config(tmp_path, model_dir, extra: str = "") -> str:
    members = "  - name: IFDScorer\n  - name: PPLScorer\n  - name: UPDScorer\n    convention: exact\n"
    return write_config(tmp_path / "set.yaml", f"model: {model_dir}\nbatch_size: 2\nscores:\n{members}{extra}")


def test_a_set_job_writes_each_members_first_output_under_its_name_streamed_or_not(tmp_path, model_dir):
    data = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    config = set_config(tmp_path, model_dir)
    assert cli.main(["score", config, "--data", str(data), "--output", str(tmp_path / "out.jsonl"),
                     "--no-progress"]) == 0
    lines = read_jsonl(tmp_path / "out.jsonl")
    assert list(lines[0]) == ["id", "ifd", "perplexity", "upd"]
    alone = build_scorer({"name": "IFDScorer", "model": model_dir}).score_rows(ROWS)
    assert same([math.nan if line["ifd"] is None else line["ifd"] for line in lines], alone)
    assert cli.main(["score", config, "--data", str(data), "--output", str(tmp_path / "all.jsonl"),
                     "--score-columns", "all", "--no-progress"]) == 0
    assert list(read_jsonl(tmp_path / "all.jsonl")[0]) == ["id", "ifd", "perplexity", "upd", "ppl_conditional",
                                                          "ppl_direct"]
    assert cli.main(["score", config, "--data", str(data), "--output", str(tmp_path / "streamed.jsonl"),
                     "--streaming", "--no-progress"]) == 0
    assert (tmp_path / "streamed.jsonl").read_bytes() == (tmp_path / "out.jsonl").read_bytes()


class StopAfter:
    """Makes a set's ``score_batch`` stop the job (as Ctrl-C does) once it has scored ``calls`` batches."""

    def __init__(self, calls: int):
        self.calls = calls

    def __call__(self, original):
        def score_batch(scorer, batch, first_row=0):
            if self.calls == 0:
                raise KeyboardInterrupt
            self.calls -= 1
            return original(scorer, batch, first_row)
        return score_batch


def assert_a_stopped_job_resumes_to_the_whole_runs_bytes(data, config, scorer_class, tmp_path, monkeypatch):
    """Stops a job of ``config`` over ``data`` (12 rows) after two batches of two rows, reruns it, and checks that
    the rerun scores only the other 8 rows and writes the bytes of an uninterrupted run."""
    output = tmp_path / "out.jsonl"
    with monkeypatch.context() as patch:
        patch.setattr(scorer_class, "score_batch", StopAfter(2)(scorer_class.score_batch))
        with pytest.raises(KeyboardInterrupt):
            run_scoring_job(data, build_scorer(config), output, progress=False, data_fingerprint="rows", save_every=2)
    assert not output.exists()
    summary = run_scoring_job(data, build_scorer(config), output, progress=False, data_fingerprint="rows",
                              save_every=2)
    assert (summary.rows, summary.scored) == (12, 8)
    run_scoring_job(data, build_scorer(config), tmp_path / "whole.jsonl", progress=False, data_fingerprint="rows",
                    save_every=2)
    assert output.read_bytes() == (tmp_path / "whole.jsonl").read_bytes()


def test_a_stopped_set_job_resumes_to_the_bytes_of_an_uninterrupted_run(tmp_path, model_dir, monkeypatch):
    rows = [{**row, "id": f"{row['id']}{copy}"} for copy in range(3) for row in ROWS]
    data = Dataset.from_list([{key: row[key] for key in ("id", "instruction", "input", "output")} for row in rows])
    config = {"scores": ["IFDScorer", "PPLScorer", {"name": "HESScorer", "convention": "exact"}],
              "model": model_dir, "batch_size": 2}
    assert_a_stopped_job_resumes_to_the_whole_runs_bytes(data, config, ScoreSet, tmp_path, monkeypatch)


def test_changing_one_members_option_is_another_job(tmp_path, model_dir, monkeypatch):
    data = Dataset.from_list([{key: row[key] for key in ("id", "instruction", "input", "output")} for row in ROWS])
    config = {"scores": ["IFDScorer", {"name": "HESScorer", "convention": "exact"}], "model": model_dir,
              "batch_size": 2}
    output = tmp_path / "out.jsonl"
    with monkeypatch.context() as patch:
        patch.setattr(ScoreSet, "score_batch", StopAfter(1)(ScoreSet.score_batch))
        with pytest.raises(KeyboardInterrupt):
            run_scoring_job(data, build_scorer(config), output, progress=False, data_fingerprint="rows", save_every=2)
    changed = {**config, "scores": ["IFDScorer", {"name": "HESScorer", "convention": "exact",
                                                  "percentile_cutoff": 0.5}]}
    with pytest.raises(JobConflictError, match="partial results of a different job"):
        run_scoring_job(data, build_scorer(changed), output, progress=False, data_fingerprint="rows")


def test_add_score_columns_takes_a_set_in_memory_and_streamed(model_dir):
    rows = [{key: row[key] for key in ("instruction", "input", "output")} for row in ROWS]
    score_set = ScoreSet(["IFDScorer", {"name": "NormLossScorer", "convention": "exact"}], model=model_dir)
    in_memory = add_score_columns(Dataset.from_list(rows), score_set)
    streamed = list(add_score_columns(Dataset.from_list(rows).to_iterable_dataset(), score_set))
    for output in score_set.outputs:
        assert same([row[output] for row in streamed], list(in_memory[output]))
        assert len(in_memory[output]) == len(rows)


class Recorder(LikelihoodBackend):
    """A backend that counts its calls: one NLL per token, the token id's parity."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def score(self, items, *, max_length=None, truncate=True, token_losses=False, **settings):
        self.calls.append(len(items))
        scores = []
        for item in prepare_items(items, self.start_token_id, max_length=max_length, truncate=truncate):
            nlls = tuple(float(token % 2) + 0.5 for token in item.targets)
            scores.append(ContinuationScore(math.fsum(nlls), len(nlls), item.truncated,
                                            nlls if token_losses else None) if nlls else item.unscored(token_losses))
        return scores


def test_a_call_made_otherwise_in_replay_than_recorded_is_scored_as_it_is():
    backend = Recorder(build_tokenizer())
    passes = SharedPasses()
    with passes.recording():
        backend.score_checked([([1], [2, 3])])
    passes.run()
    with passes.replaying():
        [recorded] = backend.score_checked([([1], [2, 3])])
        [other] = backend.score_checked([([1], [3, 3, 3])], token_losses=True)
    assert backend.calls == [1, 1]
    assert (recorded.nll, other.token_nlls) == (2.0, (1.5, 1.5, 1.5))


def test_identical_sequences_and_prefixes_go_through_the_model_once():
    backend = Recorder(build_tokenizer())
    passes = SharedPasses()
    with passes.recording():
        backend.score_checked([([1, 2], [3, 4]), ([1], [2])])
        backend.score_checked([([1, 2], [3, 4]), ([1, 2, 3], [4])], token_losses=True)
    passes.run()
    assert (passes.sequences, passes.forward_passes) == (4, 1)
    with passes.replaying():
        first = backend.score_checked([([1, 2], [3, 4]), ([1], [2])])
        second = backend.score_checked([([1, 2], [3, 4]), ([1, 2, 3], [4])], token_losses=True)
    assert [score.nll for score in first] == [2.0, 0.5] and first[0].token_nlls is None
    assert [score.token_nlls for score in second] == [(1.5, 0.5), (0.5,)]
    assert json.dumps(backend.calls) == "[3]"


def test_select_ranks_by_one_column_of_a_sets_score_file(tmp_path, capsys):
    rows = [{"id": i, "instruction": f"Q{i}", "output": f"A{i}"} for i in range(4)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    scores = write_jsonl(tmp_path / "scores.jsonl", [{"id": i, "ifd": [0.5, 0.9, 1.2, 0.7][i], "perplexity": 3.0}
                                                     for i in range(4)])
    selected = tmp_path / "selected.jsonl"
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--score-column", "ifd", "--top-n", "2",
                     "--max-score", "1", "--output", str(selected)]) == 0
    assert [(row["id"], row["ifd"]) for row in read_jsonl(selected)] == [(1, 0.9), (3, 0.7)]
    assert cli.main(["select", "--data", str(data), "--scores", str(scores), "--top-n", "2",
                     "--output", str(tmp_path / "none.jsonl")]) == 2
    error = capsys.readouterr().err
    assert "has no `score`" in error and "--score-column takes one of ['ifd', 'perplexity']" in error
