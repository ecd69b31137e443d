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
from torch.nn import Module

from common.config import (
    DataParams,
    FaultParams,
    OutputParams,
    RunParams,
    TrainingParams,
    params_from_run_config,
    run_config_value,
)
from common.data import DatasetInfo, DataUnavailableError
from common.local_data import FolderSpec, read_truth
from common.models import build_model, check_model, find_head
from common.scenarios import Partition, ScenarioConfig, build_partition
from common.sources import OWN_DATA, FolderSource, folder_spec, run_info
from common.training import check_device_name
from common.validation import check_str
from strategies import CFLGT, DEFAULT_STRATEGY, PACFL, ClusteredStrategy, FedClust, get_strategy
from strategies.flag import FLAG
from strategies.replies import metric_ranges
from strategies.roster import read_roster

from .client_data import bad_client_folders
from .provenance import run_label

# Strategies that read the model's classifier head, and what for (named in the error of a model without one).
HEAD_USERS = {
    cls.name: f"strategy '{cls.name}' ({why})"
    for cls, why in (
        (CFLGT, "class forces on the head's input"),
        (FedClust, "the head's weights are its signal"),
        (FLAG, "the number of classes, from the head"),
        (PACFL, "the number of classes, from the head"),
    )
}


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
    info: DatasetInfo | None = None
    data_path: str = ""
    spec: FolderSpec | None = None
    truth_path: str = ""
    head_key: str = "head.weight"
    roster_path: str = ""

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> Experiment:
        """Validate every key; raises ``ValueError`` on the first bad one."""
        strategy_cls = get_strategy(run_config_value(rc, "strategy", DEFAULT_STRATEGY))
        scenario = ScenarioConfig.from_run_config(rc)
        info = run_info(rc)
        run = RunParams.from_run_config(rc)
        model = check_str(run.model, "model", "the run config")
        check_model(model, info.input_shape, info.task)
        head_key = _head_key(
            build_model(model, info.input_shape, info.num_classes, scenario.seed), info, strategy_cls.name
        )
        data = DataParams.from_run_config(rc)
        spec = folder_spec(rc) if data.data_path else None
        if data.truth_path:
            read_truth(data.truth_path)
        device = check_device_name(run.device, "the run config")
        if data.roster_path:
            read_roster(data.roster_path)
        return cls(
            strategy=strategy_cls.name,
            strategy_params=params_from_run_config(strategy_cls.params_type, rc),
            scenario=scenario,
            training=TrainingParams.from_run_config(rc),
            output=OutputParams.from_run_config(rc),
            model=model,
            data_dir=data.data_dir,
            device=device,
            faults=FaultParams.from_run_config(rc),
            info=info,
            data_path=data.data_path,
            spec=spec,
            truth_path=data.truth_path,
            head_key=head_key,
            roster_path=data.roster_path,
        )

    def build_strategy(self) -> ClusteredStrategy:
        """A fresh strategy object holding this experiment's parameters (and the truth file's groups).

        Raises
        ------
        ValueError
            On parameters that contradict each other or the scenario's client count.
        """
        strategy = get_strategy(self.strategy)(self.training, self.strategy_params)
        strategy.check_federation(self.scenario.num_clients)
        strategy.head_key = self.head_key
        if self.info is not None:
            strategy.metric_ranges = metric_ranges(self.info.task)
        if isinstance(strategy, FLAG) and self.info is not None:
            strategy.prepare_sweep(self.info, self.scenario.seed)
        if self.truth_path:
            strategy.truth = read_truth(self.truth_path)
        if self.roster_path:
            strategy.membership.roster = read_roster(self.roster_path)
        return strategy

    def initial_model(self) -> ArrayRecord:
        """The seeded initial model every cluster starts from."""
        assert self.info is not None
        model = build_model(self.model, self.info.input_shape, self.info.num_classes, self.scenario.seed)
        return ArrayRecord(model.state_dict())

    def partition(self) -> Partition | None:
        """Build the scenario's partition, or (run-config ``data-path``) read and check every
        client's folder; raises on impossible partitions, and when bad client data leaves too few
        clients (``server.client_data``: each bad client is logged and left out).
        """
        if self.spec is not None:
            source = FolderSource(self.data_path, self.spec, per_partition=True)
            needed = max(1, int(getattr(self.strategy_params, "num_clusters", 0) or 0))
            bad_client_folders(source.client_data, self.scenario.num_clients, needed)
            return None
        return build_partition(self.scenario, self.data_dir)

    def check_partition_if_data_here(self) -> bool:
        """Build the partition when the data is on this machine; ``False`` if it is not (or when
        the run declares its own classes and input shape without a ``data-path``: the clients'
        own folders are on their machines).
        """
        if not self.data_path and self.info is not None and self.info.name == OWN_DATA:
            return False
        try:
            self.partition()
        except DataUnavailableError:
            return False
        return True

    def default_run_name(self) -> str:
        """``<strategy>-<data>-s<seed>-<timestamp>``; ``<data>`` is ``<scenario>-<dataset>``, or for own
        data ``<folder>-<format>`` (``data-path``) or ``own-data`` (node-config folders).
        """
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return f"{self.strategy}-{run_label(self)}-s{self.scenario.seed}-{stamp}"

    def results_path(self) -> Path:
        """Absolute folder of this run's results."""
        name = self.output.run_name or self.default_run_name()
        return (Path(self.output.results_dir).expanduser() / name).resolve()


def _head_key(model: Module, info: DatasetInfo, strategy: str) -> str:
    """The ``state_dict`` key of the model's head weight; a strategy in :data:`HEAD_USERS` fails
    here, before training, when the model has no usable head.
    """
    needed_by = HEAD_USERS.get(strategy)
    try:
        return find_head(
            model, info.input_shape, max(info.num_classes, 1), needed_by or f"strategy {strategy!r}"
        ).weight_key
    except ValueError:
        if needed_by:
            raise
        return "head.weight"
