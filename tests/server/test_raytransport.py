"""server.raytransport: a Flower Array sent to a Ray actor by reference arrives as the same Array."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, Metadata, RecordDict

from server import raytransport


class _Ref:
    """A stand-in for Ray's ObjectRef: an id of the object put."""

    def __init__(self, number: int) -> None:
        self.number = number

    def binary(self) -> bytes:
        return self.number.to_bytes(8, "little")


class _Store:
    """Ray's object store as ``put`` and ``get`` see it, counting both."""

    def __init__(self) -> None:
        self.objects: list[bytes] = []
        self.gets = 0

    def put(self, data: bytes) -> _Ref:
        self.objects.append(data)
        return _Ref(len(self.objects) - 1)

    def get(self, ref: _Ref) -> bytes:
        self.gets += 1
        return bytes(self.objects[ref.number])  # a copy, as a read from another process


@pytest.fixture(autouse=True)
def _empty_caches(monkeypatch):
    monkeypatch.setattr(raytransport, "_SENT", raytransport._Kept(raytransport.SENT_BYTES))
    monkeypatch.setattr(raytransport, "_RECEIVED", raytransport._Kept(raytransport.RECEIVED_BYTES))


def _array(values: int, seed: int = 0) -> Array:
    return Array(np.random.default_rng(seed).standard_normal(values).astype(np.float32))


def _same(a: Array, b: Array) -> bool:
    return (a.dtype, tuple(a.shape), a.stype, a.data) == (b.dtype, tuple(b.shape), b.stype, b.data)


def test_a_small_array_travels_inline_and_a_large_one_by_one_reference_per_content():
    store = _Store()
    small = _array(raytransport.SHARE_ABOVE // 4 - 64)
    assert len(small.data) < raytransport.SHARE_ABOVE
    sent = raytransport.send_array(small, store.put)
    assert sent[3] == small.data and sent[4] is None and store.objects == []

    large, other = _array(200 * 784, seed=1), _array(200 * 784, seed=2)
    refs = [raytransport.send_array(large, store.put)[4] for _ in range(5)]
    assert len(store.objects) == 1 and store.objects[0] is large.data
    assert all(r is refs[0] for r in refs), "one reference for every message with the same content"
    assert raytransport.send_array(other, store.put)[4] is not refs[0] and len(store.objects) == 2


def test_an_array_sent_by_reference_is_rebuilt_equal_and_read_once_per_process():
    store = _Store()
    large, other = _array(200 * 784, seed=1), _array(200 * 784, seed=2)
    got = [raytransport.receive_array(raytransport.send_array(large, store.put), store.get) for _ in range(4)]
    assert all(_same(g, large) for g in got) and store.gets == 1
    np.testing.assert_array_equal(got[0].numpy(), large.numpy())
    second = raytransport.receive_array(raytransport.send_array(other, store.put), store.get)
    assert _same(second, other) and not _same(second, large) and store.gets == 2
    small = _array(10)
    assert _same(raytransport.receive_array(raytransport.send_array(small, store.put), store.get), small)
    assert store.gets == 2


def test_the_caches_drop_their_oldest_content_past_their_size_and_stay_right(monkeypatch):
    store = _Store()
    arrays = [_array(200 * 784, seed=s) for s in range(3)]
    size = len(arrays[0].data)
    monkeypatch.setattr(raytransport, "_SENT", raytransport._Kept(2 * size))
    monkeypatch.setattr(raytransport, "_RECEIVED", raytransport._Kept(2 * size))
    for a in arrays:
        assert _same(raytransport.receive_array(raytransport.send_array(a, store.put), store.get), a)
    assert len(store.objects) == 3 and store.gets == 3
    assert raytransport._SENT.size == 2 * size == raytransport._RECEIVED.size
    # the first was dropped from both: sent and read again, still its own content
    assert _same(raytransport.receive_array(raytransport.send_array(arrays[0], store.put), store.get), arrays[0])
    assert len(store.objects) == 4 and store.gets == 4
    # the last is still kept
    assert _same(raytransport.receive_array(raytransport.send_array(arrays[2], store.put), store.get), arrays[2])
    assert len(store.objects) == 4 and store.gets == 4


def test_two_threads_sending_one_new_content_put_it_once_and_send_the_kept_reference():
    import threading
    import time

    store, started = _Store(), threading.Barrier(2)
    large = _array(200 * 784, seed=3)

    def slow_put(data: bytes) -> _Ref:
        time.sleep(0.2)  # both threads are past their lookup before the first put ends
        return store.put(data)

    refs: list[object] = []

    def send() -> None:
        started.wait()
        refs.append(raytransport.send_array(large, slow_put)[4])

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.objects) == 1 and refs[0] is refs[1]
    assert raytransport._SENT.entries[id(large.data)][0][1] is refs[0]


def test_a_failed_read_of_a_referenced_array_raises_the_error_the_sender_retries_on():
    store = _Store()
    large = _array(200 * 784, seed=4)
    sent = raytransport.send_array(large, store.put)

    def lost(ref: _Ref) -> bytes:
        raise TimeoutError("no locations were found for the object")

    with pytest.raises(raytransport.ArrayFetchError, match="could not be fetched .*no locations") as caught:
        raytransport.receive_array(sent, lost)
    wrapped = RuntimeError(f"ray.exceptions.RaySystemError: System error: {caught.value}")  # as Ray reports it
    assert raytransport.fetch_failed(wrapped) and not raytransport.fetch_failed(RuntimeError("the actor died"))
    assert _same(raytransport.receive_array(sent, store.get), large), "nothing kept from the failed read"
    kept = _array(200 * 784, seed=6)
    other = raytransport.send_array(kept, store.put)
    assert raytransport.forget_lost(RuntimeError("the actor died")) == 0
    assert raytransport.forget_lost(wrapped) == 1  # the lost content only: the next send puts it again
    again = raytransport.send_array(large, store.put)
    assert again[4] is not sent[4] and len(store.objects) == 3
    assert raytransport.send_array(kept, store.put)[4] is other[4] and len(store.objects) == 3
    assert raytransport._SENT.size == 2 * len(large.data)


def test_inside_inline_arrays_every_array_travels_inline_in_that_thread_only():
    import threading

    store = _Store()
    large = _array(200 * 784, seed=5)
    other: list[object] = []
    with raytransport.inline_arrays():
        sent = raytransport.send_array(large, store.put)
        thread = threading.Thread(target=lambda: other.append(raytransport.send_array(large, store.put)[4]))
        thread.start()
        thread.join()
    assert sent[3] == large.data and sent[4] is None
    assert other[0] is not None and len(store.objects) == 1  # another thread still sends a reference
    assert raytransport.send_array(large, store.put)[4] is other[0]  # and so does this one after the block
    assert _same(raytransport.receive_array(sent, store.get), large)


@pytest.mark.slow
def test_through_ray_an_actor_gets_each_message_whole_and_reads_a_shared_model_once():
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        raytransport.install()

        @ray.remote(num_cpus=1)
        class Actor:
            def run(self, message: Message) -> tuple[list[bytes], bytes, int]:
                arrays = message.content["arrays"]
                return (
                    [arrays[k].data for k in sorted(arrays)],
                    message.content["config"]["round"],
                    len(raytransport._RECEIVED.entries),
                )

        actor = Actor.remote()
        model = ArrayRecord({"w": _array(200 * 784, seed=3), "b": _array(200, seed=4)})
        content = RecordDict({"arrays": model, "config": ConfigRecord({"round": b"r1"})})
        messages = [
            Message(
                content,
                metadata=Metadata(
                    run_id=1,
                    message_id=f"m{i}",
                    src_node_id=0,
                    dst_node_id=i + 1,
                    reply_to_message_id="",
                    group_id="",
                    created_at=0.0,
                    ttl=60.0,
                    message_type="evaluate",
                ),
            )
            for i in range(4)
        ]
        replies = ray.get([actor.run.remote(m) for m in messages])
        expected = [model[k].data for k in sorted(model)]
        assert all(r[0] == expected and r[1] == b"r1" for r in replies)
        assert [r[2] for r in replies] == [1, 1, 1, 1], "the shared model read once by the actor"
        assert len(cloudpickle.dumps(messages[0])) < raytransport.SHARE_ABOVE < len(model["w"].data)
        other = ArrayRecord({"w": _array(200 * 784, seed=5), "b": _array(200, seed=4)})
        changed = Message(
            RecordDict({"arrays": other, "config": ConfigRecord({"round": b"r2"})}), metadata=messages[0].metadata
        )
        data, _, kept = ray.get(actor.run.remote(changed))
        assert data == [other[k].data for k in sorted(other)] and kept == 2
    finally:
        cloudpickle.CloudPickler.dispatch.pop(Array, None)
        ray.shutdown()
