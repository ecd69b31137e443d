"""Fault drill through `umbel run` (Flower's Ray simulation): 20% of the clients fail and 20%
answer later than round-timeout in the same run, on a grouped scenario."""

import json
import subprocess
import sys

import pytest

from client.faults import fault_draws
from server import cli

pytestmark = pytest.mark.slow

CLIENTS, ROUNDS, SEED = 10, 3, 1


def test_failing_and_slow_clients_cost_only_their_own_replies(tmp_path):
    run_name = f"drill-{tmp_path.name}"
    cmd = [
        sys.executable,
        "-m",
        "server.cli",
        "run",
        "--strategy",
        "pacfl",
        "--num-clusters",
        "2",
        "--dataset",
        "digits",
        "--num-clients",
        str(CLIENTS),
        "--groups",
        "2",
        "--samples-per-label",
        "12",
        "--seed",
        str(SEED),
        "--rounds",
        str(ROUNDS),
        "--fraction",
        "1.0",
        "--eval-every",
        str(ROUNDS),  # one evaluation: each exchange with a sleeper waits out round-timeout
        "--lr",
        "0.05",
        "--local-epochs",
        "1",
        "--fail-fraction",
        "0.2",
        "--slow-fraction",
        "0.2",
        "--slow-delay",
        "30",
        "--round-timeout",
        "15",
        "--identity-timeout",
        "300",
        "--results-dir",
        str(tmp_path / "results"),
        "--run-name",
        run_name,
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    folder = tmp_path / "results" / run_name
    records = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    lost = []
    for record in records:
        draws = {p: fault_draws(SEED, record["round"], p) for p in range(CLIENTS)}
        failing = {p for p, (fail, _) in draws.items() if fail < 0.2}
        slow = {p for p, (fail, s) in draws.items() if fail >= 0.2 and s < 0.2}
        # every healthy client answered, in every round: sleepers held no healthy client up
        assert record["train-replies"] == CLIENTS - len(failing) - len(slow), (record, failing, slow)
        lost.append(len(failing) + len(slow))
    assert sum(lost) > 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["final-ari"] == 1.0
    assert len(summary["lost-replies-per-round"]) == ROUNDS
    assert all(n >= k for n, k in zip(summary["lost-replies-per-round"], lost, strict=True))
    assert not (cli.PROJECT_ROOT / ".flwr" / run_name).exists()
