"""Signal queries of many clients in batches: the server holds one batch of full replies at a time.

A query to every client of a 10,000-client federation for a full model update (FLIC's join,
FLAG's signal) would hold 10,000 updates at once (6.4 GB of the 159,010-parameter DNN). Asked
``QUERY_BATCH`` clients at a time, each batch is folded into what the step keeps (a similarity
row, a sketch) and dropped before the next is asked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from common.clustering.similarity import CountSketch
from common.signals.update import ModelUpdate

QUERY_BATCH = 256
"""Clients asked at a time (256 updates of the 159,010-parameter DNN: 163 MB)."""


def in_batches(pids: Sequence[int], size: int = QUERY_BATCH) -> Iterator[list[int]]:
    """``pids`` in order, ``size`` at a time (the last batch may be shorter).

    Raises
    ------
    ValueError
        If ``size`` is below 1.
    """
    if int(size) < 1:
        raise ValueError(f"The 'size' parameter of in_batches must be an int >= 1. Got {size!r} instead.")
    for start in range(0, len(pids), int(size)):
        yield list(pids[start : start + int(size)])


def sketched(updates: dict[int, ModelUpdate], sketch: CountSketch | None) -> dict[int, ModelUpdate]:
    """``updates`` with each delta replaced by its sketch (``updates`` emptied); as given without one."""
    if sketch is None or not updates:
        return updates
    pids = sorted(updates)
    rows = sketch.project_rows([updates.pop(p).delta for p in pids])  # row by row: no stacked batch
    return {p: ModelUpdate(row) for p, row in zip(pids, rows, strict=True)}
