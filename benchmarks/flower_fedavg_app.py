"""The overhead benchmark's reference: plain ``flwr.serverapp.strategy.FedAvg`` on umbel's clients.

A ServerApp of its own (``benchmarks.flower_fedavg_app:app``): Flower's FedAvg strategy, unchanged,
with the same initial model, clients, per-round sample size and local-training settings as
umbel's ``fedavg``. Like umbel's ServerApp it times each round with a ``server.clock.RoundClock``
given as Flower's ``evaluate_fn`` (called once after every round, in both loops) and writes
``round-times.json``, so that ``benchmarks/overhead.py`` compares like with like; it also writes
a ``summary.json`` (no clusters, no local evaluation). ``overhead.py`` runs it through ``umbel
run`` on a copy of the app whose ``serverapp`` component is this one (:func:`flower_fedavg_tree`).
"""

from __future__ import annotations

import json
import random
import shutil
import time
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomli_w
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Result

from server.clock import ROUND_TIMES_FILE, RoundClock, final_train_loss
from server.experiment import Experiment
from strategies import FedAvg as UmbelFedAvg

COMPONENT = "benchmarks.flower_fedavg_app:app"
LOOP = "flower"
# What the copied app needs: umbel's packages (its ClientApp included) and this module.
PACKAGES = ("client", "common", "server", "strategies", "benchmarks")

app = ServerApp()


class CountingFedAvg(FedAvg):
    """Flower's FedAvg, which also counts each round's train replies without an error (for ``metrics.jsonl``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.train_replies: dict[int, int] = {}

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, Any]:
        """Count the replies, then Flower's FedAvg aggregation unchanged."""
        replies = list(replies)
        self.train_replies[server_round] = sum(not reply.has_error() for reply in replies)
        return super().aggregate_train(server_round, replies)


def run_flower_fedavg(grid: Grid, experiment: Experiment, clock: RoundClock) -> tuple[Result, dict[int, int]]:
    """Train with Flower's FedAvg: every round samples as many clients as umbel would.

    Flower samples node ids with Python's ``random``, seeded here with the run's seed; node ids
    change from run to run, so which clients it samples still differs between runs.
    """
    training = experiment.training
    num_clients = experiment.scenario.num_clients
    random.seed(training.seed)
    strategy = CountingFedAvg(
        fraction_train=training.fraction,
        fraction_evaluate=0.0,
        min_train_nodes=training.num_sampled(num_clients),
        min_available_nodes=num_clients,
    )
    result = strategy.start(
        grid,
        experiment.initial_model(),
        num_rounds=training.rounds,
        timeout=training.round_timeout,
        train_config=ConfigRecord(training.local_config()),
        evaluate_fn=clock,
    )
    return result, strategy.train_replies


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Validate the run-config, train with Flower's FedAvg, write the summary and the round times."""
    experiment = Experiment.from_run_config(context.run_config)
    if experiment.strategy != UmbelFedAvg.name:
        raise ValueError(
            f"The 'strategy' parameter of the Flower FedAvg reference app must be {UmbelFedAvg.name!r}. "
            f"Got {experiment.strategy!r} instead."
        )
    folder = experiment.results_path()
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time()
    clock = RoundClock()
    result, train_replies = run_flower_fedavg(grid, experiment, clock)
    summary = {
        "rounds": experiment.training.rounds,
        "final-accuracy": None,
        "final-ari": None,
        "strategy": experiment.strategy,
        "server-loop": LOOP,
        "wall-seconds": round(time.time() - started, 3),
        "config": dict(context.run_config),
    }
    # umbel run judges a run by its metrics.jsonl (server.outcome): one line per round, as umbel's loop writes
    lines = [{"round": r, "train-replies": n} for r, n in sorted(train_replies.items())]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    clock.write(folder / ROUND_TIMES_FILE, LOOP, final_train_loss(result))


def flower_fedavg_tree(source: Path, target: Path) -> Path:
    """A copy of umbel's app in ``target`` whose ServerApp is this module's ``app``; ``target``.

    ``umbel run`` started there (``python -m server.cli`` with ``target`` as the working folder)
    packs that copy for ``flwr run``, so the reference loop needs no switch in umbel's ServerApp.
    """
    target.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        shutil.copytree(source / package, target / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    with (source / "pyproject.toml").open("rb") as fh:
        project = tomllib.load(fh)
    project["tool"]["flwr"]["app"]["components"]["serverapp"] = COMPONENT
    shutil.copy2(source / "README.md", target / "README.md")
    (target / "pyproject.toml").write_text(tomli_w.dumps(project))
    return target
