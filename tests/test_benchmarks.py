"""The benchmark's pieces on the tiny model: its competitors compute our definitions, its FLOP count
is the documented formula, and one whole run writes the Markdown report."""

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
import torch

from benchmarks import common
from benchmarks.flops import ModelShape, WorkMeter, attention_peak, matmul_peak, useful_flops
from benchmarks.references import (
    ScoredSequence,
    one_at_a_time_ifd,
    one_at_a_time_perplexity,
    pad_to_longest_perplexity,
)
from benchmarks.speed import run
from hf_adapters.backends import score_continuations
from hf_adapters.formulas.ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT, compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity
from tests.conftest import assert_exact

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Write a short poem about the sea.",
    "Cats are small mammals. " * 6,
    "敏捷的棕色狐狸 🦊",
    "Summarise.",
]
RECORDS = [
    ("Write a short poem about the sea.", "", "The sea is wide and deep."),
    ("Summarise the text below.", "Cats are small mammals.", "Cats are mammals."),
    ("Translate into French.", "The dog", "Le chien paresseux."),
]


@pytest.mark.kernels
def test_one_at_a_time_perplexity_equals_hf_adapters(model, tokenizer):
    ours = compute_perplexity(TEXTS, model=model, tokenizer=tokenizer, batch_size=2)["perplexities"]
    assert_exact(ours, lambda m: [s.perplexity for s in one_at_a_time_perplexity(m, tokenizer, TEXTS)], model)


def test_pad_to_longest_pads_every_batch_to_the_longest_text(model, tokenizer):
    widths = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: widths.append(kwargs["input_ids"].shape),
                                           with_kwargs=True)
    try:
        padded = pad_to_longest_perplexity(model, tokenizer, TEXTS, batch_size=2)
    finally:
        hook.remove()
    reference = one_at_a_time_perplexity(model, tokenizer, TEXTS)
    longest = max(s.length for s in reference)
    assert [shape[1] for shape in widths] == [longest] * 3
    # evaluate's log-softmax over a strided class dimension rounds a little differently.
    assert [s.perplexity for s in padded] == pytest.approx([s.perplexity for s in reference], rel=1e-4)
    assert [s.scored for s in padded] == [s.scored for s in reference]


@pytest.mark.kernels
def test_one_at_a_time_ifd_equals_hf_adapters(model, tokenizer):
    instructions, inputs, outputs = (list(column) for column in zip(*RECORDS, strict=True))
    reference = one_at_a_time_ifd(model, tokenizer, instructions, inputs, outputs, DEFAULT_TEMPLATE,
                                  DEFAULT_TEMPLATE_NO_INPUT)
    ours = compute_ifd(instructions, outputs, inputs, model=model, tokenizer=tokenizer)

    def naive(m):
        return [[r.ifd, r.direct.perplexity] for r in one_at_a_time_ifd(
            m, tokenizer, instructions, inputs, outputs, DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT)]

    assert_exact([list(pair) for pair in zip(ours["ifd_scores"], ours["direct_perplexities"], strict=True)], naive,
                 model)
    # Both passes score the same answer tokens.
    assert all(r.conditional.scored == r.direct.scored for r in reference)


def test_useful_flops_count_scored_tokens_and_causal_attention():
    shape = ModelShape(parameters=10, layers=2, attention_width=4, head_dim=2)
    # Length 5, the last 2 tokens scored: they are predicted from positions that see 3 and 4 keys.
    assert useful_flops(shape, [ScoredSequence(1.0, 2, 5)]) == 2 * 10 * 2 + 4 * 2 * 4 * (3 + 4)
    assert useful_flops(shape, [ScoredSequence(math.nan, 0, 3)]) == 0


def test_work_meter_charges_every_fed_position_and_output_row(model, tokenizer):
    meter = WorkMeter(model)
    shape = ModelShape.of(model)
    body = shape.parameters - model.get_input_embeddings().weight.numel() - model.lm_head.weight.numel()

    def body_flops(rows, width):
        return rows * (2 * body * width + 4 * shape.layers * shape.attention_width * width * (width + 1) / 2)

    try:
        with torch.inference_mode():
            model(torch.ones((2, 5), dtype=torch.long))
        assert meter.total == pytest.approx(body_flops(2, 5) + 2 * model.lm_head.weight.numel() * 10)
        assert meter.attention == pytest.approx(2 * 4 * shape.layers * shape.attention_width * 5 * 6 / 2)
        meter.total = 0.0
        score_continuations(model, tokenizer, [([1, 2, 3], [4, 5])])
        assert meter.total == pytest.approx(body_flops(1, 5) + 2 * model.lm_head.weight.numel() * 2)
    finally:
        meter.close()
    model(torch.ones((1, 3), dtype=torch.long))
    assert meter.total == pytest.approx(body_flops(1, 5) + 2 * model.lm_head.weight.numel() * 2)


def test_speedup_ceiling_runs_products_at_the_matmul_peak_and_attention_at_its_kernel_peak():
    section = run.Section("rolling perplexity, stride 8", "", [], [
        run.Run("reference", "float32", 10.0, [], work=8e9),
        run.Run("hf_adapters", "float32", 6.0, [], ours=True, work=6e9, attention_work=2e9),
    ])
    report = run.KernelReport("onednn", "measured", {"default": 1e9, "onednn": 2e9, "bfloat16": 8e9}, {}, 1e9)
    # 4e9 FLOPs of products at the faster float32 peak (2 s) and 2e9 of attention at 1e9 FLOP/s (2 s).
    assert run.speedup_ceiling(section, report) == pytest.approx(10.0 / 4.0)
    section.runs[1].work = 0.0
    assert math.isnan(run.speedup_ceiling(section, report))


def test_attention_peak_is_a_positive_rate(model):
    assert attention_peak(ModelShape.of(model), size=64, repeats=2) > 0


def test_model_shape_reads_the_config(model):
    shape = ModelShape.of(model)
    assert shape == ModelShape(sum(p.numel() for p in model.parameters()), 2, 64, 16)


def test_matmul_peak_is_a_positive_rate():
    assert matmul_peak(torch.float32, size=64, repeats=2) > 0


def test_relative_differences_and_spearman_skip_nan_rows():
    assert common.relative_differences([1.1, math.nan, 3.0], [1.0, 2.0, 3.0]).tolist() == pytest.approx([0.1, 0.0])
    assert common.spearman([1.0, 2.0, math.nan, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)


def test_read_records_falls_back_to_the_sample_data(tmp_path):
    records, source = common.instruction_records(str(tmp_path / "missing.json"), limit=3)
    assert len(records) == 3 and "fallback" in source
    assert all(isinstance(record[key], str) for record in records for key in ("instruction", "input", "output"))


def test_read_records_reads_the_shared_alpaca_subset(shared_dir):
    records, _ = common.instruction_records(str(shared_dir / "data" / "alpaca_cherry_5pct.json"), limit=64)
    assert len(records) == 64 and all(record["output"] for record in records)


@pytest.mark.filterwarnings("ignore::hf_adapters.backends.transformers.cpu_kernels.SlowBfloat16Warning")
@pytest.mark.parametrize("native_bfloat16", [True, False])
def test_whole_run_writes_the_markdown_report_naming_machine_kernels_and_targets(model, tokenizer, monkeypatch,
                                                                                 tmp_path, capsys, native_bfloat16):
    monkeypatch.setattr(run, "load_model", lambda *args, **kwargs: (model, tokenizer))
    monkeypatch.setattr(run, "matmul_peak", lambda dtype, **kwargs: 1e9)
    monkeypatch.setattr(run, "attention_peak", lambda shape, **kwargs: 5e8)
    monkeypatch.setattr(run, "cpu_has_native_bfloat16", lambda: native_bfloat16)
    monkeypatch.setattr(run, "bfloat16_speedup", lambda model: 2.0 if native_bfloat16 else 0.14)
    output = tmp_path / "RESULTS.md"
    run.main(["--data", str(tmp_path / "missing.json"), "--parity-data", str(tmp_path / "missing.jsonl"),
              "--limit", "4", "--perplexity-limit", "3", "--parity-ids", "2", "--output", str(output)])
    report = output.read_text(encoding="utf-8")
    assert report.strip() == capsys.readouterr().out.strip()
    assert "- Command: `python -m benchmarks.speed.run --data" in report and "- Machine:" in report
    assert "- Processor flags: avx2 " in report and f"native bfloat16: {'yes' if native_bfloat16 else 'no'}" in report
    assert "default BLAS 1.0 GFLOP/s" in report and "bfloat16 (default kernel) 1.0 GFLOP/s" in report
    assert "- Float32 linear kernel: **" in report
    assert "- Seconds: each implementation's fastest of 2 rounds" in report
    for metric in ("| perplexity: 3 outputs", "| IFD: 4 records", "| Information Parity:"):
        assert metric in report
    assert "## Targets" in report and "| reference's work / ours | most possible here |" in report
    assert "- Attention kernel peak (scaled_dot_product_attention" in report and "): 0.5 GFLOP/s" in report
    assert "work done, GFLOP |" in report and "| n/a |" not in report.split("## Targets")[0]
    for target in ("| chosen float32 kernel", "| perplexity, float32", "| IFD, float32"):
        assert target in report
    assert report.count("| hf_adapters | bfloat16 |") == (3 if native_bfloat16 else 0)
    assert ("## bfloat16 drift from float32" in report) == native_bfloat16
    assert ("bfloat16 was not timed" in report) != native_bfloat16


def test_time_runs_interleaves_the_rounds_after_all_warm_ups_and_keeps_each_fastest(monkeypatch):
    calls, seconds = [], iter([5.0, 4.0, 3.0, 6.0])

    def candidate(name):
        return (name, "float32", name == "ours", lambda: calls.append(f"warm {name}"),
                lambda: calls.append(name) or [float(len(calls))])

    monkeypatch.setattr(run, "timed", lambda function, device: (function(), next(seconds)))
    section = run.time_runs(run.Section("job", "", []), [candidate("reference"), candidate("ours")],
                            run.Timing("cpu", rounds=2))
    assert calls == ["warm reference", "warm ours", "reference", "ours", "reference", "ours"]
    assert [(r.implementation, r.seconds, r.scores) for r in section.runs] == [("reference", 3.0, [5.0]),
                                                                            ("ours", 4.0, [4.0])]


@pytest.mark.kernels
def test_rolling_section_times_ours_against_the_window_loop_on_the_same_numbers(model, tokenizer):
    document = "The quick brown fox jumps over the lazy dog. " * 40
    section = run.bench_rolling({"float32": model}, tokenizer, document, 64, 16, 4, run.Timing(torch.device("cpu")))
    names = [entry.implementation for entry in section.runs]
    assert names[0].startswith("one window at a time") and names[-1] == "hf_adapters"
    assert section.runs[-1].scores == pytest.approx(section.reference.scores, rel=1e-5)
    assert section.scored_tokens == len(tokenizer(document, add_special_tokens=False).input_ids)


@pytest.mark.kernels
def test_lm_eval_rolling_gives_our_numbers_when_installed(model, tokenizer):
    pytest.importorskip("lm_eval.models.huggingface", reason="lm-eval is installed only for make bench")
    from benchmarks.references import lm_eval_rolling_nll

    document = "The quick brown fox jumps over the lazy dog. " * 40
    ours = compute_perplexity([document], model=model, tokenizer=tokenizer, max_length=64, stride=64)["nlls"]
    assert lm_eval_rolling_nll(model, tokenizer, [document], 64, 2) == pytest.approx(ours, rel=1e-5)


def test_peer_scripts_get_the_loaded_model_from_from_pretrained_and_the_names_come_back(model, tokenizer):
    import transformers

    from benchmarks.peers.ifd_conventions import preloaded

    original = transformers.AutoTokenizer
    with preloaded(model, tokenizer):
        from transformers import LlamaForCausalLM, LlamaTokenizer

        assert LlamaForCausalLM.from_pretrained("any/path", device_map="auto") is model
        assert LlamaTokenizer.from_pretrained("any/path") is tokenizer
    assert transformers.AutoTokenizer is original


def test_peer_selections_are_matched_to_rows_by_content():
    from benchmarks.peers.ifd_conventions import row_indices, selection_verdict

    records = [{"instruction": str(i), "input": "", "output": "x"} for i in range(4)]
    selected = [{**records[3], "ifd_ppl": 0.5}, records[1]]
    assert row_indices(records, selected) == [3, 1]
    assert selection_verdict([3, 1], [3, 1]) == "same 2 rows"
    assert selection_verdict([3], [3, 1]).startswith("differs")


def test_the_gpu_benchmark_counts_useful_flops_and_alpaca_lengths(tmp_path):
    from benchmarks.gpu import llama_shapes

    model = llama_shapes.build_llama("tiny", torch.device("cpu"), torch.bfloat16, seed=0)
    assert model.dtype == torch.bfloat16 and model.config._attn_implementation == "sdpa"
    layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64  # q, o; k, v (2 of 4 heads); the MLP; two norms
    assert llama_shapes.body_parameters(model) == 2 * layer + 64
    # 5 tokens, 2 scored: every token through the body, causal attention, the output layer at the scored two.
    expected = 2 * llama_shapes.body_parameters(model) * 5 + 4 * 2 * 64 * (5 * 6 / 2) + 2 * 64 * 4096 * 2
    assert llama_shapes.useful_scoring_flops(model, [([1, 5, 6], [7, 8])], start_id=1) == expected
    assert llama_shapes.PIECES.findall("Hello, world! 1234 don't") == ["Hello", ",", " world", "!", " ", "123", "4",
                                                                      " don", "'t"]
    alpaca = tmp_path / "alpaca.json"
    alpaca.write_text(json.dumps([{"instruction": "Say hi.", "input": "", "output": "Hi there!"}]))
    [(prompt, output)], source = llama_shapes.alpaca_lengths(str(alpaca))
    assert source == str(alpaca) and output == 3 and prompt == 1 + llama_shapes.pieces(
        DEFAULT_TEMPLATE_NO_INPUT.format(instruction="Say hi."))
    assert llama_shapes.alpaca_lengths(str(tmp_path / "missing.json"))[0] is None


def test_the_gpu_benchmarks_llama_section_runs_on_the_cpu_and_writes_its_tables(tmp_path):
    from benchmarks.gpu.llama_sections import llama_sections
    from benchmarks.gpu.report import Report
    from benchmarks.gpu.run import parse_args

    records = [{"instruction": "Write a short poem about the sea.", "input": "The sea" if i % 2 else "",
                "output": "Waves. " * (1 + i)} for i in range(3)]
    alpaca = tmp_path / "alpaca.json"
    alpaca.write_text(json.dumps(records))
    args = parse_args(["--device", "cpu", "--quick", "--shapes", "tiny", "--alpaca", str(alpaca), "--long-length",
                       "16", "--sweep", "4096", "--warm-up", "1", "--generation-prompts", "2",
                       "--generation-new-tokens", "2"])
    llama_sections(args, args.shapes, torch.device("cpu"), Report(str(tmp_path / "gpu.md")), 0.0)
    text = (tmp_path / "gpu.md").read_text()
    for expected in ("### TINY, 3 Alpaca rows", "| defaults | 2,048 tokens (chosen), no row count |",
                     "| 4,096-token budget |", "| plain loop |", "### TINY, 4 rows of 16 tokens",
                     "| `model.generate` |", "### Summary", "| TINY, 2 prompts x 2 new tokens |"):
        assert expected in text


def test_the_contention_pairs_swap_which_checkout_runs_first_every_round():
    """A load that rises during the run must not favour the checkout that always runs first."""
    from benchmarks.speed.contention import pair_orders

    assert pair_orders(4) == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_the_contention_section_against_a_commit_replaces_only_itself_in_the_report():
    from benchmarks.speed.contention import AGAINST_HEADING, replace_section

    policies = "# Scoring beside busy processes\n\n| policy table |\n"
    first = replace_section(policies, f"{AGAINST_HEADING}\n\nold numbers")
    assert first == f"{policies}\n{AGAINST_HEADING}\n\nold numbers\n"
    second = replace_section(first, f"{AGAINST_HEADING}\n\nnew numbers")
    assert second == f"{policies}\n{AGAINST_HEADING}\n\nnew numbers\n"


def benchmark_commands() -> list[tuple[str, str, str]]:
    """``(where, module, output)`` of each ``-m benchmarks....`` command of the Makefile, the pages, the
    benchmarks' docstrings and reports (a line ending in a backslash joined to the next); output "" if none."""
    sources = [ROOT / "Makefile", ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *BENCHMARKS.rglob("*.py"),
               *BENCHMARKS.rglob("*.md")]
    commands = []
    for path in sources:
        text = re.sub(r"\\+\n\s*", " ", path.read_text(encoding="utf-8"))
        for line in text.splitlines():
            for match in re.finditer(r"-m (benchmarks\.[\w.]+)([^`\n]*)", line):
                output = re.search(r"--output (\S+)", match.group(2))
                commands.append((path.relative_to(ROOT).as_posix(), match.group(1), output.group(1) if output else ""))
    return commands


def test_every_benchmark_command_names_a_module_that_exists_and_writes_beside_it():
    commands = benchmark_commands()
    assert len({module for _, module, _ in commands}) >= 20
    specs = {module: importlib.util.find_spec(module) for _, module, _ in commands}
    assert not [f"{where}: {module}" for where, module, _ in commands if specs[module] is None]
    elsewhere = [f"{where}: {module} --output {output}" for where, module, output in commands
                 if output.startswith("benchmarks/") and (ROOT / output).parent != Path(specs[module].origin).parent]
    assert not elsewhere, elsewhere


def test_the_benchmarks_readme_names_every_script_and_result_of_the_subpackages():
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    files = [path for path in BENCHMARKS.glob("*/*") if path.suffix in (".py", ".md") and path.name != "__init__.py"]
    assert files and not [path.name for path in files if f"`{path.name}`" not in readme]
    subpackages = {path.parent.name for path in files}
    assert all(f"## `{name}/`" in readme for name in subpackages), subpackages
