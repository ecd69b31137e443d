"""A client's first round and memory: its own folder (``data-path``) against the scenario path.

For one partition of a built-in scenario, a fresh process per measurement builds the client
exactly as the ClientApp does (``client.task.task_from_context``) and trains its first round
(``train_local`` with the run's local epochs). Two ways to get the same client's data:

- ``scenario``: today's path, the whole dataset loaded and the scenario rebuilt in the client;
- ``data-path``: the partition's folder written by ``umbel export`` (``--format``, default the
  Hugging Face one), read alone.

Reported per mode (median of ``--repeats`` processes, modes alternating): wall and CPU seconds
of setup (data) and of the first round's training, and the process's resident memory after the
round and its peak. CPU seconds and the ratios are the figures to quote on a shared machine.

    OMP_NUM_THREADS=1 python -m benchmarks.own_data --dataset fashion-mnist --num-clients 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MODES = ("scenario", "data-path")


def measure(mode: str, rc: dict[str, Any], folder: str, pid: int) -> dict[str, float]:
    """Build the client of ``pid`` by ``mode`` and train its first round, in this process."""
    import resource
    import time

    import psutil

    from client.task import task_from_context, train_local
    from common import keys

    node = {keys.PARTITION_ID: pid}
    if mode == "data-path":
        node["data-path"] = folder
    wall, cpu = time.perf_counter(), time.process_time()
    task = task_from_context(rc, node)
    setup = (time.perf_counter() - wall, time.process_time() - cpu)
    cfg = {
        keys.LOCAL_EPOCHS: rc["local-epochs"],
        keys.BATCH_SIZE: rc["batch-size"],
        keys.LR: rc["lr"],
        keys.MOMENTUM: rc["momentum"],
        keys.WEIGHT_DECAY: 0.0,
        keys.SERVER_ROUND: 1,
    }
    from flwr.app import ArrayRecord

    arrays = ArrayRecord(task.model(ArrayRecord(task._model.state_dict())).state_dict())
    wall, cpu = time.perf_counter(), time.process_time()
    train_local(task, arrays, cfg)
    train = (time.perf_counter() - wall, time.process_time() - cpu)
    return {
        "setup-wall-s": setup[0],
        "setup-cpu-s": setup[1],
        "train-wall-s": train[0],
        "train-cpu-s": train[1],
        "first-round-wall-s": setup[0] + train[0],
        "first-round-cpu-s": setup[1] + train[1],
        "rss-mib": psutil.Process().memory_info().rss / 2**20,
        "peak-rss-mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "num-train": len(task.data.y_train),
    }


def main(argv: list[str] | None = None) -> int:
    """Export a federation, run it from disk and from the scenario, and compare; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--num-clients", type=int, default=100)
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--format", choices=("hf", "npz", "imagefolder"), default="hf", help="export format")
    parser.add_argument("--out", type=Path, default=None, help="export folder (default: a temporary one)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        mode, config = args.child
        spec = json.loads(config)
        print(json.dumps(measure(mode, spec["rc"], spec["folder"], spec["pid"])))
        return 0
    from common.export import export_partition
    from common.scenarios import ScenarioConfig, build_partition
    from server.cli import PROJECT_ROOT, load_defaults

    rc = {**load_defaults(PROJECT_ROOT), "dataset": args.dataset, "num-clients": args.num_clients, "device": "cpu"}
    out = args.out or Path(tempfile.mkdtemp(prefix="umbel-own-data-")) / "federation"
    if not (out / "federation.json").exists():
        export_partition(build_partition(ScenarioConfig.from_run_config(rc)), out, args.format)
    spec = json.dumps({"rc": rc, "folder": str(out / f"partition_{args.partition}"), "pid": args.partition})
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.own_data", "--child", mode, spec],
                capture_output=True,
                text=True,
                check=True,
                cwd=PROJECT_ROOT,
            )
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    table = {m: {k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]} for m, rs in runs.items()}
    ratios = {
        k: round(table["scenario"][k] / table["data-path"][k], 2)
        for k in ("first-round-cpu-s", "setup-cpu-s", "rss-mib", "peak-rss-mib")
        if table["data-path"][k]
    }
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "format": args.format,
                "num-clients": args.num_clients,
                "partition": args.partition,
                "repeats": args.repeats,
                "median": table,
                "scenario / data-path": ratios,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
