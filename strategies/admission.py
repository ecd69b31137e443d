"""Late clients (run-config ``late-clients``): held out when the run starts, admitted in
``admission-round`` through the strategy's ``admit`` hook.

The functions see a strategy only through ``Roster``: its clients, the clients still waiting,
the assignment and ``admit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from logging import INFO
from typing import Protocol

import numpy as np
from flwr.common import log

from .federation import ClientInfo


class Roster(Protocol):
    """What admission reads and changes of a strategy."""

    clients: dict[int, ClientInfo]
    waiting: dict[int, ClientInfo]
    assignment: dict[int, int]

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Give ``newcomers`` (already in ``clients``) a cluster."""


def hold_out_late(
    clients: Mapping[int, ClientInfo], fraction: float, rng: np.random.Generator, admission_round: int
) -> tuple[dict[int, ClientInfo], dict[int, ClientInfo]]:
    """Split ``fraction`` of the clients off (drawn with ``rng``), keeping at least one in.

    Returns
    -------
    tuple of two dict of int to ClientInfo
        The clients that start, and the late ones (they join in ``admission_round``).
    """
    count = min(len(clients) - 1, round(fraction * len(clients)))
    if count <= 0:
        return dict(clients), {}
    late = {int(p) for p in rng.choice(sorted(clients), size=count, replace=False)}
    log(INFO, "%d late clients join in round %d: %s", count, admission_round, sorted(late))
    return ({p: c for p, c in clients.items() if p not in late}, {p: c for p, c in clients.items() if p in late})


def admit_waiting(roster: Roster, server_round: int) -> list[int]:
    """Move every waiting client into ``clients`` and let ``admit`` give each a cluster; the newcomers.

    Raises
    ------
    RuntimeError
        If ``admit`` left a newcomer without a cluster.
    """
    newcomers = sorted(roster.waiting)
    roster.clients.update(roster.waiting)
    roster.waiting = {}
    roster.admit(server_round, newcomers)
    missing = [p for p in newcomers if p not in roster.assignment]
    if missing:
        raise RuntimeError(f"{type(roster).__name__}.admit left clients {missing} without a cluster.")
    log(
        INFO,
        "round %d: newcomers %s joined clusters %s",
        server_round,
        newcomers,
        [roster.assignment[p] for p in newcomers],
    )
    return newcomers
