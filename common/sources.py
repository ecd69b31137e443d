"""Where a client's data comes from: one interface, two sources.

A :class:`DataSource` gives the run's :class:`~common.data.DatasetInfo` and, for a partition
id, that client's model-ready :class:`~common.scenarios.ClientData`. :class:`ScenarioSource`
cuts a built-in scenario out of a whole dataset (benchmarks); :class:`FolderSource` reads the
client's own folder from disk (real federations, and their rehearsal in simulation).
:func:`data_source` picks one from the run config and the node config:

- node config ``data-path``: this node's own folder (a SuperNode in a deployment);
- run-config ``data-path``: a federation root holding ``partition_<i>/`` per client (simulation);
- neither: the scenario.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from common.config import DataParams, run_config_value
from common.data import DatasetInfo, dataset_info
from common.local_data import FolderSpec, load_client_folder
from common.params import run_config_key
from common.scenarios import ClientData, ScenarioConfig, build_partition, client_data
from common.validation import check_str

DATA_PATH = run_config_key(DataParams, "data_path")
OWN_DATA = "local"  # the dataset name of a run on the clients' own folders (``DatasetInfo.name``)
PARTITION_FOLDER = "partition_{}"
_OWNER = "the run config"


class DataSource(Protocol):
    """What a client needs from wherever its data lives."""

    @property
    def info(self) -> DatasetInfo:
        """Task, number of classes and input shape of the run."""
        ...

    def client_data(self, partition_id: int) -> ClientData:
        """Model-ready splits of client ``partition_id`` (raises ``ValueError`` naming the problem)."""
        ...

    def __hash__(self) -> int:
        """Sources are hashable: a client caches its task by source."""
        ...


@dataclass(frozen=True)
class ScenarioSource:
    """A built-in scenario's share of a whole dataset."""

    scenario: ScenarioConfig
    data_dir: str = ""

    @property
    def info(self) -> DatasetInfo:
        """The scenario's dataset: task, classes and input shape."""
        return dataset_info(self.scenario.dataset)

    def client_data(self, partition_id: int) -> ClientData:
        """Client ``partition_id``'s share of the scenario, split for training and testing."""
        return client_data(build_partition(self.scenario, self.data_dir), partition_id)


@dataclass(frozen=True)
class FolderSource:
    """A client's own folder on disk.

    Attributes
    ----------
    root : str
        The client's folder, or (``per_partition``) the folder holding ``partition_<i>/``.
    spec : FolderSpec
        Classes, input shape, format, columns and split fractions from the run config.
    per_partition : bool
        Whether ``root`` holds one sub-folder per client.
    """

    root: str
    spec: FolderSpec
    per_partition: bool = False

    @property
    def info(self) -> DatasetInfo:
        """The run config's classes and input shape (regression when it gives no classes)."""
        task = "classification" if self.spec.num_classes else "regression"
        return DatasetInfo(OWN_DATA, task, self.spec.num_classes, self.spec.input_shape)

    def path(self, partition_id: int) -> Path:
        """The folder client ``partition_id`` reads."""
        root = Path(self.root).expanduser()
        return root / PARTITION_FOLDER.format(partition_id) if self.per_partition else root

    def client_data(self, partition_id: int) -> ClientData:
        """Client ``partition_id``'s folder, read and split as ``spec`` says."""
        splits = load_client_folder(self.path(partition_id), self.spec, partition_id)
        return ClientData(
            x_train=splits.x_train,
            y_train=splits.y_train,
            x_test=splits.x_test,
            y_test=splits.y_test,
            group=-1,
            attacker=False,
            x_val=splits.x_val,
            y_val=splits.y_val,
        )


def parse_shape(value: Any, name: str = "input-shape") -> tuple[int, ...]:
    """``"1,28,28"`` (or a list of ints) as a tuple of positive ints; ``""`` gives ``()``.

    Raises
    ------
    ValueError
        Naming ``name`` unless every entry is a positive int.
    """
    if isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        text = check_str(value, name, _OWNER).strip().strip("()[]")
        parts = [p for p in text.replace(" ", "").split(",") if p] if text else []
    try:
        shape = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        shape = (0,)
    if any(s < 1 for s in shape):
        raise ValueError(
            f"The '{name}' parameter of {_OWNER} must be positive ints separated by commas, "
            f"e.g. '1,28,28' (C,H,W) or '64' (F). Got {value!r} instead."
        )
    return shape


def run_info(rc: Mapping[str, Any]) -> DatasetInfo:
    """The run's classes and input shape: run-config ``num-classes`` / ``input-shape`` when
    given (``0`` / ``""`` take the dataset's), else those of ``dataset``.
    """
    base = dataset_info(str(run_config_value(rc, "dataset", ScenarioConfig.dataset)))
    data = DataParams.from_run_config(rc)
    shape = parse_shape(data.input_shape)
    if not data.num_classes and not shape:
        return base
    classes = data.num_classes or base.num_classes
    return DatasetInfo(OWN_DATA, "classification" if classes else "regression", classes, shape or base.input_shape)


def folder_spec(rc: Mapping[str, Any]) -> FolderSpec:
    """The :class:`FolderSpec` the run config describes."""
    info = run_info(rc)
    data = DataParams.from_run_config(rc)
    return FolderSpec(
        num_classes=info.num_classes,
        input_shape=info.input_shape,
        data_format=data.data_format,
        x_column=data.x_column,
        y_column=data.y_column,
        test_fraction=run_config_value(rc, "test-fraction", ScenarioConfig.test_fraction),
        val_fraction=data.val_fraction,
        seed=run_config_value(rc, "seed", ScenarioConfig.seed),
    )


def data_source(rc: Mapping[str, Any], node_config: Mapping[str, Any] | None = None) -> DataSource:
    """The source a client reads: its node's ``data-path``, the run's ``data-path`` root, or the scenario."""
    node_path = check_str((node_config or {}).get(DATA_PATH, ""), DATA_PATH, "the node config")
    data = DataParams.from_run_config(rc)
    if node_path:
        return FolderSource(node_path, folder_spec(rc))
    if data.data_path:
        return FolderSource(data.data_path, folder_spec(rc), per_partition=True)
    data_dir = (node_config or {}).get("data-dir", data.data_dir)
    return ScenarioSource(ScenarioConfig.from_run_config(rc), check_str(data_dir, "data-dir", "the node config"))


def class_counts(y: np.ndarray, num_classes: int) -> list[int]:
    """Samples of each class in ``y`` (empty for regression)."""
    return np.bincount(y, minlength=num_classes).astype(int).tolist() if num_classes else []
