"""The cost of a Flower message in a Ray actor call, inline against by reference (``server/raytransport.py``).

``python -m benchmarks.ray_share [--calls N] [--sizes KIB,...] [--record]`` starts Ray with two
actors and sends each of them ``--calls`` Flower messages that share one ``RecordDict``, as
umbel's simulation does within an exchange: once with Ray's own pickling (every message carries
its arrays inline) and once with :func:`server.raytransport.install` (an ``Array`` of at least
``SHARE_ABOVE`` bytes goes by a reference put once per content). It reports, side by side in one
run, this process's CPU milliseconds per call (what the ``flwr-simulation`` process pays) and the
ratio of the two, for each array size. ``SHARE_ABOVE`` is set to 0 for the run so that every
size is measured by reference; the table shows where a reference starts to pay.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.records import Table, load_average
from benchmarks.report import add_record_flag, show_and_save

SECTION = "Large federations end to end"


def _messages(size: int, calls: int, seed: int) -> list[Any]:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, Metadata, RecordDict

    weights = np.random.default_rng(seed).standard_normal(max(size // 4, 1)).astype(np.float32)
    content = RecordDict({"arrays": ArrayRecord({"w": Array(weights)}), "config": ConfigRecord({"round": 1})})
    build: Any = Message  # the simulation's form: Metadata given whole (no run context in this process)
    return [
        build(
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
        for i in range(calls)
    ]


class _Actor:
    def size(self, message: Any) -> int:
        return sum(len(a.data) for a in message.content["arrays"].values())


def dnn_weight_kib() -> int:
    """KiB of the largest array of umbel's Fashion-MNIST DNN (its first layer's weight matrix)."""
    from common.models import build_model

    return (
        max(t.numel() * t.element_size() for t in build_model("dnn", (1, 28, 28), 10, 0).state_dict().values()) // 1024
    )


def cpu_per_call(actors: Sequence[Any], messages: Sequence[Any]) -> float:
    """The calling process's CPU milliseconds per call, over ``messages`` spread round-robin on ``actors``."""
    import ray

    start = time.process_time()
    ray.get([actors[i % len(actors)].size.remote(m) for i, m in enumerate(messages)])
    return (time.process_time() - start) * 1000 / len(messages)


def measure(sizes_kib: Sequence[int], calls: int, seed: int = 0) -> list[list[Any]]:
    """One row per size: KiB, inline ms per call, by reference ms per call, their ratio."""
    import ray
    from flwr.app import Array

    from server import raytransport

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        actor: Any = ray.remote(num_cpus=1)(_Actor)
        actors = [actor.remote() for _ in range(2)]
        ray.get([a.size.remote(_messages(1, 1, seed)[0]) for a in actors])
        rows = []
        kept = raytransport.SHARE_ABOVE
        raytransport.SHARE_ABOVE = 0
        try:
            for kib in sizes_kib:
                messages = _messages(kib * 1024, calls, seed)
                ray.util.deregister_serializer(Array)
                inline = cpu_per_call(actors, messages)
                raytransport.install()
                shared = cpu_per_call(actors, messages)
                rows.append([kib, round(inline, 3), round(shared, 3), round(shared / inline, 2)])
        finally:
            raytransport.SHARE_ABOVE = kept
        return rows
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the table (with ``--record``, also write it for docs/RESULTS.md)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="messages per size and form (default 400)")
    parser.add_argument("--sizes", help="array sizes in KiB (default 16,64,128,256 and the DNN's weight matrix)")
    parser.add_argument("--name", default="ray-share", help="the record's name (default ray-share)")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    load = load_average()
    dnn = dnn_weight_kib()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [16, 64, 128, 256, dnn]
    rows = measure(sizes, args.calls)
    table = Table(
        title="A Flower message in a Ray actor call: the sending process's CPU, inline against by reference",
        columns=["array KiB", "inline, ms CPU a call", "by reference, ms CPU a call", "by reference / inline"],
        rows=rows,
        notes=(
            f"{args.calls} messages per size and form, sharing one RecordDict, round-robin on 2 Ray actors; "
            "inline is Ray's own pickling, by reference is server/raytransport.py (put once per content). "
            f"{dnn} KiB is the DNN's first weight matrix. Above Ray's inline limit (about 100 KB) "
            "Ray's own path puts each message's array into its object store on every call; umbel's "
            "raytransport.SHARE_ABOVE is 128 KiB. CPU seconds of this process only, so a loaded box "
            "slows the run more than the figures."
        ),
    )
    show_and_save(table, args.name, SECTION, load, args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
