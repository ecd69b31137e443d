"""Which data a run used, named the same way in its run name, ``summary.json``, log and figures.

A scenario run names its scenario and data set; an own-data run names the folder of client
folders and their format (``data-path``), or says the clients read their own node-config
folders (a deployment); a data set given as a file (``npz:/path/all.npz``) is named by its file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol

from common.data import DatasetInfo
from common.local_data import FolderSpec, detect_format
from common.scenarios import STRESS_TEST, ScenarioConfig
from common.sources import OWN_DATA

OWN_NODE_DATA = "own-data"


class Experiment(Protocol):
    """What provenance reads of a run's experiment (``server.experiment.Experiment``, which imports this)."""

    @property
    def scenario(self) -> ScenarioConfig:
        """The scenario (its name and data set)."""

    @property
    def info(self) -> DatasetInfo | None:
        """The data set's facts (``OWN_DATA`` for node-config folders)."""

    @property
    def data_path(self) -> str:
        """The folder of client folders, or empty."""

    @property
    def spec(self) -> FolderSpec | None:
        """The client folders' format, with ``data-path``."""

    @property
    def truth_path(self) -> str:
        """The truth file, or empty."""


def data_format(experiment: Experiment) -> str:
    """The own-data folders' format: as given, or detected from partition 0's folder when it is here."""
    assert experiment.spec is not None
    given = experiment.spec.data_format
    if given != "auto":
        return given
    try:
        return detect_format(Path(experiment.data_path) / "partition_0")
    except (ValueError, OSError):
        return "auto"


def dataset_label(dataset: str) -> str:
    """A data set name fit for a folder name: ``npz:/data/all.npz`` -> ``npz-all``."""
    kind, sep, path = dataset.partition(":")
    return f"{kind}-{Path(path).stem}" if sep else dataset


def describe_data(experiment: Experiment) -> dict[str, Any]:
    """``summary.json``'s ``data``: where the clients' samples came from, and the truth file."""
    truth = experiment.truth_path or None
    if experiment.data_path:
        return {
            "source": "data-path",
            "path": str(Path(experiment.data_path).expanduser().resolve()),
            "format": data_format(experiment),
            "truth-path": truth,
        }
    if experiment.info is not None and experiment.info.name == OWN_DATA:
        return {"source": "node-config data-path", "path": None, "format": None, "truth-path": truth}
    s = experiment.scenario
    data = {"source": "scenario", "scenario": s.scenario, "dataset": s.dataset, "truth-path": truth}
    if s.sample_draw == STRESS_TEST:
        data["sample-draw"] = f"{STRESS_TEST}: a scaling stress test, not a benchmark of accuracy"
    return data


def data_text(data: dict[str, Any]) -> str:
    """One line for the log and figure titles: ``fashion-mnist (label-groups)``, ``own data: /x/fed (npz)``."""
    if data["source"] == "scenario":
        stress = f", {STRESS_TEST} stress test" if "sample-draw" in data else ""
        return f"{data['dataset']} ({data['scenario']}{stress})"
    if data["source"] == "data-path":
        return f"own data: {data['path']} ({data['format']})"
    return "own data: each node's node-config data-path"


def run_label(experiment: Experiment) -> str:
    """The data part of a default run name: ``label-groups-fashion-mnist``, ``fed-npz``, ``own-data``."""
    data = describe_data(experiment)
    if data["source"] == "scenario":
        stress = f"-{STRESS_TEST}" if "sample-draw" in data else ""
        label = f"{data['scenario']}{stress}-{dataset_label(data['dataset'])}"
    elif data["source"] == "data-path":
        label = f"{Path(data['path']).name}-{data['format']}"
    else:
        label = OWN_NODE_DATA
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label)
