"""The clustered-strategy mechanics, step by step, on the in-process grid."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from client.app import app as client_app
from common import keys
from server.experiment import Experiment
from strategies import ClusteredStrategy, FedAvg, Local
from strategies.federation import ClientInfo
from flwr.supercore.task_identity import TaskIdentity
from tests.helpers import small_run_config
from tests.helpers.doubles import ByTrueGroup
from server.inprocess import InProcessGrid


def _run(strategy_cls, rounds=2, grid_kwargs=None, **overrides):
    rc = small_run_config(rounds=rounds, **overrides)
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"], **(grid_kwargs or {}))
    strategy = strategy_cls(exp.training)
    initial = exp.initial_model()
    strategy.start(grid, initial, expected_clients=rc["num-clients"])
    return strategy, grid, initial


def _numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def test_identity_keys_clients_by_partition_id_not_node_id():
    strategy, grid, _ = _run(FedAvg, rounds=1)
    rc = small_run_config()
    per_client = rc["labels-per-group"] * rc["samples-per-label"]
    assert sorted(strategy.clients) == list(range(rc["num-clients"]))
    for pid, info in strategy.clients.items():
        assert info.node_id == grid.node_of[pid] and info.num_train == per_client
        assert info.num_test == rc["labels-per-group"] * round(rc["test-fraction"] * rc["samples-per-label"])
    assert sorted({c.true_group for c in strategy.clients.values()}) == [0, 1]


def test_sampling_is_seeded_and_sized_by_fraction():
    def sampled(seed):
        s, grid, _ = _run(FedAvg, rounds=3, seed=seed)
        return [
            sorted(
                grid.pid_of[m.metadata.dst_node_id]
                for m in grid.sent
                if m.metadata.message_type == "train" and m.content["config"]["server-round"] == r
            )
            for r in (1, 2, 3)
        ]

    first, again, other = sampled(1), sampled(1), sampled(2)
    assert first == again
    assert first != other
    assert all(len(r) == 3 for r in first)


def test_each_client_gets_its_own_clusters_model_and_config():
    strategy, grid, _ = _run(ByTrueGroup, rounds=1)
    train = [m for m in grid.sent if m.metadata.message_type == "train"]
    assert len({id(m.content) for m in train}) == len(train)
    assert len({id(m.content["config"]) for m in train}) == len(train)
    for m in train:
        pid = grid.pid_of[m.metadata.dst_node_id]
        assert m.content["config"][keys.CLUSTER_ID] == strategy.assignment[pid]


def test_clusters_aggregate_separately_and_empty_cluster_keeps_its_model():
    strategy, _, initial = _run(ByTrueGroup, rounds=2)
    m0, m1, empty = (_numpy(m) for m in strategy.models)
    assert not np.allclose(m0["head.weight"], m1["head.weight"])
    for name, arr in _numpy(initial).items():
        np.testing.assert_array_equal(empty[name], arr)
    assert strategy.history[-1].cluster_sizes[2] == 0
    assert strategy.history[-1].ari == 1.0 and strategy.num_clusters == 2


def test_one_cluster_aggregation_equals_flowers_fedavg():
    rc = small_run_config(rounds=1)
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, 6)
    strategy = FedAvg(exp.training)
    initial = exp.initial_model()
    strategy.start(grid, initial, expected_clients=6)
    trained = []
    for msg in (m for m in grid.sent if m.metadata.message_type == "train"):
        node = msg.metadata.dst_node_id
        ctx = Context(
            run_id=1, node_id=node, node_config={"partition-id": grid.pid_of[node]}, state=RecordDict(), run_config=rc
        )
        trained.append(client_app(msg, ctx).content)
    expected = aggregate_arrayrecords(trained, keys.NUM_EXAMPLES)
    for name, arr in expected.items():
        np.testing.assert_allclose(strategy.models[0][name].numpy(), arr.numpy(), rtol=1e-5, atol=1e-7)


def test_reply_order_does_not_matter():
    a, _, _ = _run(ByTrueGroup, rounds=2)
    b, _, _ = _run(ByTrueGroup, rounds=2, grid_kwargs={"reverse_replies": True})
    for ma, mb in zip(a.models, b.models, strict=True):
        for name in ma.keys():
            np.testing.assert_array_equal(ma[name].numpy(), mb[name].numpy())
    assert [r.accuracy for r in a.history] == [r.accuracy for r in b.history]


def _poison(mutate):
    def fault(reply: Message, server_round: int) -> Message:
        if reply.has_error() or reply.metadata.message_type != "train":
            return reply
        mutate(reply.content)
        return reply

    return fault


def _nan(content):
    arrays = content[keys.ARRAYS]
    bad = arrays["head.bias"].numpy().copy()
    bad[0] = np.nan
    arrays["head.bias"] = Array(bad)


def _wrong_shape(content):
    content[keys.ARRAYS]["head.bias"] = Array(np.zeros(3, dtype=np.float32))


def _wrong_dtype(content):
    content[keys.ARRAYS]["head.bias"] = Array(content[keys.ARRAYS]["head.bias"].numpy().astype(np.float64))


def _extra_key(content):
    content[keys.ARRAYS]["surprise"] = Array(np.zeros(1, dtype=np.float32))


def _no_examples(content):
    content[keys.METRICS] = MetricRecord({keys.TRAIN_LOSS: 0.1})


def _absurd_examples(content):
    content[keys.METRICS][keys.NUM_EXAMPLES] = 10**9


def _negative_examples(content):
    content[keys.METRICS][keys.NUM_EXAMPLES] = -5


def _inf_loss(content):
    content[keys.METRICS][keys.TRAIN_LOSS] = float("inf")


@pytest.mark.parametrize(
    "mutate, fault_text",
    [
        (_nan, "NaN or Inf"),
        (_wrong_shape, "expected float32[10]"),
        (_wrong_dtype, "float64"),
        (_extra_key, "unexpected"),
        (_no_examples, "num-examples' is missing"),
        (_absurd_examples, "not a whole number"),
        (_negative_examples, "not a whole number"),
        (_inf_loss, "train-loss"),
    ],
)
def test_malformed_reply_is_rejected_for_that_client_only(mutate, fault_text, caplog):
    with caplog.at_level(logging.WARNING):
        dirty, _, initial = _run(FedAvg, rounds=2, fraction=1.0, grid_kwargs={"faults": {0: _poison(mutate)}})
    assert [r.rejected for r in dirty.history] == [1, 1]
    assert [r.train_replies for r in dirty.history] == [5, 5]
    assert caplog.text.count("client 0 reply rejected") == 2 and fault_text in caplog.text
    assert all(np.all(np.isfinite(a.numpy())) for a in dirty.models[0].values())
    assert list(dirty.models[0].keys()) == list(initial.keys())


def _drop_train(reply, server_round):
    return None if reply.metadata.message_type == "train" else reply


def test_missing_reply_is_logged_and_skipped(caplog):
    with caplog.at_level(logging.WARNING):
        strategy, _, _ = _run(FedAvg, rounds=3, fraction=1.0, grid_kwargs={"faults": {1: _drop_train}})
    assert caplog.text.count("client 1 failed: no reply within") == 3
    assert all(r.train_replies == 5 and r.failures == 1 for r in strategy.history)


def test_client_exception_becomes_a_logged_failure(caplog):
    with caplog.at_level(logging.WARNING):
        # an impossible partition makes every ClientApp raise
        rc = small_run_config(rounds=1, fraction=1.0)
        exp = Experiment.from_run_config(rc)
        grid = InProcessGrid(client_app, {**rc, "samples-per-label": 10**6}, 6)
        with pytest.raises(RuntimeError, match="No client answered the identity query"):
            FedAvg(exp.training).start(grid, exp.initial_model(), expected_clients=6)
    assert "did not give its identity: error code 2" in caplog.text


def test_local_keeps_one_model_per_client_and_changes_only_trained_ones():
    strategy, grid, initial = _run(Local, rounds=1)
    assert len(strategy.models) == 6 and strategy.num_clusters == 6
    trained = {grid.pid_of[m.metadata.dst_node_id] for m in grid.sent if m.metadata.message_type == "train"}
    for pid, k in strategy.assignment.items():
        same = np.array_equal(strategy.models[k]["head.weight"].numpy(), initial["head.weight"].numpy())
        assert same == (pid not in trained)


def test_every_client_is_evaluated_with_its_own_clusters_model():
    strategy, grid, _ = _run(ByTrueGroup, rounds=1)
    evals = [m for m in grid.sent if m.metadata.message_type == "evaluate"]
    assert sorted(grid.pid_of[m.metadata.dst_node_id] for m in evals) == list(range(6))
    for m in evals:
        pid = grid.pid_of[m.metadata.dst_node_id]
        assert m.content["config"][keys.CLUSTER_ID] == strategy.assignment[pid]
    rec = strategy.history[0]
    assert 0.0 <= rec.accuracy <= 1.0 and rec.accuracy == pytest.approx(
        np.mean([a for a, _ in strategy.last_eval.values()])
    )


def test_traffic_counts_array_payload_bytes():
    strategy, _, initial = _run(FedAvg, rounds=1)
    model_bytes = sum(a.numpy().nbytes for a in initial.values())
    rec = strategy.history[0]
    assert rec.bytes_up_model == rec.train_replies * model_bytes
    assert rec.bytes_down_model == (rec.train_replies + 6) * model_bytes
    assert rec.bytes_up_signal == 0


def test_set_clusters_rejects_out_of_range_assignment():
    s = FedAvg()
    with pytest.raises(ValueError, match="point outside the 1 cluster models"):
        s.set_clusters([ArrayRecord()], {0: 0, 1: 1})


def test_state_read_before_its_hook_ran_raises_naming_the_attribute_and_the_hook():
    from strategies import FedClust

    with pytest.raises(RuntimeError, match=r"FedAvg\.initial is not initialised yet: start\(\)"):
        FedAvg().head_shape()
    with pytest.raises(RuntimeError, match=r"FedClust\.centroids is not initialised yet: the clustering round"):
        FedClust().place([0], server_round=1)
    assert FedAvg().require(0, "x", "y") == 0  # a falsy value that is set is returned, not refused


def _recording_strategy() -> ClusteredStrategy:
    """Four clients in true groups 0, 0, 1, 1, all in one cluster of two models."""
    strategy = ClusteredStrategy()
    strategy.clients = {p: ClientInfo(p, 100 + p, 10, 2, p // 2) for p in range(4)}
    strategy.set_clusters([ArrayRecord(), ArrayRecord()], dict.fromkeys(range(4), 0))
    return strategy


def test_a_client_without_test_samples_is_not_asked_to_evaluate(caplog, monkeypatch):
    for name, value in (("_task_id", 1), ("_run_id", 1), ("_node_id", 1)):  # what a grid's run sets
        monkeypatch.setattr(TaskIdentity, name, value)
    strategy = _recording_strategy()
    strategy.clients[2] = ClientInfo(2, 102, 10, 0, 1)  # identity: no test samples
    with caplog.at_level(logging.WARNING):
        sent = list(strategy.configure_evaluate(1, ArrayRecord(), ConfigRecord(), grid=None))
        again = list(strategy.configure_evaluate(2, ArrayRecord(), ConfigRecord(), grid=None))
    assert [m.metadata.dst_node_id for m in sent] == [100, 101, 103] == [m.metadata.dst_node_id for m in again]
    assert caplog.text.count("1 of 4 clients hold no test samples and are never evaluated") == 1
