"""CFLGT's pictures: every client's gradient trajectory (paper Fig. 3-5), one panel per cluster
(Fig. 6), and ``trajectories.json`` with the numbers behind them and the clustering diagnostics.

Points are joined in one seeded random class order, the same for every client (Sec. III-B);
the order changes the picture, never the clustering (Sec. IV-D).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ..plots import _save
from . import register


def _draw(ax: Any, points: np.ndarray, color: Any, order: np.ndarray, width: float = 0.8) -> None:
    ax.plot(points[order, 0], points[order, 1], "-o", color=color, lw=width, ms=2.5, alpha=0.7)


@register("cflgt")
def trajectory_figures(strategy: Any, folder: Path) -> list[Path]:
    """Write ``trajectories.png``, ``trajectory-clusters.png`` and ``trajectories.json``.

    Returns no path when no trajectory was collected (e.g. a run shorter than pre-training).
    """
    pids = sorted(strategy.trajectories)
    if not pids:
        return []
    folder = Path(folder)
    points = np.stack([strategy.trajectories[p] for p in pids])
    labels = np.array([strategy.assignment.get(p, -1) for p in pids])
    order = np.random.default_rng(strategy.training.seed).permutation(points.shape[1])
    clusters = sorted(set(labels.tolist()))
    cmap = colormaps["tab20" if len(clusters) > 10 else "tab10"]

    fig = Figure(figsize=(6.5, 5))
    ax = fig.add_subplot()
    for p, k in zip(points, labels, strict=True):
        _draw(ax, p, cmap(clusters.index(k) % cmap.N), order)
    ax.set_xlabel("Z1' (pulling force)")
    ax.set_ylabel("Z2' (pushing force)")
    paths = [_save(fig, folder / "trajectories.png", f"CFLGT: trajectories of {len(pids)} clients")]

    cols = min(5, len(clusters))
    rows = math.ceil(len(clusters) / cols)
    fig = Figure(figsize=(3.2 * cols, 2.8 * rows))
    lo, hi = points.reshape(-1, 2).min(axis=0), points.reshape(-1, 2).max(axis=0)
    pad = 0.05 * np.maximum(hi - lo, 1e-12)
    for i, k in enumerate(clusters):
        ax = fig.add_subplot(rows, cols, i + 1)
        members = points[labels == k]
        for p in members:
            _draw(ax, p, cmap(i % cmap.N), order)
        if 0 <= k < len(strategy.exemplars):
            _draw(ax, strategy.exemplars[k], "black", order, width=1.6)
        ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
        ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
        ax.set_title(f"cluster {k} ({len(members)} clients)", fontsize=9)
        ax.tick_params(labelsize=7)
    paths.append(_save(fig, folder / "trajectory-clusters.png", "CFLGT: trajectories by cluster (exemplar black)"))

    data = {"partition-ids": pids, "clusters": labels.tolist(), "point-order": order.tolist(),
            "trajectories": points.tolist(), "exemplars": np.asarray(strategy.exemplars).tolist(),
            "pending": sorted(strategy.pending),
            "diagnostics": {k: None if math.isnan(v) else v for k, v in strategy.diagnostics.items()}}
    path = folder / "trajectories.json"
    path.write_text(json.dumps(data, indent=1))
    return [*paths, path]
