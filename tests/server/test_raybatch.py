"""server.raybatch: identity queries in batches, answered as Flower's engine worker answers them one by one."""

from __future__ import annotations

import threading
from queue import Queue

import numpy as np
import pytest
from flwr.app import Array, ConfigRecord, Context, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
from flwr.server.superlink.fleet.vce.metrics import VceMetrics
from flwr.simulation.ray_transport.ray_actor import VirtualClientEngineActor
from flwr.supercore.task_identity import TaskIdentity
from ray import cloudpickle

from common import keys
from server import raybatch, raytransport
from tests.helpers import small_run_config

RUN = 1
_LARGE = Array(np.zeros(raytransport.SHARE_ABOVE // 4, dtype=np.float32))
"""An array past ``SHARE_ABOVE``: sent inline only inside ``raytransport.inline_arrays``."""


class _Ref:
    """What ``ray.put`` returns, as far as ``raytransport`` reads it."""

    def binary(self):
        return b"\x01" * 28


_REF = _Ref()
FLOWERS_WORKER = getattr(vce_api.worker, "flowers", vce_api.worker)
"""Flower's own engine worker, even where :func:`server.raybatch.install` has replaced it."""


def _message(node, message_type=keys.MSG_IDENTITY, number=0, content=None):
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, RUN, 1
    content = RecordDict({keys.CONFIG: ConfigRecord({})}) if content is None else content
    msg = Message(content, dst_node_id=node, message_type=message_type)
    msg.metadata.__dict__["_message_id"] = f"m{node}-{number}"
    return msg


class _Store:
    """Flower's ``DeprecatedRunInfoStore`` as the worker uses it: one Context per run."""

    def __init__(self, context):
        self.context, self.updates = context, 0

    def retrieve_context(self, run_id):
        assert run_id == RUN
        return self.context

    def update_context(self, run_id, context):
        assert run_id == RUN
        self.context, self.updates = context, self.updates + 1


def _stores(partitions, rc):
    """Node 100 + p holds partition p; a partition past the federation's makes its client fail."""
    return {
        100 + p: _Store(
            Context(RUN, 100 + p, {"partition-id": p, "num-partitions": rc["num-clients"]}, RecordDict(), rc)
        )
        for p in partitions
    }


class _Future:
    def __init__(self, value):
        self.value = value


class _Actor:
    """A Ray actor that runs Flower's own actor code on a pickled copy of its arguments, as Ray would."""

    def __init__(self, calls):
        self.calls = calls
        self.run = self

    def remote(self, *args):
        self.calls.append(args)
        args = cloudpickle.loads(cloudpickle.dumps(args))
        try:
            return _Future(cloudpickle.loads(cloudpickle.dumps(VirtualClientEngineActor().run(*args))))
        except Exception as ex:  # noqa: BLE001 - ray.get raises it in the caller
            return _Future(ex)


class _Pool:
    """Flower's ``BasicActorPool``: an idle actor popped per call and put back when its result is read."""

    def __init__(self, size, broken=False, lost_reads=0):
        self.calls = []
        self.pool = [_Actor(self.calls) for _ in range(size)]
        self.num_actors = size
        self.busy = {}
        self.broken = broken
        self.lost_reads = lost_reads  # calls whose actor fails to read an array sent by reference
        self.inline = []  # whether each call's arrays were sent inline

    def submit(self, actor_fn, job):
        self.inline.append(raytransport.send_array(_LARGE, lambda data: _REF)[4] is None)
        actor = self.pool.pop()
        future = actor_fn(actor, *job)
        self.busy[id(future)] = actor
        return future

    def fetch_result_and_return_actor_to_pool(self, future):
        if self.broken:
            raise RuntimeError("the actor died")
        if self.lost_reads:
            self.lost_reads -= 1
            raise RuntimeError(
                f"ray.exceptions.RaySystemError: System error: {raytransport.FETCH_FAILED} (object {'01' * 28}; lost)"
            )
        if isinstance(future.value, Exception):
            raise future.value
        _, out, context = future.value
        self.add_actor_back_to_pool(future)
        return out, context

    def add_actor_back_to_pool(self, future):
        self.pool.append(self.busy.pop(id(future)))


def _backend(pool, app_fn=raybatch.umbel_client_app):
    """Flower's own ``RayBackend`` around :class:`_Pool`, with umbel's loader."""
    backend = object.__new__(RayBackend)
    backend.pool, backend.app_fn = pool, app_fn
    return backend


def _drain(worker, messages, stores, backend, metrics=None):
    """Run ``worker`` on a queue of ``messages`` until each is answered; the replies by the message answered."""
    queue, replies, f_stop = Queue(), Queue(), threading.Event()
    metrics = VceMetrics() if metrics is None else metrics
    for msg in messages:
        queue.put(msg)
    thread = threading.Thread(target=worker, args=(queue, replies, stores, backend, f_stop, metrics))
    thread.start()
    answered = {}
    for _ in messages:
        reply = replies.get(timeout=60)
        answered.setdefault(reply.metadata.reply_to_message_id, []).append(reply)
    f_stop.set()
    thread.join()
    assert replies.empty()
    return answered


def _summary(reply):
    if reply.has_error():
        return reply.metadata.dst_node_id, reply.error.code, reply.error.reason
    if keys.METRICS in reply.content:
        metrics = reply.content[keys.METRICS]
        return reply.metadata.dst_node_id, metrics[keys.NUM_EXAMPLES], metrics[keys.LOSS], metrics[keys.ACCURACY]
    ident = reply.content[keys.IDENTITY]
    return reply.metadata.dst_node_id, ident[keys.PARTITION_ID], ident[keys.NUM_TRAIN]


def _evaluate(node, rc):
    from server.experiment import Experiment

    model = Experiment.from_run_config(rc).initial_model()
    return _message(node, "evaluate", 2, RecordDict({keys.ARRAYS: model, keys.CONFIG: ConfigRecord({})}))


def _sizes(pool):
    """The messages of each call to the pool's actors, in order."""
    return [len(call[1]) if isinstance(call[1], list) else 1 for call in pool.calls]


def test_a_batch_is_the_waiting_messages_of_a_batched_type_and_stops_at_another_type():
    queue = Queue()
    for node in (2, 3, 4):
        queue.put(_message(node))
    other = _message(5, "train")
    queue.put(other)
    queue.put(_message(6))
    batch, held = raybatch.take_batch(queue, _message(1))
    assert [m.metadata.dst_node_id for m in batch] == [1, 2, 3, 4] and held is other
    batch, held = raybatch.take_batch(queue, held)
    assert batch == [other] and held is None and queue.qsize() == 1, "a train message goes alone"
    queue.put(other)
    batch, held = raybatch.take_batch(queue, _message(7), size=1)
    assert [m.metadata.dst_node_id for m in batch] == [7] and held is None and queue.qsize() == 2
    batch, held = raybatch.take_batch(queue, _message(8), size=5)
    assert [m.metadata.dst_node_id for m in batch] == [8, 6] and held is other and queue.empty()
    queue.put(_message(9, "train"))
    batch, held = raybatch.take_batch(queue, other, types=frozenset({"train"}))
    assert [m.metadata.dst_node_id for m in batch] == [5, 9], "the types asked for"


def test_quick_types_are_batched_only_in_a_run_that_delays_no_client():
    rc = small_run_config()
    assert raybatch.batched_types(_message(100, "evaluate"), _stores([0], rc)) == raybatch.BATCHED | raybatch.QUICK
    assert "evaluate" in raybatch.QUICK and "train" not in raybatch.QUICK
    assert keys.MSG_IDENTITY in raybatch.BATCHED
    slow = small_run_config(**{"slow-fraction": 0.2, "slow-delay": 5.0})
    assert raybatch.batched_types(_message(100, "evaluate"), _stores([0], slow)) == raybatch.BATCHED
    for harmless in ({"slow-fraction": 0.2}, {"slow-delay": 5.0}, {"fail-fraction": 0.5}):
        got = raybatch.batched_types(_message(100, "evaluate"), _stores([0], small_run_config(**harmless)))
        assert got == raybatch.BATCHED | raybatch.QUICK, harmless
    broken = small_run_config(**{"slow-fraction": "lots"})
    assert raybatch.batched_types(_message(100, "evaluate"), _stores([0], broken)) == raybatch.BATCHED
    assert raybatch.batched_types(_message(999, "evaluate"), _stores([0], rc)) == raybatch.BATCHED, "an unknown node"

    stores = _stores([0], rc)
    read = []
    stores[100].retrieve_context = lambda run_id: read.append(run_id) or stores[100].context
    for kind in (keys.MSG_IDENTITY, "train"):
        assert raybatch.batched_types(_message(100, kind), stores) == raybatch.BATCHED
    assert read == [], "only a quick message reads its run's fault keys"
    assert raybatch.batched_types(_message(100, "evaluate"), stores) == raybatch.BATCHED | raybatch.QUICK
    assert read == [RUN]


def test_a_batch_is_at_most_a_workers_share_of_the_queue():
    queue = Queue()
    assert raybatch.batch_size(queue, 2) == 1
    for node in range(9):
        queue.put(_message(node))
    assert raybatch.batch_size(queue, 2) == 5 and raybatch.batch_size(queue, 1) == 10
    assert raybatch.batch_size(queue, 20) == 1
    for node in range(100):
        queue.put(_message(node))
    assert raybatch.batch_size(queue, 2) == raybatch.BATCH


def test_the_batched_worker_answers_as_flowers_worker_reply_for_reply():
    rc = small_run_config()
    partitions = [*range(rc["num-clients"]), rc["num-clients"] + 3]  # the last claims a partition that is not there
    messages = [_message(100 + p) for p in partitions]
    messages.insert(2, _message(101, "query.no_such_action", 1))  # a type the ClientApp has no handler for
    messages.insert(4, _message(999))  # a node the engine has no Context for
    messages += [_evaluate(100 + p, rc) for p in partitions[:3]]
    flowers_pool, batched_pool = _Pool(1), _Pool(1)
    metrics = VceMetrics()
    flowers = _drain(FLOWERS_WORKER, messages, _stores(partitions, rc), _backend(flowers_pool))
    stores = _stores(partitions, rc)
    ours = _drain(raybatch.worker, messages, stores, _backend(batched_pool), metrics)
    assert metrics.clientapp_runtime > 0
    assert sorted(ours) == sorted(flowers) == sorted(m.metadata.message_id for m in messages)
    assert all(len(replies) == 1 for replies in ours.values()), "each message is answered once"
    for message_id, [reply] in ours.items():
        assert _summary(reply) == _summary(flowers[message_id][0])
        assert reply.metadata.message_id not in (message_id, flowers[message_id][0].metadata.message_id, "")
    errors = {m: r.error.code for m, [r] in ours.items() if r.has_error()}
    assert errors == {
        "m999-0": ErrorCode.UNKNOWN,
        "m101-1": ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
        f"m{100 + partitions[-1]}-0": ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
    }
    assert _summary(ours["m103-0"][0])[1] == 3, "the reply is its own node's partition"
    assert _sizes(batched_pool) == [2, 1, len(partitions) - 2, 3], "batches around the other type, sent alone"
    assert len(flowers_pool.calls) == len(messages) - 1, "no call for the node without a Context"
    updates = [stores[100 + p].updates for p in partitions]
    assert updates == [2, 2, 2] + [1] * (len(partitions) - 4) + [0], "a failed client's Context stays as it was"


def test_evaluate_messages_go_one_to_a_call_in_a_run_that_delays_clients():
    rc = small_run_config(**{"slow-fraction": 0.5, "slow-delay": 0.01})
    partitions = list(range(4))
    messages = [_message(100 + p) for p in partitions] + [_evaluate(100 + p, rc) for p in partitions]
    pool = _Pool(1)
    ours = _drain(raybatch.worker, messages, _stores(partitions, rc), _backend(pool))
    assert len(ours) == 8 and not any(reply.has_error() for [reply] in ours.values())
    assert _sizes(pool) == [4, 1, 1, 1, 1], "identity queries in one batch: never delayed"


def _counting_app():
    """A ClientApp that counts the identity queries each node has answered in its Context's state."""
    from flwr.app import MetricRecord
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.query(keys.IDENTITY_ACTION)
    def count(msg, context):
        seen = context.state.config_records.get("seen", ConfigRecord({"n": 0}))
        context.state.config_records["seen"] = ConfigRecord({"n": int(seen["n"]) + 1})
        return Message(RecordDict({keys.METRICS: MetricRecord({"n": int(seen["n"]) + 1})}), reply_to=msg)

    return app


def test_each_node_keeps_the_context_its_clientapp_returned_even_with_two_messages_waiting(monkeypatch):
    rc = small_run_config()
    app = _counting_app()
    monkeypatch.setattr(raybatch, "umbel_client_app", lambda: app)
    messages = [_message(100 + p, number=n) for n in range(3) for p in range(4)]
    counts = {}
    for worker in (FLOWERS_WORKER, raybatch.worker):
        stores = _stores(range(4), rc)
        pool = _Pool(1)
        replies = _drain(worker, messages, stores, _backend(pool, raybatch.umbel_client_app))
        counts[worker] = {m: int(r.content[keys.METRICS]["n"]) for m, [r] in replies.items()}
        assert [int(stores[100 + p].context.state["seen"]["n"]) for p in range(4)] == [3, 3, 3, 3]
    assert (
        counts[raybatch.worker]
        == counts[FLOWERS_WORKER]
        == {f"m{100 + p}-{n}": n + 1 for n in range(3) for p in range(4)}
    )
    assert _sizes(pool) == [4, 4, 4], "a batch stops at a node's second message"


def test_a_batch_whose_call_fails_gets_an_error_reply_for_every_message_and_its_actor_back():
    rc = small_run_config()
    partitions = list(range(3))
    pool = _Pool(2, broken=True)
    ours = _drain(raybatch.worker, [_message(100 + p) for p in partitions], _stores(partitions, rc), _backend(pool))
    for [reply] in ours.values():
        assert reply.error.code == ErrorCode.UNKNOWN and "the actor died" in reply.error.reason
    assert len(pool.pool) == 2 and not pool.busy


@pytest.mark.parametrize("nodes", [1, 3])
def test_a_call_whose_actor_could_not_read_a_referenced_array_is_sent_again_inline(nodes, monkeypatch):
    forgotten = []
    forget = raytransport.forget_lost
    monkeypatch.setattr(raytransport, "forget_lost", lambda error: forgotten.append(forget(error)))
    rc = small_run_config()
    partitions = list(range(nodes))
    pool = _Pool(2, lost_reads=1)
    ours = _drain(raybatch.worker, [_message(100 + p) for p in partitions], _stores(partitions, rc), _backend(pool))
    assert all(not reply.has_error() for [reply] in ours.values()) and len(ours) == nodes
    # the failed call, its inline retry, then (3 nodes) the rest of the queue by reference again
    assert pool.inline[:2] == [False, True] and not any(pool.inline[2:]) and len(pool.pool) == 2 and not pool.busy
    assert forgotten == [1], "the lost content is dropped, so that later messages put it again"
    other = _Pool(2, broken=True)  # any other failure is not retried
    _drain(raybatch.worker, [_message(100 + p) for p in partitions], _stores(partitions, rc), _backend(other))
    assert other.inline and not any(other.inline)


def test_the_worker_sends_at_most_batch_messages_a_call(monkeypatch):
    rc = small_run_config()
    monkeypatch.setattr(raybatch, "BATCH", 2)
    partitions = list(range(5))
    pool = _Pool(1)
    ours = _drain(raybatch.worker, [_message(100 + p) for p in partitions], _stores(partitions, rc), _backend(pool))
    assert len(ours) == 5 and not any(reply.has_error() for [reply] in ours.values())
    assert _sizes(pool) == [2, 2, 1]


@pytest.mark.parametrize("umbels", [True, False])
def test_install_runs_the_batched_worker_for_umbels_client_app_only(monkeypatch, umbels):
    calls = []
    monkeypatch.setattr(vce_api, "worker", lambda *args: calls.append(("flower", args[3])))
    monkeypatch.setattr(raybatch, "worker", lambda *args: calls.append(("umbel", args[3])))
    raybatch.install()
    raybatch.install()  # installing twice keeps Flower's worker as the fallback
    backend = _backend(_Pool(1), raybatch.umbel_client_app if umbels else lambda: None)
    vce_api.worker(Queue(), Queue(), {}, backend, threading.Event(), VceMetrics())
    assert calls == [("umbel" if umbels else "flower", backend)]
