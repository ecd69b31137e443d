"""Automatic HC cut (threshold and num-clusters 0) against the tuned thresholds, on real signals.

For each grouped scenario of the quick preset, every client computes FedClust's and PACFL's
clustering signals with the real client code (``query.head`` after ``cluster-steps`` of
training the run's initial model; ``query.subspaces``), in this process and without Flower
(the signals do not depend on the transport); the server's own distance functions and cuts
then give the ARI of the tuned threshold (the quick preset's FedClust lambda, PACFL's default
30 degrees) and of the automatic cut. Only the clustering is measured, not the accuracy that
follows it.

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
from flwr.app import ConfigRecord, RecordDict
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

SCENARIOS = {
    "label-groups-1": {"scenario": "label-groups", "groups": 5, "labels-per-group": 2},
    "label-skew-20": {"scenario": "label-skew", "label-fraction": 0.2},
    "rotation-4": {"scenario": "rotation", "angles": "0,90,180,270"},
    "label-swap-5": {"scenario": "label-swap", "groups": 5},
}
TUNED = {"fedclust": 0.36, "pacfl": 30.0}  # the quick preset's FedClust lambda; PACFL's default


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
        task = task_from_context(rc, {keys.PARTITION_ID: pid, "num-partitions": rc["num-clients"]})
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


def measure(name: str, num_clients: int, seed: int, cluster_steps: int) -> list[dict]:
    rc = load_defaults(PROJECT_ROOT)
    rc.update({"num-clients": num_clients, "fraction": 0.2, "local-epochs": 1, "seed": seed, **SCENARIOS[name]})
    layers, bases, truth = signals(rc, cluster_steps)
    rows = []
    for strategy, d in (("fedclust", pairwise_distances(layers)), ("pacfl", pairwise_subspace_angles(bases, "mean"))):
        tuned = cut_tree(d, threshold=TUNED[strategy], linkage="average")
        started = time.process_time()
        auto, silhouette = auto_cut(d, "average")
        rows.append(
            {
                "scenario": name,
                "strategy": strategy,
                "true-groups": len(set(truth.tolist())),
                "tuned-threshold": TUNED[strategy],
                "tuned-clusters": int(tuned.max()) + 1,
                "tuned-ari": round(float(adjusted_rand_score(truth, tuned)), 3),
                "auto-clusters": int(auto.max()) + 1,
                "auto-ari": round(float(adjusted_rand_score(truth, auto)), 3),
                "auto-silhouette": None if silhouette is None else round(silhouette, 3),
                "auto-cpu-seconds": round(time.process_time() - started, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-clients", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cluster-steps", type=int, default=30, help="FedClust's, as the quick preset")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = [
        r for name in args.scenarios.split(",") for r in measure(name, args.num_clients, args.seed, args.cluster_steps)
    ]
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
