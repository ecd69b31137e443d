"""Each algorithm's own picture (CFLGT trajectories, CFL-GP singular values, ...), by strategy name.

A figure function takes the finished strategy and the run's folder, writes its PNGs there
(with ``server.plots``' Agg helpers) and returns their paths. ``RunRecorder.finish`` calls
the one registered under the strategy's ``name``, if any. To add one: write a module here
with ``@register("<strategy name>")`` and import it at the bottom of this file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

FigureFn = Callable[[Any, Path], list[Path]]
FIGURES: dict[str, FigureFn] = {}


def register(strategy_name: str) -> Callable[[FigureFn], FigureFn]:
    """Register ``fn`` as the figure writer of the strategy called ``strategy_name``."""

    def decorator(fn: FigureFn) -> FigureFn:
        if strategy_name in FIGURES:
            raise ValueError(f"Figures for {strategy_name!r} are registered twice.")
        FIGURES[strategy_name] = fn
        return fn

    return decorator


from . import cfl_gp, cfl_sattler, cflgt, flag, flic  # noqa: F401  (each registers its figures)
