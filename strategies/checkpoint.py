"""Checkpoints of a strategy's whole state, written atomically, and resuming from them.

A checkpoint holds everything a strategy keeps between rounds: the cluster models, the
assignment by partition id, the clients, the history, the generator's state and each
algorithm's own attributes (similarity matrices, profiles, round-robin positions, ...), so
an algorithm added later is checkpointed without code of its own. Wiring (grid, callbacks,
in-flight messages) and the run's settings are not saved: a resumed run takes its settings
from its own run-config, so it may ask for more rounds.

Checkpoints are Python pickles: load only files you wrote yourself.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import replace
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .record import RoundRecord

if TYPE_CHECKING:
    from .federation import ClientInfo

FORMAT = 1


def save_checkpoint(strategy: Any, server_round: int, path: Path) -> Path:
    """Write a ``ClusteredStrategy``'s state after ``server_round`` to ``path`` atomically (temp file + rename).

    The state is every attribute but the wiring the class names ``transient``, so each algorithm's
    own state is saved too.
    """
    transient = type(strategy).transient
    state = {name: value for name, value in vars(strategy).items() if name not in transient}
    payload = {"format": FORMAT, "strategy": type(strategy).name, "round": server_round, "state": state}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(path: Path | str, strategy_name: str) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` for the strategy called ``strategy_name``.

    Raises
    ------
    ValueError
        If the file is missing, unreadable, of another format, or from another strategy.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"The 'resume-from' parameter of the run config must name a checkpoint file. "
            f"Got {str(path)!r} instead (no such file)."
        )
    try:
        with path.open("rb") as fh:
            payload = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
        raise ValueError(f"Checkpoint {str(path)!r} cannot be read: {err}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"Checkpoint {str(path)!r} is not an umbel checkpoint of format {FORMAT}.")
    missing = sorted({"strategy", "round", "state"} - set(payload))
    if missing or not isinstance(payload["state"], dict) or "history" not in payload["state"]:
        raise ValueError(f"Checkpoint {str(path)!r} is incomplete: it lacks {missing or ['state.history']}.")
    if payload["strategy"] != strategy_name:
        raise ValueError(
            f"Checkpoint {str(path)!r} was written by strategy {payload['strategy']!r}, not {strategy_name!r}."
        )
    return payload


def rebind_clients(saved: dict[int, ClientInfo], found: dict[int, ClientInfo]) -> dict[int, ClientInfo]:
    """The saved clients with the node ids of this run (node ids change between runs).

    Raises
    ------
    RuntimeError
        If a saved partition has no node in this run.
    """
    missing = sorted(set(saved) - set(found))
    if missing:
        raise RuntimeError(f"Cannot resume: partitions {missing} of the checkpoint have no node in this run.")
    return {pid: replace(info, node_id=found[pid].node_id) for pid, info in saved.items()}


def restored_state(checkpoint: Mapping[str, Any], found: dict[int, ClientInfo]) -> dict[str, Any]:
    """The saved attributes of a ``load_checkpoint`` payload, ready to load onto a strategy.

    Clients and waiting clients carry this run's node ids (``rebind_clients``); a history of
    plain dicts (a checkpoint written before ``RoundRecord``) is read into records.
    """
    state = dict(checkpoint["state"])
    rebound = rebind_clients({**state["clients"], **state["waiting"]}, found)
    state["clients"] = {pid: rebound[pid] for pid in state["clients"]}
    state["waiting"] = {pid: rebound[pid] for pid in state["waiting"]}
    state["history"] = [r if isinstance(r, RoundRecord) else RoundRecord.from_dict(r) for r in state["history"]]
    return state
