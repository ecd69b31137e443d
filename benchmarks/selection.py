"""Do the defaults find the groups? K found and ARI of each K-choosing algorithm, with its defaults.

A grid of grouped federations (2 to 10 groups, 12 to 1,000 clients; label groups, grouped label
skew, rotation, label swap; digits, Fashion-MNIST and a tabular own-data ``npz`` federation made
from scikit-learn's bundled digits as 64 features) is split in two halves with their own seeds and
group counts: ``dev`` (groups 3 and 7, seeds 100 and 101), on which defaults may be chosen, and
``held-out`` (groups 2, 5 and 10, seeds 0 and 1), reported and never tuned on.

What is run, per cell: the project's run-config defaults (``umbel run`` with nothing set but the federation),
the real client code computing each one-shot algorithm's clustering signal in this process without Flower (as
``benchmarks/auto_cut.py``: FedClust's final layer after ``cluster-steps`` mini-batches from the initial
model, PACFL's class subspaces, FL+HC's update from the global model after its warm-up of FedAvg rounds, none
by default), then the strategy's own server-side step (``fedclust_clusters``, ``pacfl_clusters``,
``flhc_clusters``) with the default parameters. FeSEM (``--algorithms fesem``): every client's model after
training the initial model as in its round 1 (``cluster-steps`` mini-batches by default), and its automatic K
(``automatic_labels``, on the updates' cosines by default, ``fesem-auto-metric``); the E-steps after it are
not run (a client's trained model stays nearest the centre it started from, so the seeding is FeSEM's
clustering). Only the clustering is scored (ARI against the planted groups), not the accuracy after it.
Algorithms that cluster during training (CFLGT, FLIC, FLAG, CFL-GP, Sattler's CFL) are not in this grid: their
full runs are too slow for it on a shared 2-core machine. ``--during-training`` runs them in process for the
default rounds on label groups (``DURING_FEDERATIONS``: each half its own seeds and group counts);
``--full-runs`` runs them (and the three above) as ordinary ``umbel run``s with their defaults on
``FULL_RUN_CELLS``, two small federations none of them was tuned on, for ``FULL_RUN_ROUNDS`` rounds (the one
value set besides the federation), and reports the final K and ARI.

Example::

    OMP_NUM_THREADS=1 python -m benchmarks.selection --half held-out --out /tmp/selection-held-out.json
    python -m benchmarks.selection --half held-out --dry-run     # the cells
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import adjusted_rand_score, silhouette_score

from flwr.app import ConfigRecord, RecordDict

from benchmarks.auto_cut import _task, flhc_updates, signals
from benchmarks.records import Record, Table, current_command, load_average, write_record
from common.clustering.hierarchical import AUTO_TOLERANCE, cut_tree
from common.clustering.oneshot import Cut, OneShotClusters, fedclust_clusters, flhc_clusters, pacfl_clusters
from common.clustering.subspaces import client_distances
from client.signals.subspaces import subspaces
from client.task import train_as_configured
from common import keys
from common.config import TrainingParams, params_from_run_config
from common.signals.subspaces import ClassSubspaces
from server.cli import PROJECT_ROOT, load_defaults
from server.experiment import Experiment
from strategies import CFLGP, CFLGT, FLAG, FLHC, FLIC, PACFL, CFLSattler, FedClust, FeSEM
from strategies.fedclust import FedClustParams
from strategies.fesem import FeSEMParams, automatic_labels, flat
from strategies.flhc import FLHCParams
from strategies.flic import LAST
from strategies.pacfl import PACFLParams

HALVES: dict[str, dict[str, tuple[int, ...]]] = {
    "dev": {"groups": (3, 7), "seeds": (100, 101)},
    "held-out": {"groups": (2, 5, 10), "seeds": (0, 1)},
}
SCENARIOS = ("label-groups", "label-skew-dirichlet", "rotation", "label-swap")
DATASETS = ("digits", "fashion-mnist", "tabular")
ALGORITHMS = (FedClust.name, PACFL.name, FLHC.name, FeSEM.name)
MEANT_FOR: dict[str, tuple[str, ...]] = {
    FedClust.name: ("label-groups", "label-skew-dirichlet"),  # Islam et al. 2024, Sec. 4: label skew, Dirichlet
    PACFL.name: ("label-groups", "label-skew-dirichlet"),  # Vahidian et al. 2023: label skew
    FLHC.name: ("label-groups", "label-skew-dirichlet"),  # Briggs et al. 2020: label-based non-IID partitions
    FeSEM.name: ("label-groups", "label-skew-dirichlet"),  # paper not in shared/papers/: scored as the three above
}
"""The label-based heterogeneity each paper evaluates. PACFL's data subspaces cannot see a label
swap at all (the same inputs, other labels); rotation and label swap are measured for every
algorithm anyway, marked "no" in the summary."""
TABULAR = Path("/tmp/umbel-selection/digits-tabular.npz")
FULL_RUN_STRATEGIES = (FLIC.name, FLAG.name, CFLGP.name, CFLSattler.name, CFLGT.name)
FULL_RUN_ROUNDS = 30


@dataclass(frozen=True)
class Cell:
    """One grouped federation of the grid."""

    half: str
    dataset: str
    scenario: str
    groups: int
    clients: int
    seed: int

    @property
    def name(self) -> str:
        """A short label."""
        return f"{self.dataset}/{self.scenario}/G{self.groups}/N{self.clients}/s{self.seed}"

    def run_config(self) -> dict[str, Any]:
        """The project's defaults with this federation (and nothing else) set."""
        rc = load_defaults(PROJECT_ROOT)
        rc.update({"num-clients": self.clients, "seed": self.seed, "scenario": self.scenario})
        if self.dataset == "tabular":
            rc.update({"dataset": f"npz:{tabular_npz()}", "model": "dnn"})
        else:
            rc["dataset"] = self.dataset
        if self.scenario == "rotation":
            rc["angles"] = ",".join(f"{360 * g / self.groups:g}" for g in range(self.groups))
        else:
            rc["groups"] = self.groups
        if self.scenario in ("rotation", "label-swap"):  # drawn IID: as many samples as the data allow, <= 100
            rc["samples-per-client"] = min(100, (60_000 if self.dataset == "fashion-mnist" else 1400) // self.clients)
        if self.scenario == "label-skew-dirichlet":
            rc["label-fraction"] = 0.2
        return rc


def tabular_npz() -> Path:
    """scikit-learn's bundled digits as a tabular own-data set: ``x`` (1797, 64) in [0, 1], ``y``."""
    if not TABULAR.exists():
        from sklearn.datasets import load_digits

        data = load_digits()
        TABULAR.parent.mkdir(parents=True, exist_ok=True)
        np.savez(TABULAR, x=(data.data / 16.0).astype(np.float32), y=data.target.astype(np.int64))
    return TABULAR


def grid(half: str) -> list[Cell]:
    """The cells of one half: every group count and valid scenario, datasets and sizes in turn, each seed.

    Rotation needs images (not the tabular set); a label swap pairs labels, so at most 5 groups.
    Sizes cycle through 12 (when the groups fit twice), 30 and 100 clients; then ``LARGE``: cells of
    1,000 Fashion-MNIST clients (the only data set here with enough samples), one of each scenario
    in the held-out half and one in the dev half.
    """
    spec = HALVES[half]
    cells: list[Cell] = []
    turn = 0
    for seed in spec["seeds"]:
        for groups in spec["groups"]:
            for scenario in SCENARIOS:
                if scenario == "label-swap" and groups > 5:
                    continue
                datasets = [d for d in DATASETS if not (scenario == "rotation" and d == "tabular")]
                dataset = datasets[turn % len(datasets)]
                sizes = [n for n in (12, 30, 100) if n >= 2 * groups]
                cells.append(Cell(half, dataset, scenario, groups, sizes[turn % len(sizes)], seed))
                turn += 1
    return cells + [c for c in LARGE if c.half == half]


LARGE = (
    Cell("held-out", "fashion-mnist", "label-groups", 10, 1000, 0),
    Cell("held-out", "fashion-mnist", "label-skew-dirichlet", 5, 1000, 1),
    Cell("held-out", "fashion-mnist", "rotation", 5, 1000, 0),
    Cell("held-out", "fashion-mnist", "label-swap", 2, 1000, 1),
    Cell("dev", "fashion-mnist", "label-groups", 7, 1000, 100),
)
"""The 1,000-client cells (60 samples a client where the scenario draws a fixed number)."""


FULL_RUN_CELLS = (
    Cell("held-out", "digits", "label-groups", 2, 10, 3),
    Cell("held-out", "tabular", "label-groups", 5, 15, 3),
)
"""Digits first: the tabular cell runs when time allows (``--full-cells``)."""


def full_runs(
    folder: Path, cells: slice, out: Path | None = None, strategies: Sequence[str] = FULL_RUN_STRATEGIES
) -> list[dict[str, Any]]:
    """Each of ``strategies``' final K and ARI in an ``umbel run`` with its defaults on
    ``FULL_RUN_CELLS[cells]``; the rows so far are rewritten to ``out`` after each run.
    """
    from benchmarks.runs import read_run, run_cli

    rows: list[dict[str, Any]] = []
    for cell in FULL_RUN_CELLS[cells]:
        rc = cell.run_config()
        federation = ["--scenario", cell.scenario, "--groups", str(cell.groups), "--num-clients", str(cell.clients)]
        federation += ["--seed", str(cell.seed), "--dataset", str(rc["dataset"]), "--model", str(rc["model"])]
        for strategy in strategies:
            args = ["--strategy", strategy, *federation, "--rounds", str(FULL_RUN_ROUNDS)]
            name = f"{strategy}-{cell.dataset}-G{cell.groups}"
            try:
                summary = read_run(run_cli(args, name, folder))["summary"]
            except RuntimeError as error:
                print(json.dumps({"run": name, "error": str(error)[-500:]}), flush=True)
                continue
            rows.append(
                {
                    **{k: getattr(cell, k) for k in ("dataset", "scenario", "groups", "clients", "seed")},
                    "algorithm": strategy,
                    "command": "umbel run " + " ".join(args),
                    "k-found": summary.get("final-num-clusters"),
                    "ari": summary.get("final-ari"),
                    "final-accuracy": summary.get("final-accuracy"),
                    "not-learning": (summary.get("not-learning") or {}).get("warning") is not None,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            if out is not None:
                out.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


FLIC_SEEDS: dict[str, tuple[int, ...]] = {"dev": tuple(range(100, 111)), "held-out": tuple(range(12))}
FLIC_FEDERATIONS = (
    ("tabular", 5, 15),
    ("tabular", 3, 10),
    ("tabular", 7, 20),
    ("fashion-mnist", 2, 10),
    ("fashion-mnist", 3, 12),
)
"""``--flic-louvain``: label groups of few clients (dataset, groups, clients), where groups of one client occur."""
FLIC_ROUNDS = 16  # FLIC's automatic clustering round comes at the latest at rounds // 2 + 1
FLIC_VARIANTS: dict[str, tuple[float, bool]] = {
    "best silhouette": (0.0, False),
    f"tolerance {AUTO_TOLERANCE:g}": (AUTO_TOLERANCE, False),
    "split disagreeing": (0.0, True),
}
"""``--flic-louvain``'s rules: name -> (``flic-tolerance``, ``flic-split-disagreeing``)."""


def flic_louvain(half: str, seeds: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """FLIC's Louvain step by each rule of ``FLIC_VARIANTS`` on the same graph.

    Each federation of ``FLIC_FEDERATIONS`` and seed of ``FLIC_SEEDS[half]`` is an in-process FLIC
    run of the real ClientApp (``FLIC_ROUNDS`` rounds, every default but the federation, and the graph
    of the last updates clustered on the loss plateau alone, the defaults of the session that measured it); the
    update-similarity graph it clustered (the clients sampled before the clustering round) is
    clustered again by each rule and scored against the planted groups of those clients.
    """
    from common.clustering.flic import flic_clusters
    from server.inprocess import run_in_process

    rows = []
    for dataset, groups, clients in FLIC_FEDERATIONS:
        for seed in seeds or FLIC_SEEDS[half]:
            cell = Cell(half, dataset, "label-groups", groups, clients, seed)
            rc = {**cell.run_config(), "strategy": FLIC.name, "rounds": FLIC_ROUNDS, "eval-every": 100}
            rc.update({"flic-graph": LAST, "flic-min-updates": 0.0})  # the defaults when session 13 measured it
            strategy = run_in_process(rc)
            assert isinstance(strategy, FLIC) and strategy.clustering_similarity is not None
            pids, graph = strategy.clustering_similarity
            truth = np.array([strategy.true_group(p) for p in pids])
            row: dict[str, Any] = {
                **{k: getattr(cell, k) for k in ("half", "dataset", "groups", "clients", "seed")},
                "seen": len(pids),
                "seen-group-sizes": sorted(np.bincount(truth)[np.bincount(truth) > 0].tolist()),
            }
            for name, (tolerance, split) in FLIC_VARIANTS.items():
                labels, _ = flic_clusters(graph, 0.0, seed, tolerance, split)
                row[f"k {name}"] = int(labels.max()) + 1
                row[f"ari {name}"] = _ari(truth, labels)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def flic_tables(rows: Sequence[dict[str, Any]], half: str) -> list[Table]:
    """The rows of ``flic_louvain`` and a summary per rule: cells at ARI >= 0.95 with a one-client group seen and
    without."""
    names = [k[len("ari ") :] for k in rows[0] if k.startswith("ari ")] if rows else []
    summary = []
    for name in names:
        for single in (True, False):
            aris = [r[f"ari {name}"] for r in rows if (1 in r["seen-group-sizes"]) == single]
            if aris:
                summary.append(
                    [
                        name,
                        "yes" if single else "no",
                        len(aris),
                        round(float(np.mean(aris)), 3),
                        round(float(np.min(aris)), 3),
                        sum(a >= 0.95 for a in aris),
                    ]
                )
    columns = ("dataset", "groups", "clients", "seed", "seen")
    return [
        Table(
            title=f"FLIC's Louvain step by rule, {half} half: ARI on the clients seen",
            columns=("rule", "a one-client group seen", "cells", "mean ARI", "min ARI", "cells ARI >= 0.95"),
            rows=summary,
        ),
        Table(
            title=f"FLIC's Louvain step by rule, {half} half: every cell",
            columns=(*columns, "seen group sizes", *(f"{what} {n}" for n in names for what in ("K", "ARI"))),
            rows=[
                [
                    *(r[c] for c in columns),
                    str(r["seen-group-sizes"]),
                    *(r[f"{what} {n}"] for n in names for what in ("k", "ari")),
                ]
                for r in rows
            ],
            notes="In-process FLIC runs (label groups, 16 rounds, every default but the federation); the graph of "
            "the clients sampled before the clustering round, clustered by each rule (benchmarks/selection.py, "
            "flic_louvain, FLIC_VARIANTS).",
        ),
    ]


FLIC_MIN_UPDATES = (0.0, 1.0, 2.0, 3.0, 5.0)
"""``--flic-rounds``: the values of ``flic-min-updates`` compared (0: the loss plateau alone, the former default)."""


class _Enough(Exception):
    """Every compared clustering round has passed: the run stops (only the clustering is scored)."""


def flic_rounds(
    half: str, seeds: Sequence[int] | None = None, federations: Sequence[tuple[str, int, int]] = FLIC_FEDERATIONS
) -> list[dict[str, Any]]:
    """FLIC's clustering round by ``flic-min-updates``: the graph each value would cluster, and Louvain's labels.

    Each federation and seed is one in-process FLIC run of the real ClientApp with the project's defaults
    (``rounds`` included, so the automatic round is capped at ``rounds // 2 + 1``) that does not cluster
    (``flic-cluster-round`` at the last round); the graph of the clients seen is kept after every round,
    and the run stops once every value's round has come. The FedAvg rounds before a clustering do not
    depend on when it comes, so each value's round (the loss plateau's, the wait's, or the cap, as
    ``FLIC._due``) gets the graph the strategy would cluster; it is clustered with the default Louvain
    step and scored against the planted groups of those clients. Also per value: the clients' mean
    number of updates, the mean cosine within and between planted groups, the ARI of the graph cut at the
    true number of groups, and (``ari summed``) Louvain's on the graph of each client's summed updates.
    The runs store each client's last update (``flic-graph last``, the paper's graph), so that the summed
    column, computed from the same updates, is ``flic-graph summed``'s graph (the default since session 21).
    """
    from client.app import app as client_app
    from common.clustering.flic import clustering_round, flic_clusters, rounds_for_updates
    from server.inprocess import InProcessGrid

    rows = []
    for dataset, groups, clients in federations:
        for seed in seeds or FLIC_SEEDS[half]:
            cell = Cell(half, dataset, "label-groups", groups, clients, seed)
            rc = {**cell.run_config(), "strategy": FLIC.name, "eval-every": 10_000, "flic-graph": LAST}
            rc["flic-cluster-round"] = rc["rounds"]
            exp = Experiment.from_run_config(rc)
            strategy = exp.build_strategy()
            assert isinstance(strategy, FLIC)
            cap = strategy.training.rounds // 2 + 1
            per_round = strategy.training.num_sampled(clients)
            waits = {k: rounds_for_updates(k, clients, per_round) for k in FLIC_MIN_UPDATES}
            graphs: dict[int, tuple[list[int], np.ndarray, np.ndarray]] = {}
            sums: dict[int, np.ndarray] = {}
            train = strategy.after_train

            stop = (cap - 1, max(waits.values()))

            def keep(
                server_round: int,
                updates: dict[int, Any],
                strategy: FLIC = strategy,
                train: Any = train,
                graphs: dict[int, tuple[list[int], np.ndarray, np.ndarray]] = graphs,
                sums: dict[int, np.ndarray] = sums,
                stop: tuple[int, int] = stop,
            ) -> None:
                train(server_round, updates)
                assert strategy.similarity is not None
                for p, update in updates.items():
                    sums[p] = sums.get(p, 0.0) + update.delta().astype(np.float64)
                pids = [p for p in strategy.similarity.pids if p in strategy.clients]
                unit = np.stack([sums[p] / max(float(np.linalg.norm(sums[p])), 1e-12) for p in pids])
                graphs[server_round] = (pids, strategy.similarity.matrix(pids), 1.0 + unit @ unit.T)
                stable = strategy._stable_since
                if server_round >= stop[0] or (stable is not None and server_round >= stop[1]):
                    raise _Enough

            strategy.after_train = keep  # type: ignore[method-assign]
            try:
                strategy.start(InProcessGrid(client_app, rc, clients), exp.initial_model(), expected_clients=clients)
            except _Enough:
                pass
            stable = strategy._stable_since
            row: dict[str, Any] = {
                **{k: getattr(cell, k) for k in ("half", "dataset", "groups", "clients", "seed")},
                "plateau": stable,
                "cap": cap,
            }
            for k, wait in waits.items():
                at = clustering_round(stable, wait, strategy.training.rounds)
                pids, graph, summed = graphs[at - 1]
                truth = np.array([strategy.true_group(p) for p in pids])
                labels, _ = flic_clusters(graph, 0.0, seed)
                same = truth[:, None] == truth[None, :]
                within = same & ~np.eye(len(pids), dtype=bool)
                row[f"round {k:g}"] = at
                row[f"updates {k:g}"] = round((at - 1) * per_round / clients, 2)
                row[f"seen {k:g}"] = len(pids)
                row[f"cos within {k:g}"] = round(float(graph[within].mean() - 1), 3) if within.any() else None
                row[f"cos between {k:g}"] = round(float(graph[~same].mean() - 1), 3) if (~same).any() else None
                row[f"k {k:g}"] = int(labels.max()) + 1
                row[f"ari {k:g}"] = _ari(truth, labels)
                distance = np.clip(2.0 - graph.astype(np.float64), 0.0, 2.0)
                distance = (distance + distance.T) / 2  # S is float32
                np.fill_diagonal(distance, 0.0)
                told = cut_tree(distance, threshold=0.0, num_clusters=len(set(truth.tolist())))
                row[f"ari true-k {k:g}"] = _ari(truth, told)
                row[f"ari summed {k:g}"] = _ari(truth, flic_clusters(summed, 0.0, seed)[0])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def flic_rounds_tables(rows: Sequence[dict[str, Any]], half: str) -> list[Table]:
    """The rows of ``flic_rounds`` and a summary per ``flic-min-updates`` value and data set."""
    summary = []
    summed = all("ari summed 0" in r for r in rows)
    for k in FLIC_MIN_UPDATES:
        for dataset in sorted({r["dataset"] for r in rows}):
            part = [r for r in rows if r["dataset"] == dataset]
            aris = [r[f"ari {k:g}"] for r in part]
            summary.append(
                [
                    f"{k:g}",
                    dataset,
                    len(part),
                    sum(a >= 0.95 for a in aris),
                    round(float(np.mean(aris)), 3),
                    round(float(np.min(aris)), 3),
                    round(float(np.mean([r[f"round {k:g}"] for r in part])), 1),
                    round(float(np.mean([r[f"updates {k:g}"] for r in part])), 2),
                    sum(r.get(f"ari summed {k:g}", 0.0) >= 0.95 for r in part) if summed else None,
                ]
            )
    columns = ("dataset", "groups", "clients", "seed", "plateau", "cap")
    return [
        Table(
            title=f"FLIC's clustering round by flic-min-updates, {half} half: ARI on the clients seen",
            columns=(
                "flic-min-updates",
                "dataset",
                "federations",
                "ARI >= 0.95",
                "mean ARI",
                "min ARI",
                "mean round",
                "updates a client",
                "summed updates: ARI >= 0.95",
            ),
            rows=summary,
        ),
        Table(
            title=f"FLIC's clustering round by flic-min-updates, {half} half: every federation",
            columns=(
                *columns,
                *(
                    f"{what} {k:g}"
                    for k in FLIC_MIN_UPDATES
                    for what in ("round", "seen", "within", "between", "K", "ARI", "ARI at true K", "ARI summed")
                ),
            ),
            rows=[
                [
                    *(r[c] for c in columns),
                    *(
                        r.get(f"{what} {k:g}")
                        for k in FLIC_MIN_UPDATES
                        for what in (
                            "round",
                            "seen",
                            "cos within",
                            "cos between",
                            "k",
                            "ari",
                            "ari true-k",
                            "ari summed",
                        )
                    ),
                ]
                for r in rows
            ],
            notes="In-process FLIC runs (label groups, the project's defaults but the federation); each value's "
            "clustering round as FLIC._due (plateau, wait for the mean updates, at the latest rounds // 2 + 1), the "
            "graph of the clients seen then, the default Louvain step; 'within'/'between': mean cosine of the "
            "updates within and between planted groups (benchmarks/selection.py, flic_rounds).",
        ),
    ]


DURING_FEDERATIONS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "dev": (
        ("digits", 3, 12),
        ("digits", 7, 21),
        ("tabular", 3, 10),
        ("tabular", 7, 28),
        ("fashion-mnist", 3, 12),
        ("fashion-mnist", 7, 21),
    ),
    "held-out": (
        ("digits", 2, 10),
        ("digits", 5, 15),
        ("digits", 10, 30),
        ("tabular", 5, 20),
        ("fashion-mnist", 2, 10),
        ("fashion-mnist", 5, 15),
        ("fashion-mnist", 10, 30),
    ),
}
"""Label-group federations (dataset, groups, clients) of ``during_training``: each half has the group
counts of its ``HALVES`` entry, so no default is chosen on a group count it is reported on. The tabular
set is scikit-learn's digits as 64 features with the ``dnn`` model, which is what ``digits`` trains too:
its federations have other client counts than the digits ones, which they would otherwise repeat exactly."""
DURING_SEEDS: dict[str, tuple[int, ...]] = {"dev": (100, 101, 102), "held-out": (0, 1, 2)}
DURING_COLUMNS = ("dataset", "groups", "clients", "seed", "algorithm", "setting", "k-found", "ari")


def during_training(
    half: str, strategies: Sequence[str], settings: Sequence[dict[str, Any]] = ({},)
) -> list[dict[str, Any]]:
    """K found and ARI of the algorithms that cluster while training, at the project's defaults.

    Each federation of ``DURING_FEDERATIONS[half]``, seed of ``DURING_SEEDS[half]``, strategy and
    setting (run-config values over the defaults; ``{}``: the defaults) is one in-process run of the real
    ClientApp for the default ``rounds`` (evaluated only in the final stretch), scored against the planted
    groups of every client.
    """
    from server.inprocess import run_in_process

    rows = []
    for dataset, groups, clients in DURING_FEDERATIONS[half]:
        for seed in DURING_SEEDS[half]:
            cell = Cell(half, dataset, "label-groups", groups, clients, seed)
            for name in strategies:
                for setting in settings:
                    rc = {**cell.run_config(), "strategy": name, **setting}
                    rc["eval-every"] = rc["rounds"]
                    started = time.perf_counter()
                    strategy = run_in_process(rc)
                    pids = sorted(strategy.assignment)
                    truth = np.array([strategy.true_group(p) for p in pids])
                    labels = np.array([strategy.assignment[p] for p in pids])
                    row = {
                        **{k: getattr(cell, k) for k in ("half", "dataset", "groups", "clients", "seed")},
                        "algorithm": name,
                        "setting": " ".join(f"--{k} {v}" for k, v in setting.items()) or "defaults",
                        "rounds": rc["rounds"],
                        "k-found": strategy.num_clusters,
                        "ari": _ari(truth, labels),
                        "seconds": round(time.perf_counter() - started, 1),
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def during_tables(rows: Sequence[dict[str, Any]], half: str) -> list[Table]:
    """A summary per algorithm and setting and every run's K found and ARI."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        groups.setdefault((r["algorithm"], r["setting"]), []).append(r["ari"])
    summary = Table(
        title=f"Clustering while training, {half} half: ARI per algorithm",
        columns=("algorithm", "setting", "runs", "mean ARI", "min ARI", "runs ARI >= 0.95"),
        rows=[
            [a, s, len(v), round(float(np.mean(v)), 3), round(float(np.min(v)), 3), sum(x >= 0.95 for x in v)]
            for (a, s), v in groups.items()
        ],
        notes="In-process runs of the real ClientApp (benchmarks/selection.py, during_training): label groups, "
        f"the project's defaults ({_rounds(rows)} rounds) but the federation and the setting shown.",
    )
    detail = Table(
        title=f"Clustering while training, {half} half: K found, ARI",
        columns=DURING_COLUMNS,
        rows=[[r[k] for k in DURING_COLUMNS] for r in rows],
    )
    return [summary, detail]


def _rounds(rows: Sequence[dict[str, Any]]) -> str:
    """The rows' run lengths, as text ("100", or "6, 100")."""
    return ", ".join(str(r) for r in sorted({r["rounds"] for r in rows}))


def fesem_models(rc: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """FeSEM's seeding signal with ``fesem-init clients``: every client's model after training the
    initial model as in round 1 (the client's train handler's ``train_as_configured`` on the run's
    local config and FeSEM's ``client_config``), floating entries flat (N, P), and the initial model
    they started from (P,)."""
    training = TrainingParams.from_run_config(rc)
    fesem = FeSEM(training, params_from_run_config(FeSEMParams, rc))
    model = Experiment.from_run_config(rc).initial_model()
    rows = []
    for pid in range(rc["num-clients"]):
        cfg = ConfigRecord({**training.local_config(), keys.SERVER_ROUND: 1, **fesem.client_config(1, pid)})
        trained, _ = train_as_configured(_task(rc, pid), model, cfg)
        rows.append(flat({name: t.detach().cpu().numpy() for name, t in trained.state_dict().items()}))
    return np.stack(rows), flat({name: a.numpy() for name, a in model.items()})


def pacfl_bases(rc: dict[str, Any], vectors: int) -> list[dict[int, np.ndarray]]:
    """PACFL's signal: every client's class bases from the real client handler
    (``query.subspaces`` with ``vectors`` per class), in the order of the clients."""
    cfg = ConfigRecord({keys.SUBSPACE_VECTORS: vectors})
    bases = []
    for pid in range(rc["num-clients"]):
        task = _task(rc, pid)
        arrays = subspaces(task, RecordDict({keys.CONFIG: cfg}))
        signal = ClassSubspaces.from_arrays(arrays, dim=None, num_classes=task.info.num_classes, max_vectors=vectors)
        bases.append(signal.by_class())
    return bases


def find_cell(name: str) -> Cell:
    """The cell of either half (``grid``) whose ``Cell.name`` is ``name``."""
    cells = {c.name: c for half in HALVES for c in grid(half)}
    if name not in cells:
        raise ValueError(
            f"The '--proximity' parameter must name a cell of the grid (--dry-run lists them). Got {name!r}."
        )
    return cells[name]


def pacfl_proximity(cell: Cell, vectors: int = 0) -> dict[str, Any]:
    """Why PACFL's automatic cut finds what it finds on ``cell``: its default distance matrix seen by group.

    The clients' bases from the real client handler (``vectors`` per class, 0 = the default
    ``pacfl-vectors``), the default measure; returns each planted group's classes and size, the
    mean angle between every two groups (the diagonal: within a group), the within- and
    between-group angle distributions, the share of clients whose nearest client is of their own
    group, and the silhouette and ARI of the average-linkage tree cut into k = 2 .. 12 clusters
    next to the automatic cut's.
    """
    rc = cell.run_config()
    pacfl = params_from_run_config(PACFLParams, rc)
    p = vectors or pacfl.pacfl_vectors
    tasks = [_task(rc, pid) for pid in range(cell.clients)]
    truth = np.array([int(t.data.group) for t in tasks])
    groups = sorted(set(truth.tolist()))
    bases = pacfl_bases(rc, p)
    distances = client_distances(bases, pacfl.pacfl_measure)
    same, off = truth[:, None] == truth[None, :], ~np.eye(len(truth), dtype=bool)
    within, between = distances[same & off], distances[~same]
    by_group: list[list[float | None]] = []
    for a in groups:
        row: list[float | None] = []
        for b in groups:
            pairs = (same & off if a == b else ~same)[np.ix_(truth == a, truth == b)]
            block = distances[np.ix_(truth == a, truth == b)][pairs]
            row.append(round(float(block.mean()), 1) if block.size else None)
        by_group.append(row)
    nearest = np.where(off, distances, np.inf).argmin(axis=1)
    cuts = []
    for k in range(2, min(12, len(truth) - 1) + 1):
        labels = cut_tree(distances, threshold=0.0, num_clusters=k, linkage=pacfl.linkage)
        score = silhouette_score(distances, labels, metric="precomputed")
        cuts.append({"k": k, "silhouette": round(float(score), 3), "ari": _ari(truth, labels)})
    found = pacfl_clusters(
        bases,
        Cut(pacfl.pacfl_threshold, pacfl.num_clusters, pacfl.linkage),
        pacfl.pacfl_measure,
        np.random.default_rng(cell.seed),
    )
    return {
        "cell": cell.name,
        "pacfl-vectors": p,
        "pacfl-measure": pacfl.pacfl_measure,
        "groups": {
            g: {
                "classes": sorted({int(c) for t in tasks if int(t.data.group) == g for c in np.unique(t.data.y_train)}),
                "clients": int((truth == g).sum()),
            }
            for g in groups
        },
        "mean-angle-by-group": by_group,
        "within": {
            "mean": round(float(within.mean()), 1),
            "std": round(float(within.std()), 1),
            "max": round(float(within.max()), 1),
        },
        "between": {
            "mean": round(float(between.mean()), 1),
            "std": round(float(between.std()), 1),
            "min": round(float(between.min()), 1),
        },
        "between-below-within-max": round(float(np.mean(between < within.max())), 3),
        "nearest-in-own-group": round(float(np.mean(truth[nearest] == truth)), 3),
        "cuts": cuts,
        "automatic": {"k": int(found.labels.max()) + 1, "ari": _ari(truth, found.labels)},
    }


def measure(cell: Cell, algorithms: Sequence[str] = ALGORITHMS) -> list[dict[str, Any]]:
    """Each of ``algorithms``' K found and ARI on one cell, with its default parameters; only the
    signals of ``algorithms`` are computed."""
    rc = cell.run_config()
    started = time.perf_counter()
    truth = np.array([int(_task(rc, pid).data.group) for pid in range(cell.clients)])
    k_true = len(set(truth.tolist()))
    labels: dict[str, np.ndarray] = {}
    told: dict[str, np.ndarray] = {}

    def keep(name: str, found: OneShotClusters, linkage: str) -> None:
        labels[name] = found.labels
        if found.distances is not None:
            told[name] = cut_tree(found.distances, threshold=0.0, num_clusters=k_true, linkage=linkage)

    if FedClust.name in algorithms:
        fedclust = params_from_run_config(FedClustParams, rc)
        layers, _, _ = signals(rc, fedclust.cluster_steps)
        cut = Cut(fedclust.fedclust_lambda, fedclust.num_clusters, fedclust.linkage)
        keep(FedClust.name, fedclust_clusters(layers, cut, fedclust.sample_above, cell.seed), cut.linkage)
    if PACFL.name in algorithms:
        pacfl = params_from_run_config(PACFLParams, rc)
        cut = Cut(pacfl.pacfl_threshold, pacfl.num_clusters, pacfl.linkage)
        bases = pacfl_bases(rc, pacfl.pacfl_vectors)
        found = pacfl_clusters(bases, cut, pacfl.pacfl_measure, np.random.default_rng(cell.seed))
        keep(PACFL.name, found, cut.linkage)
    if FLHC.name in algorithms:
        flhc = params_from_run_config(FLHCParams, rc)
        updates = flhc_updates({**rc, "flhc-warmup-rounds": flhc.warmup_rounds})
        cut = Cut(flhc.flhc_threshold, flhc.num_clusters, flhc.linkage)
        found = flhc_clusters(list(updates), cut, flhc.flhc_metric, cell.seed, flhc.sample_above)
        keep(FLHC.name, found, cut.linkage)
    if FeSEM.name in algorithms:
        fesem = params_from_run_config(FeSEMParams, rc)
        points, origin = fesem_models(rc)
        labels[FeSEM.name] = automatic_labels(
            points, fesem.auto_limit(len(points)), cell.seed, origin=origin, metric=fesem.auto_metric
        )
    ordered = {a: labels[a] for a in algorithms if a in labels}
    return _rows(cell, truth, ordered, told, time.perf_counter() - started)


def _ari(truth: np.ndarray, labels: np.ndarray) -> float:
    return round(float(adjusted_rand_score(truth, labels)), 3) + 0.0  # + 0.0: no "-0.0" in the tables


def _rows(
    cell: Cell, truth: np.ndarray, found: dict[str, np.ndarray], told: dict[str, np.ndarray], seconds: float
) -> list[dict[str, Any]]:
    """One row per algorithm; ``told``: its labels when the same distances are cut at the true K."""
    k_true = len(set(truth.tolist()))
    return [
        {
            **{k: getattr(cell, k) for k in ("half", "dataset", "scenario", "groups", "clients", "seed")},
            "true-groups": k_true,
            "algorithm": algorithm,
            "meant-for": cell.scenario in MEANT_FOR[algorithm],
            "k-found": int(labels.max()) + 1,
            "ari": _ari(truth, labels),
            "ari-at-true-k": _ari(truth, told[algorithm]) if algorithm in told else None,
            "signal-seconds": round(seconds, 1),
        }
        for algorithm, labels in found.items()
    ]


def tables(rows: Sequence[dict[str, Any]], half: str) -> list[Table]:
    """One table of every cell (K found, ARI per algorithm) and a summary per algorithm and scenario."""
    cells: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["dataset"], r["scenario"], r["groups"], r["clients"], r["seed"])
        told = f" (true K: {r['ari-at-true-k']:.3f})" if r.get("ari-at-true-k") is not None else ""
        cells.setdefault(key, {"true": r["true-groups"]})[r["algorithm"]] = f"{r['k-found']}, {r['ari']:.3f}{told}"
    detail = Table(
        title=f"Selection with defaults, {half} half: K found, ARI",
        columns=("dataset", "scenario", "groups", "clients", "seed", "true groups", *ALGORITHMS),
        rows=[[*key, v["true"], *(v.get(a) for a in ALGORITHMS)] for key, v in cells.items()],
        notes="Each cell: clusters found, ARI against the planted groups. Server-side clustering step on the real "
        "clients' signals, no training after it (module docstring of benchmarks/selection.py). Where measured, "
        "'true K': the ARI of the same distances cut into the true number of groups (the signal's quality; a "
        "low ARI with a high one here is the automatic cut's miss).",
    )
    summary_rows = []
    for algorithm in ALGORITHMS:
        for scenario in SCENARIOS:
            aris = [r["ari"] for r in rows if r["algorithm"] == algorithm and r["scenario"] == scenario]
            if aris:
                summary_rows.append(
                    [
                        algorithm,
                        scenario,
                        "yes" if scenario in MEANT_FOR[algorithm] else "no",
                        len(aris),
                        round(float(np.mean(aris)), 3),
                        round(float(np.min(aris)), 3),
                        sum(a >= 0.95 for a in aris),
                    ]
                )
    summary = Table(
        title=f"Selection with defaults, {half} half: ARI per algorithm and scenario",
        columns=("algorithm", "scenario", "meant for (paper)", "cells", "mean ARI", "min ARI", "cells ARI >= 0.95"),
        rows=summary_rows,
    )
    return [summary, detail]


def _record(name: str, *, command: str, tables: list[Table], load: str) -> None:
    """Write ``docs/results/data/<name>.json`` in this benchmark's section of RESULTS.md."""
    write_record(Record(name=name, section="Selection with defaults", command=command, tables=tables, load=load))


def _measured(args: argparse.Namespace, measure: Callable[[], Any]) -> Any:
    """The rows ``--rows`` names, or ``measure()``'s, written to ``--out`` when given."""
    if args.rows is not None:
        return json.loads(args.rows.read_text())
    rows = measure()
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def _record_if_asked(args: argparse.Namespace, name: str, tables: list[Table]) -> None:
    """With ``--record``: the record ``name`` of ``tables``, with the command and load given or current."""
    if args.record:
        _record(name, command=args.measured_by or current_command(), tables=tables, load=args.load or load_average())


def _strategies(text: str, flag: str, parser: argparse.ArgumentParser) -> list[str]:
    """The comma-separated strategies of ``flag``, each one of ``FULL_RUN_STRATEGIES``."""
    names = text.split(",")
    unknown = sorted(set(names) - set(FULL_RUN_STRATEGIES))
    if unknown:
        parser.error(f"The '{flag}' parameter must name strategies of {FULL_RUN_STRATEGIES}. Got {unknown} instead.")
    return names


def _setting(text: str, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """``key=value,key=value`` as run-config values (each value parsed as TOML, else kept as text); every
    key must be a run-config key (``strategies.schema.SCHEMA``), so that a typo is not run as the defaults."""
    from strategies.schema import SCHEMA

    if text == "defaults":
        return {}
    setting: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key and key not in SCHEMA:
            parser.error(f"The '--setting' parameter must name run-config keys. Got {key!r} instead.")
        if not sep or not key:
            parser.error(
                f"The '--setting' parameter must be 'key=value[,key=value]' or 'defaults'. Got {text!r} instead."
            )
        try:
            setting[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            setting[key] = value
    return setting


def main(argv: Sequence[str] | None = None) -> int:
    """Measure one half; print the rows, write them (``--out``) and the record (``--record``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=tuple(HALVES), default="held-out")
    parser.add_argument("--max-clients", type=int, default=1000, help="skip cells with more clients")
    parser.add_argument("--min-clients", type=int, default=0, help="skip cells with fewer clients")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated: only these algorithms")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated: only cells of these scenarios"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--record", action="store_true", help="write docs/results/data/selection-<half>.json")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and stop")
    parser.add_argument(
        "--rows", type=Path, default=None, help="rebuild the record from rows an earlier --out wrote (no measuring)"
    )
    parser.add_argument("--measured-by", default="", help="with --rows: the command that measured them")
    parser.add_argument("--load", default="", help="with --rows: the load while they were measured")
    parser.add_argument("--full-runs", type=Path, default=None, help="umbel runs of FULL_RUN_CELLS into this folder")
    parser.add_argument("--full-cells", default="0:", help="which FULL_RUN_CELLS, a Python slice 'start:stop'")
    parser.add_argument(
        "--full-strategies", default=",".join(FULL_RUN_STRATEGIES), help="comma-separated: only these full runs"
    )
    parser.add_argument(
        "--proximity", default=None, help="a cell's name: print PACFL's distances by planted group and stop"
    )
    parser.add_argument("--vectors", type=int, default=0, help="with --proximity: p (0 = pacfl-vectors' default)")
    parser.add_argument(
        "--flic-louvain", action="store_true", help="FLIC's Louvain step by rule on --half (FLIC_SEEDS)"
    )
    parser.add_argument("--seeds", default="", help="with --flic-louvain: comma-separated seeds (default FLIC_SEEDS)")
    parser.add_argument(
        "--flic-rounds", action="store_true", help="FLIC's clustering round by flic-min-updates on --half (FLIC_SEEDS)"
    )
    parser.add_argument(
        "--flic-federations", default="", help="with --flic-rounds: indices into FLIC_FEDERATIONS, comma-separated"
    )
    parser.add_argument(
        "--during-training",
        default="",
        help="comma-separated strategies that cluster while training: in-process runs on DURING_FEDERATIONS of --half",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help="with --during-training: run-config values over the defaults, 'key=value,key=value' (repeatable; "
        "'defaults' for none; default: the defaults only)",
    )
    args = parser.parse_args(argv)
    if args.setting and not args.during_training:
        parser.error("The '--setting' parameter needs --during-training. Got --setting alone instead.")
    if args.during_training:
        names = _strategies(args.during_training, "--during-training", parser)
        settings = [_setting(text, parser) for text in args.setting] or [{}]
        during_rows = _measured(args, lambda: during_training(args.half, names, settings))
        _record_if_asked(args, f"selection-during-{args.half}", during_tables(during_rows, args.half))
        return 0
    if args.flic_rounds:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
        chosen = (
            [FLIC_FEDERATIONS[int(i)] for i in args.flic_federations.split(",")]
            if args.flic_federations
            else FLIC_FEDERATIONS
        )
        round_rows = _measured(args, lambda: flic_rounds(args.half, seeds, chosen))
        _record_if_asked(args, f"selection-flic-rounds-{args.half}", flic_rounds_tables(round_rows, args.half))
        return 0
    if args.flic_louvain:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
        flic_rows = _measured(args, lambda: flic_louvain(args.half, seeds))
        _record_if_asked(args, f"selection-flic-{args.half}", flic_tables(flic_rows, args.half))
        return 0
    if args.proximity is not None:
        print(json.dumps(pacfl_proximity(find_cell(args.proximity), args.vectors), indent=1))
        return 0
    if args.full_runs is not None:
        if args.rows is not None:
            rows = json.loads(args.rows.read_text())
        else:
            start, _, stop = args.full_cells.partition(":")
            strategies = _strategies(args.full_strategies, "--full-strategies", parser)
            rows = full_runs(args.full_runs, slice(int(start or 0), int(stop) if stop else None), args.out, strategies)
        if args.record:
            columns = ("dataset", "groups", "clients", "seed", "algorithm", "k-found", "ari", "final-accuracy")
            _record(
                "selection-full-runs",
                command=args.measured_by or current_command(),
                tables=[
                    Table(
                        title=f"Full umbel runs with defaults ({FULL_RUN_ROUNDS} rounds): final K and ARI",
                        columns=(*columns, "not learning"),
                        rows=[[*(r[c] for c in columns), r["not-learning"]] for r in rows],
                        notes="label-groups, seed 3; every key at its default but the federation and rounds.",
                    )
                ],
                load=args.load or load_average(),
            )
        return 0
    if args.rows is not None:
        saved = json.loads(args.rows.read_text())
        _record(
            f"selection-{args.half}",
            # the rebuild's own command without --measured-by and --load, whose texts are shown once
            command=f"{args.measured_by} (tables: python -m benchmarks.selection --half {args.half} --rows "
            f"{shlex.quote(str(args.rows))} --record)".strip(),
            tables=tables(saved, args.half),
            load=args.load,
        )
        return 0
    scenarios = args.scenarios.split(",")
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"The '--scenarios' parameter must name scenarios of {SCENARIOS}. Got {unknown} instead.")
    unknown = sorted(set(args.algorithms.split(",")) - set(ALGORITHMS))
    if unknown:
        parser.error(f"The '--algorithms' parameter must name algorithms of {ALGORITHMS}. Got {unknown} instead.")
    cells = [
        c for c in grid(args.half) if args.min_clients <= c.clients <= args.max_clients and c.scenario in scenarios
    ]
    if args.dry_run:
        print("\n".join(c.name for c in cells))
        return 0
    rows: list[dict[str, Any]] = []
    loads = [load_average()]
    for cell in cells:
        try:
            measured = measure(cell, args.algorithms.split(","))
        except ValueError as error:  # a federation the data cannot make: reported, not hidden
            print(json.dumps({"cell": cell.name, "error": str(error)}), flush=True)
            continue
        for row in measured:
            rows.append(row)
            print(json.dumps(row), flush=True)
        loads.append(load_average())
        if args.out is not None:
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
    if args.record:
        _record(
            f"selection-{args.half}",
            command=current_command(),
            tables=tables(rows, args.half),
            load=f"load averages (1, 5, 15 min) at the start and after each cell: {'; '.join(loads)}",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
