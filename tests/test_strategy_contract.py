"""What every registered strategy promises, checked on the in-process grid with digits.

Parametrised over ``strategies.REGISTRY``: a strategy added to the registry is held to the
contract without touching this file, except for ``FAST`` (run-config overrides that make
its clustering happen within these short runs).
"""

from __future__ import annotations

import copy
from dataclasses import fields
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Message
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from client.app import app as client_app
from common import keys
from common.config import TrainingParams
from common.params import run_config_keys
from common.export import export_partition
from common.models import Classifier
from common.scenarios import ScenarioConfig, build_partition
from server.cli import PROJECT_ROOT, load_defaults
from server.experiment import Experiment
from strategies import REGISTRY
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

NAMES = sorted(REGISTRY)
# Overrides that make each algorithm cluster inside a 3-round run on 6 clients.
FAST: dict[str, dict[str, Any]] = {
    "cfl-gp": {"num-clusters": 2},
    "ifca": {"num-clusters": 2},
    "cflgt": {"cflgt-pretrain-rounds": 1},
    "flag": {"num-clusters": 2, "flag-gradient-epochs": 1},
    "flhc": {"flhc-warmup-rounds": 1, "num-clusters": 2},
    "flic": {"flic-cluster-round": 2},
    "cfl-sattler": {"cfl-sattler-split-after": 1, "cfl-sattler-eps1": 100.0, "cfl-sattler-eps2": 1e-6},
}
NO_SPLIT: dict[str, dict[str, Any]] = {"cfl-sattler": {"cfl-sattler-split-after": 100}}
# Strategies whose cluster update is deliberately not FedAvg's weighted mean.
NOT_FEDAVG_AGGREGATION = {"fedmedian": "coordinate-wise median by design"}
# Strategies whose cluster models start as distinct draws, not as copies of the initial model.
DISTINCT_START = {"ifca": "K random initial models by design (identical ones would tie on loss)"}


def _setup(name: str, rounds: int = 3, **overrides: Any):
    rc = small_run_config(strategy=name, rounds=rounds, **{**FAST.get(name, {}), **overrides})
    exp = Experiment.from_run_config(rc)
    return rc, exp, exp.build_strategy()


def _bad_value(default: Any) -> Any:
    if isinstance(default, bool):
        return "maybe"
    if isinstance(default, (int, float)):
        return "not-a-number"
    return "no-such-option!"


@pytest.mark.parametrize("name", NAMES)
def test_builds_from_the_projects_defaults(name):
    cls = REGISTRY[name]
    strategy = cls.from_run_config(TrainingParams(), load_defaults(PROJECT_ROOT))
    assert isinstance(strategy.params, cls.params_type) and strategy.name == name


@pytest.mark.parametrize("name", NAMES)
def test_rejects_each_invalid_parameter_naming_it(name):
    cls = REGISTRY[name]
    params = [f for f in fields(cls.params_type) if f.init]
    defaults = cls.params_type()
    for field in params:
        key = run_config_keys(cls.params_type)[field.name]
        with pytest.raises(ValueError, match=f"The '{key}' parameter of"):
            cls.from_run_config(TrainingParams(), {key: _bad_value(getattr(defaults, field.name))})


def _drop_all(reply: Message, server_round: int) -> Message | None:
    return reply if reply.metadata.message_type == keys.MSG_IDENTITY else None


@pytest.mark.parametrize("name", NAMES)
def test_survives_rounds_without_any_reply(name):
    # max-rejected-rounds 0: the stop rule is off, so the loop itself must carry on with its models
    rc, exp, strategy = _setup(name, **{"max-rejected-rounds": 0})
    grid = InProcessGrid(client_app, rc, 6, faults=dict.fromkeys(range(6), _drop_all))
    initial = exp.initial_model()
    strategy.start(grid, initial, expected_clients=6)
    assert [r.train_replies for r in strategy.history] == [0, 0, 0]
    start = [initial] * len(strategy.models)
    if name in DISTINCT_START:
        fresh = exp.build_strategy()
        fresh.clients = strategy.clients
        fresh.init_clusters(initial)
        start = fresh.models
    for model, first in zip(strategy.models, start, strict=True):
        for key in initial.keys():
            np.testing.assert_array_equal(model[key].numpy(), first[key].numpy())


@pytest.mark.parametrize("name", NAMES)
def test_survives_a_client_that_always_errors(name, caplog):
    rc, exp, strategy = _setup(name, fraction=1.0)
    grid = InProcessGrid(client_app, rc, 6, failing={2})
    strategy.start(grid, exp.initial_model(), expected_clients=6)
    assert len(strategy.history) == 3
    assert strategy.history[-1].failures >= 1
    assert "client 2 failed: error code 2: RuntimeError: this client always fails" in caplog.text
    assert all(np.all(np.isfinite(a.numpy())) for m in strategy.models for a in m.values())


@pytest.mark.parametrize("name", NAMES)
def test_reply_order_does_not_change_the_result(name):
    runs = []
    for reverse in (False, True):
        rc, exp, strategy = _setup(name)
        strategy.start(
            InProcessGrid(client_app, rc, 6, reverse_replies=reverse), exp.initial_model(), expected_clients=6
        )
        runs.append(strategy)
    a, b = runs
    assert a.assignment == b.assignment
    for ma, mb in zip(a.models, b.models, strict=True):
        for key in ma.keys():
            np.testing.assert_allclose(ma[key].numpy(), mb[key].numpy(), rtol=1e-6, atol=1e-7)
    assert [r.accuracy for r in a.history] == [r.accuracy for r in b.history]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in NOT_FEDAVG_AGGREGATION])
def test_one_cluster_aggregates_like_flowers_fedavg(name):
    # the aggregation round must not also be a re-clustering round
    rc, exp, strategy = _setup(name, rounds=2, fraction=1.0, **NO_SPLIT.get(name, {}))
    grid = InProcessGrid(client_app, rc, 6)
    initial = exp.initial_model()
    strategy.start(grid, initial, expected_clients=6)
    strategy.set_clusters([initial.copy()], dict.fromkeys(strategy.clients, 0))
    messages = list(strategy.configure_train(3, initial, ConfigRecord(), grid))
    replies = grid.send_and_receive(messages)
    contents = [copy.deepcopy(r.content) for r in replies]
    strategy.aggregate_train(3, replies)
    expected = aggregate_arrayrecords(contents, keys.NUM_EXAMPLES)
    for key, arr in expected.items():
        np.testing.assert_allclose(strategy.models[0][key].numpy(), arr.numpy(), rtol=1e-5, atol=1e-7)


def _batchnorm_model(name, input_shape, num_classes, seed=0):
    """A small CNN with BatchNorm (float running stats, a 0-d int64 ``num_batches_tracked``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        features = torch.nn.Sequential(
            torch.nn.Conv2d(input_shape[0], 4, 3, padding=1),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
        )
        return Classifier(features, torch.nn.Linear(4 * input_shape[1] * input_shape[2], max(num_classes, 1)))


@pytest.mark.parametrize("name", NAMES)
def test_aggregates_a_batchnorm_model(name, monkeypatch):
    monkeypatch.setattr("client.task.build_model", _batchnorm_model)
    monkeypatch.setattr("server.experiment.build_model", _batchnorm_model)
    rc, exp, strategy = _setup(name, rounds=2, fraction=1.0, **{"local-epochs": 1})
    initial = exp.initial_model()
    assert initial["features.1.num_batches_tracked"].numpy().shape == ()
    strategy.start(InProcessGrid(client_app, rc, 6), initial, expected_clients=6)
    assert len(strategy.history) == 2 and sum(r.train_replies for r in strategy.history) > 0
    tracked = []
    for model in strategy.models:
        for key, arr in model.items():
            values = arr.numpy()
            assert values.dtype == initial[key].numpy().dtype and values.shape == tuple(initial[key].shape)
            assert np.all(np.isfinite(values))
        tracked.append(int(model["features.1.num_batches_tracked"].numpy()))
    assert max(tracked) > 0  # the aggregated integer buffer counts the clients' batches


@pytest.fixture(scope="module")
def own_data(tmp_path_factory) -> dict[str, Any]:
    """The conftest federation exported to disk, read back by each client, with a user's CNN."""
    rc = small_run_config()
    root = tmp_path_factory.mktemp("federation")
    truth = export_partition(build_partition(ScenarioConfig.from_run_config(rc)), root, "hf")
    return {
        "model": "tests.helpers.user_models:small_cnn",
        "data-path": str(root),
        "truth-path": str(truth),
        "num-classes": 10,
        "input-shape": "1,8,8",
        "local-epochs": 1,
        "cluster-steps": 10,
    }


@pytest.mark.parametrize("name", NAMES)
def test_trains_a_user_model_on_clients_own_folders(name, own_data):
    rc, exp, strategy = _setup(name, fraction=1.0, **own_data)
    grid = InProcessGrid(client_app, rc, 6)
    initial = exp.initial_model()
    assert "classifier.weight" in initial and "head.weight" not in initial
    strategy.start(grid, initial, expected_clients=6)
    assert len(strategy.history) == 3
    assert all(r.failures == 0 and r.rejected == 0 for r in strategy.history), strategy.history
    assert strategy.history[-1].ari is not None  # scored against the truth file
    assert all(c.true_group == -1 and sum(c.class_counts) == c.num_train for c in strategy.clients.values())
    assert any(not np.array_equal(m[k].numpy(), initial[k].numpy()) for m in strategy.models for k in initial)
