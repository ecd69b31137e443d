"""Quick messages go to Flower's Ray actors several to a call, not one call each.

Flower's simulation engine sends every message to a Ray actor in its own call. For a message the
ClientApp answers at once, such as the identity query every client gets as a run starts, the call
is the cost: in calls of up to 32, an identity query costs the sending process about a tenth of
the CPU and of the wall time it costs alone (``python -m benchmarks.ray_batch``, record
``ray-batch``; 1.7-2.9 ms of CPU a call on this project's 2-core box).

:func:`worker`, Flower's engine worker for umbel's ClientApp, takes the messages of the first
one's type that wait in the engine's queue, up to :data:`BATCH` and to its share of the queue
among the engine's workers, sends them in one call (:func:`batch_app` runs umbel's ClientApp on
each in turn, in the actor) and stores each reply, each updated Context and each error as
Flower's worker does for one. Identity queries (:data:`BATCHED`) always go in batches; evaluate
messages and the final models (:data:`QUICK`) too, unless the run delays clients
(``slow-fraction`` and ``slow-delay``, fault drills), since the messages queued behind a sleeping
client in its call would miss their deadlines with it. Train messages and signal queries, which
take a client long, go one to a call, as in Flower. An actor that dies fails every message of its
call, as Flower's engine fails the one message it was running. A call whose actor could not read a
model array sent by reference (``raytransport.ArrayFetchError``, before any of its messages ran) is
sent once more with its arrays inline.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from logging import ERROR, WARNING
from queue import Empty, Queue
from typing import Any
from uuid import uuid4

from flwr.app import Context, Error, Message, MessageType
from flwr.clientapp.client_app import ClientAppException, LoadClientAppError
from flwr.common.constant import ErrorCode
from flwr.supercore import log

from common import keys
from common.config import FaultParams
from server import raytransport

BATCH = 32
"""The most messages sent to an actor in one call."""
BATCHED: frozenset[str] = frozenset({keys.MSG_IDENTITY})
"""Message types always sent in batches: answered at once, and never delayed by injected faults (``client.faults``)."""
QUICK: frozenset[str] = frozenset({MessageType.EVALUATE, keys.query_type(keys.MODEL_ACTION)})
"""Message types also sent in batches when the run delays no client: one pass over a test split, a file written."""

Outcome = tuple["Message | None", Context, "str | None"]
"""One message's outcome in the actor: ``(reply, context, None)``, or ``(None, context, error text)``."""


def umbel_client_app() -> Any:
    """The ClientApp of umbel, imported in the process that runs it (a Ray actor imports it once)."""
    from client.app import app

    return app


def batch_app() -> Callable[..., list[Outcome]]:
    """A stand-in ClientApp for Flower's actor: ``message`` and ``context`` are equal-length lists.

    It runs umbel's ClientApp on each pair in turn; an exception of one message is that message's
    error text (Flower's actor makes the same text its ``ClientAppException``) and the others go on.
    """

    def run(message: Sequence[Message], context: Sequence[Context]) -> list[Outcome]:
        app = umbel_client_app()
        outcomes: list[Outcome] = []
        for msg, ctx in zip(message, context, strict=True):
            try:
                outcomes.append((app(message=msg, context=ctx), ctx, None))
            except Exception as ex:  # noqa: BLE001 - one client's failure is its own reply
                outcomes.append((None, ctx, str(ex)))
        return outcomes

    return run


def batched_types(message: Message, stores: dict[int, Any]) -> frozenset[str]:
    """The types sent in batches in ``message``'s run: :data:`BATCHED`, and :data:`QUICK` when no client is delayed.

    Only a message of a :data:`QUICK` type reads the run's fault keys. A node or run the stores do
    not know, or fault keys that do not parse, give :data:`BATCHED` alone.
    """
    if message.metadata.message_type not in QUICK:
        return BATCHED
    try:
        context = stores[message.metadata.dst_node_id].retrieve_context(run_id=message.metadata.run_id)
        delays = FaultParams.from_run_config(context.run_config).delays
    except Exception:  # noqa: BLE001 - handling the message reports it
        return BATCHED
    return BATCHED if delays else BATCHED | QUICK


def take_batch(
    queue: Queue[Message], first: Message, size: int = BATCH, types: frozenset[str] = BATCHED
) -> tuple[list[Message], Message | None]:
    """``first``, and while its type is in ``types``, up to ``size - 1`` more of its type that wait in ``queue``.

    The batch stops at a message of another type or to a node already in it.

    Returns
    -------
    batch : list of Message
        ``first`` alone when its type is not in ``types``.
    held : Message or None
        A message taken from ``queue`` that cannot join the batch: the caller sends it next.
    """
    kind = first.metadata.message_type
    batch = [first]
    if kind not in types:
        return batch, None
    nodes = {first.metadata.dst_node_id}
    while len(batch) < size:
        try:
            message = queue.get_nowait()
        except Empty:
            break
        # a node's second message must see the Context its first one leaves
        if message.metadata.message_type != kind or message.metadata.dst_node_id in nodes:
            return batch, message
        nodes.add(message.metadata.dst_node_id)
        batch.append(message)
    return batch, None


def batch_size(queue: Queue[Message], workers: int) -> int:
    """Messages for the next call: :data:`BATCH` at most, and no more than a worker's share of the queue (+1).

    A batch larger than its share would leave the other workers' actors idle.
    """
    return max(1, min(BATCH, (queue.qsize() + 1) // max(workers, 1)))


def error_reply(message: Message, ex: Exception) -> Message:
    """Flower's engine's reply to ``message`` when handling it raised ``ex`` (``vce_api.worker``'s codes).

    Through Ray, Flower's reason names Ray's wrapper of the ClientApp's exception and its remote
    traceback; for a message of a batch it names the ClientApp's exception and its text.
    """
    log(ERROR, ex)
    if isinstance(ex, ClientAppException):
        code = ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    elif isinstance(ex, LoadClientAppError):
        code = ErrorCode.LOAD_CLIENT_APP_EXCEPTION
    else:
        code = ErrorCode.UNKNOWN
    return Message(Error(code=code, reason=f"{type(ex)}:<'{ex}'>"), reply_to=message)


def call_batch(backend: Any, batch: list[Message], contexts: list[Context]) -> list[Outcome]:
    """Send ``batch`` to an idle actor of ``backend``'s pool in one call, as ``RayBackend.process_message`` does one."""
    pool = backend.pool
    future = None
    try:
        job = (batch_app, batch, "batch", contexts)
        future = pool.submit(lambda a, fn, msgs, cid, ctxs: a.run.remote(fn, msgs, cid, ctxs), job)
        outcomes, _ = pool.fetch_result_and_return_actor_to_pool(future)
    except Exception:
        if future is not None:
            pool.add_actor_back_to_pool(future)
        raise
    return list(outcomes)


def run_messages(backend: Any, messages: list[Message], contexts: list[Context]) -> list[Outcome]:
    """One message through Flower's ``process_message``, more in one call (:func:`call_batch`)."""
    if len(messages) == 1:
        reply, context = backend.process_message(messages[0], contexts[0])
        return [(reply, context, None)]
    if not messages:
        return []
    outcomes = call_batch(backend, messages, contexts)
    if len(outcomes) != len(messages):
        raise RuntimeError(f"{len(outcomes)} outcomes came back for a batch of {len(messages)} messages")
    return outcomes


def handle(batch: list[Message], stores: dict[int, Any], backend: Any, metrics: Any) -> list[Message]:
    """Flower's worker for one message or many: run ``batch`` and store each node's Context back.

    Parameters
    ----------
    batch : list of Message
        Messages of one type, each to its own node.
    stores : dict of int to DeprecatedRunInfoStore
        The engine's store of each node's Contexts, by node id.
    backend : RayBackend
        Flower's backend; one message goes through its ``process_message``, more in one call.
    metrics : VceMetrics
        Gets the seconds the call took.

    Returns
    -------
    list of Message
        One reply for each message of ``batch``, in its order: the ClientApp's, or Flower's error
        reply. A message whose Context cannot be found fails alone; a call that fails (its actor
        died) fails every message it carried.
    """
    replies: dict[int, Message] = {}
    sent: list[int] = []
    contexts: list[Context] = []
    for i, message in enumerate(batch):
        try:
            contexts.append(stores[message.metadata.dst_node_id].retrieve_context(run_id=message.metadata.run_id))
            sent.append(i)
        except Exception as ex:  # noqa: BLE001 - Flower's worker answers every failure with an error reply
            log(ERROR, traceback.format_exc())
            replies[i] = error_reply(message, ex)
    messages = [batch[i] for i in sent]
    started = time.perf_counter()
    try:
        try:
            outcomes = run_messages(backend, messages, contexts)
        except Exception as ex:  # noqa: BLE001 - only an actor's failed read of a referenced array is retried
            if not raytransport.fetch_failed(ex):
                raise
            log(
                WARNING,
                "an actor could not read a model array sent by reference; sending its %d message(s) again inline",
                len(messages),
            )
            raytransport.forget_lost(ex)  # later messages with that content put it again
            with raytransport.inline_arrays():
                outcomes = run_messages(backend, messages, contexts)
    except Exception as ex:  # noqa: BLE001
        log(ERROR, traceback.format_exc())
        outcomes = []
        replies.update((i, error_reply(batch[i], ex)) for i in sent)
    finally:
        if messages:
            metrics.add_clientapp_runtime(time.perf_counter() - started)
    for i, (reply, context, error) in zip(sent, outcomes, strict=False):
        message = batch[i]
        if error is not None or reply is None:
            replies[i] = error_reply(message, ClientAppException(str(error)))
            continue
        stores[message.metadata.dst_node_id].update_context(message.metadata.run_id, context=context)
        replies[i] = reply
    return [replies[i] for i in range(len(batch))]


def worker(
    messageins_queue: Queue[Message],
    messageres_queue: Queue[Message],
    node_info_store: dict[int, Any],
    backend: Any,
    f_stop: Any,
    metrics: Any,
) -> None:
    """Flower's engine worker (``vce_api.worker``, same arguments), sending quick messages in batches.

    It takes a message from ``messageins_queue``, with it the messages of its type waiting there that
    :func:`take_batch` allows, and puts one reply for each (a new message id) into
    ``messageres_queue`` until ``f_stop`` is set.
    """
    held: Message | None = None
    while not f_stop.is_set():
        if held is None:
            try:
                held = messageins_queue.get(timeout=1.0)
            except Empty:
                continue
        size = batch_size(messageins_queue, backend.num_workers)
        batch, held = take_batch(messageins_queue, held, size, batched_types(held, node_info_store))
        for reply in handle(batch, node_info_store, backend, metrics):
            reply.metadata.__dict__["_message_id"] = str(uuid4())
            messageres_queue.put(reply)


def install() -> None:
    """Make Flower's engine run :func:`worker` for a backend whose loader is :func:`umbel_client_app`.

    Any other backend keeps Flower's worker. Call it once the backend is built.
    """
    from flwr.server.superlink.fleet.vce import vce_api

    flowers = getattr(vce_api.worker, "flowers", vce_api.worker)

    def choose(queue: Any, replies: Any, stores: Any, backend: Any, f_stop: Any, metrics: Any) -> None:
        umbels = getattr(backend, "app_fn", None) is umbel_client_app and hasattr(backend, "pool")
        (worker if umbels else flowers)(queue, replies, stores, backend, f_stop, metrics)

    choose.flowers = flowers  # type: ignore[attr-defined]
    vce_api.worker = choose  # type: ignore[assignment]
