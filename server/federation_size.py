"""Check, before anything trains, that the federation holds the run's ``num-clients`` nodes.

Plain ``flwr run .`` runs on Flower's default local simulation (2 SuperNodes since Flower 1.32),
whatever the app's ``num-clients``; a deployment may have fewer SuperNodes connected than
expected when ``node-wait-timeout`` runs out. In both cases umbel stops with a message that
names what to change, unless the user allowed fewer nodes with ``min-nodes``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from logging import ERROR, WARNING
from typing import Any

from flwr.common import log
from flwr.serverapp import Grid

# seconds a simulation's node count must hold still before it counts as final
SETTLE_SECONDS = 1.0
# longest wait for a simulation to register its nodes
SIMULATION_WAIT_SECONDS = 30.0


class FederationTooSmall(RuntimeError):
    """Fewer nodes than the run needs, and fewer than ``min-nodes`` allows."""


def is_simulation(grid: Grid) -> bool:
    """Whether ``grid`` is Flower's in-process simulation grid (not a deployment's SuperLink)."""
    from flwr.superlink.grid import InMemoryGrid

    return isinstance(grid, InMemoryGrid)


def required_nodes(num_clients: int, min_nodes: int) -> int:
    """Nodes the run cannot go on without: ``min-nodes``, or all ``num_clients`` when it is 0.

    Raises
    ------
    ValueError
        If ``min_nodes`` exceeds ``num_clients``.
    """
    if min_nodes > num_clients:
        raise ValueError(
            f"The 'min-nodes' parameter of the run config must be an int in the range [0, num-clients = "
            f"{num_clients}]. Got {min_nodes} instead."
        )
    return min_nodes or num_clients


def check_federation(
    grid: Grid,
    num_clients: int,
    min_nodes: int,
    wait_timeout: float,
    *,
    simulation: bool | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The number of nodes the run goes on with; raise if there are too few.

    A simulation registers all its nodes as it starts, so its count is known within seconds.
    A deployment's SuperNodes connect over time: wait up to ``wait_timeout`` seconds for all
    ``num_clients``, then go on only if ``min_nodes`` > 0 and at least that many are there.

    Raises
    ------
    FederationTooSmall
        With the exact command or setting that gives the intended federation.
    """
    needed = required_nodes(num_clients, min_nodes)
    simulation = is_simulation(grid) if simulation is None else simulation
    start = clock()
    count, since = -1, start
    while True:
        now_count = len(list(grid.get_node_ids()))
        if now_count != count:
            count, since = now_count, clock()
        if count >= num_clients:
            return num_clients
        waited = clock() - start
        if simulation and count > 0 and clock() - since >= SETTLE_SECONDS:
            break
        if waited >= (SIMULATION_WAIT_SECONDS if simulation else wait_timeout):
            break
        sleep(0.2)
    if count >= needed and count > 0:
        log(
            WARNING,
            "%d of %d expected nodes are in the federation; going on with them (min-nodes = %d). "
            "summary.json's num-clients says how many took part.",
            count,
            num_clients,
            min_nodes,
        )
        return count
    message = (
        too_small_simulation(count, num_clients, min_nodes)
        if simulation
        else too_small_deployment(count, num_clients, min_nodes, wait_timeout)
    )
    log(ERROR, "%s", message)
    raise FederationTooSmall(message)


def too_small_simulation(count: int, num_clients: int, min_nodes: int) -> str:
    """What to do when Flower's simulation has fewer SuperNodes than ``num-clients``."""
    fewer = f" (min-nodes = {min_nodes})" if min_nodes else ""
    superlink = local_superlink_pid()
    stop = (
        f"\nFlower's local SuperLink (PID {superlink}) keeps running after this run; stop it with: kill {superlink}"
        if superlink
        else ""
    )
    return (
        f"umbel stopped before training: the run needs {num_clients} clients (num-clients){fewer}, but "
        f"Flower's simulation has {count} SuperNodes (Flower's default federation has 2). Run it on a "
        f"federation of the right size:\n"
        f"  flwr run . --stream --federation-config "
        f'"num-supernodes={num_clients} client-resources-num-cpus=1 client-resources-num-gpus=0.0"\n'
        f"or with `umbel run`, which sizes the simulation itself; or ask for fewer clients "
        f'(--run-config "num-clients={max(count, 1)}"), or allow fewer nodes '
        f'(--run-config "min-nodes={max(count, 1)}").' + stop
    )


def too_small_deployment(count: int, num_clients: int, min_nodes: int, wait_timeout: float) -> str:
    """What to do when fewer SuperNodes than ``num-clients`` connected within ``node-wait-timeout``."""
    needed = f"at least {min_nodes} (min-nodes)" if min_nodes else f"all {num_clients} (num-clients)"
    return (
        f"umbel stopped before training: {count} of {num_clients} SuperNodes connected within "
        f"node-wait-timeout {wait_timeout:g} s, and the run needs {needed}. Start the missing SuperNodes "
        f'(each with its own --node-config "partition-id=<i> num-partitions={num_clients}"), wait longer '
        f'(--run-config "node-wait-timeout=<seconds>"), or go on with fewer '
        f'(--run-config "min-nodes={max(count, 1)}").'
    )


def local_superlink_pid() -> int | None:
    """PID of the ``flower-superlink`` this process runs under (Flower's local SuperLink), if any."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return None
    try:
        proc: Any = psutil.Process(os.getpid())
        while proc is not None:
            if any("flower-superlink" in part for part in proc.cmdline()[:2]):
                return int(proc.pid)
            proc = proc.parent()
    except psutil.Error:
        return None
    return None
