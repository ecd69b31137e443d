"""PNG plots of a run: accuracy, clustering quality and the clients' distance matrix.

Figures are drawn with matplotlib's Agg canvas directly, never through ``pyplot``: nothing is
shown, no global backend is switched and no figure outlives its function. Each function writes
one PNG (creating parent folders) and returns its path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from common.clustering.ordering import cluster_spans, order_by_cluster

__all__ = ["order_by_cluster", "plot_accuracy", "plot_clustering", "plot_distance_matrix"]

KINDS: tuple[str, ...] = ("distance", "similarity")
DPI = 120


def plot_accuracy(
    rounds: Sequence[int],
    mean: Sequence[float | None],
    std: Sequence[float | None],
    path: str | Path,
    title: str = "",
    marks: Sequence[int] = (),
) -> Path:
    """Plot the mean local test accuracy per round with a +-std band.

    Parameters
    ----------
    rounds : sequence of int of length R
    mean, std : sequence of float or None of length R
        Rounds without an evaluation may be ``None`` or NaN; they leave a gap.
    path : str or Path
        The PNG to write.
    title : str, default=""
    marks : sequence of int, default=()
        Rounds drawn as dashed vertical lines labelled "clustering" (the clusters changed).

    Raises
    ------
    ValueError
        Naming ``'mean'`` or ``'std'`` when a length differs from ``rounds``.
    """
    x = _series(rounds, "rounds", len(rounds), "plot_accuracy")
    m = _series(mean, "mean", len(x), "plot_accuracy")
    s = _series(std, "std", len(x), "plot_accuracy")
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    ax.plot(x, m, marker="." if len(x) < 50 else None, label="mean")
    # accuracy (and R^2) never exceeds 1, so neither may the band
    ax.fill_between(x, m - s, np.minimum(m + s, 1.0), alpha=0.25, label="± std across clients")
    for i, mark in enumerate(marks):
        ax.axvline(
            mark,
            color="tab:red",
            linestyle="--",
            linewidth=1.0,
            label=f"clustering (round {mark})" if len(marks) == 1 else ("clusters change" if i == 0 else None),
        )
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("local test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _save(fig, path, title)


def plot_clustering(
    rounds: Sequence[int],
    ari: Sequence[float | None],
    num_clusters: Sequence[int],
    path: str | Path,
    title: str = "",
) -> Path:
    """Plot the ARI against the true groups and the number of clusters per round, two panels.

    Parameters
    ----------
    rounds : sequence of int of length R
    ari : sequence of float or None of length R
        ``None`` (no ground truth that round) points are skipped.
    num_clusters : sequence of int of length R
    path : str or Path
    title : str, default=""

    Raises
    ------
    ValueError
        Naming ``'ari'`` or ``'num_clusters'`` when a length differs from ``rounds``.
    """
    x = _series(rounds, "rounds", len(rounds), "plot_clustering")
    a = _series(ari, "ari", len(x), "plot_clustering")
    k = _series(num_clusters, "num_clusters", len(x), "plot_clustering")
    fig = Figure(figsize=(6.4, 5.6))
    top, bottom = fig.subplots(2, 1, sharex=True)
    known = np.isfinite(a)
    if known.any():
        top.plot(x[known], a[known], marker=".", color="tab:blue")
    else:
        top.text(0.5, 0.5, "ARI n/a (no ground truth)", ha="center", va="center", transform=top.transAxes)
    top.set_ylabel("ARI")
    top.set_ylim(-0.05, 1.05)
    top.grid(alpha=0.3)
    bottom.step(x, k, where="post", color="tab:orange")
    bottom.set_ylabel("number of clusters")
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    if np.isfinite(k).any():
        bottom.set_ylim(0, np.nanmax(k) + 1)
    bottom.set_xlabel("round")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.grid(alpha=0.3)
    return _save(fig, path, title)


def plot_distance_matrix(
    matrix: np.ndarray,
    labels: np.ndarray,
    path: str | Path,
    title: str = "",
    kind: str = "distance",
) -> Path:
    """Plot a client x client matrix with clients grouped by cluster and cluster borders drawn.

    Parameters
    ----------
    matrix : np.ndarray of shape (N, N)
        Pairwise distances or similarities.
    labels : np.ndarray of shape (N,)
        Cluster of each client; rows and columns are reordered by :func:`order_by_cluster`.
    path : str or Path
    title : str, default=""
    kind : {"distance", "similarity"}, default="distance"
        Names the colour bar; distances use a reversed colour map so that close pairs look
        alike in both kinds.

    Raises
    ------
    ValueError
        Naming ``'matrix'`` unless it is square, ``'labels'`` unless it has one entry per row,
        ``'kind'`` for an unknown kind.
    """
    if kind not in KINDS:
        raise ValueError(f"The 'kind' parameter of plot_distance_matrix must be one of {KINDS}. Got {kind!r} instead.")
    mat = np.asarray(matrix, dtype=np.float64)
    if mat.ndim != 2 or mat.shape[0] != mat.shape[1] or mat.shape[0] == 0:
        raise ValueError(
            f"The 'matrix' parameter of plot_distance_matrix must be a non-empty square "
            f"(N, N) array. Got shape {mat.shape} instead."
        )
    labels = np.asarray(labels)
    if labels.shape != (mat.shape[0],):
        raise ValueError(
            f"The 'labels' parameter of plot_distance_matrix must have shape "
            f"({mat.shape[0]},). Got shape {labels.shape} instead."
        )
    order = order_by_cluster(labels)
    ordered = mat[np.ix_(order, order)]
    sorted_labels = labels[order]
    starts, ends = cluster_spans(sorted_labels)

    fig = Figure(figsize=(6.0, 5.2))
    ax = fig.add_subplot()
    image = ax.imshow(ordered, cmap="viridis_r" if kind == "distance" else "viridis", interpolation="nearest")
    for border in starts[1:] - 0.5:
        ax.axhline(border, color="white", linewidth=1.0)
        ax.axvline(border, color="white", linewidth=1.0)
    centres = (starts + ends - 1) / 2.0
    tick_labels = [str(v) for v in sorted_labels[starts]]
    if len(starts) <= 30:
        ax.set_xticks(centres, tick_labels)
        ax.set_yticks(centres, tick_labels)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_xlabel("clients, by cluster")
    ax.set_ylabel("clients, by cluster")
    fig.colorbar(image, ax=ax, label=kind)
    return _save(fig, path, title)


def _series(values: Sequence, name: str, length: int, owner: str) -> np.ndarray:
    array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if array.shape != (length,):
        raise ValueError(
            f"The '{name}' parameter of {owner} must be a 1-D sequence of length {length}, "
            f"as rounds. Got shape {array.shape} instead."
        )
    return array


def _save(fig: Figure, path: str | Path, title: str) -> Path:
    FigureCanvasAgg(fig)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=DPI)
    return out
