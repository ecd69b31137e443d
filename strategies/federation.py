"""Talking to the federation: identity discovery, per-client messages, reply attribution.

A client is its stable partition id, never a node id (node ids change per run and per
SuperNode restart). Replies are attributed through ``reply_to_message_id`` because
SuperLink-made errors arrive from node 1 (FLOWER.md 3.8).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from common import keys

PROGRESS_SECONDS = 10.0


@dataclass(frozen=True)
class ClientInfo:
    """What a client said about itself in the ``query.identity`` reply."""

    partition_id: int
    node_id: int
    num_train: int
    num_test: int
    true_group: int
    device: str = "cpu"
    num_val: int = 0
    class_counts: tuple[int, ...] = ()


@dataclass
class Traffic:
    """Array payload bytes (the numbers in the arrays, not headers), split by purpose."""

    model: int = 0
    signal: int = 0

    def add(self, content: RecordDict) -> None:
        for name, record in content.array_records.items():
            size = sum(math.prod(arr.shape) * np.dtype(arr.dtype).itemsize for arr in record.values())
            if keys.is_model_record(name):
                self.model += size
            else:
                self.signal += size

    def __iadd__(self, other: Traffic) -> Traffic:
        self.model += other.model
        self.signal += other.signal
        return self


@dataclass
class Exchange:
    """The outcome of one send-and-receive: good replies and failures, by partition id."""

    phase: str  # the message type, e.g. "train" or "query.identity"
    replies: dict[int, RecordDict] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)
    down: Traffic = field(default_factory=Traffic)
    up: Traffic = field(default_factory=Traffic)
    seconds: float = 0.0


class Outbox:
    """One message per destination, each with its own ``RecordDict``.

    Parameters
    ----------
    nodes : mapping of key to node id
        Keys are partition ids (or node ids before identities are known).
    message_type : str
        ``"train"``, ``"evaluate"``, ``"query.<action>"``.
    group_id : str
        Shown by SuperNodes in their logs (``[ROUND <group_id>]``).
    """

    def __init__(self, nodes: Mapping[int, int], message_type: str, group_id: str) -> None:
        self.nodes = nodes
        self.message_type = message_type
        self.group_id = group_id
        self.messages: list[Message] = []
        self._key_of: list[int] = []
        self.down = Traffic()
        self.created = time.monotonic()

    def add(self, key: int, content: RecordDict) -> None:
        """Queue ``content`` for ``key``'s node."""
        self.messages.append(
            Message(content, dst_node_id=self.nodes[key], message_type=self.message_type,
                    group_id=self.group_id)
        )
        self._key_of.append(key)
        self.down.add(content)

    def collect(self, replies: Iterable[Message], timeout: float) -> Exchange:
        """Attribute ``replies`` to keys; errors and missing replies become failures.

        Call after ``grid.send_and_receive(self.messages)``, which fills message ids.
        """
        by_id = {m.metadata.message_id: k for m, k in zip(self.messages, self._key_of, strict=True)}
        out = Exchange(phase=self.message_type, down=self.down)
        for reply in replies:
            key = by_id.get(reply.metadata.reply_to_message_id)
            if key is None:
                continue
            if reply.has_error():
                out.failures[key] = f"error code {reply.error.code}: {reply.error.reason}"
            else:
                out.replies[key] = reply.content
                out.up.add(reply.content)
        for key in self._key_of:
            if key not in out.replies and key not in out.failures:
                out.failures[key] = f"no reply within {timeout:g} s"
        out.seconds = time.monotonic() - self.created
        return out


def send(grid: Grid, outbox: Outbox, timeout: float, progress: str = "") -> Exchange:
    """Send every queued message, wait up to ``timeout`` seconds, and collect.

    With ``progress`` (e.g. "clients identified"), log the count of replies every
    ``PROGRESS_SECONDS`` while waiting.
    """
    if not outbox.messages:
        return Exchange(phase=outbox.message_type)
    if not progress:
        return outbox.collect(grid.send_and_receive(outbox.messages, timeout=timeout), timeout)
    pending = set(grid.push_messages(outbox.messages))
    total, start = len(pending), time.monotonic()
    replies: list[Message] = []
    shown = start
    while pending and time.monotonic() - start < timeout:
        pulled = list(grid.pull_messages(pending))
        replies.extend(pulled)
        pending.difference_update(m.metadata.reply_to_message_id for m in pulled)
        if pending and time.monotonic() - shown >= PROGRESS_SECONDS:
            shown = time.monotonic()
            log(INFO, "%d of %d %s (%.0f s)", total - len(pending), total, progress, shown - start)
        if pending:
            time.sleep(0.2)
    return outbox.collect(replies, timeout)


def wait_for_nodes(grid: Grid, expected: int, timeout: float) -> list[int]:
    """Node ids once ``expected`` nodes are online, or whatever is online at ``timeout``.

    Raises
    ------
    RuntimeError
        If no node at all connected within ``timeout`` seconds.
    """
    start = time.monotonic()
    while True:
        node_ids = sorted(grid.get_node_ids())
        if len(node_ids) >= expected:
            return node_ids
        if time.monotonic() - start > timeout:
            if not node_ids:
                raise RuntimeError(f"No client node connected within {timeout:g} s.")
            log(WARNING, "Only %d of %d expected nodes connected after %.0f s; going on with them.",
                len(node_ids), expected, timeout)
            return node_ids
        time.sleep(0.5)


def discover_clients(
    grid: Grid, expected: int, *, wait_timeout: float, reply_timeout: float
) -> tuple[dict[int, ClientInfo], Exchange]:
    """Ask every online node for its identity once; key the federation by partition id.

    Returns
    -------
    clients : dict of int to ClientInfo
        By partition id. A partition id claimed by two nodes keeps the lower node id.
    exchange : Exchange
        The raw exchange (for traffic accounting and failures, keyed by node id).
    """
    node_ids = wait_for_nodes(grid, expected, wait_timeout)
    outbox = Outbox({n: n for n in node_ids}, keys.MSG_IDENTITY, "identity")
    for node in node_ids:
        outbox.add(node, RecordDict({keys.CONFIG: ConfigRecord({})}))
    exchange = send(grid, outbox, reply_timeout, progress="clients identified")
    clients: dict[int, ClientInfo] = {}
    for node, cause in sorted(exchange.failures.items()):
        log(WARNING, "Node %d did not give its identity: %s", node, cause)
    for node in sorted(exchange.replies):
        try:
            info = _identity_of(node, exchange.replies[node])
        except (KeyError, TypeError, ValueError) as err:
            log(WARNING, "Node %d sent a malformed identity (%s); it is left out.", node, err)
            continue
        if info.partition_id in clients:
            log(WARNING, "Partition %d is claimed by nodes %d and %d; keeping %d.",
                info.partition_id, clients[info.partition_id].node_id, node,
                clients[info.partition_id].node_id)
            continue
        clients[info.partition_id] = info
    log(INFO, "%d clients identified (of %d nodes) in %.1f s", len(clients), len(node_ids),
        exchange.seconds)
    return clients, exchange


def _identity_of(node: int, content: RecordDict) -> ClientInfo:
    ident = content[keys.IDENTITY]
    values = {k: ident[k] for k in (keys.PARTITION_ID, keys.NUM_TRAIN, keys.NUM_TEST, keys.TRUE_GROUP)}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if values[keys.PARTITION_ID] < 0 or values[keys.NUM_TRAIN] < 1 or values[keys.NUM_TEST] < 0:
        raise ValueError(f"impossible sizes or id: {values}")
    num_val = ident.get(keys.NUM_VAL, 0)
    counts = list(ident.get(keys.CLASS_COUNTS, []))
    if isinstance(num_val, bool) or not isinstance(num_val, int) or num_val < 0:
        raise ValueError(f"{keys.NUM_VAL} must be an int >= 0, got {num_val!r}")
    if counts and (not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
                   or sum(counts) != values[keys.NUM_TRAIN]):
        raise ValueError(f"{keys.CLASS_COUNTS} must be ints >= 0 summing to {keys.NUM_TRAIN}, got {counts!r}")
    return ClientInfo(
        partition_id=values[keys.PARTITION_ID], node_id=node, num_train=values[keys.NUM_TRAIN],
        num_test=values[keys.NUM_TEST], true_group=values[keys.TRUE_GROUP],
        device=str(ident.get(keys.DEVICE, "cpu")), num_val=num_val, class_counts=tuple(counts),
    )


def packed(models: list[ArrayRecord]) -> ArrayRecord:
    """All cluster models in one record, keys ``c{k}.{name}`` (FLOWER.md 4.2)."""
    out = ArrayRecord()
    for k, model in enumerate(models):
        for name, arr in model.items():
            out[f"c{k}.{name}"] = arr
    return out
