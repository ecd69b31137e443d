"""umbel's ServerApp: run-config -> experiment -> strategy -> rounds -> results.

Works the same under ``umbel run``, plain ``flwr run .`` and a real deployment.
"""

from __future__ import annotations

from logging import INFO

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from .experiment import Experiment
from .results import RunRecorder

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Validate the run-config, then train; results go to ``results-dir/run-name``."""
    experiment = Experiment.from_run_config(context.run_config)
    if not experiment.check_partition_if_data_here():
        log(INFO, "The dataset is not on the server's machine; clients check their own partitions.")
    folder = experiment.results_path()
    log(INFO, "umbel: %s on %s/%s with %d clients; results in %s", experiment.strategy,
        experiment.scenario.dataset, experiment.scenario.scenario, experiment.scenario.num_clients, folder)
    recorder = RunRecorder(folder, context.run_config)
    strategy = experiment.build_strategy()
    strategy.on_round = recorder.on_round
    strategy.start(grid, experiment.initial_model(), expected_clients=experiment.scenario.num_clients)
    recorder.finish(strategy)
