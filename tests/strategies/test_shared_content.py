"""One content shared by the messages that carry the same thing: what each client gets and what is counted.

The identity query, a signal query and the evaluate phase send one ``RecordDict`` to every
destination that gets the same model and config (as Flower's own strategies do); each client must
still get exactly its own cluster's model and config, and the traffic must count every destination.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from common import keys
from common.config import TrainingParams
from strategies import FedAvg
from strategies.federation import ClientInfo, Membership, Outbox, identify
from strategies.messenger import Messenger, timeouts
from strategies.phases import evaluate_messages


def _model(value: float, size: int) -> ArrayRecord:
    return ArrayRecord({"w": Array(np.full(size, value, dtype=np.float32))})


def _identity_reply(msg: Message) -> Message:
    node = msg.metadata.dst_node_id
    ident = {keys.PARTITION_ID: node - 10, keys.NUM_TRAIN: 5, keys.NUM_TEST: 2, keys.TRUE_GROUP: 0}
    return Message(RecordDict({keys.IDENTITY: ConfigRecord(ident)}), reply_to=msg)


class _Grid:
    def __init__(self) -> None:
        self.sent: list[Message] = []
        self._ids = itertools.count(1)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"m{next(self._ids)}"
            self.sent.append(msg)
            replies.append(_identity_reply(msg))
        return replies


def _set_task_identity(monkeypatch) -> None:
    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def test_each_cluster_evaluates_its_own_model_and_config_sent_once_per_cluster(monkeypatch):
    _set_task_identity(monkeypatch)
    strategy = FedAvg()
    strategy.messenger = Messenger(timeouts(TrainingParams()))
    strategy.clients = {pid: ClientInfo(pid, 100 + pid, 10, 0 if pid == 5 else 4, pid % 2) for pid in range(6)}
    strategy.models = [_model(0.0, 3), _model(1.0, 5)]
    strategy.assignment = {0: 1, 1: 0, 2: 1, 3: 1, 4: 0, 5: 0}
    messages = evaluate_messages(strategy, 7, ConfigRecord({"local-epochs": 2}))
    got = {m.metadata.dst_node_id - 100: m.content for m in messages}
    assert sorted(got) == [0, 1, 2, 3, 4], "client 5 holds no test data"
    for pid, content in got.items():
        k = strategy.assignment[pid]
        assert content[keys.ARRAYS] is strategy.models[k]
        assert dict(content[keys.CONFIG]) == {"local-epochs": 2, keys.SERVER_ROUND: 7, keys.CLUSTER_ID: k}
        assert sorted(content) == sorted([keys.ARRAYS, keys.CONFIG])
    assert len({id(c) for c in got.values()}) == 2, "one content per cluster"
    assert got[0] is got[2] is got[3] and got[1] is got[4] and got[0] is not got[1]
    # every destination is counted: three of cluster 1 (5 floats), two of cluster 0 (3 floats)
    assert (strategy.messenger._pending.down.model, strategy.messenger._pending.down.signal) == (4 * (3 * 5 + 2 * 3), 0)


def test_an_outbox_counts_a_shared_content_for_every_destination_and_each_record_by_its_name(monkeypatch):
    _set_task_identity(monkeypatch)
    model, signal = _model(0.0, 4), ArrayRecord({"s": Array(np.zeros(2, dtype=np.float64))})
    shared = RecordDict({keys.ARRAYS: model, "extra": signal, keys.CONFIG: ConfigRecord({})})
    own = RecordDict({keys.ARRAYS: _model(1.0, 4)})
    box = Outbox({0: 10, 1: 11, 2: 12, 3: 13}, MessageType.EVALUATE, "g", offline={13})
    for key in range(4):
        box.add(key, shared if key != 1 else own)
    assert [m.content for m in box.messages] == [shared, own, shared]
    assert (box.down.model, box.down.signal) == (3 * 16, 2 * 16)
    assert list(box.skipped) == [3], "an offline node is not sent, and not counted"


def test_the_identity_query_is_one_empty_config_sent_to_every_node_and_each_reply_binds_its_own(monkeypatch):
    _set_task_identity(monkeypatch)
    grid = _Grid()
    nodes = [13, 10, 12, 11]
    clients, exchange = identify(grid, nodes, Membership(), dict.fromkeys(nodes), reply_timeout=5.0)
    assert sorted(m.metadata.dst_node_id for m in grid.sent) == sorted(nodes)
    for msg in grid.sent:
        assert msg.metadata.message_type == keys.MSG_IDENTITY and msg.metadata.ttl == 5.0
        assert list(msg.content) == [keys.CONFIG] and dict(msg.content[keys.CONFIG]) == {}
    assert {pid: info.node_id for pid, info in clients.items()} == {0: 10, 1: 11, 2: 12, 3: 13}
    assert (exchange.down.model, exchange.down.signal, exchange.up.model, exchange.up.signal) == (0, 0, 0, 0)
