"""FLAG's threshold sweep (paper Fig. 1): validation accuracy and cluster count against alpha."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from server.plots import _save
from strategies import FLAG


def flag_sweep(strategy: FLAG, folder: Path) -> list[Path]:
    """``flag-sweep.png`` (blue bars: clusters, red line: accuracy, dashed: chosen alpha) and
    ``flag-sweep.json``; nothing when no sweep ran (``flag-alpha`` or ``num-clusters`` given).
    """
    sweep = list(strategy.sweep)
    if not sweep:
        return []
    alpha = np.array([r["alpha"] for r in sweep])
    clusters = np.array([r["num-clusters"] for r in sweep])
    acc = np.array([np.nan if r["accuracy"] is None else r["accuracy"] for r in sweep])
    width = 0.8 * (np.min(np.abs(np.diff(alpha))) if len(alpha) > 1 else 0.1)
    fig = Figure(figsize=(6.4, 4.4))
    bars = fig.add_subplot()
    bars.bar(alpha, clusters, width=width, color="tab:blue", alpha=0.5, label="clusters")
    bars.set_xlabel("HC threshold alpha")
    bars.set_ylabel("number of clusters", color="tab:blue")
    bars.yaxis.set_major_locator(MaxNLocator(integer=True))
    bars.invert_xaxis()
    line = bars.twinx()
    line.plot(alpha, acc, color="tab:red", marker="o", label="validation accuracy")
    line.set_ylabel("mean validation accuracy", color="tab:red")
    chosen = strategy.chosen_alpha
    if chosen is not None:
        line.axvline(chosen, color="black", linestyle="--", linewidth=1, label=f"chosen alpha {chosen:g}")
    handles = bars.get_legend_handles_labels()[0] + line.get_legend_handles_labels()[0]
    bars.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=9)
    data = folder / "flag-sweep.json"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(json.dumps({"chosen-alpha": chosen, "sweep": sweep}, indent=1))
    return [_save(fig, folder / "flag-sweep.png", "FLAG: threshold sweep, validated on held-out train data"), data]
