"""Round times: a ``RoundClock`` given as Flower's ``evaluate_fn`` notes the end of every round.

umbel's ServerApp and the overhead benchmark's plain Flower FedAvg app
(``benchmarks/flower_fedavg_app.py``) both time their rounds with it and write
``round-times.json``, so that ``benchmarks/overhead.py`` compares like with like.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp.strategy import Result

from common import keys
from common.records import read_float

ROUND_TIMES_FILE = "round-times.json"


class RoundClock:
    """``evaluate_fn`` that notes when each round ended; ``intervals`` are the round times.

    Flower's ``Strategy.start`` also calls it before round 1 (round 0); umbel's loop does not,
    so only the intervals between rounds 1..R are comparable across loops.
    """

    def __init__(self) -> None:
        self.ends: dict[int, float] = {}

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Note that ``server_round`` ended now; no metrics."""
        self.ends[server_round] = time.perf_counter()
        return None

    def intervals(self) -> dict[int, float]:
        """Seconds from the end of round ``r - 1`` to the end of round ``r``, for ``r >= 2``."""
        return {
            r: round(t - self.ends[r - 1], 6) for r, t in sorted(self.ends.items()) if r - 1 in self.ends and r >= 2
        }

    def write(self, path: Path, server_loop: str, final_train_loss: float | None) -> None:
        """``round-times.json``: the loop (``umbel`` or ``flower``), each round's seconds and the last train loss."""
        data: dict[str, Any] = {
            "server-loop": server_loop,
            "round-seconds": self.intervals(),
            "final-train-loss": final_train_loss,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)


def final_train_loss(result: Result) -> float | None:
    """The last round's mean client train loss (both loops record it under ``train-loss``)."""
    if not result.train_metrics_clientapp:
        return None
    last = result.train_metrics_clientapp[max(result.train_metrics_clientapp)]
    return read_float(last, keys.TRAIN_LOSS, "the last round's train metrics") if keys.TRAIN_LOSS in last else None
