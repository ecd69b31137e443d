"""Sattler's CFL picture: per cluster, the mean-update ratio with eps1, the max norm, and the splits."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from strategies import CFLSattler

from ..plots import _save


def cfl_sattler_norms(strategy: CFLSattler, folder: Path) -> list[Path]:
    """Write ``cfl-norms.png``: per cluster and round, ``mean_update_ratio`` of its sampled members
    against eps1 (top) and ``max ||update_i||`` against ``eps2_floor`` (bottom: eps2, or eps2-relative x the
    first round's RMS update norm); kept splits (red) and
    rejected bi-partitions (grey, dotted) as vertical lines in both panels.
    """
    fig = Figure(figsize=(7.0, 6.0))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for k in sorted({r["cluster"] for r in strategy.norms}):
        rows = [r for r in strategy.norms if r["cluster"] == k]
        x = [r["round"] for r in rows]
        top.plot(x, [r["ratio"] for r in rows], color=f"C{k % 10}", marker=".", label=f"cluster {k}")
        bottom.plot(x, [r["max-norm"] for r in rows], color=f"C{k % 10}", marker=".")
    top.axhline(
        strategy.params.eps1, color="black", linestyle="--", linewidth=0.8, label=f"eps1 = {strategy.params.eps1:g}"
    )
    floor = strategy.eps2_floor()
    if floor:
        bottom.axhline(floor, color="black", linestyle="--", linewidth=0.8, label=f"eps2 floor = {floor:.3g}")
    for ax in (top, bottom):
        for i, split in enumerate(strategy.splits):
            ax.axvline(split["round"], color="tab:red", alpha=0.5, label="split" if i == 0 and ax is top else None)
        for i, attempt in enumerate(a for a in strategy.attempts if not a["kept"]):
            ax.axvline(
                attempt["round"], color="grey", linestyle=":", label="no separation" if i == 0 and ax is top else None
            )
        ax.grid(alpha=0.3)
    top.set_ylabel("||mean update|| / RMS ||update_i||", fontsize=9)
    bottom.set_ylabel("max ||update_i||", fontsize=9)
    bottom.set_xlabel("round")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    top.legend(fontsize="x-small", ncol=2, loc="best")
    if floor:
        bottom.legend(fontsize="x-small", loc="upper right")
    return [_save(fig, Path(folder) / "cfl-norms.png", "Sattler's CFL: split criterion per cluster")]
