"""The golden run: every registered strategy on a small digits federation, recorded once.

Each strategy runs through the real ServerApp strategy (``Experiment.build_strategy``) and the
real ClientApp on the in-process grid: 6 clients in 2 true groups, seed 1, 3 rounds, 1 local
epoch, half the clients sampled per round, with the contract suite's ``FAST`` overrides so that
every algorithm clusters inside the run. ``tests/strategies/test_golden.py`` replays it and
demands the recorded assignment after every round and the final per-client accuracies to 1e-6.

Re-record (only after a change that is MEANT to change what an algorithm does; never in CI)::

    python -m tests.helpers.golden            # every strategy
    python -m tests.helpers.golden ifca flag  # only these, the others kept
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from client.app import app as client_app
from server.experiment import Experiment
from strategies.state import capture
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

GOLDEN_FILE = Path(__file__).resolve().parents[1] / "strategies" / "golden.json"
NUM_CLIENTS = 6
ROUNDS = 3
# The contract suite's overrides make each algorithm cluster within 3 rounds on 6 clients.
SETTINGS: dict[str, Any] = {"rounds": ROUNDS, "local-epochs": 1, "fraction": 0.5, "seed": 1, "num-clients": NUM_CLIENTS}
# With seed 1 IFCA's two random models collapse into one cluster; seed 3 moves clients every round.
OVERRIDES: dict[str, dict[str, Any]] = {"ifca": {"seed": 3}}


def golden_run(name: str) -> dict[str, Any]:
    """Run strategy ``name`` once; what the golden file holds for it.

    Returns
    -------
    dict
        ``assignments``: per round, partition id (as a string) -> cluster; ``accuracies``: the
        last round's local test accuracy per partition id; ``losses``: the same clients' test loss
        (continuous, so it catches a change that moves no prediction); ``round_accuracy``: the mean
        per round; ``checkpoint_fields``: the names a checkpoint stores (a checkpoint written before a
        refactor loads after it only while these stay the same).
    """
    from tests.test_strategy_contract import FAST

    rc = small_run_config(strategy=name, **{**FAST.get(name, {}), **SETTINGS, **OVERRIDES.get(name, {})})
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    assignments: list[dict[str, int]] = []
    strategy.on_round = lambda s, record: assignments.append({str(p): k for p, k in sorted(s.assignment.items())})
    strategy.start(InProcessGrid(client_app, rc, NUM_CLIENTS), exp.initial_model(), expected_clients=NUM_CLIENTS)
    return {
        "assignments": assignments,
        "accuracies": {str(p): acc for p, (acc, _) in sorted(strategy.last_eval.items())},
        "losses": {str(p): loss for p, (_, loss) in sorted(strategy.last_eval.items())},
        "round_accuracy": [r.accuracy for r in strategy.history],
        "checkpoint_fields": sorted(capture(strategy)),
    }


def load_golden() -> dict[str, Any]:
    """The recorded golden runs, by strategy name (``{}`` when none is recorded)."""
    if not GOLDEN_FILE.is_file():
        return {}
    return dict(json.loads(GOLDEN_FILE.read_text())["runs"])


def record(names: list[str]) -> None:
    """Run ``names`` (every registered strategy when empty) and write them into the golden file."""
    from strategies import REGISTRY

    runs = load_golden()
    for name in names or sorted(REGISTRY):
        runs[name] = golden_run(name)
        print(f"recorded {name}: {runs[name]['assignments'][-1]}")
    payload = {"settings": SETTINGS, "overrides": OVERRIDES, "runs": dict(sorted(runs.items()))}
    GOLDEN_FILE.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    record(sys.argv[1:])
