"""umbel's ServerApp: run-config -> experiment -> strategy -> rounds -> results.

Works the same under ``umbel run``, plain ``flwr run .`` and a real deployment.
"""

from __future__ import annotations

import json
from logging import INFO
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Result

from common.metrics import deep_bytes, process_resources
from strategies import ClusteredStrategy
from strategies.state import CHECKPOINT_FILE, load_checkpoint

from .clock import ROUND_TIMES_FILE, RoundClock, final_train_loss
from .experiment import Experiment
from .federation_size import check_federation
from .provenance import data_text, describe_data
from .models import save_models
from .results import RunRecorder
from .tracking import open_loggers

RESOURCES_FILE = "resources.json"
# Strategy attributes that are not per-client state (the connection, callbacks, settings).
NOT_STATE = frozenset({"messenger", "on_round", "training", "params", "rng", "checkpoints"})

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Validate the run-config, then train; results go to ``results-dir/run-name``."""
    experiment = Experiment.from_run_config(context.run_config)
    training = experiment.training
    nodes = check_federation(grid, experiment.scenario.num_clients, training.min_nodes, training.node_wait_timeout)
    if not experiment.check_partition_if_data_here():
        log(INFO, "The data are not on the server's machine; clients check their own.")
    folder = experiment.results_path()
    data = describe_data(experiment)
    log(
        INFO,
        "umbel: %s on %s with %d clients; results in %s",
        experiment.strategy,
        data_text(data),
        experiment.scenario.num_clients,
        folder,
    )
    recorder = RunRecorder(
        folder,
        context.run_config,
        loggers=open_loggers(experiment.output, folder, data_text(data)),
        expected_clients=experiment.scenario.num_clients,
        data=data,
    )
    clock = RoundClock()
    strategy = experiment.build_strategy()
    result = _run_umbel(grid, experiment, strategy, recorder, folder, clock, nodes)
    clock.write(folder / ROUND_TIMES_FILE, "umbel", final_train_loss(result))
    write_resources(folder / RESOURCES_FILE, strategy)


def write_resources(path: Path, strategy: ClusteredStrategy | None) -> None:
    """``resources.json``: the server process's peak RSS and CPU seconds, and (umbel's loop) the
    start-up identity phase's seconds and the bytes of each piece of the strategy's state.
    """
    data: dict[str, Any] = process_resources()
    if strategy is not None:
        data["identity-seconds"] = round(strategy.identity_seconds, 3)
        data["num-clients"] = len(strategy.clients)
        state: dict[str, int] = {}
        for name, value in sorted(vars(strategy).items()):
            if name not in NOT_STATE:
                key = name.lstrip("_").replace("_", "-")  # a public name, not the attribute's
                state[key] = state.get(key, 0) + deep_bytes(value)
        data["state-bytes"] = state
    path.write_text(json.dumps(data, indent=2) + "\n")


def _run_umbel(
    grid: Grid,
    experiment: Experiment,
    strategy: ClusteredStrategy,
    recorder: RunRecorder,
    folder: Path,
    clock: RoundClock,
    nodes: int,
) -> Result:
    """Umbel's own loop: the strategy, its checkpoints and its results."""
    output = experiment.output
    checkpoint = load_checkpoint(output.resume_from, strategy.name) if output.resume_from else None
    if checkpoint is not None:
        strategy.resume(checkpoint)
        recorder.replay(checkpoint["state"]["history"])
        log(INFO, "umbel: resuming from %s (after round %d)", output.resume_from, checkpoint["round"])
    if output.checkpoint_every:
        strategy.checkpoint_to(folder / CHECKPOINT_FILE, output.checkpoint_every)
    strategy.on_round = recorder.on_round
    strategy.deliver = output.save_models
    result = strategy.start(grid, experiment.initial_model(), evaluate_fn=clock, expected_clients=nodes)
    recorder.finish(strategy)
    if output.save_models:
        log(INFO, "umbel: cluster models in %s", save_models(folder, strategy, experiment, recorder.run_config))
    return result
