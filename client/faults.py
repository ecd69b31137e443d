"""Injected client faults (run-config ``fail-fraction``, ``slow-fraction``, ``slow-delay``).

A ClientApp mod: in each round a client raises (Flower turns that into an error reply) or
answers late, drawn from the run's seed, the round and the partition id, so a drill is
reproducible. A delay that outlasts the message's time to live (the round timeout) sleeps only
until then and gives up: the server has stopped waiting, and a simulated worker held any
longer would make healthy clients queue behind a sleeper in the next round. Identity queries
are never touched (a client must be able to join). Off by
default; for tests and fault drills only.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message

from common import keys
from common.config import FaultParams, TrainingParams, run_config_value
from common.records import read_int

from .deadline import deadline_of, handling
from .task import SERVER_CONFIG


class InjectedFault(RuntimeError):
    """The failure a client was told to simulate."""


class ExpiredMessage(RuntimeError):
    """An instruction whose time to live ran out before the client started on it."""


def skip_expired(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Refuse an instruction the server has stopped waiting for (its TTL ran out in a queue),
    and stop local training at its deadline (``client.deadline``).

    Flower's simulation queues messages for busy workers without checking their TTL, so a
    round that timed out would otherwise keep the workers busy into the next rounds.
    """
    overdue = time.time() - deadline_of(msg)
    if overdue > 0:
        raise ExpiredMessage(f"{msg.metadata.message_type} message expired {overdue:.1f} s before it was handled")
    with handling(msg):
        return call_next(msg, context)


@lru_cache(maxsize=4)
def _params(fail: float, slow: float, delay: float) -> FaultParams:
    return FaultParams(fail, slow, delay)


def fault_draws(seed: int, server_round: int, partition_id: int) -> tuple[float, float]:
    """Two uniforms in [0, 1): ``(fail draw, slow draw)`` for one client in one round."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, server_round, partition_id, 0xFA17]))
    fail, slow = rng.random(2)
    return float(fail), float(slow)


def inject_faults(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Fail or delay this client's reply as the run-config's fault parameters say."""
    rc = context.run_config
    params = _params(*(float(run_config_value(rc, k, 0.0)) for k in ("fail-fraction", "slow-fraction", "slow-delay")))
    if not params.active or msg.metadata.message_type == keys.MSG_IDENTITY:
        return call_next(msg, context)
    cfg = msg.content.config_records.get(keys.CONFIG)
    server_round = 0 if cfg is None else read_int(cfg, keys.SERVER_ROUND, SERVER_CONFIG, default=0)
    pid = int(context.node_config[keys.PARTITION_ID])
    fail, slow = fault_draws(int(run_config_value(rc, "seed", TrainingParams.seed)), server_round, pid)
    if fail < params.fail_fraction:
        raise InjectedFault(f"injected fault: client {pid} fails round {server_round}")
    if slow < params.slow_fraction:
        left = deadline_of(msg) - time.time()
        if params.slow_delay < left:
            time.sleep(params.slow_delay)
        else:  # its reply would come after the server stopped waiting: hold the worker no longer than that
            time.sleep(max(left, 0.0))
            raise ExpiredMessage(
                f"injected delay: client {pid} answers round {server_round} {params.slow_delay:g} s late, "
                "after its deadline"
            )
    return call_next(msg, context)


def npy_bytes(values: np.ndarray) -> bytes:
    """``values`` as ``.npy`` bytes (no pickle)."""
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=False)
    return buffer.getvalue()


def relabelled(arr: Array, data: bytes) -> Array:
    """``data`` under ``arr``'s own dtype and shape labels."""
    return Array(dtype=arr.dtype, shape=tuple(arr.shape), stype=arr.stype, data=data)


def corrupt_record(record: ArrayRecord, fault: str) -> None:
    """Break the last array of ``record`` in place, as a malformed client would (fault drills and
    tests): ``"garbage"`` bytes, an array of ``"other-shape"``, or ``"float64"`` data labelled as the
    record's dtype."""
    name = list(record.keys())[-1]
    arr = record[name]
    if fault == "garbage":
        record[name] = relabelled(arr, b"\x93garbag")
    elif fault == "other-shape":
        record[name] = relabelled(arr, npy_bytes(np.zeros(3, dtype=arr.dtype)))
    elif fault == "float64":
        record[name] = relabelled(arr, npy_bytes(arr.numpy().astype(np.float64)))
