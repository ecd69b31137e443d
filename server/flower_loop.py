"""The overhead benchmark's reference: plain ``flwr.serverapp.strategy.FedAvg`` on umbel's clients.

``server-loop = "flower"`` runs Flower's own FedAvg strategy, unchanged, with the same
initial model, clients, per-round sample size and local-training settings as umbel's
``fedavg``. Both loops report the time of each round through a ``RoundClock`` given as
Flower's ``evaluate_fn`` (called once after every round, in both loops), so that
``benchmarks/overhead.py`` compares like with like.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from common import keys

from .experiment import Experiment

ROUND_TIMES_FILE = "round-times.json"


class RoundClock:
    """``evaluate_fn`` that notes when each round ended; ``intervals`` are the round times.

    Flower's ``Strategy.start`` also calls it before round 1 (round 0); umbel's loop does not,
    so only the intervals between rounds 1..R are comparable across loops.
    """

    def __init__(self) -> None:
        self.ends: dict[int, float] = {}

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        self.ends[server_round] = time.perf_counter()
        return None

    def intervals(self) -> dict[int, float]:
        """Seconds from the end of round ``r - 1`` to the end of round ``r``, for ``r >= 2``."""
        return {
            r: round(t - self.ends[r - 1], 6) for r, t in sorted(self.ends.items()) if r - 1 in self.ends and r >= 2
        }

    def write(self, path: Path, server_loop: str, final_train_loss: float | None) -> None:
        """``round-times.json``: the loop, each round's seconds and the last round's train loss."""
        data: dict[str, Any] = {
            "server-loop": server_loop,
            "round-seconds": self.intervals(),
            "final-train-loss": final_train_loss,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)


def run_flower_fedavg(grid: Grid, experiment: Experiment, clock: RoundClock) -> Result:
    """Train with Flower's FedAvg: every round samples as many clients as umbel would.

    Flower samples node ids with Python's ``random``, seeded here with the run's seed; node ids
    change from run to run, so which clients it samples still differs between runs.
    """
    training = experiment.training
    num_clients = experiment.scenario.num_clients
    random.seed(training.seed)
    strategy = FedAvg(
        fraction_train=training.fraction,
        fraction_evaluate=0.0,
        min_train_nodes=training.num_sampled(num_clients),
        min_available_nodes=num_clients,
    )
    return strategy.start(
        grid,
        experiment.initial_model(),
        num_rounds=training.rounds,
        timeout=training.round_timeout,
        train_config=ConfigRecord(training.local_config()),
        evaluate_fn=clock,
    )


def final_train_loss(result: Result) -> float | None:
    """The last round's mean client train loss (both loops record it under ``train-loss``)."""
    if not result.train_metrics_clientapp:
        return None
    last = result.train_metrics_clientapp[max(result.train_metrics_clientapp)]
    return float(last[keys.TRAIN_LOSS]) if keys.TRAIN_LOSS in last else None
