"""An exchange with every simulated client: Flower's in-memory LinkState against umbel's indexed one.

Each size runs FedAvg twice through ``umbel run``, once with Flower's own state
(``UMBEL_FLOWER_LINKSTATE=flower``) and once with ``server.linkindex``'s, alternating: a few
clients train per round and every client evaluates every round, so a round is one small train
exchange plus one exchange with all N clients. Reported: the identity phase (one query to every
node), the mean round, the whole run, and the ratio of each pair. The table is written as the
``exchange`` record (``benchmarks.records``).

Example::

    python -m benchmarks.exchange --sizes 1000,10000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.records import Record, Table, current_command, load_average, write_record
from benchmarks.runs import ROOT, run_cli
from server.linkindex import DISABLE_ENV

STATES = ("flower", "indexed")


def measure(clients: int, state: str, rounds: int, folder: Path, extra: Sequence[str]) -> dict[str, Any]:
    """One FedAvg run of ``clients`` clients on LinkState ``state``; its identity, round and wall seconds."""
    args = [
        "--strategy",
        "fedavg",
        "--num-clients",
        str(clients),
        "--scenario",
        "label-groups",
        "--groups",
        "5",
        "--samples-per-label",
        "0",
        "--fraction",
        str(min(1.0, 10 / clients)),
        "--rounds",
        str(rounds),
        "--eval-every",
        "1",
        "--local-epochs",
        "1",
        *extra,
    ]
    previous = os.environ.get(DISABLE_ENV)
    os.environ[DISABLE_ENV] = "flower" if state == "flower" else "indexed"
    load_before = load_average()
    started = time.monotonic()
    try:
        run = run_cli(args, f"exchange-{clients}-{state}", folder)
    finally:
        if previous is None:
            os.environ.pop(DISABLE_ENV, None)
        else:
            os.environ[DISABLE_ENV] = previous
    wall = time.monotonic() - started
    resources = json.loads((run / "resources.json").read_text())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {
        "identity": resources.get("identity-seconds"),
        "round": statistics.fmean(float(m["round-seconds"]) for m in metrics),
        "wall": wall,
        "load": f"{load_before} -> {load_average()}",
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Measure each size on both states and write the record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated client counts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--results-dir", default="results/bench")
    parser.add_argument("--no-record", action="store_true", help="print the table, write no record")
    args, extra = parser.parse_known_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    folder = (ROOT / args.results_dir / "exchange").resolve()
    rows = []
    loads = []
    for clients in sizes:
        got = {state: measure(clients, state, args.rounds, folder, [a for a in extra if a != "--"]) for state in STATES}
        flower, indexed = got["flower"], got["indexed"]
        loads += [flower["load"], indexed["load"]]

        def ratio(key: str, a: dict[str, Any] = flower, b: dict[str, Any] = indexed) -> float | None:
            return round(b[key] / a[key], 3) if a[key] and b[key] is not None else None

        rows.append(
            [
                clients,
                round(flower["identity"], 1),
                round(indexed["identity"], 1),
                ratio("identity"),
                round(flower["round"], 1),
                round(indexed["round"], 1),
                ratio("round"),
                round(flower["wall"], 0),
                round(indexed["wall"], 0),
            ]
        )
        print(rows[-1], flush=True)
    table = Table(
        "An exchange with every simulated client: Flower's LinkState against umbel's indexed one",
        [
            "clients",
            "identity s, Flower's",
            "identity s, indexed",
            "ratio",
            "round s, Flower's",
            "round s, indexed",
            "ratio",
            "run s, Flower's",
            "run s, indexed",
        ],
        rows,
        notes=(
            f"FedAvg, Fashion-MNIST label-groups, 10 clients train a round and all clients evaluate every round "
            f"({args.rounds} rounds); the round is the mean of the rounds' server-side seconds "
            "(metrics.jsonl `round-seconds`). "
            "The two states ran one after the other on the same machine."
        ),
    )
    record = Record(
        name="exchange",
        section="Scale",
        command=current_command(),
        tables=[table],
        load="; ".join(loads),
    )
    if not args.no_record:
        print(write_record(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
