"""The judgment scores against the peers' own code: DEITA's scorer and OpenDataArena-Tool's batched scorers.

Runs DEITA's ``Llama_Scorer`` (``model.generate`` one row at a time) and OpenDataArena-Tool's
``DeitaCScorer``, ``DeitaQScorer``, ``AskLlmScorer`` and ``SelectitTokenScorer`` (batches of 8, as their
configs say), unmodified, from copies of their repositories that the caller points at (never part of
this repository), on the same rows and the same loaded model as hf_adapters, and reports per scorer the
largest difference of the scores and both wall times.

    git clone https://github.com/hkust-nlp/deita ../peers/deita
    git clone https://github.com/OpenDataArena/OpenDataArena-Tool ../peers/OpenDataArena-Tool
    git -C ../peers/OpenDataArena-Tool checkout 88fb1f8   # its scorers before they moved to ODA-DataScorer
    .venv/bin/python -m benchmarks.peers.judgment_peers --peers ../peers --data ../shared/data/alpaca_cherry_5pct.json \
        --limit 64 --output benchmarks/peers/JUDGMENT_PEERS.md

The peers read DEITA's Llama-2 label ids (29896...29953); here the scorer model is the embedded default,
so both sides read that model's ids of the vocabulary entries "1".."6" (the one setting changed on the
peers' objects). OpenDataArena-Tool's DEITA scorers read the first generated token's scores of a padded
batch, which is right only where the tokenizer pads on the left, as Llama-2's does: they run with the
tokenizer padding on the left (SmolLM2's pads on the right, where their numbers would be another
position's). Each side runs once, after one warm-up call of the model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.common import instruction_records, log, machine_description, publish, timed
from benchmarks.peers.ifd_conventions import oda_scorer, preloaded
from hf_adapters.backends.loading import load_model
from hf_adapters.formulas.ask_llm import compute_ask_llm
from hf_adapters.formulas.deita import DEITA_LABELS, compute_deita
from hf_adapters.formulas.rating_tokens import label_token_ids
from hf_adapters.formulas.selectit import compute_selectit

#: OpenDataArena-Tool's batch size in its configs of these scorers.
ODA_BATCH = 8
ASK_PROMPT = "Is the following data high quality? Please answer yes or no.\n\n"
RATING_PROMPTS = ("Rate the response from 1 to 5.", "How good is this answer? Give 1 to 5.")


def deita_scorer(root: Path, model, tokenizer, label_ids: Sequence[int]):
    """DEITA's Llama scorer around the loaded model, reading ``label_ids``."""
    sys.path.insert(0, str(root / "deita" / "src"))
    with preloaded(model, tokenizer):  # DEITA binds transformers' classes when its module is imported
        from deita.selection.scorer.llama_scorer import Llama_Scorer

        class EmbeddedModelScorer(Llama_Scorer):
            @property
            def id2score(self):
                return {token: label for token, label in zip(label_ids, DEITA_LABELS, strict=True)}

        return EmbeddedModelScorer("embedded")


def oda(root: Path, name: str, model, tokenizer, **config):
    with preloaded(model, tokenizer):
        scorer = oda_scorer(root / "OpenDataArena-Tool", name)
        return scorer({"name": name, "model": "embedded", "batch_size": ODA_BATCH, **config})


def in_batches(score_batch: Callable[[list[dict]], list[float]], records: Sequence[dict]) -> list[float]:
    return [score for start in range(0, len(records), ODA_BATCH)
            for score in score_batch(list(records[start:start + ODA_BATCH]))]


def padded_left(tokenizer, run: Callable[[], list[float]]) -> list[float]:
    """``run()`` with the tokenizer padding on the left."""
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        return run()
    finally:
        tokenizer.padding_side = side


def query(record: dict) -> str:
    return f"{record['instruction']}\n{record['input']}" if record["input"] else record["instruction"]


def compare(name: str, theirs: Callable[[], list[float]], ours: Callable[[], list[float]]) -> str:
    log(name)
    reference, their_seconds = timed(theirs)
    scores, our_seconds = timed(ours)
    worst = max(abs(float(a) - float(b)) for a, b in zip(scores, reference, strict=True))
    return f"| {name} | {worst:.2e} | {their_seconds:.1f} | {our_seconds:.1f} | {their_seconds / our_seconds:.2f}x |"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", required=True, help="folder holding the deita and OpenDataArena-Tool checkouts")
    parser.add_argument("--data", default=None, help="Alpaca-style JSON or JSONL (default: the package's sample)")
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    root = Path(args.peers)
    records, source = instruction_records(args.data, args.limit)
    model, tokenizer = load_model(dtype="float32")
    labels = label_token_ids(tokenizer, DEITA_LABELS)
    instructions, inputs, outputs = ([r[key] for r in records] for key in ("instruction", "input", "output"))
    loaded = {"model": model, "tokenizer": tokenizer}
    deita = deita_scorer(root, model, tokenizer, labels)
    rows = []
    with torch.inference_mode():
        compute_deita(instructions[:2], **loaded)
        rows.append(compare("DEITA complexity: DEITA's scorer / ours (exact)",
                            lambda: [float(deita.infer_complexity(query(r))) for r in records],
                            lambda: compute_deita(instructions, inputs=inputs, **loaded)["deita_scores"]))
        rows.append(compare("DEITA quality: DEITA's scorer / ours (exact)",
                            lambda: [float(deita.infer_quality(query(r), r["output"])) for r in records],
                            lambda: compute_deita(instructions, outputs, inputs, aspect="quality",
                                                  **loaded)["deita_scores"]))
        for name, aspect in (("DeitaCScorer", "complexity"), ("DeitaQScorer", "quality")):
            peer = oda(root, name, model, tokenizer, max_length=2048)
            peer._score_ids = torch.tensor(labels)
            rows.append(compare(f"{name}: OpenDataArena-Tool / ours (opendataarena)",
                                lambda peer=peer: padded_left(tokenizer,
                                                              lambda: in_batches(peer.score_batch, records)),
                                lambda aspect=aspect: compute_deita(instructions, outputs, inputs, aspect=aspect,
                                                                    convention="opendataarena", max_length=2048,
                                                                    **loaded)["deita_scores"]))
        peer = oda(root, "AskLlmScorer", model, tokenizer, prompt=ASK_PROMPT, yes_token="yes", max_length=2048)
        rows.append(compare("AskLlmScorer: OpenDataArena-Tool / ours (opendataarena)",
                            lambda: in_batches(peer.score_batch, records),
                            lambda: compute_ask_llm(instructions, outputs, inputs, prompt=ASK_PROMPT,
                                                    convention="opendataarena", max_length=2048,
                                                    **loaded)["ask_llm_scores"]))
        with tempfile.TemporaryDirectory() as folder:
            rp_file = Path(folder) / "rating_prompts.txt"
            rp_file.write_text("\n".join(RATING_PROMPTS) + "\n", encoding="utf-8")
            peer = oda(root, "SelectitTokenScorer", model, tokenizer, rp_file=str(rp_file), k=2, alpha=0.2,
                       max_length=512)
            rows.append(compare("SelectitTokenScorer: OpenDataArena-Tool / ours",
                                lambda: in_batches(peer.score_batch, records),
                                lambda: compute_selectit(instructions, outputs, inputs, rp_file=str(rp_file), k=2,
                                                         max_length=512, **loaded)["selectit_scores"]))
    report = "\n".join([
        "# Judgment scores against the peers' own code",
        "",
        f"{len(records)} records of {source}, the embedded SmolLM2-135M-Instruct in float32 as the scorer model, "
        f"{machine_description(torch.device('cpu'))}, {datetime.now(timezone.utc):%Y-%m-%d}. "
        "Command: `.venv/bin/python -m benchmarks.peers.judgment_peers " + " ".join(argv or sys.argv[1:]) + "`.",
        "",
        "| scorer: peer / ours | largest difference | peer (s) | ours (s) | speed-up |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
    ])
    publish(report, args.output)


if __name__ == "__main__":
    main()
