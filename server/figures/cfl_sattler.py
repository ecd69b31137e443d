"""Sattler's CFL picture: per cluster, the mean-update ratio with eps1, the max norm, and the splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import register


@register("cfl-sattler")
def cfl_sattler_norms(strategy: Any, folder: Path) -> list[Path]:
    """Write ``cfl-norms.png``: per cluster, ``mean_update_ratio`` of its sampled members (solid) and ``max ||update_i||`` (dashed, right axis) each round; eps1 and eps2
    as horizontal lines, kept splits (red) and rejected bi-partitions (grey) as vertical lines."""
    fig = Figure(figsize=(7.0, 4.4))
    ax = fig.add_subplot()
    right = ax.twinx()
    colours = [f"C{i % 10}" for i in range(max(1, len(strategy.models)))]
    for k in sorted({r["cluster"] for r in strategy.norms}):
        rows = [r for r in strategy.norms if r["cluster"] == k]
        x = [r["round"] for r in rows]
        colour = colours[k % len(colours)]
        ax.plot(x, [r["ratio"] for r in rows], color=colour,
                label=f"cluster {k}")
        right.plot(x, [r["max-norm"] for r in rows], color=colour, linestyle="--", linewidth=0.8)
    ax.axhline(strategy.params.eps1, color="black", linewidth=0.8, label=f"eps1 = {strategy.params.eps1}")
    if strategy.params.eps2:
        right.axhline(strategy.params.eps2, color="grey", linewidth=0.8, linestyle="--")
    for i, split in enumerate(strategy.splits):
        ax.axvline(split["round"], color="tab:red", alpha=0.5, label="split" if i == 0 else None)
    for i, attempt in enumerate(a for a in strategy.attempts if not a["kept"]):
        ax.axvline(attempt["round"], color="grey", linestyle=":", label="no separation" if i == 0 else None)
    ax.set_xlabel("round")
    ax.set_ylabel("||mean update|| / RMS ||update_i|| (unbiased)")
    right.set_ylabel("max ||update_i|| (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2, loc="upper right")
    FigureCanvasAgg(fig)
    fig.suptitle("cfl-sattler: split criterion")
    fig.tight_layout()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cfl-norms.png"
    fig.savefig(path, format="png", dpi=120)
    return [path]
