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

from strategies import CFLGT

from ..plots import _save


def _draw(
    ax: Any,
    points: np.ndarray,
    color: Any,
    order: np.ndarray,
    width: float = 0.6,
    alpha: float = 0.35,
    label: str | None = None,
) -> None:
    ax.plot(points[order, 0], points[order, 1], "-o", color=color, lw=width, ms=2.0, alpha=alpha, label=label)


def _exemplar(ax: Any, points: np.ndarray, color: Any, order: np.ndarray) -> None:
    """The cluster's exemplar: thick, in its colour, outlined in black so it stands above its members."""
    ax.plot(points[order, 0], points[order, 1], "-o", color="black", lw=3.2, ms=4.5, zorder=3)
    ax.plot(points[order, 0], points[order, 1], "-o", color=color, lw=1.8, ms=3.0, zorder=4)


def trajectory_figures(strategy: CFLGT, folder: Path) -> list[Path]:
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

    sizes = {k: int(np.sum(labels == k)) for k in clusters}
    names = {k: f"cluster {k} ({sizes[k]})" if k >= 0 else f"not clustered ({sizes[k]})" for k in clusters}
    fig = Figure(figsize=(8.0, 5.2))
    ax = fig.add_subplot()
    for i, k in enumerate(clusters):
        for j, p in enumerate(points[labels == k]):
            _draw(ax, p, cmap(i % cmap.N), order, label=names[k] if j == 0 else None)
        if 0 <= k < len(strategy.exemplars):
            _exemplar(ax, np.asarray(strategy.exemplars[k]), cmap(i % cmap.N), order)
    ax.set_xlabel("Z1' (pulling force)")
    ax.set_ylabel("Z2' (pushing force)")
    ax.grid(alpha=0.3)
    legend = ax.legend(
        title="cluster (clients); thick: exemplar",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        title_fontsize=8,
        ncol=1 if len(clusters) <= 16 else 2,
    )
    for handle in legend.legend_handles:
        if handle is not None:
            handle.set_alpha(1.0)
    paths = [_save(fig, folder / "trajectories.png", f"CFLGT: gradient trajectories of {len(pids)} clients")]

    cols = min(3, len(clusters))
    rows = math.ceil(len(clusters) / cols)
    fig = Figure(figsize=(3.6 * cols, 3.0 * rows + 0.4))
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)).ravel()
    lo, hi = points.reshape(-1, 2).min(axis=0), points.reshape(-1, 2).max(axis=0)
    pad = 0.05 * np.maximum(hi - lo, 1e-12)
    for i, k in enumerate(clusters):
        ax = axes[i]
        for p in points[labels == k]:
            _draw(ax, p, cmap(i % cmap.N), order)
        if 0 <= k < len(strategy.exemplars):
            _exemplar(ax, np.asarray(strategy.exemplars[k]), cmap(i % cmap.N), order)
        ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
        ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
        ax.set_title(f"cluster {k}: {sizes[k]} clients" if k >= 0 else f"not clustered: {sizes[k]}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        if i % cols == 0:
            ax.set_ylabel("Z2' (pushing)", fontsize=9)
        if i >= len(clusters) - cols:
            ax.set_xlabel("Z1' (pulling)", fontsize=9)
            ax.xaxis.set_tick_params(labelbottom=True)
    for ax in axes[len(clusters) :]:
        ax.set_visible(False)
    paths.append(
        _save(fig, folder / "trajectory-clusters.png", "CFLGT: trajectories by cluster (outlined: the exemplar)")
    )

    data = {
        "partition-ids": pids,
        "clusters": labels.tolist(),
        "point-order": order.tolist(),
        "trajectories": points.tolist(),
        "exemplars": np.asarray(strategy.exemplars).tolist(),
        "pending": sorted(strategy.pending),
        "diagnostics": {k: None if math.isnan(v) else v for k, v in strategy.diagnostics.items()},
    }
    path = folder / "trajectories.json"
    path.write_text(json.dumps(data, indent=1))
    return [*paths, path]
