"""The end of a run: every client receives its own cluster's final model (``query.model``).

After the last round the server sends each client with a cluster the model of that cluster
(record ``arrays``, config ``cluster-id`` and ``server-round``). umbel's ClientApp writes it
to the file its node config names (``model-out``) and answers ``model-written`` 1, or 0 when
it has no ``model-out``. Clients whose node is offline or that do not answer are listed in
the summary (``delivery``), so an operator knows who still needs their model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

from flwr.app import ConfigRecord, RecordDict
from flwr.common import log

from common import keys

from .federation import Outbox, send
from .protocols import Core


@dataclass
class Delivery:
    """What the final-model message did, client by client (partition ids)."""

    round: int
    written: list[int] = field(default_factory=list)  # wrote the model to their model-out
    not_written: list[int] = field(default_factory=list)  # answered, but have no model-out
    offline: dict[int, str] = field(default_factory=dict)  # no good answer: why
    bytes_down: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The summary's ``delivery`` entry (JSON)."""
        return {
            "round": self.round,
            "written": self.written,
            "not-written": self.not_written,
            "offline": sorted(self.offline),
            "offline-why": {str(p): why for p, why in sorted(self.offline.items())},
            "bytes-down": self.bytes_down,
            "seconds": round(self.seconds, 4),
        }


def deliver_models(strategy: Core, server_round: int) -> Delivery:
    """Send every client with a cluster its cluster's model and note who wrote it."""
    started = time.perf_counter()
    grid = strategy.messenger.require_grid()
    nodes = {pid: info.node_id for pid, info in strategy.clients.items()}
    timeout, offline = strategy.training.round_timeout, strategy.messenger.offline
    outbox = Outbox(nodes, keys.query_type(keys.MODEL_ACTION), "final-model", timeout, offline)
    for pid, k in sorted(strategy.assignment.items()):
        if pid in nodes:
            cfg = ConfigRecord({keys.SERVER_ROUND: server_round, keys.CLUSTER_ID: k})
            outbox.add(pid, RecordDict({keys.ARRAYS: strategy.models[k], keys.CONFIG: cfg}))
    exchange = send(grid, outbox, strategy.training.round_timeout)
    out = Delivery(round=server_round, offline=dict(exchange.failures), bytes_down=exchange.down.model)
    for pid, content in sorted(exchange.replies.items()):
        metrics = content.metric_records.get(keys.METRICS)
        value = None if metrics is None else metrics.get(keys.MODEL_WRITTEN)
        if value == 1:
            out.written.append(pid)
        elif value == 0:
            out.not_written.append(pid)
        else:
            out.offline[pid] = f"malformed reply: '{keys.MODEL_WRITTEN}' must be 0 or 1, got {value!r}"
    out.seconds = time.perf_counter() - started
    log(
        INFO,
        "final models sent to %d clients: %d wrote theirs (model-out), %d have no model-out",
        len(outbox.messages),
        len(out.written),
        len(out.not_written),
    )
    if out.offline:
        log(WARNING, "final models not delivered to clients %s (offline or failed)", sorted(out.offline))
    return out
