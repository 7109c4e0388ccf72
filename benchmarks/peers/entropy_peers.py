"""UPD, HES, NormLoss and MIWV against OpenDataArena's own scorers, run unmodified.

Runs ``UPDScorer``, ``HESScorer``, ``NormLossScorer`` and ``MIWVScorer`` of ODA-DataScorer (``model_based/scorers/``)
from a checkout the caller points at (never part of this repository), with the settings of their
published configs (``model_based/configs/*.yaml``), on the same rows and the same loaded model as
hf_adapters' scorers of the same names (MIWV: :func:`hf_adapters.formulas.miwv.compute_miwv`, both on the
model's mean-pooled embeddings of the rows, saved as the ``.npy`` file the peer reads), and reports
the largest relative difference, the Spearman correlation and both wall times.

    git clone https://github.com/OpenDataArena/ODA-DataScorer ../peers/ODA-DataScorer
    python -m benchmarks.peers.entropy_peers --peers ../peers --data ../shared/data/alpaca_cherry_5pct.json \
        --output benchmarks/peers/ENTROPY_PEERS.md

As in :mod:`benchmarks.peers.ifd_conventions`, the scorers' ``from_pretrained`` calls return the model and tokenizer
already loaded (so the tokenizer keeps its right padding: HES asks for left padding, which its
published config's batch size of 1 never uses).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import tempfile
import types
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    instruction_records,
    machine_description,
    publish,
    relative_differences,
    spearman,
    timed,
)
from benchmarks.peers.ifd_conventions import preloaded
from hf_adapters.backends.loading import load_model
from hf_adapters.core.texts import ppl_text
from hf_adapters.formulas.embeddings import embed_texts
from hf_adapters.formulas.miwv import compute_miwv
from hf_adapters.scorers import HESScorer, NormLossScorer, UPDScorer

#: The settings of ODA-DataScorer's published configs (``model_based/configs/``), beside ``model``.
PEER_CONFIGS = {
    "UPDScorer": {"max_length": 2048, "batch_size": 4},
    "HESScorer": {"percentile_cutoff": 0.005, "batch_size": 1, "max_model_len": 4096},
    "NormLossScorer": {"max_length": 2048, "batch_size": 8},
    "MIWVScorer": {"max_length": 8192, "batch_size": 8, "distance_metric": "cosine"},
}
ROW_SCORERS = {"UPDScorer": UPDScorer, "HESScorer": HESScorer, "NormLossScorer": NormLossScorer}


def peer_scorer(root: Path, name: str):
    """ODA-DataScorer's scorer class ``name``, imported from its file (its ``utils`` package on the path)."""
    model_based = root / "model_based"
    if str(model_based) not in sys.path:
        sys.path.insert(0, str(model_based))
    package = types.ModuleType("oda_datascorer_scorers")
    package.__path__ = [str(model_based / "scorers")]
    sys.modules["oda_datascorer_scorers"] = package
    return getattr(importlib.import_module(f"oda_datascorer_scorers.{name}"), name)


#: What HESScorer adds inside its logarithm: its "entropy" is -sum_v p_v log2(p_v + EPSILON).
EPSILON = 1e-9


@torch.inference_mode()
def epsilon_hes(model, tokenizer, record: dict, cutoff: float = 0.005, max_length: int = 4096) -> float:
    """HES with the peer's arithmetic, one row at a time: at each answer token, -sum_v p_v log2(p_v + 1e-9)
    from float32 probabilities, then the sum at or above the (1 - cutoff) percentile. It tells how much of
    the difference from our exact entropies the epsilon makes."""
    prompt = record["instruction"] + ("\n" + record["input"] if record["input"] else "")
    ids = tokenizer(prompt + record["output"]).input_ids[:max_length]
    start = max(len(tokenizer(prompt, add_special_tokens=False).input_ids), 1)
    probabilities = torch.softmax(model(torch.tensor([ids])).logits[0, start - 1:-1].float(), dim=-1)
    bits = (-(probabilities * torch.log2(probabilities + EPSILON)).sum(dim=-1)).numpy()
    return float(np.sum(bits[bits >= np.percentile(bits, (1 - cutoff) * 100)], dtype=np.float64))


def our_scores(name: str, config: dict, records: Sequence[dict], model, tokenizer) -> list[float]:
    """Our scores of the rows under the peer's ``config``."""
    if name == "MIWVScorer":
        columns = {key: [record[key] for record in records] for key in ("instruction", "output", "input")}
        return compute_miwv(columns["instruction"], columns["output"], columns["input"],
                            embeddings=np.load(config["embedding_path"]), model=model, tokenizer=tokenizer,
                            max_length=config["max_length"], batch_size=config["batch_size"])["miwv_scores"]
    options = {key: value for key, value in config.items() if key in ("max_length", "percentile_cutoff")}
    return ROW_SCORERS[name](model=model, tokenizer=tokenizer, **options).score_rows(records)


def compare(root: Path, name: str, records: Sequence[dict], folder: Path, model, tokenizer) -> dict:
    # MIWV checks that its model path exists (the loaded model is returned for it) and reads embeddings from a file.
    config = {"name": name, "model": str(folder), "embedding_path": str(folder / "embeddings.npy"),
              **PEER_CONFIGS[name]}
    with preloaded(model, tokenizer):
        scorer = peer_scorer(root, name)(dict(config))
        results, peer_seconds = timed(lambda: scorer.evaluate(str(folder / "rows.jsonl")))
    reference = [float(row["score"]) for row in results]
    scores, our_seconds = timed(lambda: our_scores(name, config, records, model, tokenizer))
    # The peers write 0 where no token is scored; ours is NaN there.
    row = {"name": name, "scores": scores, "reference": [r if not math.isnan(s) else math.nan
                                                         for s, r in zip(scores, reference, strict=True)],
           "peer_seconds": peer_seconds, "our_seconds": our_seconds}
    if name == "HESScorer":
        row["epsilon"] = [epsilon_hes(model, tokenizer, record) for record in records]
    return row


def report(rows: Sequence[dict], count: int, source: str) -> str:
    lines = [
        f"# UPD, HES, NormLoss and MIWV against ODA-DataScorer's own scorers ({datetime.now(timezone.utc):%Y-%m-%d})",
        "",
        f"Machine: {machine_description(torch.device('cpu'))}. Model: SmolLM2-135M-Instruct, float32, the same "
        f"loaded model on both sides. Rows: the first {count} of {source}. Written by "
        "`python -m benchmarks.peers.entropy_peers`.",
        "",
        "| peer scorer | rows scored (ours / peer) | max relative difference | max absolute difference | Spearman "
        "| peer time | ours | speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        finite = sum(not math.isnan(s) for s in row["scores"]), sum(not math.isnan(s) for s in row["reference"])
        diff = relative_differences(row["scores"], row["reference"])
        absolute = max(abs(a - b) for a, b in zip(row["scores"], row["reference"], strict=True) if not math.isnan(a))
        lines.append(f"| {row['name']} | {finite[0]} / {finite[1]} | {diff.max():.1e} | {absolute:.1e} | "
                     f"{spearman(row['scores'], row['reference']):.4f} | {row['peer_seconds']:.2f} s | "
                     f"{row['our_seconds']:.2f} s | {row['peer_seconds'] / row['our_seconds']:.2f}x |")
    if any(row["name"] == "MIWVScorer" for row in rows):
        lines += ["", "MIWV is the difference of two mean answer losses of a few nats each; where they nearly cancel, "
                  "a difference in their last float32 digits is a large part of the score, so compare its absolute "
                  "difference (in nats) with the exactness of one loss."]
    for row in rows:
        if "epsilon" in row:
            to_peer = relative_differences(row["epsilon"], row["reference"]).max()
            ours = relative_differences(row["scores"], row["epsilon"]).max()
            lines += ["", f"HES: the peer's \"entropy\" is -sum_v p_v log2(p_v + {EPSILON:g}), not the entropy: it "
                      "falls short of it by sum_v p_v log2(1 + 1e-9 / p_v), at most V x 1e-9 / ln 2 bits a token "
                      "(7.1e-5 bits for V = 49,152). That arithmetic, recomputed here one row at a time "
                      f"(`epsilon_hes`), gives the peer's numbers to {to_peer:.1e} (relative); our exact entropies "
                      f"differ from it by at most {ours:.1e}, which is the whole difference in the table."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=Path, required=True, help="folder holding an ODA-DataScorer checkout")
    parser.add_argument("--data", required=True, help="Alpaca records (JSON list or JSONL)")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--output", help="write the Markdown report here too")
    args = parser.parse_args(argv)
    records, source = instruction_records(args.data, args.rows)
    records = [{key: record[key] for key in ("instruction", "input", "output")} for record in records]
    model, tokenizer = load_model()
    model.eval()
    UPDScorer(model=model, tokenizer=tokenizer).score_rows(records[:1])  # the core picks its kernels once
    texts = [ppl_text(record["instruction"], record["input"], record["output"]) for record in records]
    embeddings = embed_texts(texts, model=model, tokenizer=tokenizer, pooling="mean", progress=False)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "rows.jsonl").write_text("".join(json.dumps({"id": str(i), **r}) + "\n"
                                                   for i, r in enumerate(records)))
        np.save(folder / "embeddings.npy", embeddings)
        rows = [compare(args.peers / "ODA-DataScorer", name, records, folder, model, tokenizer)
                for name in PEER_CONFIGS]
    text = report(rows, len(records), source)
    publish(text, args.output)
    return text


if __name__ == "__main__":
    main()
