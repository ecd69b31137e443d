"""Membership during a run: nodes that restart, join late, claim another's id, or replay replies."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from flwr.app import Error, Message, RecordDict

from client.app import app as client_app
from common import keys
from server.experiment import Experiment
from server.results import coverage
from strategies import ClusteredStrategy
from strategies.federation import Membership, Outbox
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


class ByTrueGroup(ClusteredStrategy):
    """Clusters = true groups, so each client's cluster state is known in advance."""

    name = "by-true-group"

    def init_clusters(self, initial):
        groups = sorted({c.true_group for c in self.clients.values()})
        self.set_clusters(
            [initial.copy() for _ in groups], {pid: groups.index(c.true_group) for pid, c in self.clients.items()}
        )


class ChangingGrid(InProcessGrid):
    """Nodes can go offline, restart (new node id and key, or the same), or be added.

    ``get_nodes`` shows each online node's key and registered name, as Flower's SuperLink does.
    """

    def __init__(self, *args, registered: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.keys = {node: f"key-{node}".encode() for node in self.pid_of}
        self.names = {node: f"supernode-{pid}" for node, pid in self.pid_of.items()} if registered else {}
        self.offline: set[int] = set()
        self.activated = dict.fromkeys(self.pid_of, "t0")
        self._next = 900_000

    def get_node_ids(self) -> list[int]:
        return [n for n in self.pid_of if n not in self.offline]

    def get_nodes(self):
        return [
            SimpleNamespace(
                node_id=n,
                public_key=self.keys[n],
                name=self.names.get(n, ""),
                last_activated_at=self.activated.get(n, "t0"),
            )
            for n in self.get_node_ids()
        ]

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        live = [m for m in messages if m.metadata.dst_node_id not in self.offline]
        for msg in messages:
            if msg not in live:  # sent to a dead node: no reply (a timeout)
                msg.metadata.__dict__["_message_id"] = f"dead{next(self._ids)}"
                self.sent.append(msg)
        return super().send_and_receive(live, timeout=timeout)

    def add(self, pid: int, *, name: str = "") -> int:
        """A new node (new id, new key) that holds partition ``pid``."""
        node, self._next = self._next, self._next + 1
        self.pid_of[node] = pid
        self.states[node] = RecordDict()
        self.keys[node] = f"key-{node}".encode()
        if name:
            self.names[node] = name
        return node

    def restart_insecure(self, pid: int) -> int:
        """The node of ``pid`` dies and comes back as a new node (Flower's insecure mode)."""
        self.offline.add(self.node_of[pid])
        self.node_of[pid] = self.add(pid)
        return self.node_of[pid]


def _start(grid_factory, rounds, on_round=None, **overrides):
    rc = small_run_config(rounds=rounds, fraction=1.0, **overrides)
    exp = Experiment.from_run_config(rc)
    grid = grid_factory(rc)
    strategy = ByTrueGroup(exp.training)
    strategy.on_round = on_round
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid


def _trained(grid, server_round):
    return {
        m.metadata.dst_node_id: m
        for m in grid.sent
        if m.metadata.message_type == "train" and m.content["config"]["server-round"] == server_round
    }


def test_a_restarted_insecure_node_is_lost_then_rejoins_with_its_cluster_state(caplog):
    events = {1: lambda g: g.offline.add(g.node_of[2]), 2: lambda g: g.restart_insecure(2)}
    grids = []

    def make(rc):
        grids.append(ChangingGrid(client_app, rc, rc["num-clients"]))
        return grids[0]

    with caplog.at_level(logging.INFO):
        strategy, grid = _start(make, rounds=3, on_round=lambda s, r: events.get(r.round, lambda g: None)(grids[0]))
    first_node = 1000 + (2 * 7919) % 100_003
    new_node = grid.node_of[2]
    assert new_node != first_node and strategy.clients[2].node_id == new_node
    lost = [r.clients_lost for r in strategy.history]
    rejoined = [r.clients_rejoined for r in strategy.history]
    assert lost == [[], [2], []] and rejoined == [[], [], [2]]
    assert [r.eval_clients for r in strategy.history] == [6, 5, 6]
    # round 3 trains partition 2 on its new node, with the model of the cluster it had before
    msg = _trained(grid, 3)[new_node]
    k = strategy.assignment[2]
    assert (
        msg.content["config"][keys.CLUSTER_ID] == k == _trained(grid, 1)[first_node].content["config"][keys.CLUSTER_ID]
    )
    assert first_node not in _trained(grid, 3)
    assert "clients lost (their nodes are offline): [2]" in caplog.text and "clients rejoined" in caplog.text
    assert coverage(strategy.history[:2], fraction=0.5) == {
        "final-accuracy": "over 5 of 6 clients",
        "final-ari": "over 6 clients (1 of them offline at the end)",
        "final-ami": "over 6 clients (1 of them offline at the end)",
    }
    assert coverage(strategy.history)["final-accuracy"] == "over 6 of 6 clients"


def test_a_second_live_node_claiming_a_held_client_id_is_refused(caplog):
    state = {"intruders": []}

    def make(rc):
        state["grid"] = ChangingGrid(client_app, rc, rc["num-clients"])
        state["intruders"].append(state["grid"].add(0))  # from the start: the lower node id keeps client 0
        return state["grid"]

    def late_intruder(strategy, record):
        if record.round == 1:
            state["intruders"].append(state["grid"].add(3))

    with caplog.at_level(logging.WARNING):
        strategy, grid = _start(make, rounds=2, on_round=late_intruder)
    assert strategy.clients[0].node_id == grid.node_of[0] and strategy.clients[3].node_id == grid.node_of[3]
    for node in state["intruders"]:
        assert {m.metadata.message_type for m in grid.sent if m.metadata.dst_node_id == node} == {"query.identity"}
        assert f"Node {node} refused" in caplog.text
    assert "which is online" in caplog.text
    assert all(not r.clients_rejoined for r in strategy.history)


def test_with_registered_keys_an_offline_clients_id_is_not_taken_by_another_key(caplog):
    state = {}

    def make(rc):
        state["grid"] = ChangingGrid(client_app, rc, rc["num-clients"], registered=True)
        return state["grid"]

    def events(strategy, record):
        grid = state["grid"]
        if record.round == 1:  # client 1's node dies; another registered key claims client 1
            grid.offline.add(grid.node_of[1])
            state["other"] = grid.add(1, name="supernode-x")
            grid.activated[grid.node_of[4]] = "t1"  # client 4's node restarts between two rounds
        if record.round == 2:  # the registered node restarts: same node id, same key
            grid.offline.discard(grid.node_of[1])
            grid.activated[grid.node_of[1]] = "t2"

    with caplog.at_level(logging.WARNING):
        strategy, grid = _start(make, rounds=3, on_round=events)
    assert strategy.clients[1].node_id == grid.node_of[1]
    assert "bound to the registered key" in caplog.text
    assert not [
        m for m in grid.sent if m.metadata.dst_node_id == state["other"] and m.metadata.message_type != "query.identity"
    ]
    assert [r.clients_lost for r in strategy.history] == [[], [1], []]
    assert [r.clients_rejoined for r in strategy.history] == [[], [4], [1]]


def test_membership_rules():
    m = Membership()
    live = {10: SimpleNamespace(public_key=b"a", name=""), 11: SimpleNamespace(public_key=b"b", name="")}
    assert m.claim(0, 10, live) is None
    assert "online" in m.claim(0, 11, live) and m.unknown(live) == []  # asked again only once 10 is gone
    del live[10]
    assert m.unknown(live) == [11] and m.claim(0, 11, live) is None  # insecure restart: takes over
    reg = Membership()
    live = {20: SimpleNamespace(public_key=b"k", name="supernode-0")}
    assert reg.claim(0, 20, live) is None
    live = {21: SimpleNamespace(public_key=b"other", name="supernode-9")}
    assert "registered key" in reg.claim(0, 21, live) and reg.unknown(live) == []
    live = {22: SimpleNamespace(public_key=b"k", name="supernode-0")}
    assert reg.claim(0, 22, live) is None  # the same key is the same node


def test_replies_never_sent_second_replies_and_foreign_replies_are_refused(caplog):
    rc = small_run_config()
    InProcessGrid(client_app, rc, 2)  # sets Flower's task identity for building messages
    outbox = Outbox({0: 1001, 1: 1002}, keys.MSG_IDENTITY, "identity")
    outbox.add(0, RecordDict())
    outbox.add(1, RecordDict())
    for i, msg in enumerate(outbox.messages):
        msg.metadata.__dict__["_message_id"] = f"m{i}"
    old = Message(RecordDict(), dst_node_id=1002, message_type=keys.MSG_IDENTITY)
    old.metadata.__dict__["_message_id"] = "from-an-earlier-exchange"
    good = Message(RecordDict(), reply_to=outbox.messages[0])
    replayed = Message(RecordDict(), reply_to=outbox.messages[0])
    stray = Message(RecordDict(), reply_to=old)
    foreign = Message(RecordDict(), reply_to=outbox.messages[1])
    foreign.metadata.__dict__["_src_node_id"] = 1001  # node 1001 answers for node 1002
    with caplog.at_level(logging.WARNING):
        exchange = outbox.collect([good, replayed, stray, foreign], timeout=5)
    assert list(exchange.replies) == [0] and list(exchange.failures) == [1]
    assert len(exchange.refused) == 3
    assert "never sent" in caplog.text and "second reply" in caplog.text
    assert "from node 1001 to the message sent to node 1002" in caplog.text


def test_superlink_errors_from_node_1_still_count_as_the_clients_failure():
    rc = small_run_config()
    InProcessGrid(client_app, rc, 1)
    outbox = Outbox({0: 1001}, "train", "train-1")
    outbox.add(0, RecordDict())
    outbox.messages[0].metadata.__dict__["_message_id"] = "m0"
    err = Message(Error(code=5, reason="Node Unavailable"), reply_to=outbox.messages[0])
    err.metadata.__dict__["_src_node_id"] = 1
    exchange = outbox.collect([err], timeout=5)
    assert exchange.failures == {0: "error code 5: Node Unavailable"} and not exchange.refused


def test_nothing_is_sent_to_a_node_that_is_offline_when_the_round_starts(caplog):
    """A message to an offline node could only time out, holding every healthy client's phase for the
    whole timeout: the round asks the node nothing and counts its client as failed at once."""
    grids = []

    def make(rc):
        grids.append(ChangingGrid(client_app, rc, rc["num-clients"]))
        return grids[0]

    def on_round(strategy, record):
        if record.round == 1:
            grids[0].offline.add(grids[0].node_of[2])

    with caplog.at_level(logging.INFO):
        strategy, grid = _start(make, rounds=2, on_round=on_round)
    dead = grid.node_of[2]
    configs = [(m, m.content.config_records.get("config")) for m in grid.sent]
    round_2 = [m for m, cfg in configs if cfg is not None and cfg.get("server-round") == 2]
    assert round_2 and all(m.metadata.dst_node_id != dead for m in round_2)
    assert f"client 2 failed: not sent: node {dead} was offline at the start of the round" in caplog.text
    assert [r.train_replies for r in strategy.history] == [6, 5]
