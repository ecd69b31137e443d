"""Each algorithm's own picture (CFLGT trajectories, CFL-GP singular values, ...), by strategy name.

A figure function takes the finished strategy and the run's folder, writes its PNGs there
(with ``server.plots``' Agg helpers) and returns their paths. ``RunRecorder.finish`` calls
the one in ``FIGURES`` under the strategy's ``name``, if any. To add one: write its function
in a module here and add it to ``FIGURES`` under the strategy's name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cfl_gp import singular_values
from .cfl_sattler import cfl_sattler_norms
from .cflgt import trajectory_figures
from .flag import flag_sweep
from .flic import flic_figures

FigureFn = Callable[[Any, Path], list[Path]]

FIGURES: dict[str, FigureFn] = {
    "cfl-gp": singular_values,
    "cfl-sattler": cfl_sattler_norms,
    "cflgt": trajectory_figures,
    "flag": flag_sweep,
    "flic": flic_figures,
}

__all__ = ["FIGURES", "FigureFn"]
