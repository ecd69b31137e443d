"""The collaborators of ``ClusteredStrategy`` one at a time, without Flower's simulation or a ClientApp.

The messenger (``strategies.messenger``), the reply guard (``strategies.guard``), the roster
(``strategies.admission``), the stop rule (``strategies.outcome``), the run state's checkpoints
(``strategies.state.Checkpoints``) and the train phase's merge (``strategies.phases``). A grid here
is a few lines that answer each message with a reply built by the test.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from common import keys
from common.config import TrainingParams
from common.signals.losses import ModelLosses
from strategies import FedAvg
from strategies.admission import check_round_params, refresh_membership, with_test_data
from strategies.federation import REJECTED, TIMED_OUT, ClientInfo, Exchange
from strategies.guard import cap_weights, evaluations, signals, train_updates
from strategies.messenger import IDENTITY, QUERY, Messenger, timeouts
from strategies.outcome import stop_if_all_rejected
from strategies.phases import merge
from strategies.recorder import RoundStats
from strategies.replies import TrainUpdate, metric_ranges
from strategies.state import Checkpoints, load_checkpoint

Answer = Callable[[Message], Message | None]


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    """What a grid's run sets before any message is built."""
    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


class EchoGrid:
    """Nodes ``10 + pid``; ``answer(message)`` builds each reply (None: no reply)."""

    def __init__(self, answer: Answer, pids: Iterable[int] = range(3)) -> None:
        self.answer = answer
        self.nodes = {pid: 10 + pid for pid in pids}
        self._ids = itertools.count(1)
        self.timeouts: list[float | None] = []

    def get_node_ids(self) -> list[int]:
        return list(self.nodes.values())

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        self.timeouts.append(timeout)
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"m{next(self._ids)}"
            reply = self.answer(msg)
            if reply is not None:
                replies.append(reply)
        return replies


def _metrics_reply(msg: Message, **metrics: float) -> Message:
    return Message(RecordDict({keys.METRICS: MetricRecord(metrics)}), reply_to=msg)


def _info(pid: int, num_train: int = 10, num_test: int = 4, node: int | None = None) -> ClientInfo:
    return ClientInfo(pid, 10 + pid if node is None else node, num_train, num_test, pid % 2)


# ----------------------------------------------------------------- messenger
def test_each_kind_waits_its_own_timeout_and_a_query_action_falls_back_to_query():
    training = TrainingParams(round_timeout=7.0, identity_timeout=3.0)
    wait = timeouts(training)
    assert wait == {MessageType.TRAIN: 7.0, MessageType.EVALUATE: 7.0, QUERY: 7.0, IDENTITY: 3.0}
    messenger = Messenger({**wait, MessageType.EVALUATE: 5.0})
    assert messenger.timeout("query.losses") == 7.0 and messenger.timeout(MessageType.EVALUATE) == 5.0
    box = messenger.outbox({0: 10}, MessageType.EVALUATE, 4)
    box.add(0, RecordDict({keys.CONFIG: ConfigRecord({})}))
    assert box.messages[0].metadata.ttl == 5.0 and box.messages[0].metadata.group_id == "evaluate-4"


def test_a_query_is_sent_now_and_every_failure_is_counted_and_logged_once(caplog):
    def answer(msg: Message) -> Message | None:
        node = msg.metadata.dst_node_id
        if node == 11:
            return Message(Error(code=2, reason="boom"), reply_to=msg)
        return None if node == 12 else _metrics_reply(msg, x=1.0)

    messenger = Messenger(timeouts(TrainingParams(round_timeout=9.0)))
    messenger.grid = grid = EchoGrid(answer)
    extra = ArrayRecord({"x": Array(np.zeros(3, dtype=np.float32))})  # not a model: signal traffic
    contents = {pid: RecordDict({"extra": extra, keys.CONFIG: ConfigRecord({"a": 1})}) for pid in range(3)}
    with caplog.at_level(logging.WARNING):
        exchange = messenger.query(grid.nodes, "query.x", contents, 2)
        messenger.account(exchange, 2)  # a second look at the same failures logs nothing new
    assert sorted(exchange.replies) == [0] and grid.timeouts == [9.0]
    assert exchange.failures[1] == "error code 2: boom" and exchange.failures[2].startswith(TIMED_OUT)
    assert caplog.text.count("client 1 failed") == 1 and caplog.text.count("client 2 failed") == 1
    assert messenger.stats.failures == 4  # counted per exchange accounted
    assert (messenger.stats.down.signal, messenger.stats.down.model) == (2 * 3 * 12, 0)  # two accounts of 3 x 12 B


def test_collect_takes_the_pending_phase_once_and_refuses_replies_for_none():
    messenger = Messenger(timeouts(TrainingParams()))
    with pytest.raises(RuntimeError, match="Replies arrived for no configured round"):
        messenger.collect([], 1)
    grid = EchoGrid(lambda msg: _metrics_reply(msg, y=2.0))
    box = messenger.outbox(grid.nodes, MessageType.TRAIN, 1)
    box.add(0, RecordDict({keys.CONFIG: ConfigRecord({})}))
    exchange = messenger.collect(grid.send_and_receive(messenger.expect(box)), 1)
    assert sorted(exchange.replies) == [0] and messenger.stats.asked[MessageType.TRAIN] is exchange
    with pytest.raises(RuntimeError, match="no configured round"):
        messenger.collect([], 1)


def test_a_grid_is_required_before_anything_is_sent():
    with pytest.raises(RuntimeError, match=r"no grid yet: call start\(\) first"):
        Messenger(timeouts(TrainingParams())).query({}, "query.x", {}, 1)


def test_reject_turns_a_reply_into_a_failure_and_keeps_the_first_fault_of_the_phase(caplog):
    messenger = Messenger(timeouts(TrainingParams()))
    exchange = Exchange(MessageType.TRAIN, replies={1: RecordDict(), 2: RecordDict(), 3: RecordDict()})
    with caplog.at_level(logging.WARNING):
        messenger.reject(exchange, 2, "NaN in w", 5)
        messenger.reject(exchange, 1, "bad shape", 5)
    assert sorted(exchange.replies) == [3]
    assert exchange.failures == {2: f"{REJECTED}NaN in w", 1: f"{REJECTED}bad shape"}
    assert messenger.stats.rejected == 2 and messenger.stats.faults == {MessageType.TRAIN: "client 2: NaN in w"}
    assert "round 5 train: client 2 reply rejected: NaN in w" in caplog.text


# ----------------------------------------------------------------- reply guard
def _model(value: float) -> ArrayRecord:
    return ArrayRecord({"w": Array(np.full((2, 2), value, dtype=np.float32))})


def _train_reply(arrays: ArrayRecord, num_examples: int, loss: float = 0.5) -> RecordDict:
    metrics = MetricRecord({keys.NUM_EXAMPLES: num_examples, keys.TRAIN_LOSS: loss})
    return RecordDict({keys.ARRAYS: arrays, keys.METRICS: metrics})


def test_train_updates_decode_against_each_replys_own_cluster_and_reject_only_the_bad_one():
    models = [_model(0.0), _model(1.0)]
    bad = ArrayRecord({"w": Array(np.full((2, 2), np.nan, dtype=np.float32))})
    exchange = Exchange(
        MessageType.TRAIN,
        replies={0: _train_reply(_model(0.5), 10), 1: _train_reply(bad, 10), 2: _train_reply(_model(3.0), 10)},
    )
    rejected: list[int] = []
    updates, clusters = train_updates(
        exchange,
        lambda pid, content, update: {0: 0, 1: 0, 2: 1}[pid],
        models,
        dict.fromkeys(range(3), 0),
        {p: _info(p) for p in range(3)},
        lambda ex, pid, fault: rejected.append(pid),
    )
    assert rejected == [1] and sorted(updates) == [0, 2] and clusters == {0: 0, 2: 1}
    np.testing.assert_array_equal(updates[0].delta(), np.full(4, 0.5, dtype=np.float32))  # from cluster 0's model
    np.testing.assert_array_equal(updates[2].delta(), np.full(4, 2.0, dtype=np.float32))  # from cluster 1's model


def test_train_updates_decode_each_reply_once_and_hand_it_to_the_cluster_hook(monkeypatch):
    import strategies.guard as guard_module

    decoded: list[int] = []
    real = guard_module.decode_train_reply
    monkeypatch.setattr(guard_module, "decode_train_reply", lambda *a, **kw: decoded.append(1) or real(*a, **kw))
    seen: dict[int, np.ndarray] = {}

    def nearest(pid: int, content: RecordDict, update: TrainUpdate) -> int:
        seen[pid] = update.arrays["w"]
        return int(update.arrays["w"].mean() > 0.5)  # a FeSEM-like E-step on the decoded model

    models = [_model(0.0), _model(1.0)]
    exchange = Exchange(MessageType.TRAIN, replies={0: _train_reply(_model(0.2), 10), 1: _train_reply(_model(0.9), 10)})
    updates, clusters = train_updates(
        exchange, nearest, models, {0: 1, 1: 0}, {p: _info(p) for p in range(2)}, lambda *a: None
    )
    assert len(decoded) == 2 and clusters == {0: 0, 1: 1}
    np.testing.assert_array_equal(seen[0], np.full((2, 2), 0.2, dtype=np.float32))
    # the update's reference is the cluster it joined, not the one it was sent
    np.testing.assert_allclose(updates[0].delta(), np.full(4, 0.2, dtype=np.float32))
    np.testing.assert_allclose(updates[1].delta(), np.full(4, -0.1, dtype=np.float32), rtol=1e-6)


def _update(num_examples: int) -> TrainUpdate:
    arrays = {"w": np.zeros(2, dtype=np.float32)}
    return TrainUpdate(arrays=arrays, num_examples=num_examples, loss=0.1, sent=arrays)


def test_weights_are_capped_at_the_cap_times_the_median_train_size_and_counted(caplog):
    updates = {0: _update(10), 1: _update(25), 2: _update(1000)}
    with caplog.at_level(logging.WARNING):
        capped, count = cap_weights(dict(updates), [10, 10, 30], 2.0, 3)
    assert {p: u.num_examples for p, u in capped.items()} == {0: 10, 1: 20, 2: 20} and count == 2
    assert "client 2 claims num-examples 1000; its weight is capped at 20" in caplog.text
    assert cap_weights(dict(updates), [10, 10, 30], 0.0, 3) == (updates, 0)  # weight-cap 0: off


def test_evaluations_and_signals_keep_the_good_replies_and_reject_out_of_range_ones():
    good = RecordDict({keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: 4, keys.ACCURACY: 0.75, keys.LOSS: 0.4})})
    over = RecordDict({keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: 4, keys.ACCURACY: 1.5, keys.LOSS: 0.4})})
    rejected: list[int] = []
    reject = lambda ex, pid, fault: rejected.append(pid)  # noqa: E731
    exchange = Exchange(MessageType.EVALUATE, replies={0: good, 1: over})
    assert evaluations(exchange, {0: _info(0), 1: _info(1)}, metric_ranges(), reject) == {0: (0.75, 0.4)}
    losses = RecordDict({keys.SIGNAL: ArrayRecord({"losses": Array(np.array([0.3, 0.1], dtype=np.float32))})})
    nan = RecordDict({keys.SIGNAL: ArrayRecord({"losses": Array(np.array([np.nan, 0.1], dtype=np.float32))})})
    got = signals(Exchange("query.losses", replies={2: losses, 3: nan}), ModelLosses.from_arrays, reject, num_models=2)
    assert sorted(got) == [2] and got[2].best() == 1 and rejected == [1, 3]


# ----------------------------------------------------------------- roster
def test_only_clients_with_test_samples_are_evaluated_and_the_others_are_named_when_asked(caplog):
    clients = {0: _info(0), 1: _info(1, num_test=0), 2: _info(2)}
    with caplog.at_level(logging.WARNING):
        assert with_test_data({2: 0, 1: 0, 0: 1}, clients, tell=False) == [0, 2]
    assert "hold no test samples" not in caplog.text
    with caplog.at_level(logging.WARNING):
        with_test_data({2: 0, 1: 0, 0: 1}, clients, tell=True)
    assert "1 of 3 clients hold no test samples and are never evaluated (e.g. clients [1])" in caplog.text


def test_refresh_notes_a_lost_client_then_its_rejoin_and_queues_a_newcomer():
    strategy = FedAvg()
    strategy.clients = {0: _info(0), 1: _info(1)}
    for node in (10, 11):
        strategy.membership.claim(node - 10, node, {10: None, 11: None})

    def identity(msg: Message) -> Message:
        pid = msg.metadata.dst_node_id - 10
        record = ConfigRecord({"partition-id": pid, "num-train": 10, "num-test": 4, "true-group": 0})
        return Message(RecordDict({keys.IDENTITY: record}), reply_to=msg)

    grid = EchoGrid(identity, pids=[0])  # node 11 is offline
    stats = RoundStats()
    refresh_membership(strategy, grid, stats, 1, 5.0)
    assert stats.lost == [1] and stats.rejoined == [] and strategy._lost == {1}
    grid.nodes = {0: 10, 1: 11, 2: 12}  # 11 is back, 12 is new
    stats = RoundStats()
    refresh_membership(strategy, grid, stats, 2, 5.0)
    assert stats.lost == [] and 1 in stats.rejoined and sorted(strategy.waiting) == [2]
    assert strategy._lost == set()


def test_round_parameters_and_num_clusters_are_checked_against_the_run_naming_the_key():
    strategy = FedAvg(TrainingParams(rounds=3))
    check_round_params(strategy, 2)  # nothing to check: no round parameters, no num-clusters
    from strategies import IFCA

    ifca = IFCA.from_run_config(TrainingParams(rounds=3), {"num-clusters": 4})
    with pytest.raises(
        ValueError, match=r"'num-clusters' parameter of IFCA must be at most the number of clients \(3\)"
    ):
        check_round_params(ifca, 3)


# ----------------------------------------------------------------- stop rule
def test_the_stop_rule_counts_streaks_per_phase_and_resets_on_a_usable_reply():
    training = TrainingParams(rounds=10, max_rejected_rounds=2)
    lost = Exchange(MessageType.TRAIN, failures={0: f"{REJECTED}NaN"})
    streaks: dict[str, int] = {}
    accepted: set[str] = set()
    stop_if_all_rejected({MessageType.TRAIN: 1}, {}, streaks, accepted, 1, training)
    stop_if_all_rejected({MessageType.TRAIN: 0}, {MessageType.TRAIN: lost}, streaks, accepted, 2, training)
    assert streaks == {MessageType.TRAIN: 1} and accepted == {MessageType.TRAIN}
    stop_if_all_rejected({MessageType.TRAIN: 0}, {}, streaks, accepted, 3, training)  # nothing sent: no count
    with pytest.raises(RuntimeError, match=r"Stopping after round 4: no train reply was usable in 2 consecutive"):
        stop_if_all_rejected({MessageType.TRAIN: 0}, {MessageType.TRAIN: lost}, streaks, accepted, 4, training)
    never = Exchange(MessageType.EVALUATE, failures={0: "error code 2: x"})
    last = replace(training, max_rejected_rounds=5)
    with pytest.raises(RuntimeError, match="no evaluate reply was usable in round 10"):
        stop_if_all_rejected({MessageType.EVALUATE: 0}, {MessageType.EVALUATE: never}, {}, set(), 10, last)
    stop_if_all_rejected(
        {MessageType.EVALUATE: 0}, {MessageType.EVALUATE: never}, {}, set(), 10, replace(last, max_rejected_rounds=0)
    )


# ----------------------------------------------------------------- run state and merge
def test_checkpoints_are_due_every_n_rounds_and_after_the_last_and_resume_rebinds_nodes(tmp_path):
    strategy = FedAvg()
    strategy.clients = {0: _info(0), 1: _info(1)}
    strategy.set_clusters([_model(2.0)], {0: 0, 1: 0})
    checkpoints = Checkpoints()
    checkpoints.path, checkpoints.every = tmp_path / "checkpoint.npz", 3
    for rnd in (1, 2, 4, 5):
        checkpoints.save_if_due(strategy, rnd, 5)
        written = load_checkpoint(checkpoints.path, "fedavg")["round"] if checkpoints.path.exists() else None
        assert written == {1: None, 2: None, 4: None, 5: 5}[rnd]
    checkpoints.save_if_due(strategy, 3, 5)
    assert load_checkpoint(checkpoints.path, "fedavg")["round"] == 3
    fresh = FedAvg()
    with pytest.raises(RuntimeError, match=r"No checkpoint to resume from: call resume\(\) first"):
        fresh_checkpoints = Checkpoints()
        fresh_checkpoints.resume_onto(fresh, {})
    fresh.checkpoints.pending = load_checkpoint(checkpoints.path, "fedavg")
    first = fresh.checkpoints.resume_onto(fresh, {0: _info(0, node=70), 1: _info(1, node=71)})
    assert first == 4 and fresh.checkpoints.pending is None and fresh.assignment == {0: 0, 1: 0}
    assert {p: c.node_id for p, c in fresh.clients.items()} == {0: 70, 1: 71}
    np.testing.assert_array_equal(fresh.models[0]["w"].numpy(), np.full((2, 2), 2.0, dtype=np.float32))


def test_merge_is_the_weighted_mean_or_the_median_in_the_sent_dtype():
    sent = {"w": np.zeros(3, dtype=np.float32), "n": np.array(0, dtype=np.int64)}
    arrays = [
        {"w": np.array([1.0, 0.0, 0.0], dtype=np.float32), "n": np.array(2, dtype=np.int64)},
        {"w": np.array([4.0, 3.0, 0.0], dtype=np.float32), "n": np.array(5, dtype=np.int64)},
        {"w": np.array([100.0, 3.0, 9.0], dtype=np.float32), "n": np.array(9, dtype=np.int64)},
    ]
    updates = [
        TrainUpdate(arrays=a, num_examples=n, loss=0.0, sent=sent) for a, n in zip(arrays, (1, 2, 1), strict=True)
    ]
    mean = merge(updates, "mean")
    np.testing.assert_allclose(mean["w"].numpy(), [27.25, 2.25, 2.25])
    assert mean["w"].numpy().dtype == np.float32 and mean["n"].numpy().dtype == np.int64
    np.testing.assert_allclose(merge(updates, "median")["w"].numpy(), [4.0, 3.0, 0.0])
