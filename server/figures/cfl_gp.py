"""CFL-GP's picture (Kim et al., ICML 2024, App. G, Fig. 19): the profile's singular values after
each clustering update (darker = later), with the largest gap marked (of the spectrum K was
estimated from, when it was).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from common.clustering.spectral import largest_gap
from strategies import CFLGP

from ..plots import DPI


def singular_values(strategy: CFLGP, folder: Path) -> list[Path]:
    """``singular-values.png``: the spectrum of ``G`` per update; nothing if there was none.

    With K estimated, the one-model spectrum it came from is drawn too, with its gap marked.
    """
    spectra = strategy.spectra
    if not spectra:
        return []
    fig = Figure(figsize=(6.4, 4.4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cmap = colormaps["Reds"]
    estimate = strategy.estimate
    # the estimate's K and gap may pass the max-clusters models (cfl-gp-auto-max-clusters)
    reach = max(strategy.params.max_clusters, strategy.k, estimate.gap_dims if estimate is not None else 0)
    shown = min(len(spectra[-1][1]), 2 * reach + 2)
    for i, (rnd, values) in enumerate(spectra):
        x = np.arange(1, min(len(values), shown) + 1)
        ax.plot(
            x,
            values[: len(x)],
            marker=".",
            color=cmap(0.3 + 0.7 * (i + 1) / len(spectra)),
            label=f"round {rnd}" if i in (0, len(spectra) - 1) else None,
        )
    title = f"CFL-GP profile spectrum (K = {strategy.k}"
    if estimate is not None:
        values = estimate.singular_values[:shown]
        ax.plot(
            np.arange(1, len(values) + 1),
            values,
            marker="x",
            color="black",
            linestyle=":",
            label="one-model profile at the K estimate",
        )
        s = estimate.gap_dims
        title += f" from the silhouette on {estimate.dims or estimate.gap_dims} directions"
    else:
        s = largest_gap(spectra[-1][1], strategy.params.max_clusters)
    ax.axvline(s + 0.5, color="gray", linestyle="--", label=f"largest gap: after {s}")
    ax.set_title(title + ")", fontsize=9)
    ax.set_xlabel("index")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("singular value of G")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(folder) / "singular-values.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI)
    return [path]
