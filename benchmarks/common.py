"""What the benchmark scripts share: the rows they read, how they time, compare and name the machine.

The scripts are modules of this package: run them from the repository root as
``python -m benchmarks.speed.run`` (``make bench``), ``python -m benchmarks.exactness.scores`` and so on.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from hf_adapters.backends.transformers.cpu_kernels import cpuinfo_value
from hf_adapters.files.data_io import read_records

from .flops import synchronize


def package_data(name: str) -> list[dict]:
    """The records of one of the package's sample files (``hf_adapters/data/NAME``)."""
    with resources.as_file(resources.files("hf_adapters") / "data" / name) as path:
        return read_records(path)


def _file_or_sample(path: str | None, sample: str) -> tuple[list[dict], str]:
    if path and Path(path).is_file():
        return read_records(path), path
    return package_data(sample), f"hf_adapters/data/{sample} (fallback: {path} not found)"


def instruction_records(path: str | None, limit: int) -> tuple[list[dict], str]:
    """The first ``limit`` instruction/input/output records of ``path`` (a JSON list or JSONL), or of
    the package's sample data when ``path`` is missing; and where they came from."""
    records, source = _file_or_sample(path, "sample.jsonl")
    return [dict(record, input=record.get("input") or "") for record in records[:limit]], source


def parallel_rows(path: str | None, ids_per_language: int) -> tuple[list[dict], str]:
    """The first ``ids_per_language`` sentence ids of a FLORES-style ``{lang, id, text}`` file, or of
    the package's parallel sample when ``path`` is missing; and where they came from."""
    rows, source = _file_or_sample(path, "parallel_sample.jsonl")
    ids = list(dict.fromkeys(row["id"] for row in rows))[:ids_per_language]
    return [row for row in rows if row["id"] in ids], source


def relative_differences(scores: Sequence[float], reference: Sequence[float]) -> np.ndarray:
    """|score - reference| / |reference| over the rows where both are finite."""
    a, b = np.asarray(scores, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b) & (b != 0)
    return np.abs(a[keep] - b[keep]) / np.abs(b[keep])


def spearman(scores: Sequence[float], reference: Sequence[float]) -> float:
    """Spearman rank correlation over the rows where both are finite."""
    from scipy.stats import spearmanr

    a, b = np.asarray(scores, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[keep], b[keep]).statistic)


CPU = torch.device("cpu")


def timed(function: Callable[[], object], device: torch.device = CPU) -> tuple[object, float]:
    """The function's result and its wall time in seconds."""
    synchronize(device)
    start = time.perf_counter()
    result = function()
    synchronize(device)
    return result, time.perf_counter() - start


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def publish(report: str, output: str | Path | None) -> None:
    """Print a Markdown report, and write it to ``output`` too when one is given."""
    print(report)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(report if report.endswith("\n") else report + "\n", encoding="utf-8")


def cpu_name() -> str:
    return cpuinfo_value("model name") or platform.processor() or platform.machine()


def machine_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return (f"{cpu_name()} ({platform.machine()}, {os.cpu_count()} logical CPUs, {torch.get_num_threads()} torch "
            f"threads, {torch.backends.cpu.get_cpu_capability()}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, torch {torch.__version__}")


def tiny_model_dir(folder: str | Path, texts: Sequence[str], seed: int = 0) -> str:
    """A tiny random Llama (2 layers, 64 wide) and a byte-level BPE tokenizer trained on ``texts``,
    saved with ``save_pretrained`` into ``folder``: a model path a config can name, loaded in
    milliseconds, so that timings show the engine's costs rather than the model's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<eos>", "<bos>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", bos_token="<bos>",
                                        pad_token="<pad>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
