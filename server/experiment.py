"""One experiment's whole configuration, validated once from Flower's run-config.

Every check runs here, before any message is sent, so a bad value fails the run at once
with a message naming the key, what is allowed and what was given.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord

from common.config import (
    FaultParams,
    OutputParams,
    TrainingParams,
    params_from_run_config,
    run_config_value,
)
from common.data import DataUnavailableError, dataset_info
from common.models import build_model, check_model
from common.scenarios import Partition, ScenarioConfig, build_partition
from common.training import check_device_name
from common.validation import check_choice, check_str
from strategies import ClusteredStrategy, get_strategy

SERVER_LOOPS = ("umbel", "flower")


@dataclass(frozen=True)
class Experiment:
    """Strategy, scenario, model, training and output settings of one run."""

    strategy: str
    strategy_params: Any
    scenario: ScenarioConfig
    training: TrainingParams
    output: OutputParams
    model: str
    data_dir: str
    device: str
    faults: FaultParams = field(default_factory=FaultParams)
    server_loop: str = "umbel"

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> Experiment:
        """Validate every key; raises ``ValueError`` on the first bad one."""
        strategy_cls = get_strategy(run_config_value(rc, "strategy", "fedavg"))
        scenario = ScenarioConfig.from_run_config(rc)
        info = dataset_info(scenario.dataset)
        model = check_str(run_config_value(rc, "model", "dnn"), "model", "the run config")
        check_model(model, info.input_shape, info.task)
        device = check_device_name(run_config_value(rc, "device", "auto"), "the run config")
        server_loop = check_choice(run_config_value(rc, "server-loop", "umbel"), "server-loop", "the run config",
                                   SERVER_LOOPS)
        if server_loop == "flower" and strategy_cls.name != "fedavg":
            raise ValueError("The 'server-loop' parameter of the run config must be 'umbel' for strategy "
                             f"{strategy_cls.name!r} ('flower' runs plain Flower FedAvg only). Got 'flower' instead.")
        return cls(
            strategy=strategy_cls.name,
            strategy_params=params_from_run_config(strategy_cls.params_type, rc),
            scenario=scenario,
            training=TrainingParams.from_run_config(rc),
            output=OutputParams.from_run_config(rc),
            model=model,
            data_dir=check_str(run_config_value(rc, "data-dir", ""), "data-dir", "the run config"),
            device=device,
            faults=FaultParams.from_run_config(rc),
            server_loop=server_loop,
        )

    def build_strategy(self) -> ClusteredStrategy:
        """A fresh strategy object holding this experiment's parameters, checked against the scenario.

        Raises
        ------
        ValueError
            On parameters that contradict each other or the scenario's client count.
        """
        strategy = get_strategy(self.strategy)(self.training, self.strategy_params)
        strategy.check_federation(self.scenario.num_clients)
        return strategy

    def initial_model(self) -> ArrayRecord:
        """The seeded initial model every cluster starts from."""
        info = dataset_info(self.scenario.dataset)
        model = build_model(self.model, info.input_shape, info.num_classes, self.scenario.seed)
        return ArrayRecord(model.state_dict())

    def partition(self) -> Partition:
        """Build the scenario's partition (loads data; raises on impossible partitions)."""
        return build_partition(self.scenario, self.data_dir)

    def check_partition_if_data_here(self) -> bool:
        """Build the partition when the data is on this machine; ``False`` if it is not."""
        try:
            self.partition()
        except DataUnavailableError:
            return False
        return True

    def default_run_name(self) -> str:
        """``<strategy>-<scenario>-<dataset>-s<seed>-<timestamp>``."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        s = self.scenario
        return f"{self.strategy}-{s.scenario}-{s.dataset}-s{s.seed}-{stamp}"

    def results_path(self) -> Path:
        """Absolute folder of this run's results."""
        name = self.output.run_name or self.default_run_name()
        return (Path(self.output.results_dir).expanduser() / name).resolve()
