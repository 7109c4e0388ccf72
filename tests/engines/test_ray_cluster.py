"""Reaching a Ray cluster (``hf_adapters.engines.ray_cluster``): what a Ray run prints of Ray's own start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hf_adapters.engines.ray_cluster import LOG_LEVEL_ANNOUNCEMENT, _log_level_announcement_dropped
from tests.conftest import QUIET_RAY
from tests.spaces.spaces_fixtures import ROOT, tiny_model_dir_fixture  # noqa: F401  (fixture)


def test_rays_announcement_of_the_log_level_is_dropped_and_its_other_lines_kept(capfd, monkeypatch):
    monkeypatch.setenv("RAY_BACKEND_LOG_LEVEL", "fatal")
    with _log_level_announcement_dropped():
        os.write(2, b"[I 1 1] logging.cc:303: " + LOG_LEVEL_ANNOUNCEMENT + b" to 3\n")
        os.write(2, b"[E 1 1] core_worker.cc: a real error\n")
    assert capfd.readouterr().err == "[E 1 1] core_worker.cc: a real error\n"


def test_a_ray_engine_runs_stderr_does_not_announce_rays_log_level(ray_cluster, tiny_model_dir, tmp_path):
    """The Ray engine sets ``RAY_BACKEND_LOG_LEVEL`` (to keep Ray's C++ log quiet), which Ray announced on stderr
    as the command connected, though the user set nothing."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"instruction": f"Say {i}.", "output": "A fox. " * i}) + "\n" for i in range(6)),
                    encoding="utf-8")
    config = tmp_path / "ppl.yaml"
    config.write_text(f"name: PPLScorer\nmodel: {tiny_model_dir}\nbatch_size: 8\nmax_length: 64\n", encoding="utf-8")
    environment = {name: value for name, value in os.environ.items() if name != "RAY_BACKEND_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "hf_adapters", "score", str(config), "--data", str(rows), "--output",
         str(tmp_path / "scores.jsonl"), "--engine", "ray", "--no-progress",
         "--ray-address", ray_cluster.get_runtime_context().gcs_address],
        env={**environment, **QUIET_RAY, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "RAY_BACKEND_LOG_LEVEL" not in result.stderr, result.stderr
    assert len((tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()) == 6
