"""Bad data costs only that client: every client folder checked, each bad one named with its reason.

``umbel run`` (before anything starts) and the ServerApp (when the folders are on its machine)
read every ``partition_<i>`` folder. A bad folder leaves that client out, logged with the reason;
its node then fails its identity query and the run goes on without it. Only when fewer usable
clients remain than the run needs (one, or the strategy's ``num-clusters``) does the run stop,
naming every bad client.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import WARNING

from flwr.common import log

from strategies.outcome import some_ids


def bad_client_folders(read: Callable[[int], object], num_clients: int, needed: int = 1) -> dict[int, str]:
    """Read every client's data with ``read(pid)``; the bad ones by partition id, with their reasons.

    Parameters
    ----------
    read : callable
        Reads and checks one client's data; raises ``ValueError`` or ``FileNotFoundError`` naming the problem.
    num_clients : int
        Partitions ``0 .. num_clients - 1``.
    needed : int, default=1
        The fewest usable clients the run can go on with.

    Raises
    ------
    ValueError
        If fewer than ``needed`` clients have usable data; the message lists every bad client.
    """
    bad: dict[int, str] = {}
    for pid in range(num_clients):
        try:
            read(pid)
        except (ValueError, FileNotFoundError) as err:
            bad[pid] = str(err)
            log(WARNING, "client %d is left out: %s", pid, err)
    usable = num_clients - len(bad)
    if bad and usable < needed:
        reasons = "\n".join(f"  client {pid}: {why}" for pid, why in sorted(bad.items()))
        raise ValueError(
            f"The client folders must give at least {needed} usable client(s). Got {usable} of {num_clients} "
            f"instead; {len(bad)} have bad data:\n{reasons}"
        )
    if bad:
        log(WARNING, "%d of %d clients have bad data and are left out: %s", len(bad), num_clients, some_ids(list(bad)))
    return bad
