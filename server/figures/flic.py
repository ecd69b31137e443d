"""FLIC's picture and report: the training loss before clustering, and the clusters.

``flic-stability.png`` plots the mean training loss per round (``loss_plateau`` reads it)
and the clustering round (the automatic rule's evidence). ``flic.json`` gives the clustering
round, Louvain's resolution, the round each client outside the graph joined and, per final
cluster, its size, its members' true groups (scoring only) and their mean local test accuracy
of the last evaluation, e.g. for the attack scenario's loyal clusters.
``flic-similarity.npz`` keeps ``S`` among the clustered clients (``pids``, ``similarity``) when
they are at most ``MAX_SAVED``, to study Louvain's resolution offline.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from strategies import FLIC

from ..plots import _save

MAX_SAVED = 5000


def flic_figures(strategy: FLIC, folder: Path) -> list[Path]:
    """Write ``flic-stability.png`` and ``flic.json`` into ``folder``; return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    loss = np.asarray(strategy.train_loss, dtype=np.float64)
    if loss.size:
        ax.plot(np.arange(1, loss.size + 1), loss, marker=".", label="mean training loss")
    if strategy.clustered_at is not None:
        ax.axvline(strategy.clustered_at, color="tab:green", label=f"clustering (round {strategy.clustered_at})")
    ax.set_xlabel("round")
    ax.set_ylabel("mean training loss of the sampled clients")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8)
    png = _save(fig, folder / "flic-stability.png", "FLIC: training loss before clustering")
    clusters = []
    for k in range(len(strategy.models)):
        members = sorted(p for p, c in strategy.assignment.items() if c == k)
        accs = [strategy.last_eval[p][0] for p in members if p in strategy.last_eval]
        clusters.append(
            {
                "cluster": k,
                "size": len(members),
                "true-groups": {str(g): n for g, n in sorted(Counter(strategy.true_group(p) for p in members).items())},
                "accuracy": float(np.mean(accs)) if accs else None,
            }
        )
    report = folder / f"{FLIC.name}.json"
    report.write_text(
        json.dumps(
            {
                "cluster-round": strategy.clustered_at,
                "resolution": strategy.resolution,
                "joined": {str(p): r for p, r in sorted(strategy.joined.items())},
                "train-loss": loss.tolist(),
                "clusters": clusters,
            },
            indent=1,
        )
        + "\n"
    )
    paths = [png, report]
    if strategy.clustering_similarity is not None and len(strategy.clustering_similarity[0]) <= MAX_SAVED:
        pids, matrix = strategy.clustering_similarity
        paths.append(folder / "flic-similarity.npz")
        np.savez_compressed(paths[-1], pids=np.asarray(pids), similarity=matrix.astype(np.float32))
    return paths
