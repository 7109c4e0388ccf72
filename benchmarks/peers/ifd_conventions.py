"""IFD and perplexity conventions against the peers' own published code.

Runs Cherry_LLM's, Superfiltering's and OpenDataArena-Tool's scripts, unmodified, from copies of
their repositories that the caller points at (never part of this repository), on the same rows and
the same loaded model as hf_adapters with the matching ``convention``, and reports per peer: the
largest relative difference of the scores, the Spearman correlation, whether the selected rows
agree, and both wall times. A second table gives how far the default convention (``exact``) is
from each peer.

    git clone https://github.com/tianyi-lab/Cherry_LLM ../peers/Cherry_LLM
    git clone https://github.com/tianyi-lab/Superfiltering ../peers/Superfiltering
    git clone https://github.com/OpenDataArena/OpenDataArena-Tool ../peers/OpenDataArena-Tool
    git -C ../peers/OpenDataArena-Tool checkout 88fb1f8   # its scorers before they moved to ODA-DataScorer
    python -m benchmarks.peers.ifd_conventions --peers ../peers --data ../shared/data/alpaca_cherry_5pct.json \
        --output benchmarks/peers/IFD_CONVENTIONS.md

The scripts load their model with ``from_pretrained(path)`` (Cherry_LLM names the LLaMA classes);
here those calls return the model and tokenizer already loaded, so both sides score with the same
weights and neither timing includes loading. Each side runs once after a warm-up.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import runpy
import sys
import tempfile
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.common import instruction_records, machine_description, relative_differences, spearman, timed
from hf_adapters.backends.loading import load_model
from hf_adapters.core.texts import ppl_text
from hf_adapters.curation.ranking import selection_indices
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity

#: The seed's configs, as OpenDataArena-Tool reads them.
SEED_CONFIGS = Path(__file__).resolve().parents[2] / "hf_adapters" / "configs"
#: Cherry_LLM's published selection run: ``scripts/cherry_analysis.sh`` and ``cherry_selection.sh``.
CHERRY_MAX_LENGTH, CHERRY_RATE = 512, 0.06
#: Superfiltering's default ``--max_length``, and a rate of its hard-coded 52002 rows that keeps 26.
SUPERFILTERING_MAX_LENGTH, SUPERFILTERING_RATE = 1024, 0.0005


@dataclass
class Comparison:
    peer: str
    convention: str
    scores: list[float]  # ours
    reference: list[float]  # the peer's
    selection: str  # "same" or what differs; "-" when the peer has no selection step
    peer_seconds: float
    our_seconds: float
    exact_scores: list[float]  # the default convention's


@contextlib.contextmanager
def preloaded(model, tokenizer) -> Iterator[None]:
    """``from_pretrained`` of transformers' Auto and LLaMA model and tokenizer classes returns
    ``model`` and ``tokenizer``, for code that imports those names while this is active."""
    import transformers

    def returning(value) -> type:
        return type("Preloaded", (), {"from_pretrained": staticmethod(lambda *args, **kwargs: value)})

    names = {"AutoModelForCausalLM": returning(model), "LlamaForCausalLM": returning(model),
             "AutoTokenizer": returning(tokenizer), "LlamaTokenizer": returning(tokenizer)}
    saved = {name: getattr(transformers, name) for name in names}
    for name, value in names.items():
        setattr(transformers, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(transformers, name, value)


def run_script(path: Path, *args: str) -> None:
    """Run a peer's script as ``python path args...`` in this process."""
    argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = argv


def oda_scorer(root: Path, name: str):
    """OpenDataArena-Tool's scorer class ``name``, imported from its file without its package's ``__init__``."""
    package = types.ModuleType("oda_scorers")
    package.__path__ = [str(root / "data_scorer" / "model_based" / "scorers")]
    sys.modules["oda_scorers"] = package
    return getattr(importlib.import_module(f"oda_scorers.{name}"), name)


def row_indices(records: Sequence[dict], selected: Sequence[dict]) -> list[int]:
    """The positions in ``records`` of the ``selected`` records (by content), in ``selected``'s order."""
    positions = {json.dumps(record, sort_keys=True): index for index, record in enumerate(records)}
    return [positions[json.dumps({key: record[key] for key in ("instruction", "input", "output")}, sort_keys=True)]
            for record in selected]


def selection_verdict(ours: Sequence[int], theirs: Sequence[int]) -> str:
    if list(ours) == list(theirs):
        return f"same {len(ours)} rows"
    return f"differs: ours {len(ours)} rows, theirs {len(theirs)}, {len(set(ours) ^ set(theirs))} not shared"


def ifd_columns(records) -> tuple[list[str], list[str], list[str]]:
    """Instructions, outputs and inputs, in compute_ifd's order."""
    return [r["instruction"] for r in records], [r["output"] for r in records], [r["input"] for r in records]


def exact_ifd(records, model, tokenizer) -> dict[str, list[float]]:
    """The default convention's IFD of each record, as both ratios (from one run at the seed's max_length)."""
    result = compute_ifd(*ifd_columns(records), model=model, tokenizer=tokenizer)
    pairs = zip(result["conditional_perplexities"], result["direct_perplexities"], strict=True)
    return {"ppl_ratio": result["ifd_scores"], "loss_ratio": [math.log(c) / math.log(d) for c, d in pairs]}


def ours_ifd(records, model, tokenizer, **options) -> Callable[[], list[float]]:
    columns = ifd_columns(records)
    return lambda: compute_ifd(*columns, model=model, tokenizer=tokenizer, **options)["ifd_scores"]


def compare_cherry(root: Path, records, data_path: Path, work: Path, model, tokenizer, exact) -> Comparison:
    scripts = root / "cherry_seletion"
    analysis, selected_path = work / "cherry.pt", work / "cherry_selected.json"
    common = ["--max_length", str(CHERRY_MAX_LENGTH), "--prompt", "alpaca"]
    with preloaded(model, tokenizer):
        _, peer_seconds = timed(lambda: run_script(
            scripts / "data_analysis.py", "--data_path", str(data_path), "--save_path", str(analysis),
            "--model_name_or_path", str(work), "--mod", "cherry", *common))
        run_script(scripts / "data_by_IFD.py", "--pt_data_path", str(analysis), "--json_data_path", str(data_path),
                   "--json_save_path", str(selected_path), "--sample_rate", str(CHERRY_RATE), *common)
    # data_by_IFD.py's rate is the ratio of the mean token losses, the logs of the saved perplexities.
    reference = [float(torch.log(row["ppl"][2]) / torch.log(row["ppl"][1])) for row in torch.load(analysis)]
    scores, our_seconds = timed(ours_ifd(records, model, tokenizer, convention="cherry", max_length=CHERRY_MAX_LENGTH))
    chosen, _ = selection_indices(scores, top=CHERRY_RATE, convention="cherry")
    theirs = row_indices(records, json.loads(selected_path.read_text()))
    return Comparison("Cherry_LLM", "cherry", scores, reference, selection_verdict(chosen, theirs), peer_seconds,
                      our_seconds, exact["loss_ratio"])


def compare_superfiltering(root: Path, records, data_path: Path, work: Path, model, tokenizer, exact) -> Comparison:
    scripts = root / "code_ifd"
    analysis, data_with_ifd, selected_path = (work / "sf_scores.jsonl", work / "sf_data.json",
                                              work / "sf_selected.json")
    with preloaded(model, tokenizer):
        _, peer_seconds = timed(lambda: run_script(
            scripts / "data_analysis.py", "--data_path", str(data_path), "--save_path", str(analysis),
            "--model_name_or_path", str(work), "--max_length", str(SUPERFILTERING_MAX_LENGTH)))
    run_script(scripts / "put_analysis_to_data.py", "--pt_data_path", str(analysis), "--json_data_path",
               str(data_path), "--json_save_path", str(data_with_ifd))
    run_script(scripts / "select_data.py", "--json_data_path", str(data_with_ifd), "--json_save_path",
               str(selected_path), "--sample_rate", str(SUPERFILTERING_RATE))
    reference = [float(row["ifd_ppl"]) for row in json.loads(data_with_ifd.read_text())]
    scores, our_seconds = timed(ours_ifd(records, model, tokenizer, convention="superfiltering",
                                         max_length=SUPERFILTERING_MAX_LENGTH))
    chosen, _ = selection_indices(scores, top_n=int(52002 * SUPERFILTERING_RATE), convention="superfiltering")
    theirs = row_indices(records, json.loads(selected_path.read_text()))
    return Comparison("Superfiltering", "superfiltering", scores, reference, selection_verdict(chosen, theirs),
                      peer_seconds, our_seconds, exact["ppl_ratio"])


def seed_config(name: str, model_path: Path) -> dict:
    import yaml

    config = yaml.safe_load((SEED_CONFIGS / name).read_text())
    return {**config, "model": str(model_path)}


def compare_opendataarena(root: Path, records, jsonl_path: Path, work: Path, model, tokenizer, exact
                          ) -> list[Comparison]:
    comparisons = []
    with preloaded(model, tokenizer):
        config = seed_config("ifd.yaml", work)
        scorer = oda_scorer(root, "IFDScorer")(config)
        results, peer_seconds = timed(lambda: scorer.evaluate(str(jsonl_path)))
        reference = [math.nan if row["score"] == -1 else row["score"] for row in results]
        scores, our_seconds = timed(ours_ifd(records, model, tokenizer, convention="opendataarena",
                                             max_length=config["max_length"], batch_size=config["batch_size"]))
        comparisons.append(Comparison("OpenDataArena-Tool IFDScorer", "opendataarena", scores, reference, "-",
                                      peer_seconds, our_seconds, exact["ppl_ratio"]))

        config = seed_config("ppl.yaml", work)
        scorer = oda_scorer(root, "PPLScorer")(config)
        results, peer_seconds = timed(lambda: scorer.evaluate(str(jsonl_path)))
        texts = [ppl_text(r["instruction"], r["input"], r["output"]) for r in records]

        def ours_ppl(**options) -> list[float]:
            return compute_perplexity(texts, model=model, tokenizer=tokenizer, max_length=config["max_length"],
                                      batch_size=config["batch_size"], **options)["perplexities"]

        scores, our_seconds = timed(lambda: ours_ppl(convention="opendataarena"))
        comparisons.append(Comparison("OpenDataArena-Tool PPLScorer", "opendataarena", scores,
                                      [row["score"] for row in results], "-", peer_seconds, our_seconds, ours_ppl()))
    return comparisons


def report(comparisons: Sequence[Comparison], rows: int, source: str) -> str:
    lines = [
        f"# hf_adapters conventions against the peers' own code ({datetime.now(timezone.utc):%Y-%m-%d})",
        "",
        f"Machine: {machine_description(torch.device('cpu'))}. Model: SmolLM2-135M-Instruct, float32, the same "
        f"loaded model on both sides. Rows: the first {rows} of {source}. Written by "
        "`python -m benchmarks.peers.ifd_conventions`.",
        "",
        "| peer code | convention | rows scored (ours / peer) | max relative difference | Spearman | selection "
        "| peer time | ours | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        finite = sum(not math.isnan(s) for s in c.scores), sum(not math.isnan(s) for s in c.reference)
        diff = relative_differences(c.scores, c.reference)
        lines.append(
            f"| {c.peer} | `{c.convention}` | {finite[0]} / {finite[1]} | {diff.max():.1e} | "
            f"{spearman(c.scores, c.reference):.4f} | {c.selection} | {c.peer_seconds:.2f} s | {c.our_seconds:.2f} s "
            f"| {c.peer_seconds / c.our_seconds:.2f}x |")
    lines += ["", "The default convention (`exact`: ChatML prompt, max_length 2048; for Cherry_LLM its loss ratio) "
              "against the same peer numbers:", "",
              "| peer code | max relative difference | median | Spearman |", "|---|---|---|---|"]
    for c in comparisons:
        diff = relative_differences(c.exact_scores, c.reference)
        lines.append(f"| {c.peer} | {diff.max():.1%} | {float(sorted(diff)[len(diff) // 2]):.1%} | "
                     f"{spearman(c.exact_scores, c.reference):.4f} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=Path, required=True,
                        help="folder holding Cherry_LLM, Superfiltering and OpenDataArena-Tool checkouts")
    parser.add_argument("--data", required=True, help="Alpaca records (JSON list or JSONL)")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--output", help="write the Markdown report here too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> str:
    args = parse_args(argv)
    records, source = instruction_records(args.data, args.rows)
    records = [{key: record[key] for key in ("instruction", "input", "output")} for record in records]
    model, tokenizer = load_model()
    model.eval()
    compute_ifd(["Warm up."], ["Done."], model=model, tokenizer=tokenizer)  # the core picks its kernels once
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        data_path, jsonl_path = work / "rows.json", work / "rows.jsonl"
        data_path.write_text(json.dumps(records))
        jsonl_path.write_text("".join(json.dumps({"id": str(i), **r}) + "\n" for i, r in enumerate(records)))
        exact = exact_ifd(records, model, tokenizer)
        comparisons = [
            compare_cherry(args.peers / "Cherry_LLM", records, data_path, work, model, tokenizer, exact),
            compare_superfiltering(args.peers / "Superfiltering", records, data_path, work, model, tokenizer, exact),
            *compare_opendataarena(args.peers / "OpenDataArena-Tool", records, jsonl_path, work, model, tokenizer,
                                   exact),
        ]
    text = report(comparisons, len(records), source)
    if args.output:
        Path(args.output).write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
