"""The roster: who takes part. Clients found at start, late ones held out and admitted, nodes lost and back.

At start every node is asked who it is (``discover``); late clients (run-config ``late-clients``)
are held out (``hold_out_late``) and admitted in ``admission-round`` through the strategy's
``admit`` hook (``admit_waiting``); before each round, nodes never seen are identified and the
clients whose nodes went offline or came back are noted (``refresh_membership``). A client that
never took part is placed by the lowest train loss of the cluster models (``assign_by_loss``)
unless its strategy has a rule of its own.

The functions see a strategy only through ``Roster``: its clients, the clients still waiting,
the assignment, its membership and ``admit``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from logging import INFO, WARNING
from typing import TYPE_CHECKING, Protocol

import numpy as np
from flwr.common import log
from flwr.serverapp import Grid

from common import keys
from common.config import TrainingParams
from common.params import run_config_key
from common.metrics import cluster_sizes
from common.signals.losses import ModelLosses

from .federation import ClientInfo, Membership, discover_clients, identify, live_nodes
from .outcome import identity_failures
from .protocols import Core
from .recorder import RoundStats

if TYPE_CHECKING:
    from flwr.app import ArrayRecord


class Roster(Protocol):
    """What admission reads and changes of a strategy."""

    clients: dict[int, ClientInfo]
    waiting: dict[int, ClientInfo]
    assignment: dict[int, int]
    membership: Membership
    _lost: set[int]  # clients whose nodes were offline at the last refresh

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


def discover(
    grid: Grid, expected: int, training: TrainingParams, membership: Membership
) -> tuple[dict[int, ClientInfo], float]:
    """Every online node's identity at start (``discover_clients``), by partition id; the seconds it took.

    Raises
    ------
    RuntimeError
        If no node gave a usable identity: nothing can train.
    """
    started = time.perf_counter()
    clients, asked = discover_clients(
        grid,
        expected,
        wait_timeout=training.node_wait_timeout,
        reply_timeout=training.identity_timeout,
        membership=membership,
    )
    if not clients:
        raise RuntimeError(
            f"No client answered the identity query ('{keys.MSG_IDENTITY}'): {identity_failures(asked)} "
            f"after {asked.seconds:.0f} s (identity-timeout {training.identity_timeout:g} s); "
            "nothing to train. Every umbel strategy first asks each "
            "node who it is: run umbel's ClientApp (client.app:app) or add a "
            f"@app.query('{keys.IDENTITY_ACTION}') handler to yours (docs/protocol.md)."
        )
    return clients, time.perf_counter() - started


def refresh_membership(roster: Roster, grid: Grid, stats: RoundStats, server_round: int, timeout: float) -> set[int]:
    """Identify nodes never seen (restarted, late); note the clients lost and rejoined in ``stats``.

    A node never seen that claims a new partition id waits in ``roster.waiting`` for admission.
    Returns the node ids of the known clients whose nodes are offline now.
    """
    live = live_nodes(grid)
    found: dict[int, ClientInfo] = {}
    unknown = roster.membership.unknown(live)
    if unknown:
        found, exchange = identify(grid, unknown, roster.membership, live, reply_timeout=timeout)
        stats.down += exchange.down
        stats.up += exchange.up
    newcomers = []
    for pid, info in sorted(found.items()):
        if pid in roster.clients:
            roster.clients[pid] = info
        elif pid in roster.waiting:
            roster.waiting[pid] = info
        else:
            roster.waiting[pid] = info
            newcomers.append(pid)
    known = {**roster.waiting, **roster.clients}
    offline = {pid: info.node_id for pid, info in known.items() if info.node_id not in live}
    lost = set(offline)
    stats.lost = sorted(lost - roster._lost)
    stats.rejoined = sorted(
        ((roster._lost - lost) | set(found) | set(roster.membership.restarted(live))) - set(newcomers)
    )
    roster._lost = lost
    if stats.lost:
        log(WARNING, "round %d: clients lost (their nodes are offline): %s", server_round, stats.lost)
    if stats.rejoined:
        log(
            INFO,
            "round %d: clients rejoined, with their cluster state: %s (nodes %s)",
            server_round,
            stats.rejoined,
            [(roster.clients.get(p) or roster.waiting[p]).node_id for p in stats.rejoined],
        )
    if newcomers:
        log(INFO, "round %d: clients never seen before arrived: %s", server_round, newcomers)
    return set(offline.values())


def assign_by_loss(strategy: Core, pids: Sequence[int], server_round: int) -> dict[int, int]:
    """Each client's cluster by the lowest loss of the cluster models on its TRAIN split.

    One cluster needs no query. Clients that fail or send a malformed reply go to the
    largest cluster, with a warning.
    """
    if not pids:
        return {}
    if len(strategy.models) == 1:
        return dict.fromkeys(pids, 0)
    losses = strategy.query_signal(
        keys.LOSSES_ACTION,
        pids,
        server_round,
        ModelLosses.from_arrays,
        models=strategy.models,
        num_models=len(strategy.models),
    )
    sizes = cluster_sizes(strategy.assignment, len(strategy.models))
    fallback = int(np.argmax(sizes)) if sizes else 0
    for pid in sorted(set(pids) - set(losses)):
        log(
            WARNING,
            "round %d: client %d has no train losses; it joins the largest cluster %d",
            server_round,
            pid,
            fallback,
        )
    return {pid: losses[pid].best() if pid in losses else fallback for pid in pids}


def with_test_data(assignment: Mapping[int, int], clients: Mapping[int, ClientInfo], *, tell: bool) -> list[int]:
    """The assigned clients whose identity reported test samples, sorted; with ``tell``, warn about the others.

    In a large federation the test split leaves some clients none: they are never asked to
    evaluate, and the final accuracy's coverage counts the others.
    """
    untested = [pid for pid in assignment if clients[pid].num_test == 0]
    if untested and tell:
        log(
            WARNING,
            "%d of %d clients hold no test samples and are never evaluated (e.g. clients %s)",
            len(untested),
            len(assignment),
            sorted(untested)[:5],
        )
    return sorted(set(assignment) - set(untested))


def check_round_params(strategy: Core, num_clients: int) -> None:
    """Raise ``ValueError`` if ``strategy``'s parameters contradict its ``rounds`` or ``num_clients`` clients.

    A parameter naming a round (``round_params``) must leave the rounds it needs after it;
    ``num-clusters`` may not exceed the clients.
    """
    name, rounds = type(strategy).__name__, strategy.training.rounds
    for field_name, after in strategy.round_params.items():
        value, high = getattr(strategy.params, field_name), rounds - after
        if value > high:
            raise ValueError(
                f"The '{run_config_key(strategy.params_type, field_name)}' parameter of {name} must be "
                f"an int in the range [0, {high}] ('rounds' is {rounds}). Got {value!r} instead."
            )
    k = getattr(strategy.params, "num_clusters", 0)
    if k > num_clients:
        raise ValueError(
            f"The 'num-clusters' parameter of {name} must be at most the number "
            f"of clients ({num_clients}). Got {k!r} instead."
        )


def join(strategy: Core, grid: Grid, initial: ArrayRecord, expected: int) -> int:
    """Identify the clients at start, then restore a pending checkpoint or start fresh; the first round to run.

    Fresh: late clients are held out and ``init_clusters`` gives the others their clusters.
    A strategy that already has clients and nothing to resume keeps them (round 1).
    """
    if strategy.checkpoints.pending is None and strategy.clients:
        return 1
    found, strategy.identity_seconds = discover(grid, expected, strategy.training, strategy.membership)
    if strategy.checkpoints.pending is not None:
        strategy._lost = set()
        return strategy.checkpoints.resume_onto(strategy, found)
    training = strategy.training
    strategy.clients, strategy.waiting = hold_out_late(
        found, training.late_clients, strategy.rng, training.admission_round
    )
    strategy.initial = initial
    strategy.init_clusters(initial)
    return 1
