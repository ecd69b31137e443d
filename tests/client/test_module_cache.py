"""The process's shared client module is keyed by its builder too: no ``clear_caches()`` needed.

A builder swapped in one process (a test's builder, another file imported under the same
``package.module:factory`` name, a module reloaded after an edit) must build its own module;
the same builder keeps reusing one.
"""

from __future__ import annotations

import sys

import pytest
import torch

from client import task as client_task
from common.models import build_model
from server.experiment import Experiment
from tests.helpers import small_run_config

SHAPE = (1, 8, 8)
FACTORY = """
import torch


def factory(input_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear({hidden}, max(num_classes, 1)))
"""


def _batchnorm_model(name, input_shape, num_classes, seed=0):
    """Another builder for every built-in name: a BatchNorm in front of ``build_model``'s model."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.Sequential(
            torch.nn.BatchNorm2d(input_shape[0]), build_model(name, input_shape, num_classes, seed)
        )


def test_two_builders_of_one_model_name_get_two_modules_without_clearing_the_caches(monkeypatch):
    first = client_task.shared_module("dnn", SHAPE, 10, 0, "cpu")
    monkeypatch.setattr("client.task.build_model", _batchnorm_model)
    second = client_task.shared_module("dnn", SHAPE, 10, 0, "cpu")
    assert second is not first and isinstance(second[0], torch.nn.BatchNorm2d)
    assert client_task.shared_module("dnn", SHAPE, 10, 0, "cpu") is second  # one module per builder
    monkeypatch.undo()
    assert client_task.shared_module("dnn", SHAPE, 10, 0, "cpu") is first


def test_a_cached_task_follows_a_swapped_builder(monkeypatch):
    """The contract test's failure: a task cached with one builder, then arrays of another's model."""
    rc = small_run_config()
    task = client_task.task_from_context(dict(rc), {"partition-id": 0})
    plain = Experiment.from_run_config(rc).initial_model()
    assert task.model(plain) is client_task.shared_module(
        task.model_name, task.info.input_shape, task.info.num_classes, task.seed, str(task.device)
    )
    plain_head = task.head("this test")
    monkeypatch.setattr("client.task.build_model", _batchnorm_model)
    monkeypatch.setattr("server.experiment.build_model", _batchnorm_model)
    again = client_task.task_from_context(dict(rc), {"partition-id": 0})
    assert again is task  # the task itself stays cached ...
    sent = Experiment.from_run_config(rc).initial_model()
    assert "0.running_mean" in sent
    model = task.model(sent)  # ... and loads the other model's arrays into that builder's module
    assert torch.equal(model.state_dict()["0.running_mean"], torch.from_numpy(sent["0.running_mean"].numpy()))
    head = task.head("this test")
    assert head.name == "1.head" and head.module is model[1].head and head is not plain_head


def test_another_file_under_the_same_factory_name_is_another_builder(tmp_path, monkeypatch):
    """A user's factory is keyed by the object imported, not by its name: two files named alike differ."""
    name = "umbel_cache_probe_models:factory"
    for folder, hidden in (("a", 64), ("b", 63)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "umbel_cache_probe_models.py").write_text(FACTORY.format(hidden=hidden))
    monkeypatch.delitem(sys.modules, "umbel_cache_probe_models", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    first = client_task.shared_module(name, SHAPE, 10, 0, "cpu")
    assert first[1].in_features == 64 and client_task.shared_module(name, SHAPE, 10, 0, "cpu") is first
    del sys.modules["umbel_cache_probe_models"]
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    with pytest.raises(RuntimeError, match=r"size mismatch"):  # b's model cannot hold a's arrays
        client_task.shared_module(name, SHAPE, 10, 0, "cpu").load_state_dict(first.state_dict())
    assert client_task.shared_module(name, SHAPE, 10, 0, "cpu")[1].in_features == 63
    monkeypatch.delitem(sys.modules, "umbel_cache_probe_models")
