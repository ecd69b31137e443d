"""A Grid that runs the real ClientApp in this process: for tests, benchmarks and debugging a strategy.

It stands in for Flower's simulation grid: node ids, message ids and reply attribution
work as in Flower (replies point back with ``reply_to_message_id``; errors come back as
error replies; a dropped message is simply missing), without Ray or a SuperLink.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

SERVER_NODE_ID = 1

Fault = Callable[[Message, int], Message | None]


class InProcessGrid:
    """Nodes ``1000 + i`` hold partitions ``i`` (shuffled node order on purpose).

    Parameters
    ----------
    client_app : ClientApp
        The app every node runs.
    run_config : mapping
        The run-config every node sees.
    num_nodes : int
        How many nodes (partition ids ``0..num_nodes-1``).
    faults : mapping of partition id to callable, optional
        ``fault(reply, server_round)`` returns a replacement reply or ``None`` to drop it.
    reverse_replies : bool
        Return replies in reverse order (replies may arrive in any order).
    failing : iterable of int
        Partition ids whose ClientApp raises on every message but the identity query.
    node_configs : mapping of partition id to mapping, optional
        Extra node config of a partition's node (e.g. ``model-out``).
    """

    def __init__(
        self,
        client_app: ClientApp,
        run_config: Mapping[str, Any],
        num_nodes: int,
        faults: Mapping[int, Fault] | None = None,
        reverse_replies: bool = False,
        failing: Iterable[int] = (),
        node_configs: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        self.client_app = client_app
        self.run_config = dict(run_config)
        self.node_of = {pid: 1000 + (pid * 7919) % 100_003 for pid in range(num_nodes)}
        self.pid_of = {node: pid for pid, node in self.node_of.items()}
        self.states = {node: RecordDict() for node in self.pid_of}
        self.faults = dict(faults or {})
        self.reverse_replies = reverse_replies
        self.failing = set(failing)
        self.node_configs = dict(node_configs or {})
        self.sent: list[Message] = []
        self._ids = itertools.count(1)
        TaskIdentity.task_id = 1
        TaskIdentity.run_id = 1
        TaskIdentity.node_id = SERVER_NODE_ID

    def get_node_ids(self) -> list[int]:
        """Every node's id (shuffled against the partition order)."""
        return list(self.pid_of)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        """Run each message's node's ClientApp now; the replies (an error reply where it raised)."""
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"m{next(self._ids)}"
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            context = Context(
                run_id=1,
                node_id=node,
                node_config={
                    "partition-id": self.pid_of[node],
                    "num-partitions": len(self.pid_of),
                    **self.node_configs.get(self.pid_of[node], {}),
                },
                state=self.states[node],
                run_config=self.run_config,
            )
            try:
                if self.pid_of[node] in self.failing and msg.metadata.message_type != "query.identity":
                    raise RuntimeError("this client always fails")
                reply = self.client_app(msg, context)
            except Exception as err:  # noqa: BLE001 - Flower turns any ClientApp exception into an error reply
                reply = Message(Error(code=2, reason=f"{type(err).__name__}: {err}"), reply_to=msg)
            fault = self.faults.get(self.pid_of[node])
            if fault is not None:
                config = msg.content.config_records.get("config")
                server_round = config.get("server-round", 0) if config is not None else 0
                faulted = fault(reply, server_round if isinstance(server_round, int) else 0)
                if faulted is None:
                    continue
                reply = faulted
            replies.append(reply)
        return replies[::-1] if self.reverse_replies else replies

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Flower's two-step form of ``send_and_receive``: the replies wait for ``pull_messages``."""
        messages = list(messages)
        self._waiting = getattr(self, "_waiting", []) + self.send_and_receive(messages)
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The waiting replies to ``message_ids``, once each."""
        wanted = set(message_ids)
        pulled = [r for r in self._waiting if r.metadata.reply_to_message_id in wanted]
        self._waiting = [r for r in self._waiting if r.metadata.reply_to_message_id not in wanted]
        return pulled


def run_in_process(run_config: Mapping[str, Any], prepare: Callable[[Any], None] | None = None) -> Any:
    """A whole run of ``run_config`` on an :class:`InProcessGrid` of the real ClientApp: its strategy
    built as ``umbel run`` builds it (``prepare(strategy)``, when given, before the start), run for its
    rounds and returned."""
    from client.app import app as client_app

    from .experiment import Experiment

    exp = Experiment.from_run_config(dict(run_config))
    strategy = exp.build_strategy()
    if prepare is not None:
        prepare(strategy)
    clients = int(run_config["num-clients"])
    grid = cast(Grid, InProcessGrid(client_app, run_config, clients))  # a Grid in all but its base class
    strategy.start(grid, exp.initial_model(), expected_clients=clients)
    return strategy
