"""Plain ``flwr run .`` as a new Flower user types it, in a clean ``FLWR_HOME``.

Flower's default local federation has 2 SuperNodes, umbel's default ``num-clients`` 100: the run
must stop before training, fail, and say which command gives the intended federation and how to
stop the local SuperLink Flower leaves running.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from server.cli import free_port, stop_superlinks

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_flwr_run_dot_on_flowers_default_federation_stops_before_training_and_says_what_to_run(tmp_path):
    flwr = shutil.which("flwr")
    assert flwr, "flwr is not on PATH"
    home = tmp_path / "flwr-home"
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        # else Flower builds a per-run environment of every dependency with uv (about 6 GB from the index)
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
    }
    results = ROOT / "results"
    before = set(results.iterdir()) if results.is_dir() else set()
    try:
        for _ in range(3):  # Flower gives its local SuperLink 15 s to start, which a loaded box can miss
            run = subprocess.run([flwr, "run", "."], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            if "Failed to start local SuperLink" not in run.stdout + run.stderr:
                break
        assert run.returncode == 0, run.stdout + run.stderr
        run_id = re.search(r"Successfully started run (\d+)", run.stdout)
        assert run_id, run.stdout
        logs = subprocess.run(
            [flwr, "log", run_id.group(1)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
        )
        text = re.sub(r"\x1b\[[0-9;]*m", "", logs.stdout)
        assert "umbel stopped before training: the run needs 100 clients (num-clients)" in text, text[-3000:]
        assert "Flower's simulation has 2 SuperNodes" in text
        assert 'flwr run . --stream --federation-config "num-supernodes=100 ' in text
        assert "| acc" not in text, "a round was trained on the 2-node federation"
        listing = subprocess.run(
            [flwr, "ls", "--format", "json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        (status,) = [r["status"] for r in json.loads(listing.stdout)["runs"] if r["run-id"] == run_id.group(1)]
        assert status == "finished:failed"
        pid = re.search(
            r"Flower's local SuperLink \(PID (\d+)\) keeps running after this run; stop it with: kill (\d+)", text
        )
        assert pid and pid.group(1) == pid.group(2), text[-3000:]
    finally:
        stopped = stop_superlinks(home)
    assert int(pid.group(1)) in stopped, "the PID umbel named is not the local SuperLink of this FLWR_HOME"
    after = set(results.iterdir()) if results.is_dir() else set()
    assert not [p for p in after - before if (p / "summary.json").exists()], "a run wrote results"
