"""Talking to the federation: identity discovery, per-client messages, reply attribution.

A client is its stable partition id, never a node id (node ids change per run and per
SuperNode restart). Replies are attributed through ``reply_to_message_id`` because
errors the SuperLink makes itself (node unavailable, message or reply expired: error codes 3, 4, 5)
arrive with ``src_node_id == 1``, not the destination node's id.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from common import keys
from common.records import read_int, read_ints, read_str

from .roster import Roster

SUPERLINK_NODE_ID = 1  # errors the SuperLink makes (a dead node, an expired message) come from node 1
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

    def add(self, content: RecordDict, sizes: dict[int, int] | None = None) -> None:
        """Count the array bytes of ``content`` as model or signal traffic, by record name.

        ``sizes`` remembers each record's bytes by ``id``: one cluster model sent to many clients
        is measured once (the caller keeps the records alive while it keeps ``sizes``).
        """
        sizes = {} if sizes is None else sizes
        for name, record in content.items():  # not ``array_records``, which builds a new dict per call
            if not isinstance(record, ArrayRecord):
                continue
            size = sizes.get(id(record))
            if size is None:
                size = sizes[id(record)] = sum(
                    math.prod(arr.shape) * np.dtype(arr.dtype).itemsize for arr in record.values()
                )
            if keys.is_model_record(name):
                self.model += size
            else:
                self.signal += size

    def __iadd__(self, other: Traffic) -> Traffic:
        self.model += other.model
        self.signal += other.signal
        return self


REJECTED = "rejected: "
"""How ``Exchange.failures`` begins for a reply that arrived but failed the server's checks."""
TIMED_OUT = "no reply within"
"""How ``Exchange.failures`` begins for a message that got no reply in time."""
OFFLINE = "not sent: node"
"""How ``Exchange.failures`` begins for a client whose node was offline at the start of the round."""


@dataclass
class Exchange:
    """The outcome of one send-and-receive: good replies and failures, by partition id."""

    phase: str  # the message type, e.g. "train" or "query.identity"
    replies: dict[int, RecordDict] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)
    down: Traffic = field(default_factory=Traffic)
    up: Traffic = field(default_factory=Traffic)
    seconds: float = 0.0
    refused: list[str] = field(default_factory=list)  # replies no client is charged with: why each was refused


class Outbox:
    """One message per destination; destinations sent the same content may share one ``RecordDict``.

    A ``RecordDict`` added for several keys is sent as it is to each (as Flower's own strategies
    send one to every node): Flower copies nothing per message, and each destination gets its
    own copy (the simulation engine pickles each message; a SuperNode gets it over the wire).
    Its traffic is counted once and added for each destination.

    Parameters
    ----------
    nodes : mapping of key to node id
        Keys are partition ids (or node ids before identities are known).
    message_type : str
        ``"train"``, ``"evaluate"``, ``"query.<action>"``.
    group_id : str
        Shown by SuperNodes in their logs (``[ROUND <group_id>]``).
    ttl : float, optional
        Seconds each message lives (Flower's default when omitted): give the reply timeout, so
        that a message nobody answered in time is dropped instead of queueing for a busy client.
    offline : collection of int, optional
        Node ids known to be offline: nothing is sent to them (a reply could only time out, holding
        the whole phase for its timeout); their keys fail at once.
    """

    def __init__(
        self,
        nodes: Mapping[int, int],
        message_type: str,
        group_id: str,
        ttl: float | None = None,
        offline: Collection[int] = (),
    ) -> None:
        self.nodes = nodes
        self.offline = offline
        self.skipped: dict[int, str] = {}
        self.message_type = message_type
        self.group_id = group_id
        self.ttl = ttl
        self.messages: list[Message] = []
        self._key_of: list[int] = []
        self.down = Traffic()
        self._sizes: dict[int, int] = {}
        self._counted: dict[int, Traffic] = {}  # id of a content already added -> its traffic
        self.created = time.monotonic()

    def add(self, key: int, content: RecordDict) -> None:
        """Queue ``content`` for ``key``'s node (or note it unsent when the node is offline)."""
        if self.nodes[key] in self.offline:
            self.skipped[key] = f"{OFFLINE} {self.nodes[key]} was offline at the start of the round"
            return
        self.messages.append(
            Message(
                content,
                dst_node_id=self.nodes[key],
                message_type=self.message_type,
                group_id=self.group_id,
                ttl=self.ttl,
            )
        )
        self._key_of.append(key)
        traffic = self._counted.get(id(content))
        if traffic is None:  # the messages keep each content alive, so its id stays its own
            traffic = self._counted[id(content)] = Traffic()
            traffic.add(content, self._sizes)
        self.down += traffic

    def collect(self, replies: Iterable[Message], timeout: float) -> Exchange:
        """Attribute ``replies`` to keys; errors and missing replies become failures.

        Call after ``grid.send_and_receive(self.messages)``, which fills message ids.
        """
        by_id = {m.metadata.message_id: k for m, k in zip(self.messages, self._key_of, strict=True)}
        dst = {m.metadata.message_id: m.metadata.dst_node_id for m in self.messages}
        out = Exchange(phase=self.message_type, down=self.down, failures=dict(self.skipped))
        for reply in replies:
            mid, src = reply.metadata.reply_to_message_id, reply.metadata.src_node_id
            key = by_id.get(mid)
            if key is None:
                out.refused.append(
                    f"a reply from node {src} to message {mid!r}, which this {self.message_type} exchange never sent"
                )
            elif key in out.replies or key in out.failures:
                out.refused.append(f"a second reply from node {src} to the message sent to node {dst[mid]}")
            elif src != dst[mid] and not (src == SUPERLINK_NODE_ID and reply.has_error()):
                out.refused.append(f"a reply from node {src} to the message sent to node {dst[mid]}")
            elif reply.has_error():
                out.failures[key] = f"error code {reply.error.code}: {reply.error.reason}"
            else:
                out.replies[key] = reply.content
                out.up.add(reply.content)
        for reason in out.refused:
            log(WARNING, "%s refused: %s", self.message_type, reason)
        for key in self._key_of:
            if key not in out.replies and key not in out.failures:
                out.failures[key] = f"{TIMED_OUT} {timeout:g} s"
        out.seconds = time.monotonic() - self.created
        return out


def send(grid: Grid, outbox: Outbox, timeout: float, progress: str = "") -> Exchange:
    """Send every queued message, wait up to ``timeout`` seconds, and collect.

    With ``progress`` (e.g. "clients identified"), log the count of replies every
    ``PROGRESS_SECONDS`` while waiting.
    """
    if not outbox.messages:
        return Exchange(phase=outbox.message_type, failures=dict(outbox.skipped))
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
            log(
                WARNING,
                "Only %d of %d expected nodes connected after %.0f s; going on with them.",
                len(node_ids),
                expected,
                timeout,
            )
            return node_ids
        time.sleep(0.5)


@dataclass(frozen=True)
class Claim:
    """The node a client id is bound to for the run.

    ``key`` is the node's public key as the SuperLink shows it (empty where Flower shows
    none, as in simulation); ``registered`` says the operator registered that key by name
    (``flwr supernode register --name``, which ``umbel deploy register`` does for every key);
    ``activated`` is when the SuperNode last connected (a restart changes it).
    """

    node_id: int
    key: bytes = b""
    registered: bool = False
    activated: str = ""


class Membership:
    """Which node holds which client id during a run, and who may claim one.

    With a roster, a client id goes only to the node whose key (or node id) the roster names
    for it, whoever claims first. Without one, a client id is bound to the node that first
    claims it. Another node may take it over only when the holder is offline and its key was
    not registered by the operator (an insecure SuperNode gets a new node id and key at every
    restart). A node with a registered key keeps its node id across restarts, so its client id
    needs no takeover.
    """

    def __init__(self, roster: Roster | None = None) -> None:
        self.roster = roster  # the operator's binding of client ids to node keys (``strategies.roster``)
        self.claims: dict[int, Claim] = {}
        self.refused: set[int] = set()  # nodes refused for good: not asked again this run
        self.contested: dict[int, int] = {}  # node -> the online node holding the id it claimed
        self.unanswered: dict[int, int] = {}  # node -> identity queries it left unanswered

    def claim(self, pid: int, node: int, live: Mapping[int, Any]) -> str | None:
        """Bind ``pid`` to ``node`` if allowed; the reason for a refusal otherwise.

        A node refused because the holder is online is asked again once the holder is
        offline (a killed SuperNode stays online for a heartbeat timeout); any other
        refusal is final for the run.
        """
        new = _claim_of(node, live.get(node))
        if self.roster is not None and (reason := self.roster.refusal(pid, node, new.key)) is not None:
            self.refused.add(node)
            return reason
        held = self.claims.get(pid)
        self.contested.pop(node, None)
        if held is None or held.node_id == node or (held.key and held.key == new.key):
            self.claims[pid] = new
            return None
        if held.node_id in live:
            self.contested[node] = held.node_id
            return f"client {pid} is held by node {held.node_id}, which is online"
        if held.registered:
            self.refused.add(node)
            return f"client {pid} is bound to the registered key of node {held.node_id}; node {node} has another key"
        self.claims[pid] = new
        return None

    def restarted(self, live: Mapping[int, Any]) -> list[int]:
        """Client ids whose node reconnected under the same node id since last seen (a registered key)."""
        out = []
        for pid, held in sorted(self.claims.items()):
            now = _claim_of(held.node_id, live.get(held.node_id)) if held.node_id in live else None
            if now is not None and now.activated and now.activated != held.activated:
                self.claims[pid] = now
                if held.activated:
                    out.append(pid)
        return out

    def unknown(self, live: Mapping[int, Any], max_unanswered: int = 3) -> list[int]:
        """Online nodes that hold no client id and may be asked who they are now."""
        held = {c.node_id for c in self.claims.values()}
        return sorted(
            n
            for n in live
            if n not in held
            and n not in self.refused
            and self.contested.get(n) not in live
            and self.unanswered.get(n, 0) < max_unanswered
        )


def live_nodes(grid: Grid) -> dict[int, Any]:
    """Online node ids, each with Flower's ``NodeInfo`` where the grid gives it (else ``None``)."""
    get_nodes = getattr(grid, "get_nodes", None)
    if get_nodes is None:
        return dict.fromkeys(grid.get_node_ids())
    return {int(info.node_id): info for info in get_nodes()}


def identify(
    grid: Grid,
    node_ids: Iterable[int],
    membership: Membership,
    live: Mapping[int, Any],
    *,
    reply_timeout: float,
    progress: str = "",
) -> tuple[dict[int, ClientInfo], Exchange]:
    """Ask ``node_ids`` who they are; bind each valid claim in ``membership``.

    Malformed identities and refused claims (a client id another node holds) are logged
    and their nodes are not asked again this run.

    Returns
    -------
    clients : dict of int to ClientInfo
        The accepted claims, by partition id.
    exchange : Exchange
        The raw exchange, keyed by node id.
    """
    node_ids = sorted(node_ids)
    outbox = Outbox({n: n for n in node_ids}, keys.MSG_IDENTITY, "identity", ttl=reply_timeout)
    query = RecordDict({keys.CONFIG: ConfigRecord({})})
    for node in node_ids:
        outbox.add(node, query)
    exchange = send(grid, outbox, reply_timeout, progress=progress)
    for node, cause in sorted(exchange.failures.items()):
        membership.unanswered[node] = membership.unanswered.get(node, 0) + 1
        log(WARNING, "Node %d did not give its identity: %s", node, cause)
    clients: dict[int, ClientInfo] = {}
    for node in sorted(exchange.replies):
        try:
            info = _identity_of(node, exchange.replies[node])
        except (KeyError, TypeError, ValueError) as err:
            membership.refused.add(node)
            log(WARNING, "Node %d sent a malformed identity (%s); it is left out.", node, err)
            continue
        reason = membership.claim(info.partition_id, node, live)
        if reason is not None:
            log(WARNING, "Node %d refused: it claims client %d, but %s.", node, info.partition_id, reason)
            continue
        clients[info.partition_id] = info
    return clients, exchange


def discover_clients(
    grid: Grid,
    expected: int,
    *,
    wait_timeout: float,
    reply_timeout: float,
    membership: Membership | None = None,
) -> tuple[dict[int, ClientInfo], Exchange]:
    """Ask every online node for its identity once; key the federation by partition id.

    Returns
    -------
    clients : dict of int to ClientInfo
        By partition id. A partition id claimed by two nodes goes to the lower node id;
        the other is refused (``membership``).
    exchange : Exchange
        The raw exchange (for traffic accounting and failures, keyed by node id).
    """
    node_ids = wait_for_nodes(grid, expected, wait_timeout)
    live = live_nodes(grid)
    live.update({n: live.get(n) for n in node_ids})
    clients, exchange = identify(
        grid, node_ids, membership or Membership(), live, reply_timeout=reply_timeout, progress="clients identified"
    )
    log(INFO, "%d clients identified (of %d nodes) in %.1f s", len(clients), len(node_ids), exchange.seconds)
    return clients, exchange


def _claim_of(node: int, info: Any) -> Claim:
    if info is None:
        return Claim(node)
    return Claim(
        node,
        bytes(getattr(info, "public_key", b"") or b""),
        bool(getattr(info, "name", "")),
        str(getattr(info, "last_activated_at", "") or ""),
    )


def _identity_of(node: int, content: RecordDict) -> ClientInfo:
    if keys.IDENTITY not in content.config_records:
        raise ValueError(
            f"The reply of node {node} must hold a ConfigRecord {keys.IDENTITY!r}. Got {sorted(content)} instead."
        )
    ident = content.config_records[keys.IDENTITY]
    where = f"the identity reply of node {node}"
    pid, num_train, num_test, true_group = (
        read_int(ident, k, where) for k in (keys.PARTITION_ID, keys.NUM_TRAIN, keys.NUM_TEST, keys.TRUE_GROUP)
    )
    if pid < 0 or num_train < 1 or num_test < 0:
        raise ValueError(
            f"The values '{keys.PARTITION_ID}', '{keys.NUM_TRAIN}' and '{keys.NUM_TEST}' of {where} must be "
            f">= 0, >= 1 and >= 0. Got {pid}, {num_train} and {num_test} instead."
        )
    num_val = read_int(ident, keys.NUM_VAL, where, default=0)
    counts = read_ints(ident, keys.CLASS_COUNTS, where, default=[])
    if num_val < 0:
        raise ValueError(f"The '{keys.NUM_VAL}' value of {where} must be an int >= 0. Got {num_val!r} instead.")
    if counts and (min(counts) < 0 or sum(counts) != num_train):
        raise ValueError(
            f"The '{keys.CLASS_COUNTS}' value of {where} must be ints >= 0 summing to '{keys.NUM_TRAIN}' "
            f"({num_train}). Got {counts!r} instead."
        )
    return ClientInfo(
        partition_id=pid,
        node_id=node,
        num_train=num_train,
        num_test=num_test,
        true_group=true_group,
        device=read_str(ident, keys.DEVICE, where, default="cpu"),
        num_val=num_val,
        class_counts=tuple(counts),
    )


def packed(models: list[ArrayRecord]) -> ArrayRecord:
    """All cluster models in one record, keys ``c{k}.{name}``.

    ``Strategy.start``'s ``Result.arrays`` then holds every cluster model.
    """
    out = ArrayRecord()
    for k, model in enumerate(models):
        for name, arr in model.items():
            out[f"c{k}.{name}"] = arr
    return out
