"""The peers' side of ``benchmarks.peers.diversity_peers``, run in a Python environment that has the
peers' libraries (apricot-select, submodlib-py) and needs nothing of hf_adapters.

    python benchmarks/peers/diversity_peer_driver.py JOB.json RESULT.json

The job names ``.npy`` inputs. Superfiltering's ``do_fla.py`` is imported unmodified from a
checkout; its module-level ``torch``/``transformers`` imports (used only to embed, which the job
does not ask of it) get stand-ins, so no torch is needed here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np


def superfiltering_module(checkout: str) -> types.ModuleType:
    """``code_diversity_fla/do_fla.py`` of a Superfiltering checkout, imported as it is (submodlib,
    and the scipy it imports, first: scipy takes any ``torch`` module it finds for the real one)."""
    import submodlib.functions.facilityLocation  # noqa: F401

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    functional = types.ModuleType("torch.nn.functional")
    torch.nn = types.SimpleNamespace(functional=functional)
    transformers = types.ModuleType("transformers")
    transformers.AutoTokenizer = transformers.AutoModel = None
    sys.modules.update({"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": functional,
                        "transformers": transformers})
    spec = importlib.util.spec_from_file_location("do_fla", Path(checkout) / "code_diversity_fla" / "do_fla.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def superfiltering_d(job: dict) -> dict:
    """do_fla.py's main() without its embedding step: do_ifd, then do_fla on the given embeddings."""
    module = superfiltering_module(job["superfiltering"])
    records = [{"id": index, "ifd_ppl": score} for index, score in enumerate(job["scores"])]
    args = argparse.Namespace(ifd_num=job["ifd_num"], ifd_lower=0.9, ifd_lupper=1.0, key_name="ifd_ppl")
    embeddings = np.load(job["embeddings"])
    start = time.perf_counter()
    pool = module.do_ifd(args, records)
    picked = module.do_fla(embeddings[[record["id"] for record in pool]], len(pool), job["fla_num"])
    seconds = time.perf_counter() - start
    return {"rows": [pool[position]["id"] for position in picked], "seconds": seconds}


def apricot_facility_location(job: dict) -> dict:
    """apricot's FacilityLocationSelection, lazy greedy, on the given similarity matrix."""
    from apricot import FacilityLocationSelection

    similarities = np.load(job["similarities"])
    start = time.perf_counter()
    selector = FacilityLocationSelection(job["budget"], metric="precomputed", optimizer="lazy").fit(similarities)
    return {"rows": [int(row) for row in selector.ranking], "seconds": time.perf_counter() - start}


def main() -> None:
    job_path, result_path = sys.argv[1:3]
    job = json.loads(Path(job_path).read_text())
    run = {"superfiltering_d": superfiltering_d, "apricot": apricot_facility_location}[job["peer"]]
    Path(result_path).write_text(json.dumps(run(job)))


if __name__ == "__main__":
    main()
