"""Sattler's CFL above ``cfl-sattler-sample-above``: the sample asked and split first, the other members
asked a batch at a time (real ClientApp, digits, in-process grid)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

import strategies.cfl_sattler as cfl
from client.app import app as client_app
from common.clustering.sampled import sample_rows
from server.experiment import Experiment
from server.inprocess import InProcessGrid
from strategies import CFLSattler
from strategies.cfl_sattler import CFLSattlerParams
from tests.helpers import small_run_config

CLIENTS = 12


def _run(sample_above: int):
    rc = small_run_config(rounds=3, fraction=1.0, **{"num-clients": CLIENTS, "groups": 2, "samples-per-label": 10})
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, CLIENTS)
    strategy = CFLSattler(exp.training, CFLSattlerParams(eps1=1e6, split_after=1, sample_above=sample_above))
    strategy.start(grid, exp.initial_model(), expected_clients=CLIENTS)
    asked = [
        grid.pid_of[m.metadata.dst_node_id]
        for m in grid.sent
        if m.metadata.message_type == "query.update" and m.content["config"]["server-round"] == 3
    ]
    return strategy, asked


@pytest.mark.slow
def test_a_sampled_split_asks_the_sample_first_then_batches_and_finds_the_exact_splits_groups(monkeypatch):
    monkeypatch.setattr(cfl, "SPLIT_SAMPLE", 6)
    monkeypatch.setattr(cfl, "QUERY_BATCH", 4)
    exact, exact_asked = _run(sample_above=0)
    sampled, asked = _run(sample_above=4)
    assert sorted(exact_asked) == sorted(asked) == list(range(CLIENTS))  # every member asked once
    seed = sampled.training.seed
    sample = sample_rows(CLIENTS, np.random.default_rng(seed), 6).tolist()  # members are 0..11, sorted
    assert sorted(asked[:6]) == sample  # the sample first
    attempt = sampled.attempts[0]
    assert attempt["round"] == 3 and sum(attempt["sizes"]) == 6  # the criteria are the sample's
    assert exact.attempts[0]["kept"] and attempt["kept"]
    pids = sorted(exact.assignment)
    truth = [exact.true_group(p) for p in pids]
    exact_ari = adjusted_rand_score(truth, [exact.assignment[p] for p in pids])
    sampled_ari = adjusted_rand_score(truth, [sampled.assignment[p] for p in pids])
    assert exact_ari == pytest.approx(1.0) and sampled_ari >= exact_ari - 0.01
    assert len(sampled.models) == 2 and sampled.splits[0] == {"round": 3, "cluster": 0, "new": 1}
    # above sample-above the store keeps the first split's sample only (what distances.png shows), the
    # exact run every member's
    assert sampled.similarity is not None and sorted(sampled.similarity.pids) == sample
    assert exact.similarity is not None and set(exact.similarity.pids) == set(range(CLIENTS))
