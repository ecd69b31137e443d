"""Client-side cost of each clustering signal against one local epoch on the same client.

One client (``--partition``) of a real federation (``--dataset``, default Fashion-MNIST, the
project's default scenario) computes every signal the strategies ask for, through the same
``client.signals`` handlers a ClientApp runs, with the config a strategy sends (its default
parameters), on the initial model:

- ``forces`` (CFLGT: one forward pass, per-class pulling and pushing forces);
- ``final-layer`` (FedClust: ``fedclust-cluster-epochs`` of local training, then the final layer);
- ``subspaces`` (PACFL, and FLAG with class counts: truncated SVD of each class's data);
- ``update`` (FLIC, Sattler's CFL, FL+HC, FLAG's gradient: local training, the flat update);
- ``profile`` (CFL-GP's model gap after local training) at compression 1, 100 and 1000.

Each is called once untimed, then timed ``--repeats`` times (median wall and CPU seconds of the call, single-threaded
torch so that CPU seconds mean the same on a loaded machine) and its reply size is the bytes
of the arrays it returns (what the ClientApp sends, before Flower's framing). One local epoch
of ``train_local`` with the run's training config is the reference; the ratio columns divide
by it. Writes signal_cost.md and signal_cost.json.

Example::

    nice -n 5 python -m benchmarks.signal_cost --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.records import load_average
from benchmarks.report import SCALING, add_record_flag, save_tables, tables_from_markdown
from strategies import CFLGP, CFLGT, FLAG, FLIC, PACFL, CFLSattler, FedClust

ROOT = Path(__file__).resolve().parent.parent

COMPRESSIONS = (1.0, 100.0, 1000.0)


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of ``fn()`` over ``repeats`` calls, and its last result."""
    walls, cpus, out = [], [], fn()  # a first, untimed call: lazy imports and allocations
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), out


def _bytes(arrays: dict[str, Any]) -> int:
    return int(sum(a.nbytes for a in arrays.values()))


def measure(rc: dict[str, Any], partition: int, repeats: int) -> dict[str, Any]:
    """Time and size every signal of client ``partition`` under run-config ``rc``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(rc, partition, repeats)
    finally:
        torch.set_num_threads(threads)


def _measure(rc: dict[str, Any], partition: int, repeats: int) -> dict[str, Any]:
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from client.signals.final_layer import final_layer
    from client.signals.forces import forces
    from client.signals.profile import gradient_profile
    from client.signals.subspaces import subspaces
    from client.signals.update import model_update
    from client.task import task_from_context, train_local
    from common import keys
    from common.clustering.compression import block_seed, compressed_size
    from common.config import TrainingParams
    from server.experiment import Experiment
    from strategies.cfl_gp import CFLGPParams
    from strategies.fedclust import FedClustParams
    from strategies.pacfl import PACFLParams

    exp = Experiment.from_run_config(rc)
    initial: ArrayRecord = exp.initial_model()
    task = task_from_context(rc, {keys.PARTITION_ID: partition, "num-partitions": rc["num-clients"]})
    training = TrainingParams.from_run_config(rc)
    base = {keys.SERVER_ROUND: 1, **training.local_config()}
    dim = sum(a.numpy().size for a in initial.values() if a.numpy().dtype.kind == "f")

    def content(**extra: Any) -> RecordDict:
        return RecordDict({keys.ARRAYS: initial, keys.CONFIG: ConfigRecord({**base, **extra})})

    fedclust, pacfl, cflgp = FedClustParams(), PACFLParams(), CFLGPParams()
    signals: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
        (CFLGT.name, "forces", lambda: forces(task, content())),
        (
            FedClust.name,
            "final-layer",
            lambda: final_layer(
                task,
                content(**{keys.CLUSTER_EPOCHS: fedclust.cluster_epochs, keys.CLUSTER_STEPS: fedclust.cluster_steps}),
            ),
        ),
        (
            f"{PACFL.name}, {FLAG.name}",
            f"subspaces (p = {pacfl.pacfl_vectors}, with counts)",
            lambda: subspaces(task, content(**{keys.SUBSPACE_VECTORS: pacfl.pacfl_vectors, keys.WITH_COUNTS: True})),
        ),
        (f"{FLIC.name}, {CFLSattler.name}, fl+hc", "update", lambda: model_update(task, content())),
    ]
    for ratio in COMPRESSIONS:
        signals.append(
            (
                CFLGP.name,
                f"profile (model gap), compression {ratio:g}",
                lambda r=ratio: gradient_profile(
                    task,
                    content(
                        **{
                            keys.PROFILE_PROTOCOL: cflgp.profile_protocol,
                            keys.PROFILE_SIZE: compressed_size(dim, r),
                            keys.PROFILE_SEED: block_seed(rc["seed"], 0),
                        }
                    ),
                ),
            )
        )
    cfg = content()[keys.CONFIG]
    epoch_wall, epoch_cpu, _ = _timed(lambda: train_local(task, initial, cfg, epochs=1), repeats)
    rows = [
        {
            "algorithms": "(reference)",
            "signal": "one local epoch (train_local)",
            "wall_s": epoch_wall,
            "cpu_s": epoch_cpu,
            "bytes": dim * 4,
            "note": "the model update a training round sends",
        }
    ]
    for algorithms, name, fn in signals:
        wall, cpu, out = _timed(fn, repeats)
        rows.append({"algorithms": algorithms, "signal": name, "wall_s": wall, "cpu_s": cpu, "bytes": _bytes(out)})
    for r in rows:
        r["cpu_vs_epoch"] = r["cpu_s"] / epoch_cpu if epoch_cpu > 0 else None
        r["bytes_vs_update"] = r["bytes"] / (dim * 4)
    return {
        "dataset": rc["dataset"],
        "model": rc.get("model", "dnn"),
        "partition": partition,
        "train_samples": len(task.data.y_train),
        "params": dim,
        "local_config": {k: v for k, v in base.items() if isinstance(v, int | float | str)},
        "repeats": repeats,
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown table, one row per signal."""
    head = (
        f"Client {result['partition']} of {result['dataset']} ({result['train_samples']} train samples), "
        f"{result['model']} ({result['params']:,} parameters), median of {result['repeats']}, torch on 1 thread.\n\n"
        "| algorithms | signal | CPU s | wall s | CPU / epoch | bytes up | bytes / model update |\n"
        "|---|---|---:|---:|---:|---:|---:|\n"
    )
    lines = [
        f"| {r['algorithms']} | {r['signal']} | {r['cpu_s']:.3f} | {r['wall_s']:.3f} | "
        f"{r['cpu_vs_epoch']:.2f} | {r['bytes']:,} | {r['bytes_vs_update']:.4f} |"
        for r in result["rows"]
    ]
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure each signal against one local epoch and print the table; the exit status."""
    from server.cli import load_defaults

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--num-clients", type=int, default=0, help="0: the run-config default")
    parser.add_argument("--partition", type=int, default=0, help="the measured client's partition id")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="other run-config overrides (repeatable; values parsed as JSON when they parse)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "signal_cost")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be an int >= 1. Got {args.repeats} instead.")
    rc = load_defaults(ROOT)
    rc["dataset"] = args.dataset
    if args.num_clients:
        rc["num-clients"] = args.num_clients
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set must be KEY=VALUE. Got {item!r} instead.")
        try:
            rc[key] = json.loads(value)
        except json.JSONDecodeError:
            rc[key] = value
    load_before = load_average()
    result = measure(rc, args.partition, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "signal_cost.json").write_text(json.dumps(result, indent=1))
    text = markdown(result)
    (args.out / "signal_cost.md").write_text(text)
    print(text)
    if args.record:
        tables = tables_from_markdown("Each clustering signal's cost on a client", text)
        print(f"wrote {save_tables('signal-cost', SCALING, tables, load_before)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
