"""What a client knows about itself: its partition, data, model and device.

Built from the run-config and the node config once per process and cached, so a Ray
actor serving many simulated clients loads the dataset once. The data come from one
:class:`common.sources.DataSource`: the client's own folder (``data-path``) or a scenario.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord
from flwr.common.constant import NUM_PARTITIONS_KEY

from common import keys
from common.config import RunParams, run_config_value
from common.data import DatasetInfo
from common.models import Head, build_model, find_head, is_factory, load_factory
from common.records import read_float, read_int
from common.scenarios import ClientData, ScenarioConfig
from common.sources import DataSource, data_source
from common.training import check_device_name, get_device
from common.training import train as train_model
from common.validation import check_int

from .deadline import current_deadline

SERVER_CONFIG = f"the {keys.CONFIG!r} record the server sent"  # where a bad config value came from


@dataclass(frozen=True, eq=False)
class ClientTask:
    """One client's fixed setup for a run."""

    partition_id: int
    data: ClientData
    info: DatasetInfo
    model_name: str
    device: torch.device
    seed: int
    _head: tuple[torch.nn.Module, Head] | None = field(default=None, init=False, repr=False)

    def model(self, arrays: ArrayRecord) -> torch.nn.Module:
        """The client's model holding ``arrays`` (the cluster model the server sent).

        One module per process, builder, model and device is reused by every task
        (:func:`shared_module`): ``strict`` loading overwrites every parameter and buffer, so
        nothing of an earlier message, or of another client, survives.
        """
        model = self._model
        model.load_state_dict(arrays.to_torch_state_dict(), strict=True)
        return model

    @property
    def _model(self) -> torch.nn.Module:
        return shared_module(self.model_name, self.info.input_shape, self.info.num_classes, self.seed, str(self.device))

    def head(self, needed_by: str) -> Head:
        """The classifier head of the task's reused model (found once per module; raises naming ``needed_by``)."""
        model, found = self._model, self._head
        if found is None or found[0] is not model:
            found = (model, find_head(model, self.info.input_shape, max(self.info.num_classes, 1), needed_by))
            object.__setattr__(self, "_head", found)
        return found[1]

    def round_seed(self, server_round: int) -> int:
        """A seed for this client's local shuffling in ``server_round``, from the run's seed."""
        return int(np.random.SeedSequence([self.seed, server_round, self.partition_id]).generate_state(1)[0])


def train_local(
    task: ClientTask, arrays: ArrayRecord, cfg: Mapping[str, object], epochs: int | None = None
) -> tuple[torch.nn.Module, float]:
    """Train the model holding ``arrays`` on the task's train split as ``cfg`` says.

    ``cfg`` is a train config (local epochs, batch size, optimiser, server round, optional
    proximal mu); ``epochs`` overrides its local epochs. Returns the trained module (the
    task's reused one) and the last epoch's mean loss.
    """
    model = task.model(arrays)
    loss = train_model(
        model,
        task.data.x_train,
        task.data.y_train,
        epochs=read_int(cfg, keys.LOCAL_EPOCHS, SERVER_CONFIG) if epochs is None else epochs,
        batch_size=read_int(cfg, keys.BATCH_SIZE, SERVER_CONFIG),
        lr=read_float(cfg, keys.LR, SERVER_CONFIG),
        momentum=read_float(cfg, keys.MOMENTUM, SERVER_CONFIG),
        weight_decay=read_float(cfg, keys.WEIGHT_DECAY, SERVER_CONFIG),
        proximal_mu=read_float(cfg, keys.PROXIMAL_MU, SERVER_CONFIG, default=0.0),
        task=task.info.task,
        seed=task.round_seed(read_int(cfg, keys.SERVER_ROUND, SERVER_CONFIG)),
        device=task.device,
        deadline=current_deadline(),
    )
    return model, float(loss)


def train_steps(
    task: ClientTask, arrays: ArrayRecord, cfg: Mapping[str, object], steps: int
) -> tuple[torch.nn.Module, float]:
    """Train the model holding ``arrays`` on exactly ``steps`` mini-batches of the train split.

    The batches are drawn with replacement, seeded by the client's round seed, so that clients
    of very different sizes train equally long. Returns the task's reused module and the mean loss.
    """
    seed = task.round_seed(read_int(cfg, keys.SERVER_ROUND, SERVER_CONFIG))
    batch = read_int(cfg, keys.BATCH_SIZE, SERVER_CONFIG)
    rows = np.random.default_rng(seed).integers(0, len(task.data.y_train), size=steps * batch)
    model = task.model(arrays)
    loss = train_model(
        model,
        task.data.x_train[rows],
        task.data.y_train[rows],
        epochs=1,
        batch_size=batch,
        lr=read_float(cfg, keys.LR, SERVER_CONFIG),
        momentum=read_float(cfg, keys.MOMENTUM, SERVER_CONFIG),
        weight_decay=read_float(cfg, keys.WEIGHT_DECAY, SERVER_CONFIG),
        proximal_mu=read_float(cfg, keys.PROXIMAL_MU, SERVER_CONFIG, default=0.0),
        task=task.info.task,
        seed=seed,
        device=task.device,
        deadline=current_deadline(),
    )
    return model, float(loss)


def train_as_configured(
    task: ClientTask, arrays: ArrayRecord, cfg: Mapping[str, object], epochs_key: str = keys.LOCAL_EPOCHS
) -> tuple[torch.nn.Module, float]:
    """``cluster-steps`` mini-batches when ``cfg`` holds it > 0 (a clustering signal's training),
    else as many epochs as ``cfg[epochs_key]`` says (``train_local``)."""
    steps = read_int(cfg, keys.CLUSTER_STEPS, SERVER_CONFIG, default=0)
    if steps > 0:
        return train_steps(task, arrays, cfg, steps)
    return train_local(task, arrays, cfg, epochs=read_int(cfg, epochs_key, SERVER_CONFIG))


def task_from_context(run_config: Mapping[str, Any], node_config: Mapping[str, Any]) -> ClientTask:
    """The cached task for this node (raises ``ValueError`` naming a bad key).

    The node config gives ``partition-id`` and may name this node's own ``data-path`` (or
    override the run-config's ``data-dir``) and ``device``: each SuperNode of a deployment
    has its own data and GPU.
    """
    num_clients = run_config_value(run_config, "num-clients", ScenarioConfig.num_clients)
    pid = check_int(
        node_config.get(keys.PARTITION_ID), keys.PARTITION_ID, "the node config", low=0, high=int(num_clients) - 1
    )
    device = node_config.get(keys.DEVICE, run_config_value(run_config, "device", RunParams.device))
    return _task(
        _source(run_config, node_config),
        pid,
        str(run_config_value(run_config, "model", RunParams.model)),
        check_device_name(device, "the node config"),
        int(run_config_value(run_config, "seed", ScenarioConfig.seed)),
    )


def _source(run_config: Mapping[str, Any], node_config: Mapping[str, Any]) -> DataSource:
    """``data_source`` of these configs, read and checked once per process for each pair of configs.

    Every message brings its own copy of the run config (a Ray actor unpickles it), so the cache
    is keyed by the values; a client's own keys (partition id) do not change its source.
    """
    node = {k: v for k, v in node_config.items() if k not in (keys.PARTITION_ID, NUM_PARTITIONS_KEY)}
    try:
        return _source_of(tuple(sorted(run_config.items())), tuple(sorted(node.items())))
    except TypeError:  # an unhashable value (not a TOML scalar): no cache
        return data_source(run_config, node_config)


@lru_cache(maxsize=8)
def _source_of(run_items: tuple[tuple[str, Any], ...], node_items: tuple[tuple[str, Any], ...]) -> DataSource:
    return data_source(dict(run_items), dict(node_items))


Builder = tuple[Callable[..., torch.nn.Module], Callable[..., object] | None]


def builder_of(model: str) -> Builder:
    """What builds ``model`` in this process now: ``build_model`` (as this module names it) and, for
    the user's ``"package.module:factory"``, the factory object it imports.

    The object, not its qualified name: another file imported under the same name, or the
    module reloaded after an edit, is another builder.

    Raises
    ------
    ValueError
        Naming ``'model'`` if the user's factory cannot be imported (``common.models.load_factory``).
    """
    return build_model, load_factory(model) if is_factory(model) else None


def shared_module(
    model: str, input_shape: tuple[int, ...], num_classes: int, seed: int, device: str
) -> torch.nn.Module:
    """One module of ``model`` for every client this process serves on ``device`` with one builder.

    A Ray actor serves thousands of simulated clients one message at a time, and drawing a new
    module's initial weights costs more than evaluating a client's test split; every use loads
    the server's arrays into it first (:meth:`ClientTask.model`). The cache is keyed by the
    builder too (:func:`builder_of`), so a builder swapped in the same process builds its own
    module. ``device`` only keys the cache: training moves the module there.
    """
    return _module(builder_of(model), model, tuple(input_shape), num_classes, seed, device)


@lru_cache(maxsize=4)
def _module(
    builder: Builder, model: str, input_shape: tuple[int, ...], num_classes: int, seed: int, device: str
) -> torch.nn.Module:
    return builder[0](model, input_shape, num_classes, seed)


def clear_caches() -> None:
    """Forget every cached task, data source and shared module of this process (frees their memory)."""
    for cached in (_task, _source_of, _module):
        cached.cache_clear()


# Bounded: one Ray actor serves many simulated clients and must not hold all their data.
@lru_cache(maxsize=8)
def _task(source: DataSource, pid: int, model: str, device: str, seed: int) -> ClientTask:
    return ClientTask(
        partition_id=pid,
        data=source.client_data(pid),
        info=source.info,
        model_name=model,
        device=get_device(device),
        seed=seed,
    )
