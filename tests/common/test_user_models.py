"""The user's own model: factories, the head finder, and the signals that read the head."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from client.signals.forces import class_forces
from common.models import build_model, find_head
from server.experiment import Experiment
from tests.helpers import small_run_config

CNN = "tests.helpers.user_models:small_cnn"


def test_a_factory_builds_the_users_module_with_seeded_weights():
    a = build_model(CNN, (1, 8, 8), 10, seed=4)
    b = build_model(CNN, (1, 8, 8), 10, seed=4)
    c = build_model(CNN, (1, 8, 8), 10, seed=5)
    assert type(a).__name__ == "SmallCNN"
    assert torch.equal(a.classifier.weight, b.classifier.weight)
    assert not torch.equal(a.classifier.weight, c.classifier.weight)


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "no_such_module_xyz:build",
            "whose module cannot be imported .* put the folder that holds 'no_such_module_xyz' on PYTHONPATH",
        ),
        ("tests.helpers.user_models:missing", "has no callable 'missing'"),
        (
            "tests.helpers.user_models:not_a_module",
            (
                "must name a factory that returns a torch.nn.Module. "
                "Got 'tests.helpers.user_models:not_a_module', which returned str"
            ),
        ),
    ],
)
def test_a_bad_factory_is_a_clear_error(name, message):
    with pytest.raises(ValueError, match=message):
        build_model(name, (1, 8, 8), 10)
    with pytest.raises(ValueError, match="'model'"):
        Experiment.from_run_config(small_run_config(model=name))


def test_the_head_is_the_last_linear_of_the_forward_pass_not_the_last_registered():
    model = build_model(CNN, (1, 8, 8), 10)
    assert [n for n, m in model.named_modules() if isinstance(m, nn.Linear)][-1] == "hidden"
    head = find_head(model, (1, 8, 8), 10)
    assert head.module is model.classifier and head.weight_key == "classifier.weight"


def test_an_attribute_head_is_preferred_and_builtins_keep_their_head():
    model = build_model("dnn", (1, 8, 8), 10)
    assert find_head(model, (1, 8, 8)).module is model.head


@pytest.mark.parametrize(
    "factory, message",
    [
        ("softmaxed", "whose output is not the output of its last nn.Linear"),
        ("no_linear", "whose forward pass reaches no nn.Linear"),
    ],
)
@pytest.mark.parametrize("strategy", ["cflgt", "fedclust"])
def test_a_model_without_a_usable_head_fails_before_training_naming_the_strategy(factory, message, strategy):
    rc = small_run_config(strategy=strategy, model=f"tests.helpers.user_models:{factory}")
    with pytest.raises(ValueError, match=f"strategy '{strategy}'.*{message}"):
        Experiment.from_run_config(rc)


def test_strategies_that_do_not_read_the_head_accept_a_model_without_one():
    exp = Experiment.from_run_config(small_run_config(strategy="fedavg", model="tests.helpers.user_models:no_linear"))
    assert exp.initial_model().keys()


def test_a_head_of_the_wrong_size_is_refused():
    model = build_model(CNN, (1, 8, 8), 7)
    with pytest.raises(ValueError, match="head with 10 outputs"):
        find_head(model, (1, 8, 8), 10)


def test_class_forces_use_the_input_of_the_forward_heads_on_a_user_model():
    torch.manual_seed(0)
    model = build_model(CNN, (1, 8, 8), 4, seed=2)
    x = np.random.default_rng(0).normal(size=(30, 1, 8, 8)).astype(np.float32)
    y = np.arange(30) % 4
    pull, push = class_forces(model, x, y, 4)
    with torch.no_grad():
        v = torch.relu(model.hidden(model.conv(torch.as_tensor(x)).flatten(1)))
        probs = torch.softmax(model.classifier(v), dim=1).numpy()
    v_mean = v.mean(dim=1).numpy()
    onehot = np.eye(4)[y]
    np.testing.assert_allclose(pull, (onehot * (1 - probs) * v_mean[:, None]).sum(0), rtol=1e-5)
    np.testing.assert_allclose(push, ((1 - onehot) * probs * v_mean[:, None]).sum(0), rtol=1e-5)
