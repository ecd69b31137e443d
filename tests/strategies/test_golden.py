"""Behaviour unchanged: every strategy replays its recorded golden run (``tests.helpers.golden``).

The run goes through the real strategy and the real ClientApp (in-process grid, no Ray). A
refactor of the core must leave every algorithm's assignment after each round and each client's
final accuracy as recorded; re-record with ``python -m tests.helpers.golden`` only for a change
meant to alter an algorithm, and say so in the commit.
"""

from __future__ import annotations

import pytest

from strategies import REGISTRY
from tests.helpers.golden import ROUNDS, golden_run, load_golden

GOLDEN = load_golden()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_replays_the_golden_run(name):
    if name not in GOLDEN:
        pytest.skip(f"no golden run recorded for {name!r}: python -m tests.helpers.golden {name}")
    expected, got = GOLDEN[name], golden_run(name)
    assert len(got["assignments"]) == ROUNDS
    assert got["assignments"] == expected["assignments"]
    assert set(got["accuracies"]) == set(expected["accuracies"])
    assert got["accuracies"] == pytest.approx(expected["accuracies"], abs=1e-6)
    assert got["losses"] == pytest.approx(expected["losses"], abs=1e-6)
    assert got["round_accuracy"] == pytest.approx(expected["round_accuracy"], abs=1e-6)
    assert got["checkpoint_fields"] == expected["checkpoint_fields"]  # older checkpoints still load


def test_every_strategy_has_a_golden_run_with_a_clustering_to_compare():
    assert set(GOLDEN) >= set(REGISTRY), "re-record: python -m tests.helpers.golden <name>"
    # a run whose assignment never leaves one cluster could not catch a broken re-clustering
    multi = {name for name, run in GOLDEN.items() if any(len(set(a.values())) > 1 for a in run["assignments"])}
    assert multi >= set(GOLDEN) - {"fedavg", "fedprox", "fedmedian"}
    # a client moving between rounds is what catches a broken re-assignment
    moving = {name for name, run in GOLDEN.items() if len({tuple(sorted(a.items())) for a in run["assignments"]}) > 1}
    assert {"ifca", "flic", "cflgt", "cfl-sattler"} <= moving
