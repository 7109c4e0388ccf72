"""Shared fixtures: tiny randomly initialised causal LMs and tokenizers built in-process, the naive
one-at-a-time reference that every batched score is compared against, the exactness criterion, the rows
and configs that several test modules write, and a local Ray cluster."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from hf_adapters.backends import loading as hf_models
from hf_adapters.formulas import information_parity

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Write a short poem about the sea.",
    "Instruction: summarise the text below.\nInput: Cats are small mammals.\nOutput: Cats are mammals.",
    "Le renard brun saute par-dessus le chien paresseux. 敏捷的棕色狐狸跳过了懒狗。🦊🐶",
] * 20


def build_tokenizer(bos: bool = True, pad: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on a few sentences; any text, emoji included, encodes."""
    specials = ["<eos>"] + (["<bos>"] if bos else []) + (["<pad>"] if pad else [])
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<eos>",
        bos_token="<bos>" if bos else None,
        pad_token="<pad>" if pad else None,
    )


def build_model(vocab_size: int, seed: int = 0, max_position_embeddings: int = 512) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer()


@pytest.fixture(scope="session")
def model(tokenizer) -> LlamaForCausalLM:
    return build_model(len(tokenizer))


@pytest.fixture(autouse=True)
def fresh_text_score_cache(monkeypatch):
    """Each test starts with no text scores kept from another (whose model may have been a stand-in)."""
    monkeypatch.setattr(information_parity, "_text_scores", OrderedDict())


@pytest.fixture
def load_calls(model, tokenizer, monkeypatch):
    """Every model id loaded by name; ``load_model`` returns the tiny model instead."""
    calls = []

    def fake_load_model(model_id=hf_models.DEFAULT_MODEL_ID, dtype=None, device=None, trust_remote_code=False):
        calls.append(model_id)
        return model, tokenizer

    monkeypatch.setattr(hf_models, "load_model", fake_load_model)
    return calls


def saved_model(folder: Path, model, tokenizer) -> str:
    """``model`` and ``tokenizer`` saved into ``folder``, as ``--model`` takes them; the folder's path."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, model, tokenizer) -> str:
    """The tiny model (512 positions) and its tokenizer saved as a local folder, as ``--model`` takes it."""
    return saved_model(tmp_path_factory.mktemp("tiny-model"), model, tokenizer)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a JSONL file at ``path``."""
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file (its lines end at ``\n`` only: an id may hold U+2028)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ../shared data folder beside the repo; tests that need it skip when it is absent."""
    if not SHARED.is_dir():
        pytest.skip("../shared is not present beside the repository")
    return SHARED


def naive_nll(model, context: Sequence[int], continuation: Sequence[int], start_id: int,
              max_length: int | None = None) -> tuple[float, int]:
    """Reference: one unpadded forward pass of the whole model for one item, in the model's dtype.

    Returns (sum of NLL over the scored continuation tokens, number of scored tokens).
    """
    context = list(context) or [start_id]
    ids = (context + list(continuation))[:max_length]
    if len(ids) <= len(context):
        return math.nan, 0
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    total = -sum(logprobs[p - 1, ids[p]].item() for p in range(len(context), len(ids)))
    return total, len(ids) - len(context)


#: The exactness criterion's floor, relative to the float64 value. Where the naive float32 result happens
#: to land near the float64 one, 2 x their distance says little about float32's rounding, so the criterion
#: allows this much besides: the rounding float32 shows on the real model whatever the order of its sums.
#: Measured by `.venv/bin/python -m benchmarks.exactness.scores --data ../shared/data/alpaca_cherry_5pct.json
#: --limit 32` (benchmarks/exactness/SCORES.md: SmolLM2-135M, 30 layers, 32 records, both CPU kernels,
#: AVX2-only AMD EPYC):
#: float32 perplexities, naive or batched, were at most 1.8e-5 of the value from float64 (median 1.4e-5),
#: IFDs at most 7e-6. 2e-5 is that maximum rounded up: about 170 float32 epsilons, a thousand times below
#: bfloat16's drift (about 1e-2), and far below what a wrong token, mask or position changes.
EXACT_FLOOR = 2e-5

_FLOAT64_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def float64_copy(model):
    """The model cast to float64, made once per model."""
    if model not in _FLOAT64_COPIES:
        _FLOAT64_COPIES[model] = copy.deepcopy(model).to(torch.float64)
    return _FLOAT64_COPIES[model]


def _flatten(values) -> list[float]:
    if isinstance(values, (list, tuple)):
        return [value for item in values for value in _flatten(item)]
    return [float(values)]


def assert_exact(actual, naive: Callable, model) -> None:
    """The exactness criterion: ``naive(model)`` is the plain one-at-a-time computation (a number or a
    nested list of numbers, like ``actual``); each value of ``actual`` must lie within
    ``2 x |naive float32 - naive float64| + EXACT_FLOOR x |float64|`` of ``naive(float64 model)``.
    NaN must match NaN."""
    float32, float64 = _flatten(naive(model)), _flatten(naive(float64_copy(model)))
    actual = _flatten(actual)
    assert len(actual) == len(float64), (len(actual), len(float64))
    for index, (value, single, double) in enumerate(zip(actual, float32, float64, strict=True)):
        if math.isnan(double):
            assert math.isnan(value), f"value {index}: {value} where the reference is NaN"
            continue
        allowed = 2 * abs(single - double) + EXACT_FLOOR * abs(double)
        assert abs(value - double) <= allowed, (
            f"value {index}: {value!r} is {abs(value - double):.3g} from the float64 reference {double!r}; "
            f"allowed {allowed:.3g} (naive float32: {single!r})")


@pytest.fixture
def unreachable_hub(monkeypatch):
    """No offline mode (huggingface_hub reads HF_HUB_OFFLINE at import), no proxy, and every TCP
    connection refused at once, huggingface_hub's included; returns the addresses asked for."""
    import socket

    from huggingface_hub import constants

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", *hf_models._PROXY_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    attempts = []

    def refuse(address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_models, "_hub_checks", {})
    return attempts


def write_config(path: Path, text: str) -> str:
    """``text`` written as a config file at ``path``; its path, as ``hf-adapters score`` takes it."""
    path.write_text(text, encoding="utf-8")
    return str(path)


def ppl_config(tmp_path: Path) -> str:
    """A perplexity config (64 positions, batches of 2) in ``tmp_path``."""
    return write_config(tmp_path / "ppl.yaml", "name: PPLScorer\nmax_length: 64\nbatch_size: 2\n")


def instruction_rows(count: int = 4) -> list[dict]:
    """``count`` instruction rows ``r0``, ``r1``... with outputs of growing length."""
    return [{"id": f"r{i}", "instruction": f"Say {i}.", "input": "", "output": "ab" * (i + 1)} for i in range(count)]


def job_rows(empty: str = "output") -> list[dict]:
    """24 instruction rows ``sample-1``... whose row 21 (``sample-22``) has an empty ``empty`` field."""
    rows = [{"id": f"sample-{i + 1}", "instruction": f"Repeat {i}.", "input": "", "output": f"Done {i}."}
            for i in range(24)]
    rows[21][empty] = ""
    return rows


#: No white space at all: one "word" of many tokens, so the word perplexity is exp(total NLL) (> e^709 here).
LONG_CJK = "敏捷的棕色狐狸跳过了懒狗。猫在沙发上睡觉。" * 24

#: Set before Ray is imported: no usage report, no auth token written to ~/.ray.
QUIET_RAY = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[object]:
    """A local Ray cluster of 2 CPUs for the module, whose workers import this checkout of hf_adapters.

    Its idle workers are kept (Ray kills those beyond one per CPU after a second), so that the next
    job's tasks find torch and the scorer's modules imported: some 7 s a job on 2 cores. The command's
    own cluster has Ray's default, its workers being its own."""
    pytest.importorskip("ray")
    saved = {name: os.environ.get(name) for name in [*QUIET_RAY, "PYTHONPATH"]}
    os.environ.update(QUIET_RAY)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), saved["PYTHONPATH"]]))
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR, object_store_memory=100 * 1024**2,
             _system_config={"idle_worker_killing_time_threshold_ms": 3_600_000})
    try:
        yield ray
    finally:
        ray.shutdown()
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)


@pytest.fixture
def executors_ray(monkeypatch) -> Iterator[dict[str, list[int]]]:
    """For a tool whose executor starts Ray itself (NeMo Curator's): Ray's folder is a new one of this test's
    (``RAY_TMPDIR``), and after the test every process started meanwhile that is Ray's (its command line names
    that folder) or a child of this process is stopped by its process id. Yields ``{"stopped": [...]}``, the
    ids stopped, filled after the test."""
    import shutil
    import tempfile

    import psutil

    folder = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    for name, value in {**QUIET_RAY, "RAY_TMPDIR": folder}.items():
        monkeypatch.setenv(name, value)
    before = set(psutil.pids())
    found = {"stopped": []}
    yield found
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    ours = {child.pid: child for child in psutil.Process().children(recursive=True) if child.pid not in before}
    for process in psutil.process_iter(["cmdline"]):
        if process.pid not in before and folder in " ".join(process.info["cmdline"] or ()):
            ours[process.pid] = process
    for process in ours.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(list(ours.values()), timeout=10)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    found["stopped"] += sorted(ours)
    shutil.rmtree(folder, ignore_errors=True)


def lm_eval_logs_to_this_stderr() -> None:
    """Point lm-eval's own stream handlers, set up by an earlier test on the stderr of its time, at this
    test's ``sys.stderr`` (which pytest's capture replaces per test), before running its command line."""
    for handler in logging.getLogger("lm_eval").handlers:
        if type(handler) is logging.StreamHandler:
            handler.stream = sys.stderr


@pytest.fixture(scope="session")
def lm_eval_tasks_indexed_once() -> Iterator[None]:
    """lm-eval's own task folder indexed once for the session rather than for every ``TaskManager``
    (each run of its command line makes one): its ~15,000 YAML files take some 8 s on 2 cores, and
    do not change. Other folders (ours, a test's) are indexed each time, after it, as lm-eval does.
    Where lm-eval or its index is not where this expects it, nothing is changed (and nothing skipped)."""
    try:
        from lm_eval.tasks import _index as lm_eval_index
    except ImportError:
        lm_eval_index = None
    build = getattr(getattr(lm_eval_index, "TaskIndex", None), "build", None)
    if build is None:
        yield
        return
    own_folder = Path(lm_eval_index.__file__).parent
    indexed = {}

    def build_once(paths, *, resolve_includes=True):
        paths = [Path(path) for path in paths]
        if not paths or paths[0] != own_folder or not resolve_includes:
            return build(paths, resolve_includes=resolve_includes)
        if "own" not in indexed:
            indexed["own"] = build([own_folder])
        return {**copy.deepcopy(indexed["own"]), **(build(paths[1:]) if paths[1:] else {})}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lm_eval_index.TaskIndex, "build", staticmethod(build_once))
        yield
