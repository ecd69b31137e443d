"""What delivering the models costs: writing ``models/``, the final-model round, one training round, ``umbel assign``.

Runs FedClust (K = 2) on the Fashion-MNIST label-groups scenario (digits cannot feed 1,000
clients) with the real ClientApp in this process (``server.inprocess.InProcessGrid``: no
Ray, no network, so the message times are the ClientApp's and the server's work, not transport),
every size with the same samples per client, and writes the record
``docs/results/data/delivery.json``::

    python -m benchmarks.delivery --clients 100 1000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.records import Record, Table, current_command, load_average, write_record
from client.app import app as client_app
from common.export import export_partition
from common.scenarios import ScenarioConfig, build_partition
from server.cli import PROJECT_ROOT, load_defaults
from server.experiment import Experiment
from server.models import MODELS_DIR, assign, save_models
from server.inprocess import InProcessGrid
from strategies import FedClust

# Settings of the in-process benchmarks that are not run-config defaults (the former shared
# ``small_run_config``): every figure they recorded was measured with these.
IN_PROCESS_SETTINGS = {"seed": 1, "groups": 2, "eval-every": 1, "lr": 0.05, "local-epochs": 2}


def in_process_config(**overrides: object) -> dict[str, object]:
    """The project's run-config defaults with ``IN_PROCESS_SETTINGS`` and ``overrides``."""
    rc = load_defaults(PROJECT_ROOT)
    rc.update({**IN_PROCESS_SETTINGS, **overrides})
    return rc


DATASET = "fashion-mnist"
SAMPLES_PER_LABEL = 5  # 1,000 clients of 2 groups sharing a label take 5 of its 6,000 train samples each
# In-process clients answer one after another, so a round's last message would outlive a real
# round-timeout (and be refused as expired) on a busy machine: the rounds here are not timed out.
IN_PROCESS_TIMEOUT = 86_400.0
CLUSTER_STEPS = 10  # FedClust's signal steps (default 100): the signal is not what is measured here


def measure(num_clients: int, work: Path) -> list[object]:
    """One row: clients, training-round s, delivery s and MB, models/ write s and MB, assign s."""
    rc = in_process_config(
        strategy=FedClust.name,
        rounds=2,
        fraction=1.0,
        dataset=DATASET,
        **{
            "num-clients": num_clients,
            "samples-per-label": SAMPLES_PER_LABEL,
            "num-clusters": 2,
            "round-timeout": IN_PROCESS_TIMEOUT,
            "cluster-steps": CLUSTER_STEPS,
        },
    )
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    strategy.start(InProcessGrid(client_app, rc, num_clients), exp.initial_model(), expected_clients=num_clients)
    train_round = strategy.history[-1].round_seconds
    train_mb = (strategy.history[-1].bytes_down_model + strategy.history[-1].bytes_up_model) / 1e6
    delivery = strategy.delivery
    assert delivery is not None
    folder = work / f"run-{num_clients}"
    started = time.perf_counter()
    save_models(folder, strategy, exp, rc)
    write_s = time.perf_counter() - started
    written_mb = sum(p.stat().st_size for p in (folder / MODELS_DIR).iterdir()) / 1e6
    newcomer = work / f"new-{num_clients}"
    export_partition(build_partition(ScenarioConfig.from_run_config({**rc, "num-clients": 2}), ""), newcomer, "npz")
    placed = assign(folder, newcomer / "partition_0")
    return [
        num_clients,
        round(train_round, 3),
        round(train_mb, 3),
        round(delivery.seconds, 3),
        round(delivery.bytes_down / 1e6, 3),
        round(write_s, 3),
        round(written_mb, 3),
        round(placed.seconds, 3),
    ]


def write(rows: list[list[object]], load: str) -> None:
    """Write the record of the sizes measured so far (a long run leaves its finished rows)."""
    table = Table(
        title=(
            f"Delivering the models (FedClust K = 2, cluster-steps {CLUSTER_STEPS}, {DATASET} label groups, "
            f"{SAMPLES_PER_LABEL} samples a label, dnn; in-process ClientApp)"
        ),
        columns=[
            "clients",
            "training round s",
            "training round MB",
            "final-model round s",
            "final-model round MB",
            "models/ write s",
            "models/ MB",
            "umbel assign s",
        ],
        rows=rows,
        notes="MB: array payload sent and received (training) or sent (delivery), and bytes on disk (models/).",
    )
    record = Record(name="delivery", section="After training", command=current_command(), tables=[table], load=load)
    print(write_record(record), rows[-1], flush=True)


def main() -> None:
    """Measure each federation size and write the record after each."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    args = parser.parse_args()
    rows: list[list[object]] = []
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.clients:
            loads.append(load_average())
            rows.append(measure(n, Path(tmp)))
            write(rows, " / ".join(loads))


if __name__ == "__main__":
    main()
