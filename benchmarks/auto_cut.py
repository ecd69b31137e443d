"""Automatic HC cut (threshold and num-clusters 0) against the tuned thresholds, on real signals.

For each grouped scenario of the quick preset, every client computes FedClust's, PACFL's and
FL+HC's clustering signals with the real client code (``query.head`` after ``cluster-steps`` of
training the run's initial model; ``query.subspaces``; ``query.update`` after FL+HC's 100
mini-batches from the global model of ``warmup-rounds`` FedAvg rounds, which this script runs
with the clients' own ``train_local``), in this process and without Flower (the signals do not
depend on the transport); the server's own distance functions and cuts then give the ARI of
the tuned cut (the quick preset's FedClust lambda, PACFL's default 30 degrees, FL+HC's default
threshold and the true number of groups, which the benchmark gives FL+HC) and of the automatic
cut. Only the clustering is measured, not the accuracy that follows it. ``--save`` keeps the
distance matrices and true groups (``.npz``) to study other cut rules without recomputing.

Example::

    python -m benchmarks.auto_cut --num-clients 100 --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from sklearn.metrics import adjusted_rand_score

from client.signals.final_layer import final_layer
from client.signals.subspaces import subspaces
from client.task import task_from_context
from common import keys
from common.clustering.hierarchical import auto_cut, cut_tree, pairwise_distances
from common.clustering.subspaces import pairwise_subspace_angles
from common.config import TrainingParams
from common.signals.final_layer import FinalLayer
from common.signals.subspaces import ClassSubspaces
from server.cli import PROJECT_ROOT, load_defaults
from server.experiment import Experiment
from client.signals.update import model_update
from client.task import train_local
from common.clustering.similarity import sketch_rows
from common.signals.update import ModelUpdate
from strategies import FLHC, FedClust, PACFL

SCENARIOS = {
    "label-groups-1": {"scenario": "label-groups", "groups": 5, "labels-per-group": 2},
    "label-skew-20": {"scenario": "label-skew", "label-fraction": 0.2},
    "rotation-4": {"scenario": "rotation", "angles": "0,90,180,270"},
    "label-swap-5": {"scenario": "label-swap", "groups": 5},
    "label-skew-dirichlet-20": {"scenario": "label-skew-dirichlet", "label-fraction": 0.2, "quantity-alpha": 1.0},
    "label-groups-3": {"scenario": "label-groups", "groups": 20, "labels-per-group": 3},
}
QUICK = ("label-groups-1", "label-skew-20", "rotation-4", "label-swap-5")
TUNED = {FedClust.name: 0.36, PACFL.name: 30.0, FLHC.name: 1.0}  # the quick preset's FedClust lambda; the defaults


def signals(rc: dict, cluster_steps: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """FedClust final layers (N, D), PACFL stacked bases, true groups of every client."""
    initial = Experiment.from_run_config(rc).initial_model()
    cfg = {
        **TrainingParams.from_run_config(rc).local_config(),
        keys.SERVER_ROUND: 1,
        keys.CLUSTER_STEPS: cluster_steps,
        keys.CLUSTER_EPOCHS: 1,
        keys.SUBSPACE_VECTORS: 3,
    }
    layers, bases, truth = [], [], []
    for pid in range(rc["num-clients"]):
        task = _task(rc, pid)
        head = FinalLayer.from_arrays(
            final_layer(task, RecordDict({keys.ARRAYS: initial, keys.CONFIG: ConfigRecord(cfg)})),
            outputs=task.info.num_classes,
            features=initial["head.weight"].shape[1],
        )
        sub = ClassSubspaces.from_arrays(
            subspaces(task, RecordDict({keys.CONFIG: ConfigRecord(cfg)})),
            dim=None,
            num_classes=task.info.num_classes,
            max_vectors=3,
        )
        layers.append(head.vector())
        bases.append(sub.stacked())
        truth.append(int(task.data.group))
    return np.stack(layers), bases, np.array(truth)


def flhc_updates(rc: dict) -> np.ndarray:
    """FL+HC's signal: ``warmup-rounds`` of FedAvg (the clients' ``train_local``, seeded sampling),
    then every client's update after ``cluster-steps`` mini-batches from the global model (N, P).
    """
    training = TrainingParams.from_run_config(rc)
    model = Experiment.from_run_config(rc).initial_model()
    rng = np.random.default_rng(rc["seed"])
    n = rc["num-clients"]
    for rnd in range(1, int(rc["flhc-warmup-rounds"]) + 1):
        cfg = ConfigRecord({**training.local_config(), keys.SERVER_ROUND: rnd})
        total: dict[str, np.ndarray] = {}
        weight = 0
        for pid in sorted(rng.choice(n, size=training.num_sampled(n), replace=False).tolist()):
            task = _task(rc, pid)
            trained, _ = train_local(task, model, cfg)
            k = len(task.data.y_train)
            for name, t in trained.state_dict().items():
                total[name] = total.get(name, 0) + k * t.detach().cpu().numpy().astype(np.float64)
            weight += k
        model = ArrayRecord({name: Array((v / weight).astype(np.float32)) for name, v in total.items()})
    size = sum(int(np.prod(a.shape)) for a in model.values())
    cfg = ConfigRecord(
        {
            **training.local_config(),
            keys.SERVER_ROUND: int(rc["flhc-warmup-rounds"]) + 1,
            keys.CLUSTER_STEPS: int(rc["cluster-steps"]),
        }
    )
    ups = [
        ModelUpdate.from_arrays(
            model_update(_task(rc, pid), RecordDict({keys.ARRAYS: model, keys.CONFIG: cfg})), size=size
        )
        for pid in range(n)
    ]
    return sketch_rows([u.delta for u in ups], rc["seed"])


def _task(rc: dict, pid: int):  # noqa: ANN202 - the client's ClientTask
    return task_from_context(rc, {keys.PARTITION_ID: pid, "num-partitions": rc["num-clients"]})


def measure(name: str, num_clients: int, seed: int, cluster_steps: int, save: Path | None = None) -> list[dict]:
    """One row per strategy: the tuned cut, the true number of groups and the automatic cut."""
    rc = load_defaults(PROJECT_ROOT)
    rc.update({"num-clients": num_clients, "fraction": 0.2, "local-epochs": 1, "seed": seed, **SCENARIOS[name]})
    layers, bases, truth = signals(rc, cluster_steps)
    matrices = {
        FedClust.name: pairwise_distances(layers),
        PACFL.name: pairwise_subspace_angles(bases, "mean"),
        FLHC.name: pairwise_distances(flhc_updates(rc)),
    }
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        np.savez(save / f"{name}-s{seed}.npz", truth=truth, **matrices)
    k_true = len(set(truth.tolist()))
    rows = []
    for strategy, d in matrices.items():
        tuned = cut_tree(d, threshold=TUNED[strategy], linkage="average")
        given = cut_tree(d, threshold=0.0, num_clusters=k_true, linkage="average")
        started = time.process_time()
        auto, score = auto_cut(d, "average")
        rows.append(
            {
                "scenario": name,
                "seed": seed,
                "strategy": strategy,
                "true-groups": k_true,
                "tuned-threshold": TUNED[strategy],
                "tuned-clusters": int(tuned.max()) + 1,
                "tuned-ari": round(float(adjusted_rand_score(truth, tuned)), 3),
                "true-k-ari": round(float(adjusted_rand_score(truth, given)), 3),
                "auto-clusters": int(auto.max()) + 1,
                "auto-ari": round(float(adjusted_rand_score(truth, auto)), 3),
                "auto-score": None if score is None else round(score, 3),
                "auto-cpu-seconds": round(time.process_time() - started, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every scenario asked for; print (and with ``--out`` write) the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-clients", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cluster-steps", type=int, default=30, help="FedClust's, as the quick preset")
    parser.add_argument("--scenarios", default=",".join(QUICK), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--save", type=Path, default=None, help="keep the distance matrices (npz) in this folder")
    args = parser.parse_args(argv)
    rows = [
        r
        for name in args.scenarios.split(",")
        for r in measure(name, args.num_clients, args.seed, args.cluster_steps, args.save)
    ]
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
