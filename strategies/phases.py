"""The two phases of a round: the messages each client gets, and what the checked replies change.

Train: each sampled client gets its own cluster's model (``train_records``) and config
(``client_config``); the replies are checked by the reply guard, their weights capped, and each
cluster's model is its members' aggregate (``aggregate_cluster``); ``after_train`` then sees
the updates. Evaluate: each assigned client holding test data gets its own cluster's model; the
round's accuracy is the mean of the clients' local accuracies. ``query_signal`` asks clients
for a typed signal outside the two phases. The messenger sends and accounts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from common import keys
from common.aggregation import coordinate_median, weighted_average
from common.learning import observe_train_loss
from common.metrics import mean_std

from . import admission, guard, queries
from .protocols import Core
from .replies import S, TrainUpdate


def nodes(strategy: Core) -> dict[int, int]:
    """Node id of each client, by partition id."""
    return {pid: info.node_id for pid, info in strategy.clients.items()}


def base_config(strategy: Core, server_round: int) -> dict[str, Any]:
    """What every message's config holds: the round and the local training parameters."""
    return {keys.SERVER_ROUND: server_round, **strategy.training.local_config()}


def merge(updates: list[TrainUpdate], aggregation: str) -> ArrayRecord:
    """One model from ``updates``, in the sent model's dtypes: the mean weighted by ``num-examples``, or
    the coordinate-wise median when ``aggregation`` is ``"median"``."""
    reference = updates[0].sent
    if aggregation == "median":
        merged = coordinate_median([u.arrays for u in updates], reference)
    else:
        merged = weighted_average([u.arrays for u in updates], [u.num_examples for u in updates], reference)
    return ArrayRecord({name: Array(arr) for name, arr in merged.items()})


def train_messages(strategy: Core, server_round: int, config: ConfigRecord) -> list[Message]:
    """One train message per sampled client, each with its own cluster's model (``_sent_cluster`` notes which)."""
    outbox = strategy.messenger.outbox(nodes(strategy), MessageType.TRAIN, server_round)
    strategy._sent_cluster = {}
    for pid in strategy.sample(server_round):
        k = strategy.assignment[pid]
        cfg = {**dict(config), **base_config(strategy, server_round), keys.CLUSTER_ID: k}
        cfg.update(strategy.client_config(server_round, pid))
        records = strategy.train_records(server_round, pid, k)
        outbox.add(pid, RecordDict({**records, keys.CONFIG: ConfigRecord(cfg)}))
        strategy._sent_cluster[pid] = k
    return strategy.messenger.expect(outbox)


def apply_train(strategy: Core, server_round: int, replies: Iterable[Message]) -> MetricRecord:
    """Check the train replies, aggregate each cluster that got some, call ``after_train``; the round's metrics."""
    messenger = strategy.messenger
    exchange = messenger.collect(replies, server_round)
    reject = partial(messenger.reject, server_round=server_round)
    cluster_of = partial(strategy.reply_cluster, server_round)
    updates, clusters = guard.train_updates(
        exchange, cluster_of, strategy.models, strategy._sent_cluster, strategy.clients, reject
    )
    strategy._sent_cluster.update(clusters)
    sizes = [c.num_train for c in strategy.clients.values()]
    updates, capped = guard.cap_weights(updates, sizes, strategy.training.weight_cap, server_round)
    messenger.stats.capped += capped
    members: dict[int, list[TrainUpdate]] = {}
    for pid, update in updates.items():
        members.setdefault(strategy._sent_cluster[pid], []).append(update)
    for k, cluster_updates in sorted(members.items()):
        strategy.models[k] = strategy.aggregate_cluster(k, cluster_updates)
        strategy.last_trained[k] = server_round
    messenger.stats.train_replies = len(updates)
    strategy.after_train(server_round, updates)
    metrics: dict[str, int | float | list[int] | list[float]] = {
        "replies": len(updates),
        "failures": len(exchange.failures),
    }
    if updates:
        loss = metrics[keys.TRAIN_LOSS] = float(np.mean([u.loss for u in updates.values()]))
        strategy.learning = observe_train_loss(
            strategy.learning,
            strategy.training,
            strategy.initial_model,
            strategy.head_key,
            server_round,
            loss,
            len(updates),
            len(strategy.clients),
        )
    return MetricRecord(metrics)


def evaluate_messages(strategy: Core, server_round: int, config: ConfigRecord) -> list[Message]:
    """One evaluate message per assigned client that holds test data, with its own cluster's model.

    The clients of one cluster are sent one shared content: the same model and config.
    """
    outbox = strategy.messenger.outbox(nodes(strategy), MessageType.EVALUATE, server_round)
    tested = admission.with_test_data(strategy.assignment, strategy.clients, tell=not strategy._told_untested)
    strategy._told_untested = strategy._told_untested or len(tested) < len(strategy.assignment)
    contents: dict[int, RecordDict] = {}
    for pid in tested:
        k = strategy.assignment[pid]
        if k not in contents:
            cfg = {**dict(config), keys.SERVER_ROUND: server_round, keys.CLUSTER_ID: k}
            contents[k] = RecordDict({keys.ARRAYS: strategy.models[k], keys.CONFIG: ConfigRecord(cfg)})
        outbox.add(pid, contents[k])
    return strategy.messenger.expect(outbox)


def apply_evaluate(strategy: Core, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
    """Check the evaluate replies into ``last_eval``; mean and std of accuracy, mean loss (None: no reply)."""
    exchange = strategy.messenger.collect(replies, server_round)
    reject = partial(strategy.messenger.reject, server_round=server_round)
    strategy.last_eval = guard.evaluations(exchange, strategy.clients, strategy.metric_ranges, reject)
    if not strategy.last_eval:
        return None
    acc_mean, acc_std = mean_std([a for a, _ in strategy.last_eval.values()])
    loss_mean, _ = mean_std([loss for _, loss in strategy.last_eval.values()])
    return MetricRecord({keys.ACCURACY: acc_mean, "accuracy-std": acc_std, keys.LOSS: loss_mean})


def query_signal(
    strategy: Core,
    action: str,
    pids: Iterable[int],
    server_round: int,
    from_arrays: Callable[..., S],
    models: Sequence[ArrayRecord],
    config: Mapping[str, Any] | None,
    **expected: Any,
) -> dict[int, S]:
    """Ask ``pids`` for a signal with ``query.<action>``; the signals ``from_arrays(**expected)`` accepts.

    ``models`` travel as ``arrays`` (one) or ``arrays-0..K-1`` with ``num-models`` (several);
    ``config`` is added to ``base_config``. A malformed signal rejects that client only.
    """
    queries.check_declared(type(strategy), action)
    records = {keys.ARRAYS: models[0]} if len(models) == 1 else {keys.model_record(k): m for k, m in enumerate(models)}
    cfg = {**base_config(strategy, server_round), **(dict(config or {}))}
    if len(models) > 1:
        cfg[keys.NUM_MODELS] = len(models)
    content = RecordDict({**records, keys.CONFIG: ConfigRecord(cfg)})
    contents = dict.fromkeys(pids, content)
    exchange = strategy.messenger.query(nodes(strategy), keys.query_type(action), contents, server_round)
    reject = partial(strategy.messenger.reject, server_round=server_round)
    return guard.signals(exchange, from_arrays, reject, **expected)
