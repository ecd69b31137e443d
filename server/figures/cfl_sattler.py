"""Sattler's CFL picture: mean and max update norms per round, with eps1, eps2 and the splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import register


@register("cfl-sattler")
def cfl_sattler_norms(strategy: Any, folder: Path) -> list[Path]:
    """Write ``cfl-norms.png``: per cluster, ``||mean update||`` (solid) and ``max ||update||``
    (dashed) of its sampled members each round; horizontal eps1/eps2, vertical split rounds."""
    fig = Figure(figsize=(7.0, 4.4))
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(max(1, len(strategy.models)))]
    for k in sorted({r["cluster"] for r in strategy.norms}):
        rows = [r for r in strategy.norms if r["cluster"] == k]
        x = [r["round"] for r in rows]
        ax.plot(x, [r["mean-norm"] for r in rows], color=colours[k % len(colours)], label=f"cluster {k} mean")
        ax.plot(x, [r["max-norm"] for r in rows], color=colours[k % len(colours)], linestyle="--",
                label=f"cluster {k} max")
    ax.axhline(strategy.params.eps1, color="black", linewidth=0.8, label=f"eps1 = {strategy.params.eps1}")
    ax.axhline(strategy.params.eps2, color="grey", linewidth=0.8, label=f"eps2 = {strategy.params.eps2}")
    for i, split in enumerate(strategy.splits):
        ax.axvline(split["round"], color="tab:red", alpha=0.5, label="split" if i == 0 else None)
    ax.set_xlabel("round")
    ax.set_ylabel("update norm")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2, loc="upper right")
    FigureCanvasAgg(fig)
    fig.suptitle("cfl-sattler: update norms")
    fig.tight_layout()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cfl-norms.png"
    fig.savefig(path, format="png", dpi=120)
    return [path]
