"""The models a run trained: written to ``<results>/models/``, loaded back, and used to place a newcomer.

The public API (one import path, ``server.models``)::

    from server.models import load_models, assign

    trained = load_models("results/my-run")     # the cluster models as torch.nn.Modules
    trained.models[k]                           # cluster k's model
    trained.assignment                          # partition id -> cluster id
    placed = assign("results/my-run", "data/new-client")   # a client that never took part
    placed.cluster, placed.accuracy, placed.rule

``models/`` holds one ``cluster-<k>.npz`` per cluster model (arrays named as the model's
``state_dict``; ``common.modelstore.read_bundle`` or ``numpy.load(..., allow_pickle=False)``
read it), ``state.npz`` (the strategy's declared state after the last round: what its
placement rule needs, e.g. FedClust's centroids, CFLGT's pre-training model and exemplars,
FLIC's clustered model and similarity, FLAG's subspaces) and ``manifest.json`` (model, input
shape, classes, clusters with members, sizes, last round trained and the members' final
accuracy, the strategy and its placement rule, the run config, versions, and a SHA-256 of
every file). Nothing is read with pickle; every file is checked against the manifest first.
"""

from __future__ import annotations

import itertools
import platform
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Error, Message, RecordDict
from flwr.serverapp import Grid

from common import keys
from common.modelstore import StoreError, read_bundle, read_json, sha256_file, write_bundle, write_json
from common.models import build_model
from common.sources import data_source
from common.training import evaluate as evaluate_model
from strategies import ClusteredStrategy
from strategies.federation import Membership, identify
from strategies.state import declared, load_checkpoint, restore, save_state

from .experiment import Experiment

MODELS_DIR = "models"
MANIFEST = "manifest.json"
STATE_FILE = "state.npz"
FORMAT = "umbel-models-1"
LOSS_RULE = "lowest loss over the cluster models on the client's train split (query.losses)"


def cluster_file(k: int) -> str:
    """The file of cluster ``k``'s model inside ``models/``."""
    return f"cluster-{k}.npz"


def versions() -> dict[str, str]:
    """umbel's, Flower's, torch's, numpy's and Python's versions."""
    out = {}
    for dist in ("umbel", "flwr", "torch", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    out["python"] = platform.python_version()
    return out


def placement_rule(strategy: type[ClusteredStrategy]) -> tuple[str, bool]:
    """How ``strategy`` places a newcomer, and whether the rule is the strategy's own (else lowest loss)."""
    rule = strategy.placement_rule
    return (rule, True) if rule else (f"{LOSS_RULE}; {strategy.name} has no rule of its own", False)


# ----------------------------------------------------------------- writing
def save_models(
    folder: Path, strategy: ClusteredStrategy, experiment: Experiment, run_config: Mapping[str, Any]
) -> Path:
    """Write ``folder/models/``: a file per cluster model, ``state.npz`` and ``manifest.json`` (last).

    Returns the manifest's path.
    """
    out = Path(folder) / MODELS_DIR
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    server_round = strategy.history[-1].round if strategy.history else 0
    members: dict[int, list[int]] = {k: [] for k in range(len(strategy.models))}
    for pid, k in sorted(strategy.assignment.items()):
        members[k].append(pid)
    clusters = []
    for k, model in enumerate(strategy.models):
        arrays = {name: arr.numpy() for name, arr in model.items()}
        digest = write_bundle(out / cluster_file(k), arrays, {keys.CLUSTER_ID: k, keys.SERVER_ROUND: server_round})
        acc = {str(p): strategy.last_eval[p][0] for p in members[k] if p in strategy.last_eval}
        clusters.append(
            {
                "id": k,
                "file": cluster_file(k),
                "sha256": digest,
                "members": members[k],
                "size": len(members[k]),
                "last-round-trained": strategy.last_trained.get(k),
                "member-accuracy": acc,
                "mean-accuracy": float(np.mean(list(acc.values()))) if acc else None,
            }
        )
    save_state(strategy, server_round, out / STATE_FILE)
    rule, own = placement_rule(type(strategy))
    assert experiment.info is not None
    manifest = {
        "format": FORMAT,
        "model": {
            "name": experiment.model,
            "input-shape": list(experiment.info.input_shape),
            "num-classes": experiment.info.num_classes,
            "task": experiment.info.task,
            "seed": experiment.scenario.seed,
        },
        "round": server_round,
        "strategy": {
            "name": strategy.name,
            "placement-rule": rule,
            "own-rule": own,
            "state-file": STATE_FILE,
            "state-sha256": sha256_file(out / STATE_FILE),
            "state-fields": sorted(declared(type(strategy))),
        },
        "clusters": clusters,
        "assignment": {str(p): k for p, k in sorted(strategy.assignment.items())},
        "delivery": None if strategy.delivery is None else strategy.delivery.to_dict(),
        "run-config": dict(run_config),
        "versions": versions(),
        "write-seconds": round(time.perf_counter() - started, 4),
    }
    return Path(out / MANIFEST) if write_json(out / MANIFEST, manifest) else out / MANIFEST


# ----------------------------------------------------------------- reading
@dataclass
class TrainedModels:
    """A run's cluster models, loaded and checked against their manifest.

    Attributes
    ----------
    folder : Path
        The ``models/`` folder.
    manifest : dict
        ``manifest.json``.
    models : dict of int to torch.nn.Module
        Cluster id -> its model, in eval mode.
    assignment : dict of int to int
        Partition id -> cluster id at the end of the run.
    """

    folder: Path
    manifest: dict[str, Any]
    models: dict[int, torch.nn.Module] = field(default_factory=dict)
    assignment: dict[int, int] = field(default_factory=dict)

    def model_for(self, partition_id: int) -> torch.nn.Module:
        """The model of the cluster ``partition_id`` ended in (``KeyError`` for a client not in the run)."""
        return self.models[self.assignment[partition_id]]


def models_folder(results: str | Path) -> Path:
    """``results/models`` (or ``results`` itself when it is the models folder)."""
    path = Path(results).expanduser()
    return path if (path / MANIFEST).is_file() or path.name == MODELS_DIR else path / MODELS_DIR


def read_manifest(results: str | Path) -> tuple[Path, dict[str, Any]]:
    """The models folder and its checked manifest.

    Raises
    ------
    StoreError
        If the manifest is missing, of another format, or lacks a key.
    """
    folder = models_folder(results)
    path = folder / MANIFEST
    manifest = read_json(path, "models manifest")
    if manifest.get("format") != FORMAT:
        raise StoreError(
            f"The models manifest {str(path)!r} must be of format {FORMAT!r}. Got {manifest.get('format')!r} instead."
        )
    missing = sorted({"model", "strategy", "clusters", "assignment", "run-config", "round"} - set(manifest))
    if missing:
        raise StoreError(
            f"The models manifest {str(path)!r} must hold the keys {missing}. Got {sorted(manifest)} instead."
        )
    return folder, manifest


def _check_arrays(
    path: Path, arrays: Mapping[str, np.ndarray], expected: Mapping[str, torch.Tensor], spec: str
) -> None:
    names, want = sorted(arrays), sorted(expected)
    if names != want:
        raise StoreError(
            f"The cluster model {str(path)!r} must hold the parameters of {spec}: {want[:6]}... "
            f"Got {names[:6]}... instead ({sorted(set(want) ^ set(names))[:4]} differ)."
        )
    for name in want:
        shape = tuple(expected[name].shape)
        if tuple(arrays[name].shape) != shape:
            raise StoreError(
                f"The cluster model {str(path)!r} must hold {name!r} of shape {shape} ({spec}). "
                f"Got shape {tuple(arrays[name].shape)} instead."
            )


def load_models(results: str | Path) -> TrainedModels:
    """The cluster models of a run as ``torch.nn.Module``s, each file checked against the manifest.

    Parameters
    ----------
    results : str or Path
        The run's results folder (or its ``models/`` folder).

    Raises
    ------
    StoreError
        If a file is missing or changed (SHA-256), or a model does not fit the manifest's model,
        input shape and classes.
    """
    folder, manifest = read_manifest(results)
    spec = manifest["model"]
    shape, classes = tuple(spec["input-shape"]), int(spec["num-classes"])
    described = f"model {spec['name']!r} for input shape {shape} and {classes} classes"
    out = TrainedModels(folder, manifest, assignment={int(p): int(k) for p, k in manifest["assignment"].items()})
    for cluster in manifest["clusters"]:
        path = folder / cluster["file"]
        arrays, _ = read_bundle(path, f"cluster model {cluster['id']}", sha256=cluster["sha256"])
        model = build_model(spec["name"], shape, classes, int(spec.get("seed", 0)))
        _check_arrays(path, arrays, model.state_dict(), described)
        model.load_state_dict({name: torch.from_numpy(np.array(arr)) for name, arr in arrays.items()}, strict=True)
        out.models[int(cluster["id"])] = model.eval()
    return out


# ----------------------------------------------------------------- placing a newcomer
class LocalGrid:
    """A Flower ``Grid`` of one node that runs umbel's ClientApp in this process on a newcomer's folder.

    The strategy's own query code (``admit``) talks to it as to a federation, so the newcomer's
    signal is computed by the ClientApp's own handlers.
    """

    NODE = 2

    def __init__(self, run_config: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        from client.app import app as client_app

        self.app = client_app
        self.run_config = dict(run_config)
        self.node_config = dict(node_config)
        self.ids = itertools.count(1)
        _claim_task_identity()

    def get_node_ids(self) -> list[int]:
        """The one node."""
        return [self.NODE]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        """Answer each message with the ClientApp (an exception becomes an error reply, as in Flower)."""
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"local-{next(self.ids)}"
            context = Context(
                run_id=0,
                node_id=self.NODE,
                node_config=self.node_config,
                state=RecordDict(),
                run_config=self.run_config,
            )
            try:
                reply = self.app(msg, context)
            except Exception as err:  # noqa: BLE001 - as Flower: a ClientApp exception is an error reply
                reply = Message(Error(code=2, reason=f"{type(err).__name__}: {err}"), reply_to=msg)
            replies.append(reply)
        return replies


def _claim_task_identity() -> None:
    """Give this process the task identity Flower's messages need (a ServerApp process has one)."""
    try:
        from flwr.supercore.task_identity import TaskIdentity
    except ImportError:  # an older Flower keeps no task identity
        return
    for name, value in (("task_id", 0), ("run_id", 0), ("node_id", 1)):
        if getattr(TaskIdentity, f"_{name}", None) is None:
            setattr(TaskIdentity, name, value)


@dataclass(frozen=True)
class Placement:
    """Where a newcomer goes: its cluster, how it was chosen, and that model's score on its data."""

    cluster: int
    rule: str
    own_rule: bool
    accuracy: float
    loss: float
    num_test: int
    seconds: float


def assign(results: str | Path, data_path: str | Path, out: str | Path | None = None) -> Placement:
    """Place a client that never took part: the strategy's own rule on the client's own signal.

    The strategy is rebuilt from the manifest's run config and its saved state, the newcomer's
    folder is read as a SuperNode's ``data-path`` (the run's format), and the strategy's
    ``admit`` asks it for its signal through umbel's ClientApp. A strategy without a rule of its
    own (``placement_rule`` None, e.g. Sattler's CFL) places by the lowest train loss.

    Raises
    ------
    StoreError
        On a models folder that does not match its manifest.
    ValueError
        On a newcomer folder that the run's data format cannot read (naming the path).
    """
    started = time.perf_counter()
    trained = load_models(results)
    manifest, folder = trained.manifest, trained.folder
    rc = dict(manifest["run-config"])
    experiment = Experiment.from_run_config(rc)
    strategy = experiment.build_strategy()
    state_path = folder / manifest["strategy"]["state-file"]
    read_bundle(state_path, "strategy state", sha256=manifest["strategy"]["state-sha256"])
    restore(strategy, load_checkpoint(state_path, strategy.name, what="strategy state"))
    pid = max([*strategy.clients, *strategy.waiting, *trained.assignment, -1]) + 1
    rc["num-clients"] = pid + 1
    node_config = {keys.PARTITION_ID: pid, "data-path": str(Path(data_path).expanduser())}
    source = data_source(rc, node_config)
    data = source.client_data(pid)  # raises naming the folder, the format expected and what it found
    grid = cast(Grid, LocalGrid(rc, node_config))  # a Grid in all but its base class
    strategy.grid = grid
    found, exchange = identify(grid, [LocalGrid.NODE], Membership(), {LocalGrid.NODE: None}, reply_timeout=60.0)
    if pid not in found:
        raise ValueError(
            f"The newcomer folder {str(data_path)!r} could not be read by the ClientApp: {exchange.failures}"
        )
    strategy.clients[pid] = found[pid]
    next_round = int(manifest["round"]) + 1
    rule, own = placement_rule(type(strategy))
    if own:
        strategy.admit(next_round, [pid])
    else:
        strategy.assignment.update(strategy.assign_by_loss([pid], next_round))
    k = int(strategy.assignment[pid])
    model = trained.models[k]
    loss, accuracy = evaluate_model(model, data.x_test, data.y_test, task=source.info.task, device=torch.device("cpu"))
    if out is not None:
        arrays = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
        write_bundle(Path(out).expanduser(), arrays, {keys.CLUSTER_ID: k, keys.SERVER_ROUND: int(manifest["round"])})
    return Placement(k, rule, own, float(accuracy), float(loss), len(data.y_test), time.perf_counter() - started)


def as_record(model: torch.nn.Module) -> ArrayRecord:
    """A loaded model as Flower's ``ArrayRecord`` (e.g. to start another run from it)."""
    return ArrayRecord({name: Array(t.detach().cpu().numpy()) for name, t in model.state_dict().items()})
