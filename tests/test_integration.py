"""End to end through `umbel run`: flwr run, a local SuperLink, Ray, real messages."""

import json
import subprocess
import sys

import psutil
import pytest

from server import cli

pytestmark = pytest.mark.slow


def _superlinks(home):
    return [p for p in psutil.process_iter(["cmdline"])
            if any("flower-superlink" in c for c in (p.info["cmdline"] or [])[:2])
            and any(str(home) in c for c in p.info["cmdline"] or [])]


def test_umbel_run_on_digits(tmp_path):
    run_name = f"it-{tmp_path.name}"
    home = cli.PROJECT_ROOT / ".flwr" / run_name
    cmd = [sys.executable, "-m", "server.cli", "run", "--dataset", "digits", "--num-clients", "6",
           "--groups", "2", "--samples-per-label", "20", "--seed", "1", "--rounds", "3", "--fraction", "0.5",
           "--eval-every", "1", "--lr", "0.05", "--local-epochs", "2", "--results-dir", str(tmp_path / "results"),
           "--run-name", run_name]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    folder = tmp_path / "results" / run_name
    assert f"results in {folder}" in out and "6 clients identified" in out
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3]
    assert lines[-1]["accuracy"] > lines[0]["accuracy"]
    assert all(r["failures"] == 0 and r["train-replies"] == 3 for r in lines)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["final-accuracy"] == lines[-1]["accuracy"] and summary["num-clients"] == 6
    assignments = json.loads((folder / "assignments.json").read_text())
    assert sorted(assignments["true-groups"]) == [str(i) for i in range(6)]
    for png in ("accuracy.png", "clustering.png"):
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _superlinks(home) == [] and not home.exists()
