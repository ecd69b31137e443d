"""Signal queries, per-client rejection of bad signals, and late clients, on the in-process grid."""

from __future__ import annotations

import logging

import numpy as np
from flwr.app import Array, Message

from client.app import app as client_app
from common import keys
from common.signals.losses import ModelLosses
from server.experiment import Experiment
from strategies import FedAvg, Local
from strategies.base import ClusteredStrategy
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


class TwoModels(ClusteredStrategy):
    """Test double: model 0 is the initial model, model 1 is garbage (all weights 5)."""

    name = "two-models"

    def init_clusters(self, initial):
        garbage = initial.copy()
        for name in list(garbage.keys()):
            garbage[name] = Array(np.full(garbage[name].shape, 5.0, dtype=np.float32))
        self.set_clusters([initial.copy(), garbage], dict.fromkeys(self.clients, 0))


def _start(strategy_cls, grid_kwargs=None, **overrides):
    rc = small_run_config(**overrides)
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"], **(grid_kwargs or {}))
    strategy = strategy_cls(exp.training)
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid


def test_losses_query_returns_train_losses_of_every_model_and_counts_bytes():
    strategy, grid = _start(TwoModels, rounds=1)
    down_before, signal_before = strategy.messenger.stats.down.model, strategy.messenger.stats.up.signal
    losses = strategy.query_signal(
        keys.LOSSES_ACTION, [0, 3], 1, ModelLosses.from_arrays, models=strategy.models, num_models=2
    )
    assert sorted(losses) == [0, 3]
    assert all(sig.losses.shape == (2,) and sig.best() == 0 for sig in losses.values())
    queries = [m for m in grid.sent if m.metadata.message_type == "query.losses"]
    assert len(queries) == 2 and queries[0].content[keys.CONFIG][keys.NUM_MODELS] == 2
    assert set(queries[0].content.array_records) == {"arrays-0", "arrays-1"}
    model_bytes = sum(a.numpy().nbytes for a in strategy.models[0].values())
    assert strategy.messenger.stats.down.model - down_before == 2 * 2 * model_bytes  # 2 clients x 2 models
    assert strategy.messenger.stats.up.signal - signal_before == 2 * 2 * 4  # 2 clients x 2 float32 losses


def _bad_losses(reply: Message, server_round: int) -> Message:
    if reply.metadata.message_type == "query.losses":
        reply.content[keys.SIGNAL]["losses"] = Array(np.array([np.nan, 1.0], dtype=np.float32))
    return reply


def test_malformed_signal_is_rejected_for_that_client_only(caplog):
    strategy, _ = _start(TwoModels, rounds=1, grid_kwargs={"faults": {0: _bad_losses}})
    with caplog.at_level(logging.WARNING):
        losses = strategy.query_signal(
            keys.LOSSES_ACTION, [0, 1], 1, ModelLosses.from_arrays, models=strategy.models, num_models=2
        )
    assert sorted(losses) == [1]
    assert "client 0 reply rejected: model losses: array 'losses' holds NaN or Inf" in caplog.text


def test_late_clients_wait_then_join_the_cluster_with_the_lowest_train_loss():
    strategy, grid = _start(TwoModels, rounds=3, **{"late-clients": 0.34, "late-round": 2})
    late = sorted({grid.pid_of[m.metadata.dst_node_id] for m in grid.sent if m.metadata.message_type == "query.losses"})
    assert len(late) == 2
    first = [
        m for m in grid.sent if m.metadata.message_type == "train" and m.content[keys.CONFIG][keys.SERVER_ROUND] == 1
    ]
    assert not {grid.pid_of[m.metadata.dst_node_id] for m in first} & set(late)
    assert [strategy.assignment[p] for p in late] == [0, 0]
    assert [r.cluster_sizes for r in strategy.history] == [[4, 0], [6, 0], [6, 0]]


def test_fedavg_admits_without_a_query_and_local_gives_newcomers_their_own_model():
    fedavg, grid = _start(FedAvg, rounds=2, **{"late-clients": 0.5, "late-round": 2})
    assert len(fedavg.assignment) == 6
    assert not [m for m in grid.sent if m.metadata.message_type == "query.losses"]
    local, _ = _start(Local, rounds=2, **{"late-clients": 0.5, "late-round": 2})
    assert len(local.models) == 6 and sorted(local.assignment.values()) == list(range(6))


def test_train_update_delta_is_trained_minus_sent():
    strategy, _ = _start(FedAvg, rounds=1)
    seen = {}
    strategy.after_train = lambda rnd, updates: seen.update(updates)
    strategy.start(strategy.grid, strategy.models[0], num_rounds=1)
    update = next(iter(seen.values()))
    expected = np.concatenate([(update.arrays[n] - update.sent[n]).ravel() for n in update.arrays])
    np.testing.assert_allclose(update.delta(), expected)
    assert np.linalg.norm(update.delta()) > 0
