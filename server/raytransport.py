"""Large arrays go to Flower's Ray actors once per content, not once per message.

In umbel's simulation the messages of one exchange carry the same model: the identity query, a
signal query and the evaluate messages of one cluster share one ``RecordDict``. Ray still pickles
each message whole for its actor call: 636 KB per client with Fashion-MNIST's DNN, 6.4 GB for an
exchange with 10,000 clients, copied in the simulation process and read again in the actor.

:func:`install` has Ray's pickler, in the ``flwr-simulation`` process only, send each Flower
``Array`` of at least :data:`SHARE_ABOVE` bytes as a reference to one copy in Ray's object store
(:func:`send_array`: put once per ``data`` object, the last :data:`SENT_BYTES` kept); the actor
rebuilds the same ``Array`` (:func:`receive_array`), reading each content once (the last
:data:`RECEIVED_BYTES` kept). Smaller arrays, and everything an actor sends back, are pickled as
before. The message, its content and its values are unchanged.

An actor whose read of a referenced array fails or passes :data:`FETCH_TIMEOUT_S` raises
:class:`ArrayFetchError` while it deserialises its call, before any message of it runs; the sender
(``server.raybatch``) then sends the call again with every array inline (:func:`inline_arrays`;
why: docs/running.md).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SHARE_ABOVE = 128 * 1024
"""Bytes from which an ``Array`` goes by reference. From Ray's own limit of about 100 KB, Ray puts a
larger argument into its object store on every call: 4.1-4.9 ms of the sending process's CPU a call
against 1.0-1.3 ms by reference, while at 16 KiB a reference costs more than inline
(``python -m benchmarks.ray_share``, record ``ray-share``: the ratio varies about 30% run to run)."""
SENT_BYTES = 512 * 2**20
"""Bytes of sent contents whose object-store copy the simulation process keeps (oldest dropped first)."""
RECEIVED_BYTES = 256 * 2**20
"""Bytes of received contents an actor keeps (oldest dropped first)."""
FETCH_TIMEOUT_S = 60.0
"""Seconds an actor waits for a referenced array (a local read takes milliseconds)."""
FETCH_FAILED = "umbel: an array sent by reference could not be fetched"
"""The start of :class:`ArrayFetchError`'s text, which the sender finds in Ray's error of the failed call."""


class ArrayFetchError(RuntimeError):
    """An actor could not read an array sent by reference."""


def fetch_failed(error: BaseException) -> bool:
    """Whether ``error`` (Ray's, of a call) comes from an actor's failed read of an array sent by reference."""
    return FETCH_FAILED in str(error)


def forget_lost(error: BaseException) -> int:
    """Drop from the sent contents those whose reference ``error`` names as unreadable, so that the next
    message with that content puts it again; the number dropped."""
    lost = set(re.findall(rf"{re.escape(FETCH_FAILED)} \(object ([0-9a-f]+)", str(error)))
    return _SENT.drop(lambda value: value[1].binary().hex() in lost) if lost else 0


_LOCAL = threading.local()


@contextmanager
def inline_arrays() -> Iterator[None]:
    """In this thread, :func:`send_array` sends every array inline (the retry after :class:`ArrayFetchError`)."""
    before = getattr(_LOCAL, "inline", False)
    _LOCAL.inline = True
    try:
        yield
    finally:
        _LOCAL.inline = before


Sent = tuple[str, tuple[int, ...], str, "bytes | None", Any]
"""What goes in the pickle: ``(dtype, shape, stype, data or None, object reference or None)``."""


class _Kept:
    """A thread-safe cache of at most ``limit`` bytes, oldest entry dropped first."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.lock = threading.Lock()

    def drop(self, matches: Callable[[Any], bool]) -> int:
        """Drop every entry whose value ``matches``; the number dropped."""
        with self.lock:
            gone = [key for key, (value, _) in self.entries.items() if matches(value)]
            for key in gone:
                self.size -= self.entries.pop(key)[1]
            return len(gone)

    def get(self, key: Any, make: Callable[[], tuple[Any, int]]) -> Any:
        """The value kept for ``key``, made (once, whichever thread asks first) and kept if there is none."""
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key][0]
            # made under the lock, so that one content is put once and every reference sent stays here
            # while kept (two threads sending one new content would otherwise each put it)
            value, size = make()
            self.entries[key] = (value, size)
            self.size += size
            while self.size > self.limit and len(self.entries) > 1:
                _, (_, dropped) = self.entries.popitem(last=False)
                self.size -= dropped
            return value


_SENT = _Kept(SENT_BYTES)
_RECEIVED = _Kept(RECEIVED_BYTES)


def send_array(array: Any, put: Callable[[bytes], Any] | None = None) -> Sent:
    """What Ray pickles for a Flower ``Array``: its data, or at ``SHARE_ABOVE`` bytes and more a reference.

    The reference is made once per ``data`` object (``put``: Ray's ``ray.put``) while it is kept; the
    entry holds ``data`` itself, so its ``id`` is not reused by another object meanwhile.
    """
    data = array.data
    if len(data) < SHARE_ABOVE or getattr(_LOCAL, "inline", False):
        return (array.dtype, tuple(array.shape), array.stype, data, None)
    if put is None:
        import ray

        put = ray.put
    store: Callable[[bytes], Any] = put

    def make() -> tuple[Any, int]:
        return (data, store(data)), len(data)

    _, ref = _SENT.get(id(data), make)
    return (array.dtype, tuple(array.shape), array.stype, None, ref)


def receive_array(sent: Sent, get: Callable[[Any], bytes] | None = None) -> Any:
    """The ``Array`` that :func:`send_array` sent; referenced content read once per process (``get``: ``ray.get``)."""
    from flwr.app import Array

    dtype, shape, stype, inline, ref = sent
    data: bytes
    if ref is None:
        data = inline if inline is not None else b""
    else:
        if get is None:
            import ray

            def get(ref: Any) -> bytes:
                return ray.get(ref, timeout=FETCH_TIMEOUT_S)

        fetch = get

        def make() -> tuple[Any, int]:
            try:
                content = fetch(ref)
            except Exception as ex:  # noqa: BLE001 - Ray's timeout, lost-object and fetch errors alike
                raise ArrayFetchError(
                    f"{FETCH_FAILED} (object {ref.binary().hex()}; {type(ex).__name__}: {ex})"
                ) from ex
            return content, len(content)

        data = _RECEIVED.get(ref.binary(), make)
    return Array(dtype=dtype, shape=tuple(shape), stype=stype, data=data)


def install() -> bool:
    """Have Ray's pickler in this process (Ray started) send Flower's ``Array`` by :func:`send_array`."""
    import ray
    from flwr.app import Array

    ray.util.register_serializer(Array, serializer=send_array, deserializer=receive_array)
    return True
