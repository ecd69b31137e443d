"""The messenger: the server's messages to clients, one exchange at a time, each kind with its timeout.

It holds the grid, the timeout of each kind of message (``train``, ``evaluate``, ``query`` and the
start-up ``identity`` query), the outbox of the phase Flower's loop is waiting on (train and
evaluate are sent by the round loop, queries here at once), and the round's counters
(``RoundStats``): every exchange's traffic and failures are counted and each lost client is
logged once per round. A reply the guard refuses is turned into a failure with ``reject``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from logging import WARNING

from flwr.app import Message, MessageType, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from common.config import TrainingParams

from .federation import REJECTED, Exchange, Outbox, send
from .recorder import RoundStats

QUERY = "query"
IDENTITY = "identity"


def timeouts(training: TrainingParams) -> dict[str, float]:
    """Seconds to wait for the replies of each kind of message, from the training parameters."""
    rounds = training.round_timeout
    return {MessageType.TRAIN: rounds, MessageType.EVALUATE: rounds, QUERY: rounds, IDENTITY: training.identity_timeout}


class Messenger:
    """Sends messages to clients (keyed by partition id) and collects and accounts their replies.

    Parameters
    ----------
    wait : mapping of str to float
        Reply timeout by kind (``timeouts``); a ``query.<action>`` waits as long as ``query``.
    """

    def __init__(self, wait: Mapping[str, float]) -> None:
        self.grid: Grid | None = None
        self.wait = dict(wait)
        self.stats = RoundStats()
        self.offline: set[int] = set()  # node ids offline at the round's start: sent nothing this round
        self._pending: Outbox | None = None

    def timeout(self, message_type: str) -> float:
        """The reply timeout of ``message_type`` (``query.<action>`` falls back to ``query``)."""
        return self.wait.get(message_type, self.wait[QUERY])

    def require_grid(self) -> Grid:
        """The grid; ``RuntimeError`` before ``start`` gave one."""
        if self.grid is None:
            raise RuntimeError("The strategy has no grid yet: call start() first.")
        return self.grid

    def outbox(self, nodes: Mapping[int, int], message_type: str, server_round: int) -> Outbox:
        """An empty outbox for one phase of ``server_round`` (messages live as long as the phase waits)."""
        return Outbox(nodes, message_type, f"{message_type}-{server_round}", self.timeout(message_type), self.offline)

    def expect(self, outbox: Outbox) -> list[Message]:
        """Remember ``outbox`` as the phase whose replies ``collect`` receives next; its messages."""
        self._pending = outbox
        return outbox.messages

    def collect(self, replies: Iterable[Message], server_round: int) -> Exchange:
        """Attribute the replies of the pending phase to clients and account them.

        Raises
        ------
        RuntimeError
            If no phase is pending.
        """
        if self._pending is None:
            raise RuntimeError("Replies arrived for no configured round.")
        exchange = self._pending.collect(replies, self.timeout(self._pending.message_type))
        self._pending = None
        self.stats.asked[exchange.phase] = exchange
        self.account(exchange, server_round)
        return exchange

    def query(
        self, nodes: Mapping[int, int], message_type: str, contents: Mapping[int, RecordDict], server_round: int
    ) -> Exchange:
        """Send one ``message_type`` message per client in ``contents`` now, wait and account the replies."""
        box = self.outbox(nodes, message_type, server_round)
        for pid, content in contents.items():
            box.add(pid, content)
        exchange = send(self.require_grid(), box, self.timeout(message_type))
        self.account(exchange, server_round)
        return exchange

    def account(self, exchange: Exchange, server_round: int) -> None:
        """Count ``exchange`` in the round's stats; log each failed client once per round."""
        self.stats.rejected += len(exchange.refused)
        for pid, cause in sorted(exchange.failures.items()):
            if pid not in self.stats.logged:
                log(WARNING, "round %d %s: client %d failed: %s", server_round, exchange.phase, pid, cause)
            self.stats.logged.add(pid)
        self.stats.add(exchange)

    def reject(self, exchange: Exchange, pid: int, fault: str, server_round: int) -> None:
        """Turn ``pid``'s reply in ``exchange`` into a failure (``fault`` says why), logged and counted."""
        log(WARNING, "round %d %s: client %d reply rejected: %s", server_round, exchange.phase, pid, fault)
        if exchange.phase in (MessageType.TRAIN, MessageType.EVALUATE):
            self.stats.faults.setdefault(exchange.phase, f"client {pid}: {fault}")
        self.stats.logged.add(pid)
        del exchange.replies[pid]
        exchange.failures[pid] = f"{REJECTED}{fault}"
        self.stats.rejected += 1
