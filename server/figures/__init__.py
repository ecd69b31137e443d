"""Each algorithm's own picture (CFLGT trajectories, CFL-GP singular values, ...), by strategy name.

A figure function takes the finished strategy and the run's folder, writes its PNGs there
(with ``server.plots``' Agg helpers) and returns their paths. ``RunRecorder.finish`` calls
the one in ``FIGURES`` under the strategy's ``name``, if any. To add one: write its function
in a module here, its first parameter typed as the strategy's class, and list it in ``_FUNCTIONS``;
``FIGURES`` files it under that class's ``name``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

from .cfl_gp import singular_values
from .cfl_sattler import cfl_sattler_norms
from .cflgt import trajectory_figures
from .flag import flag_sweep
from .flic import flic_figures

FigureFn = Callable[[Any, Path], list[Path]]

_FUNCTIONS: tuple[FigureFn, ...] = (singular_values, cfl_sattler_norms, trajectory_figures, flag_sweep, flic_figures)


def _strategy_name(fn: FigureFn) -> str:
    """The ``name`` of the strategy class that ``fn``'s first parameter is typed as."""
    first = next(iter(get_type_hints(fn)))
    return str(get_type_hints(fn)[first].name)


FIGURES: dict[str, FigureFn] = {_strategy_name(fn): fn for fn in _FUNCTIONS}

__all__ = ["FIGURES", "FigureFn"]
