"""The reply guard: what of an exchange's replies may touch server state.

Each reply is decoded by ``strategies.replies`` (keys, shapes, dtypes, finite values, sane counts
and metric ranges); one that fails is handed to ``reject`` (the messenger's, which logs it and
turns it into a failure) and the other clients' replies go on. ``cap_weights`` bounds a client's
aggregation weight by the federation's median train size (``weight-cap``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, RecordDict
from flwr.common import log

from .federation import ClientInfo, Exchange
from .replies import Range, ReplyFault, S, TrainUpdate, decode_evaluate_reply, decode_signal, decode_train_reply

Reject = Callable[[Exchange, int, str], None]


def train_updates(
    exchange: Exchange,
    cluster_of: Callable[[int, RecordDict, TrainUpdate], int],
    models: list[ArrayRecord],
    sent_to: Mapping[int, int],
    clients: Mapping[int, ClientInfo],
    reject: Reject,
) -> tuple[dict[int, TrainUpdate], dict[int, int]]:
    """The checked train replies and the cluster each belongs to, by partition id.

    Each reply is decoded once, against the model of the cluster it was sent (``sent_to``; every cluster
    model has the same arrays); ``cluster_of(pid, content, update)`` then names its cluster (a
    ``ReplyFault`` rejects it), whose model becomes the update's ``sent``.
    """
    updates: dict[int, TrainUpdate] = {}
    clusters: dict[int, int] = {}
    sent: dict[int, dict[str, np.ndarray]] = {}

    def arrays_of(k: int) -> dict[str, np.ndarray]:
        if k not in sent:
            sent[k] = {name: arr.numpy() for name, arr in models[k].items()}
        return sent[k]

    for pid in sorted(exchange.replies):
        content, first = exchange.replies[pid], sent_to[pid]
        try:
            update = decode_train_reply(content, models[first], clients[pid].num_train, arrays_of(first))
            k = cluster_of(pid, content, update)
        except ReplyFault as fault:
            reject(exchange, pid, str(fault))
            continue
        updates[pid] = update if k == first else replace(update, sent=arrays_of(k))
        clusters[pid] = k
    return updates, clusters


def cap_weights(
    updates: dict[int, TrainUpdate], train_sizes: list[int], weight_cap: float, server_round: int
) -> tuple[dict[int, TrainUpdate], int]:
    """Updates whose ``num-examples`` is at most ``weight_cap`` x the median of ``train_sizes``; how many were capped.

    ``weight_cap`` 0 caps nothing.
    """
    if not weight_cap or not updates:
        return updates, 0
    median = float(np.median(train_sizes))
    cap = max(1, int(weight_cap * median))
    capped = 0
    for pid, update in sorted(updates.items()):
        if update.num_examples > cap:
            log(
                WARNING,
                "round %d train: client %d claims num-examples %d; its weight is capped at %d "
                "(weight-cap %g x median train size %g)",
                server_round,
                pid,
                update.num_examples,
                cap,
                weight_cap,
                median,
            )
            updates[pid] = replace(update, num_examples=cap)
            capped += 1
    return updates, capped


def evaluations(
    exchange: Exchange, clients: Mapping[int, ClientInfo], ranges: Mapping[str, Range], reject: Reject
) -> dict[int, tuple[float, float]]:
    """The checked ``(accuracy, loss)`` of each evaluate reply, by partition id."""
    out: dict[int, tuple[float, float]] = {}
    for pid, content in sorted(exchange.replies.items()):
        try:
            out[pid] = decode_evaluate_reply(content, clients[pid].num_test, ranges)
        except ReplyFault as fault:
            reject(exchange, pid, str(fault))
    return out


def signals(exchange: Exchange, from_arrays: Callable[..., S], reject: Reject, **expected: Any) -> dict[int, S]:
    """The checked signals of a query's replies, by partition id (``from_arrays(**expected)`` decodes one)."""
    out: dict[int, S] = {}
    for pid in sorted(exchange.replies):
        try:
            out[pid] = decode_signal(exchange.replies[pid], from_arrays, **expected)
        except ReplyFault as fault:
            reject(exchange, pid, str(fault))
    return out
