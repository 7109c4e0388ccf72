"""Benchmark hf_adapters against what a user would otherwise run, in one process, on one model and data.

For perplexity, IFD and Information Parity it times our float32 path (and bfloat16 where the
processor multiplies it natively) and each competitor, and reports scored tokens per second,
speed-ups, the largest relative difference of the scores from the float32 reference, and useful
FLOP/s as a fraction of the measured matmul peak. The implementations of a job run in turn,
``--rounds`` times over (default 2), and each keeps its fastest round, so that a shared machine
slowing down midway does not favour one of them. It names the machine: the processor and the
flags that matter, the float32 linear kernel chosen and the measured rate of every candidate,
and checks the targets. It prints a Markdown report and writes it to ``--output``.

    python -m benchmarks.speed.run --data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/speed/RESULTS.md
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import evaluate
import numpy as np
import torch

from benchmarks.common import (
    instruction_records,
    log,
    machine_description,
    parallel_rows,
    publish,
    relative_differences,
    spearman,
    timed,
)
from benchmarks.flops import (
    FORMULA,
    WORK_FORMULA,
    ModelShape,
    WorkMeter,
    attention_peak,
    matmul_peak,
    useful_flops,
)
from benchmarks.references import (
    ScoredSequence,
    lm_eval_rolling_nll,
    one_at_a_time_conversation_ifd,
    one_at_a_time_ifd,
    one_at_a_time_perplexity,
    one_window_at_a_time_rolling,
    pad_to_longest_perplexity,
    text_ids,
)
from hf_adapters.backends import TransformersBackend
from hf_adapters.backends.loading import DEFAULT_MODEL_ID, load_model
from hf_adapters.backends.transformers.cpu_kernels import (
    LONG_MEASURE_ROWS,
    LONG_ROWS,
    LinearKernelChoice,
    bfloat16_speedup,
    choose_cpu_linear,
    cpu_flags,
    cpu_has_native_bfloat16,
    linear_shapes,
    measure_linear_rates,
    onednn_linear_available,
)
from hf_adapters.core.texts import rolling_items
from hf_adapters.files.data_io import read_records
from hf_adapters.formulas import information_parity
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT, compute_ifd
from hf_adapters.formulas.parallel_corpus import evaluate_parallel, group_by_language
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.scorers import ConversationIFDScorer

#: Processor flags that decide the kernels: AVX2 and AVX-512 for float32, AVX512-BF16 and AMX for bfloat16.
FLAGS_THAT_MATTER = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
#: The targets the report checks: chosen kernel vs the faster candidate; our float32 speed-ups.
KERNEL_TARGET, PERPLEXITY_TARGET, IFD_TARGET, ROLLING_TARGET, CONVERSATION_TARGET = 0.95, 1.0, 1.15, 1.5, 1.3
#: The information_parity metric called once per language, as evaluate users call it, against the package.
PARITY_LOOP_TARGET = 2.0
METRICS = Path(__file__).resolve().parents[2] / "metrics"


@dataclass
class Run:
    """One implementation's timed run over a section's job."""

    implementation: str
    dtype: str
    seconds: float
    scores: list[float]
    ours: bool = False
    #: FLOPs the run made the models do (:class:`benchmarks.flops.WorkMeter`); 0 where it used another model.
    work: float = 0.0
    #: The part of ``work`` spent in attention.
    attention_work: float = 0.0


@dataclass
class Section:
    """One metric's job and every implementation timed on it; ``runs[0]`` is the reference of its scores."""

    metric: str
    job: str
    sequences: list[ScoredSequence]
    runs: list[Run] = field(default_factory=list)

    @property
    def scored_tokens(self) -> int:
        return sum(sequence.scored for sequence in self.sequences)

    @property
    def reference(self) -> Run:
        return self.runs[0]

    def ours(self, dtype: str = "float32") -> Run:
        """Our run in ``dtype``."""
        return next(run for run in self.runs if run.ours and run.dtype == dtype)


@dataclass
class Timing:
    """How a job's implementations are timed: on which device, how many interleaved rounds, and the
    meters counting the work each run makes the models do."""

    device: torch.device
    rounds: int = 1
    meters: Sequence[WorkMeter] = ()

    def work(self) -> tuple[float, float]:
        """FLOPs the models have done so far: in all, and in attention."""
        return sum(meter.total for meter in self.meters), sum(meter.attention for meter in self.meters)


def time_runs(section: Section, candidates: list[tuple[str, str, bool, Callable, Callable]],
              timing: Timing) -> Section:
    """Warm each candidate up on a tiny job, then time them in turn on the whole job, ``timing.rounds``
    times over: interleaved, a machine that slows down or speeds up meets every candidate alike. Each
    keeps its fastest round, and the work its run made the models do."""
    for _, _, _, warm_up, _ in candidates:
        warm_up()
    best: dict[int, Run] = {}
    for round_number in range(1, timing.rounds + 1):
        for index, (name, dtype, ours, _, run) in enumerate(candidates):
            work_before, attention_before = timing.work()
            scores, seconds = timed(run, timing.device)
            log(f"  {section.metric}: {name} ({dtype}) {seconds:.1f} s (round {round_number} of {timing.rounds})")
            if index not in best or seconds < best[index].seconds:
                work, attention = timing.work()
                best[index] = Run(name, dtype, seconds, scores, ours, work - work_before, attention - attention_before)
    section.runs += [best[index] for index in range(len(candidates))]
    return section


def bench_perplexity(models: dict, tokenizer, texts: list[str], batch_size: int, timing: Timing) -> Section:
    fp32 = models["float32"]

    def ours(model, rows):
        return lambda: compute_perplexity(rows, model=model, tokenizer=tokenizer, batch_size=batch_size,
                                          progress=False)["perplexities"]

    def one_at_a_time(rows):
        return lambda: [s.perplexity for s in one_at_a_time_perplexity(fp32, tokenizer, rows)]

    def padded(rows):
        return lambda: [s.perplexity for s in pad_to_longest_perplexity(fp32, tokenizer, rows, batch_size)]

    tokens = sum(len(text_ids(tokenizer, text)) - 1 for text in texts)
    section = Section("perplexity", f"{len(texts)} outputs, {tokens:,} tokens",
                      [ScoredSequence(math.nan, len(ids) - 1, len(ids)) for ids in
                       (text_ids(tokenizer, text) for text in texts)])
    warm = texts[:2]
    return time_runs(section, [
        ("one-at-a-time (reference)", "float32", False, one_at_a_time(warm), one_at_a_time(texts)),
        ("pad to longest (evaluate-style)", "float32", False, padded(warm), padded(texts)),
        *[("hf_adapters", dtype, True, ours(model, warm), ours(model, texts)) for dtype, model in models.items()],
    ], timing)


def bench_ifd(models: dict, tokenizer, records: list[dict], batch_size: int, timing: Timing) -> Section:
    fp32 = models["float32"]
    columns = {key: [record[key] for record in records] for key in ("instruction", "input", "output")}
    reference_records = []

    def ours(model, n):
        return lambda: compute_ifd(columns["instruction"][:n], columns["output"][:n], columns["input"][:n],
                                   model=model, tokenizer=tokenizer, batch_size=batch_size,
                                   progress=False)["ifd_scores"]

    def reference(n):
        def run():
            reference_records[:] = one_at_a_time_ifd(
                fp32, tokenizer, columns["instruction"][:n], columns["input"][:n], columns["output"][:n],
                DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT)
            return [record.ifd for record in reference_records]
        return run

    section = Section("IFD", f"{len(records)} records, both passes", [])
    time_runs(section, [
        ("one-at-a-time two-pass (Cherry_LLM-style, reference)", "float32", False, reference(2),
         reference(len(records))),
        *[("hf_adapters", dtype, True, ours(model, 2), ours(model, len(records))) for dtype, model in models.items()],
    ], timing)
    section.sequences = [s for record in reference_records for s in (record.conditional, record.direct)]
    section.job += f", {section.scored_tokens:,} scored tokens"
    return section


def package_runner() -> Callable | None:
    """The package comparison of ``benchmarks.peers.parity_vs_package``, if ``information-parity`` is installed."""
    try:
        from benchmarks.peers.parity_vs_package import run_package
    except ImportError:
        return None
    return run_package


#: The parity row that calls the evaluate module once per language, as its users do.
PARITY_LOOP = "hf_adapters information_parity metric, one compute per language"


def bench_parity(models: dict, tokenizer, rows: list[dict], reference_lang: str, batch_size: int,
                 timing: Timing, model_id: str = DEFAULT_MODEL_ID) -> Section:
    fp32 = models["float32"]
    grouped = group_by_language(rows)
    languages = sorted(lang for lang in grouped if lang != reference_lang)
    first_id = rows[0]["id"]
    warm = [row for row in rows if row["id"] == first_id]

    def ours(model, subset):
        def run():
            result = evaluate_parallel(subset, reference_lang, model=model, tokenizer=tokenizer,
                                       batch_size=batch_size)["languages"]
            return [result[lang]["information_parity"] for lang in languages if lang in result]
        return run

    metric = evaluate.load(str(METRICS / "information_parity"))
    # What `model_id=` resolves to (TransformersBackend.from_pretrained), on the model already loaded.
    named = TransformersBackend(fp32, tokenizer, source=(model_id, "float32", timing.device))

    def per_language(subset):
        """The evaluate module once per language with the same references and the model as `model_id=`
        names it (so its text scores are kept between calls), starting cold."""
        def run():
            information_parity._text_scores.clear()
            texts = group_by_language(subset)
            reference = texts[reference_lang]
            means = []
            for lang in languages:
                ids = [i for i in reference if i in texts.get(lang, {})]
                result = metric.compute(predictions=[texts[lang][i] for i in ids],
                                        references=[reference[i] for i in ids], backend=named, batch_size=batch_size)
                means.append(result["information_parity"])
            return means
        return run

    texts = list(dict.fromkeys(row["text"] for row in rows))
    sequences = [ScoredSequence(math.nan, len(ids) - 1, len(ids)) for ids in (text_ids(tokenizer, t) for t in texts)]
    section = Section("Information Parity",
                      f"{len(languages)} languages vs {reference_lang}, {len(texts)} sentences, mean per language",
                      sequences)
    candidates = []
    if (run_package := package_runner()) is not None:
        def package(subset):
            def run():
                means = run_package(fp32, tokenizer, group_by_language(subset), reference_lang)
                return [means[lang] for lang in languages if lang in means]
            return run
        candidates.append(("information-parity 0.1.1 package (reference)", "float32", False, package(warm),
                           package(rows)))
    else:
        log("  information-parity is not installed: Information Parity is timed without its competitor.")
    candidates += [("hf_adapters", dtype, True, ours(model, warm), ours(model, rows))
                   for dtype, model in models.items()]
    candidates.append((PARITY_LOOP, "float32", False, per_language(warm), per_language(rows)))
    return time_runs(section, candidates, timing)


def lm_eval_available() -> bool:
    try:
        import lm_eval.models.huggingface  # noqa: F401
    except ImportError:
        return False
    return True


def bench_rolling(models: dict, tokenizer, text: str, max_length: int, stride: int, batch_size: int,
                  timing: Timing) -> Section:
    """Every token of one long document, in rolling windows: ours against lm-eval's
    ``loglikelihood_rolling`` (disjoint windows only) and a one-window-at-a-time loop."""
    fp32 = models["float32"]
    ids = tokenizer(text, add_special_tokens=False).input_ids
    sequences = [ScoredSequence(math.nan, len(continuation), max(len(context), 1) + len(continuation))
                 for context, continuation in rolling_items(ids, max_length, stride)]
    section = Section(f"rolling perplexity, stride {stride}",
                      f"{len(text.encode()):,} bytes, {len(ids):,} tokens, windows of {max_length}", sequences)
    # lm-eval computes logits at every position of every window of a batch: keep a batch to ~4k tokens.
    harness_batch = max(1, 4096 // max_length)
    warm = text[:2000]

    def ours(model, document):
        return lambda: compute_perplexity([document], model=model, tokenizer=tokenizer, max_length=max_length,
                                          stride=stride, batch_size=batch_size, progress=False)["nlls"]

    def harness(document):
        return lambda: lm_eval_rolling_nll(fp32, tokenizer, [document], max_length, harness_batch)

    def loop(document):
        return lambda: [sum(s.nll for s in one_window_at_a_time_rolling(fp32, tokenizer, document, max_length,
                                                                        stride))]

    candidates = []
    if stride == max_length and lm_eval_available():
        candidates.append((f"lm-eval HFLM.loglikelihood_rolling, batch {harness_batch} (reference)", "float32",
                           False, harness(warm), harness(text)))
    elif stride == max_length:
        log("  lm-eval is not installed: rolling perplexity is timed against the one-window loop only.")
    candidates.append(("one window at a time (transformers' strided guide)"
                       + ("" if candidates else " (reference)"), "float32", False, loop(warm), loop(text)))
    candidates += [("hf_adapters", dtype, True, ours(model, warm), ours(model, text))
                   for dtype, model in models.items()]
    return time_runs(section, candidates, timing)


def bench_conversations(models: dict, tokenizer, conversations: list[list[dict]], batch_size: int,
                        timing: Timing) -> Section:
    """IFD over every assistant turn of each conversation: ours against a loop over turns."""
    fp32 = models["float32"]
    reference_passes = []

    def ours(model, subset):
        return lambda: ConversationIFDScorer(model=model, tokenizer=tokenizer, turns="all", max_length=None,
                                             batch_size=batch_size).result(subset)["ifd_scores"]

    def loop(subset):
        def run():
            results = one_at_a_time_conversation_ifd(fp32, tokenizer, subset)
            reference_passes[:] = [scored for _, passes in results for scored in passes]
            return [score for score, _ in results]
        return run

    turns = sum(message["role"] == "assistant" for messages in conversations for message in messages)
    section = Section("conversation IFD", f"{len(conversations)} conversations, {turns} assistant turns, both passes",
                      [])
    time_runs(section, [
        ("one turn at a time, two passes (reference)", "float32", False, loop(conversations[:1]), loop(conversations)),
        *[("hf_adapters", dtype, True, ours(model, conversations[:1]), ours(model, conversations))
          for dtype, model in models.items()],
    ], timing)
    section.sequences = list(reference_passes)
    section.job += f", {section.scored_tokens:,} scored tokens"
    return section


def format_table(sections: list[Section], peaks: dict[str, float], shape: ModelShape) -> str:
    header = ("| metric, job | implementation | dtype | seconds | scored tok/s | speed-up of ours | "
              "max rel. diff vs reference | useful GFLOP/s | of peak | work done, GFLOP |")
    lines = [header, "|" + " --- |" * 3 + " ---: |" * 7]
    for section in sections:
        flops = useful_flops(shape, section.sequences)
        competitors = [run for run in section.runs if not run.ours]
        for position, run in enumerate(section.runs):
            speedup = ", ".join(f"{other.seconds / run.seconds:.2f}x vs {other.implementation.split(' (')[0]}"
                                for other in competitors) if run.ours else ""
            if run is section.reference:
                difference = "(reference)" if not run.ours else "(reference: no competitor)"
            else:
                rel = relative_differences(run.scores, section.reference.scores)
                difference = f"{rel.max():.1e}" if rel.size else "n/a"
            achieved = flops / run.seconds
            label = f"{section.metric}: {section.job}" if position == 0 else ""
            lines.append(
                f"| {label} | {run.implementation} | {run.dtype} | {run.seconds:.1f} | "
                f"{section.scored_tokens / run.seconds:,.0f} | {speedup} | {difference} | {achieved / 1e9:.1f} | "
                f"{achieved / peaks[run.dtype]:.1%} | {f'{run.work / 1e9:,.1f}' if run.work else 'n/a'} |"
            )
    return "\n".join(lines)


def drift_table(sections: list[Section]) -> str:
    """How far the bfloat16 scores are from the float32 ones, per metric."""
    lines = ["| metric | compared with | rows | median rel. diff | max rel. diff | Spearman |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for section in sections:
        bf16 = section.ours("bfloat16")
        rel = relative_differences(bf16.scores, section.reference.scores)
        lines.append(
            f"| {section.metric} | {section.reference.implementation}, {section.reference.dtype} | {rel.size} | "
            f"{np.median(rel):.1e} | {rel.max():.1e} | {spearman(bf16.scores, section.reference.scores):.4f} |"
        )
    return "\n".join(lines)


@dataclass
class KernelReport:
    """The float32 linear kernel the core chose for the model, and every candidate's measured rates."""

    chosen: str
    reason: str
    peaks: dict[str, float]  # 2048 x 2048 products: each float32 kernel, and "bfloat16"
    model_rates: dict[str, float]  # each float32 kernel on the model's weight shapes, measured again here
    attention: float  # the attention kernel on the model's heads, 2048 x 2048, float32 (flops.attention_peak)
    long: LinearKernelChoice | None = None  # the choice for batches of LONG_ROWS+ positions

    @property
    def float32_peak(self) -> float:
        """The faster float32 kernel's matmul peak."""
        return max(rate for kernel, rate in self.peaks.items() if kernel != "bfloat16")

    @property
    def chosen_share(self) -> float:
        """The chosen kernel's rate on the model's shapes over the faster candidate's."""
        return self.model_rates[self.chosen] / max(self.model_rates.values())


def float32_kernels(device: torch.device) -> list[str]:
    return ["default", "onednn"] if device.type == "cpu" and onednn_linear_available() else ["default"]


def measure_peaks(device: torch.device) -> dict[str, float]:
    """2048 x 2048 product rates: each float32 kernel, and bfloat16."""
    peaks = {kernel: matmul_peak(torch.float32, device=device.type, kernel=kernel)
             for kernel in float32_kernels(device)}
    peaks["bfloat16"] = matmul_peak(torch.bfloat16, device=device.type, repeats=3)
    return peaks


def measure_kernels(model, device: torch.device, rows: int = 512) -> KernelReport:
    """The core's choice for ``model`` and, measured independently of it, each candidate's rate."""
    kernels = float32_kernels(device)
    peaks = measure_peaks(device)
    attention = attention_peak(ModelShape.of(model), device=device.type)
    if device.type != "cpu":
        return KernelReport("default", f"{device.type}: PyTorch's own kernels", peaks, {"default": peaks["default"]},
                            attention)
    choice = choose_cpu_linear(model)
    rates = measure_linear_rates(linear_shapes(model), rows=rows, repeats=10)
    return KernelReport(choice.kernel, choice.reason, peaks, {k: rates[k] for k in kernels}, attention,
                        choose_cpu_linear(model, rows=LONG_ROWS))


def kernel_lines(report: KernelReport, device: torch.device) -> list[str]:
    names = {"default": "default BLAS", "onednn": "oneDNN", "bfloat16": "bfloat16 (default kernel)"}
    flags = cpu_flags()
    listed = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in FLAGS_THAT_MATTER)
    native = "yes" if cpu_has_native_bfloat16() else "no"
    return [
        f"- Processor flags: {listed}; native bfloat16: {native}" if device.type == "cpu" else
        f"- Device: {machine_description(device)}",
        "- Matmul peak (2048 x 2048, best of the runs at start and end): "
        + ", ".join(f"{names[k]} {rate / 1e9:.1f} GFLOP/s" for k, rate in report.peaks.items()),
        f"- Attention kernel peak (scaled_dot_product_attention, float32, the model's heads, 2048 queries x 2048 keys "
        f"with no mask, best of the runs at start and end): {report.attention / 1e9:.1f} GFLOP/s",
        f"- Float32 linear kernel: **{names[report.chosen]}** ({report.reason}); on the model's weight shapes "
        "(512 rows, best of 10, measured again after the choice): "
        + ", ".join(f"{names[k]} {rate / 1e9:.1f} GFLOP/s" for k, rate in report.model_rates.items()),
        *([f"- Float32 linear kernel for batches of {LONG_ROWS}+ positions: **{names[report.long.kernel]}** "
           f"({report.long.reason}"
           + (f"; at {LONG_MEASURE_ROWS} rows: " + ", ".join(f"{names[k]} {rate / 1e9:.1f} GFLOP/s"
                                                            for k, rate in report.long.rates.items())
              if report.long.rates else "") + ")"]
          if report.long is not None else []),
    ]


def speedup(section: Section, dtype: str = "float32") -> float:
    """How many times faster our ``dtype`` run was than the section's reference."""
    return section.reference.seconds / section.ours(dtype).seconds


def work_ratio(section: Section, dtype: str = "float32") -> float:
    """The reference's work over ours: the speed-up ours would show at the reference's FLOP/s."""
    ours = section.ours(dtype)
    return section.reference.work / ours.work if ours.work and section.reference.work else math.nan


def speedup_ceiling(section: Section, report: KernelReport) -> float:
    """The most our float32 run's speed-up could be on this machine: the reference's seconds over the
    time our run's work would take with its products with weights at the float32 matmul peak, its
    attention at the attention kernel's peak, and nothing else taking any time."""
    ours = section.ours("float32")
    if not ours.work:
        return math.nan
    return section.reference.seconds / ((ours.work - ours.attention_work) / report.float32_peak
                                        + ours.attention_work / report.attention)


def targets_table(report: KernelReport, sections: list[Section]) -> str:
    by_metric = {section.metric: section for section in sections}
    timed = [("perplexity, float32: speed-up over one-at-a-time", by_metric["perplexity"], PERPLEXITY_TARGET),
             ("IFD, float32: speed-up over the one-at-a-time two-pass", by_metric["IFD"], IFD_TARGET)]
    timed += [(f"{section.metric}, float32: speed-up over {section.reference.implementation.split(',')[0]}",
               section, ROLLING_TARGET) for section in sections if section.metric.startswith("rolling")]
    timed += [("conversation IFD, float32: speed-up over one turn at a time", section, CONVERSATION_TARGET)
              for section in sections if section.metric == "conversation IFD"]

    rows = [("chosen float32 kernel vs the faster candidate, on the model's shapes", report.chosen_share, KERNEL_TARGET,
             math.nan, math.nan)]
    rows += [(name, speedup(section), target, work_ratio(section), speedup_ceiling(section, report))
             for name, section, target in timed]
    parity = by_metric["Information Parity"]
    if not parity.reference.ours and (loop := next(run for run in parity.runs if run.implementation == PARITY_LOOP)):
        rows.append(("Information Parity, the metric called once per language, float32: speed-up over the package",
                     parity.reference.seconds / loop.seconds, PARITY_LOOP_TARGET, math.nan, math.nan))
    lines = ["| target | measured | at least | met | reference's work / ours | most possible here |",
             "| --- | ---: | ---: | --- | ---: | ---: |"]
    lines += [f"| {name} | {value:.2f}x | {target:.2f}x | {'yes' if value >= target else '**no**'} | "
              f"{'' if math.isnan(ratio) else f'{ratio:.2f}x'} | {'' if math.isnan(most) else f'{most:.2f}x'} |"
              for name, value, target, ratio, most in rows]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="Alpaca-style JSON/JSONL records (instruction, input, output); "
                                       "falls back to the package's sample data when missing")
    parser.add_argument("--parity-data", default="../shared/data/flores200_dev10.jsonl",
                        help="FLORES-style JSONL ({lang, id, text}); falls back to the package's parallel sample")
    parser.add_argument("--reference-lang", default="eng_Latn")
    parser.add_argument("--limit", type=int, default=64, help="records for IFD (64 or more for the Spearman check)")
    parser.add_argument("--perplexity-limit", type=int, default=32, help="records whose outputs perplexity scores")
    parser.add_argument("--parity-ids", type=int, default=3, help="sentences per language for Information Parity")
    parser.add_argument("--rolling-data",
                        help="one long plain-text document for rolling perplexity, e.g. "
                        "../shared/data/tinyshakespeare.txt (without it, rolling perplexity is not timed)")
    parser.add_argument("--rolling-bytes", type=int, default=20_000,
                        help="score the first this many characters of it (0: all of it)")
    parser.add_argument("--rolling-length", type=int, default=2048, help="rolling windows' max_length")
    parser.add_argument("--rolling-strides", type=int, nargs="+", default=[2048, 512],
                        help="strides to time (the first should equal --rolling-length: lm-eval's windows)")
    parser.add_argument("--conversation-data",
                        help="JSONL conversations (`messages`), e.g. ../shared/data/mtbench_gpt4_reference.jsonl "
                        "(without it, conversation IFD is not timed)")
    parser.add_argument("--model", default=DEFAULT_MODEL_ID)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2,
                        help="time every implementation this many times, interleaved, and keep each one's fastest")
    parser.add_argument("--bfloat16", choices=["auto", "yes", "no"], default="auto",
                        help="time bfloat16 too: auto (default) on GPUs, and on CPUs where its products are measured "
                             "faster than float32's on the model's shapes")
    parser.add_argument("--output", help="also write the report as Markdown here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def wants_bfloat16(setting: str, device: torch.device, model) -> bool:
    if setting == "auto":
        return device.type != "cpu" or bfloat16_speedup(model) >= 1
    return setting == "yes"


def main(argv: Sequence[str] | None = None) -> str:
    args = parse_args(argv)
    started = time.perf_counter()
    device = torch.device(args.device)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    command = "python -m benchmarks.speed.run " + " ".join(sys.argv[1:] if argv is None else argv)

    log("Loading the model ...")
    fp32, tokenizer = load_model(args.model, dtype="float32", device=device)
    log("Measuring the kernels ...")
    kernels = measure_kernels(fp32, device)
    models = {"float32": fp32}
    if wants_bfloat16(args.bfloat16, device, fp32):
        # The same weights cast to bfloat16, as load_model(dtype="bfloat16") does, without a second load.
        models["bfloat16"] = copy.deepcopy(fp32).to(torch.bfloat16)
    else:
        log("  bfloat16 is measured slower than float32 here: it is not timed (--bfloat16 yes to time it anyway).")
    shape = ModelShape.of(fp32)
    timing = Timing(device, args.rounds, [WorkMeter(model) for model in models.values()])

    records, source = instruction_records(args.data, args.limit)
    parity_rows, parity_source = parallel_rows(args.parity_data, args.parity_ids)
    log(f"Benchmarking on {len(records)} records of {source} ...")
    sections = [
        bench_perplexity(models, tokenizer, [r["output"] for r in records[: args.perplexity_limit]],
                         args.batch_size, timing),
        bench_ifd(models, tokenizer, records, args.batch_size, timing),
        bench_parity(models, tokenizer, parity_rows, args.reference_lang, args.batch_size, timing, args.model),
    ]

    conversation_note = "no conversations (no --conversation-data)"
    if args.conversation_data and Path(args.conversation_data).is_file():
        conversations = [row["messages"] for row in read_records(args.conversation_data)]
        conversation_note = f"{args.conversation_data} ({len(conversations)} conversations)"
        sections.append(bench_conversations(models, tokenizer, conversations, args.batch_size, timing))
    rolling_note = "no rolling perplexity (no --rolling-data)"
    if args.rolling_data and Path(args.rolling_data).is_file():
        document = Path(args.rolling_data).read_text(encoding="utf-8")
        document = document[: args.rolling_bytes] if args.rolling_bytes else document
        rolling_note = f"{args.rolling_data} (first {len(document):,} characters) for rolling perplexity"
        sections += [bench_rolling(models, tokenizer, document, args.rolling_length, stride, args.batch_size, timing)
                     for stride in args.rolling_strides]
    # Measured again at the end and the best kept: a busy machine can hide the ceiling at the start.
    final = measure_peaks(device)
    kernels.peaks = {name: max(peak, final[name]) for name, peak in kernels.peaks.items()}
    kernels.attention = max(kernels.attention, attention_peak(shape, device=device.type))
    peaks = {"float32": kernels.float32_peak, "bfloat16": kernels.peaks["bfloat16"]}
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan

    bfloat16_part = (["## bfloat16 drift from float32", "", drift_table(sections), ""] if "bfloat16" in models else
                     ["bfloat16 was not timed: on this processor its products ran at "
                      f"{bfloat16_speedup(fp32):.2f}x the float32 rate on the model's shapes (a 2048 x 2048 product "
                      f"at {peaks['bfloat16'] / 1e9:.1f} GFLOP/s against float32's {peaks['float32'] / 1e9:.1f}).",
                      ""])
    report = "\n".join([
        "# hf_adapters benchmark",
        "",
        f"- Command: `{command}`",
        f"- Machine: {machine_description(device)}; load average {load_before:.1f} at start, "
        f"{load_after:.1f} at end",
        *kernel_lines(kernels, device),
        f"- Date: {date}; whole run {elapsed / 60:.1f} min",
        f"- Model: {args.model} ({shape.parameters / 1e6:.1f}M parameters, {shape.layers} layers), "
        + ("float32 weights, and the same weights cast to bfloat16" if "bfloat16" in models else "float32 weights")
        + f"; batch size {args.batch_size}",
        f"- Data: {source} (first {len(records)} records; perplexity scores the first "
        f"{min(args.perplexity_limit, len(records))} outputs); {parity_source} (first {args.parity_ids} ids); "
        f"{conversation_note}; {rolling_note}",
        f"- {FORMULA}; \"of peak\" divides by the peak of the row's dtype (float32: the faster kernel's)",
        f"- {WORK_FORMULA}",
        f"- Seconds: each implementation's fastest of {args.rounds} rounds, the implementations of a job timed in "
        "turn in each round",
        "- Max rel. diff: largest |score - reference| / |reference| over rows (perplexity per text, IFD per "
        "record, parity per language mean)",
        "",
        format_table(sections, peaks, shape),
        "",
        "## Targets",
        "",
        "A speed-up can exceed the ratio of the work done only by running at a higher FLOP/s than the reference. "
        "\"Most possible here\" is the reference's seconds over the time our run's work would take if its products "
        "with weights ran at the float32 matmul peak, its attention at the attention kernel's peak, and nothing else "
        "(norms, activations, softmax, Python) took any time: on PyTorch's float32 kernels no implementation of the "
        "same work can beat it on this machine.",
        "",
        targets_table(kernels, sections),
        "",
        *bfloat16_part,
    ])
    publish(report, args.output)
    return report


if __name__ == "__main__":
    main()
