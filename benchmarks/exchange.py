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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import LARGE
from benchmarks.records import Record, Table, current_command, load_average, write_record
from benchmarks.runs import ROOT, run_cli
from server.linkindex import DISABLE_ENV
from strategies import FedAvg

STATES = ("flower", "indexed")


def measure(clients: int, state: str, rounds: int, folder: Path, extra: Sequence[str]) -> dict[str, Any]:
    """One FedAvg run of ``clients`` clients on LinkState ``state``; its ``outcome``."""
    args = [
        "--strategy",
        FedAvg.name,
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
    try:
        run = run_cli(args, run_name(clients, state), folder)
    finally:
        if previous is None:
            os.environ.pop(DISABLE_ENV, None)
        else:
            os.environ[DISABLE_ENV] = previous
    return {**outcome(run), "load": f"{load_before} -> {load_average()}"}


def run_name(clients: int, state: str) -> str:
    """The results folder name of one run."""
    return f"exchange-{clients}-{state}"


def outcome(run: Path) -> dict[str, Any]:
    """A finished run's identity phase, mean round and wall seconds, the clients evaluated in its last
    round, and the messages its log reports expired before a client handled them.
    """
    resources = json.loads((run / "resources.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    log = run.with_name(run.name + ".log")
    return {
        "identity": resources.get("identity-seconds"),
        "round": statistics.fmean(float(m["round-seconds"]) for m in metrics),
        "wall": summary.get("wall-seconds"),
        "evaluated": metrics[-1]["eval-clients"],
        "expired": log.read_text(errors="replace").count("message expired") if log.exists() else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Measure each size on both states and write the record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated client counts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--results-dir", default="results/bench")
    parser.add_argument("--no-record", action="store_true", help="print the table, write no record")
    parser.add_argument("--from-runs", action="store_true", help="rebuild the record from the runs already there")
    parser.add_argument("--load", default="", help="with --from-runs: the load average while they ran, in words")
    args, extra = parser.parse_known_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    folder = (ROOT / args.results_dir / "exchange").resolve()
    rows = []
    loads = []
    for clients in sizes:
        if args.from_runs:
            got = {state: {**outcome(folder / run_name(clients, state)), "load": args.load} for state in STATES}
        else:
            got = {
                state: measure(clients, state, args.rounds, folder, [a for a in extra if a != "--"]) for state in STATES
            }
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
                f"{flower['evaluated']} / {indexed['evaluated']}",
                f"{flower['expired']} / {indexed['expired']}",
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
            "clients evaluated, Flower's / indexed",
            "messages expired, Flower's / indexed",
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
        section=LARGE,
        command=f"python -m benchmarks.exchange --sizes {args.sizes} --rounds {args.rounds}"
        if args.from_runs
        else current_command(),
        tables=[table],
        load="; ".join(dict.fromkeys(loads)),
    )
    if not args.no_record:
        print(write_record(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
