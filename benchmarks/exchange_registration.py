"""Registering every simulated node's Context: Flower's ``_register_node_info_stores`` against umbel's.

Before any message moves, Flower's simulation gives every simulated node a Context holding the
run config. Flower fuses that config again for every node (a deep copy of the parsed
``pyproject.toml`` and the run's overrides) and copies it into the node's Context;
``server.linkindex.register_contexts`` fuses it once and shares it. Each (way, size) runs in a
fresh process (``pyproject.toml`` parsed once there, as umbel's launcher does for both), which
reports the CPU and wall seconds of the registration and the growth of its resident memory.
Written as the ``exchange-registration`` record (``benchmarks.records``).

Example::

    nice -n 10 python -m benchmarks.exchange_registration --sizes 10000,100000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.records import Record, Table, current_command, load_average, write_record
from benchmarks.report import LARGE
from benchmarks.runs import ROOT
from strategies import FedAvg

WAYS = ("flower", "umbel")

CHILD = """
import json, resource, sys, time
import psutil
from flwr.server.superlink.fleet.vce import vce_api
from flwr.supercore.run import Run
from server import linkindex
linkindex.install_config_cache()
way, nodes, app, strategy = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
register = vce_api._register_node_info_stores if way == "flower" else linkindex.register_contexts
run = Run.create_empty(1)
run.override_config = {"num-clients": nodes, "strategy": strategy, "seed": 0}
mapping = {node_id: k for k, node_id in enumerate(range(10**6, 10**6 + nodes))}
register({10**6: 0}, run, app_dir=app)  # the first parse of pyproject.toml, outside the timing
rss, cpu, wall = psutil.Process().memory_info().rss, time.process_time(), time.perf_counter()
stores = register(mapping, run, app_dir=app)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
grown = (psutil.Process().memory_info().rss - rss) / 2**20
assert len(stores) == nodes
print(json.dumps({"cpu": cpu, "wall": wall, "mb": grown}))
"""


def measure(way: str, nodes: int) -> dict[str, Any]:
    """One registration of ``nodes`` nodes the ``way`` (``flower`` or ``umbel``) in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, way, str(nodes), str(ROOT), FedAvg.name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> int:
    """Measure each size both ways and write the record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated node counts")
    parser.add_argument("--no-record", action="store_true", help="print the table, write no record")
    args = parser.parse_args(argv)
    loads = [load_average()]
    rows = []
    for nodes in (int(s) for s in args.sizes.split(",") if s):
        got = {way: measure(way, nodes) for way in WAYS}
        flower, umbel = got["flower"], got["umbel"]
        rows.append(
            [
                nodes,
                round(flower["cpu"], 2),
                round(umbel["cpu"], 2),
                round(umbel["cpu"] / flower["cpu"], 4) if flower["cpu"] else None,
                round(flower["wall"], 2),
                round(umbel["wall"], 2),
                round(flower["mb"]),
                round(umbel["mb"]),
            ]
        )
        print(rows[-1], flush=True)
    loads.append(load_average())
    table = Table(
        "Registering every simulated node's Context: Flower's against umbel's shared run config",
        [
            "nodes",
            "CPU s, Flower's",
            "CPU s, umbel's",
            "ratio",
            "wall s, Flower's",
            "wall s, umbel's",
            "resident MB added, Flower's",
            "resident MB added, umbel's",
        ],
        rows,
        notes=(
            "Flower 1.42's vce_api._register_node_info_stores and server.linkindex.register_contexts, each in a "
            "fresh process on umbel's pyproject.toml (its run config, 'num-clients', 'strategy' and 'seed' "
            "overridden), with pyproject.toml parsed once (umbel's launcher's config cache) for both: what is left "
            "in Flower's is the deep copy and fusion of the config for each node and a copy in each Context."
        ),
    )
    record = Record(
        name="exchange-registration",
        section=LARGE,
        command=current_command(),
        tables=[table],
        load=" -> ".join(loads),
    )
    if not args.no_record:
        print(write_record(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
