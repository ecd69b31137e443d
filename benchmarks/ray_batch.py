"""Identity queries through Flower's engine, one Ray actor call each against batches (``server/raybatch.py``).

``python -m benchmarks.ray_batch [--clients N] [--repeats R] [--record]`` starts Flower's own
``RayBackend`` with two actors of one CPU each running umbel's ClientApp, registers the Contexts
of ``--clients`` digits clients as the simulation does, and answers one identity query to every
client through the engine's worker threads (one per actor, as Flower's engine starts them),
alternating Flower's worker (``vce_api.worker``: one actor call a message) and umbel's
(:func:`server.raybatch.worker`: up to ``BATCH`` a call). A first pass through umbel's worker loads
every client's data in the actors, so that both forms find it loaded. It reports, side by side in
one run, the wall and this process's CPU milliseconds per message (what the ``flwr-simulation``
process pays) and their ratios.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from queue import Queue
from typing import Any

from benchmarks.records import Table, cpu_ticks, load_average, steal_share
from benchmarks.report import add_record_flag, show_and_save
from benchmarks.runs import ROOT

SECTION = "Large federations end to end"
RUN_ID = 1


def federation(clients: int) -> dict[str, Any]:
    """Run-config overrides: ``clients`` digits clients in 2 groups, drawn with replacement."""
    return {
        "dataset": "digits",
        "num-clients": clients,
        "groups": 2,
        "samples-per-label": 20,
        "sample-draw": "with-replacement",
    }


def identity_queries(nodes: Sequence[int]) -> list[Any]:
    """One identity query to each of ``nodes``, as the ServerApp sends it (message ids set)."""
    from flwr.app import ConfigRecord, Message, Metadata, RecordDict

    from common import keys

    content = RecordDict({keys.CONFIG: ConfigRecord({})})
    build: Any = Message  # the simulation's form: Metadata given whole
    return [
        build(
            content,
            metadata=Metadata(
                run_id=RUN_ID,
                message_id=f"identity-{node}",
                src_node_id=0,
                dst_node_id=node,
                reply_to_message_id="",
                group_id="",
                created_at=time.time(),
                ttl=3600.0,
                message_type=keys.MSG_IDENTITY,
            ),
        )
        for node in nodes
    ]


def answer_all(worker: Callable[..., None], backend: Any, stores: dict[int, Any]) -> tuple[float, float]:
    """Wall and this process's CPU seconds for ``worker`` threads (one per actor) to answer every node once."""
    from flwr.server.superlink.fleet.vce.metrics import VceMetrics

    queue: Queue[Any] = Queue()
    replies: Queue[Any] = Queue()
    f_stop = threading.Event()
    messages = identity_queries(sorted(stores))
    wall, cpu = time.perf_counter(), time.process_time()
    for message in messages:
        queue.put(message)
    threads = [
        threading.Thread(target=worker, args=(queue, replies, stores, backend, f_stop, VceMetrics()))
        for _ in range(backend.num_workers)
    ]
    for thread in threads:
        thread.start()
    failed = 0
    for _ in messages:
        failed += replies.get(timeout=600).has_error()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    f_stop.set()
    for thread in threads:
        thread.join()
    if failed:
        raise RuntimeError(f"{failed} of {len(messages)} identity queries got an error reply")
    return wall, cpu


def measure(clients: int, repeats: int) -> list[list[Any]]:
    """One row per form: ms per message (wall and CPU, medians over ``repeats``) and each against Flower's."""
    import ray
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
    from flwr.supercore.run import Run

    from server import linkindex, raybatch

    backend = RayBackend(
        {
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": 2, "log_to_driver": False, "configure_logging": False},
        }
    )
    try:
        backend.build(raybatch.umbel_client_app)
        run = Run.create_empty(RUN_ID)
        run.override_config = federation(clients)
        stores = linkindex.register_contexts({p + 1: p for p in range(clients)}, run, str(ROOT))
        answer_all(raybatch.worker, backend, stores)
        forms = {"Flower's worker, one call a message": vce_api.worker, "umbel's, batches": raybatch.worker}
        seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in forms}
        for _ in range(repeats):
            for name, worker in forms.items():
                seconds[name].append(answer_all(worker, backend, stores))
    finally:
        backend.terminate()
        ray.shutdown()
    medians = {
        name: (
            statistics.median(w for w, _ in runs) * 1000 / clients,
            statistics.median(c for _, c in runs) * 1000 / clients,
        )
        for name, runs in seconds.items()
    }
    first_wall, first_cpu = next(iter(medians.values()))
    return [
        [name, round(wall, 3), round(cpu, 3), round(wall / first_wall, 2), round(cpu / first_cpu, 2)]
        for name, (wall, cpu) in medians.items()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the table (with ``--record``, also write it for docs/RESULTS.md)."""
    from server import raybatch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=2000, help="simulated clients, one query each (default 2000)")
    parser.add_argument("--repeats", type=int, default=3, help="passes per form, alternating (default 3)")
    parser.add_argument("--name", default="ray-batch", help="the record's name (default ray-batch)")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    load, ticks = load_average(), cpu_ticks()
    rows = measure(args.clients, args.repeats)
    stolen = steal_share(ticks, cpu_ticks())
    steal = "" if stolen is None else f" The hypervisor took {100 * stolen:.1f}% of the CPU time as steal while it ran."
    table = Table(
        title="Identity queries through Flower's engine: one Ray actor call a message against batches",
        columns=["worker", "ms wall a message", "ms CPU a message", "wall / Flower's", "CPU / Flower's"],
        rows=rows,
        notes=(
            f"{args.clients} digits clients (2 groups, samples drawn with replacement), one identity query each, "
            f"answered by umbel's ClientApp in 2 Ray actors of 1 CPU through Flower's RayBackend; medians of "
            f"{args.repeats} passes per form, alternating, after a first pass that loads every client's data. "
            f"umbel's worker sends up to {raybatch.BATCH} identity queries a call. CPU seconds are this process's "
            "only (the flwr-simulation process's part); the wall time also holds the actors' work on the same cores."
            + steal
        ),
    )
    show_and_save(table, args.name, SECTION, load, args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
