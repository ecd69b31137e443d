"""The deadline of the message a ClientApp is handling: its ``created_at + ttl``.

``client.faults.skip_expired`` (a ClientApp mod) sets it for the handler's duration, and local
training stops between steps once it has passed (``common.training.train``'s ``deadline``): a
client whose training outlasts the round timeout frees its worker at the deadline instead of
holding it into the next rounds, so it costs only its own reply. Flower cannot withdraw work
already started (its simulation runs each message to the end on a Ray actor), so the client
withdraws it. Times are the server's clock (``created_at``) read on the client's: in a
deployment, a client clock far behind or ahead of the server's moves its deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from flwr.app import Message

_DEADLINE: ContextVar[float | None] = ContextVar("umbel_message_deadline", default=None)


def deadline_of(msg: Message) -> float:
    """``time.time()`` at which ``msg``'s time to live runs out."""
    return float(msg.metadata.created_at + msg.metadata.ttl)


@contextmanager
def handling(msg: Message) -> Iterator[float]:
    """Make ``msg``'s deadline the current one while its handler runs."""
    deadline = deadline_of(msg)
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float | None:
    """The deadline of the message being handled; None outside a handler."""
    return _DEADLINE.get()
