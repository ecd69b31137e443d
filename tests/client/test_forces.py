"""CFLGT's client signal: per-class pulling/pushing forces against a slow reference from Eq. 5-6."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from torch import nn

from client.app import app
from client.signals.forces import class_forces
from common import keys
from common.models import build_model
from common.signals import SignalError
from common.signals.forces import ClassForces
from server.experiment import Experiment
from tests.helpers import small_run_config


def _reference(model, x, y, num_classes):
    """Eq. 5-6 sample by sample: the d-vectors Z1, Z2 of every class, then their averages (Eq. 8)."""
    xs = torch.as_tensor(x, dtype=torch.float32)
    with torch.no_grad():
        v = model.features(xs).double()
        probs = torch.softmax(model.head(model.features(xs)).double(), dim=1)
    d = v.shape[1]
    z1 = torch.zeros(num_classes, d, dtype=torch.float64)
    z2 = torch.zeros(num_classes, d, dtype=torch.float64)
    for i in range(len(y)):
        for c in range(num_classes):
            if y[i] == c:
                z1[c] += (1 - probs[i, c]) * v[i]
            else:
                z2[c] += probs[i, c] * v[i]
    return z1, z2


def _data(n=37, features=6, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)).astype(np.float32), rng.integers(0, classes, size=n)


def test_forces_match_the_slow_reference_and_the_head_gradient():
    x, y = _data()
    model = build_model("dnn", (6,), 4, seed=3)
    z1, z2 = _reference(model, x, y, 4)
    pull, push = class_forces(model, x, y, 4, batch_size=5)
    np.testing.assert_allclose(pull, z1.mean(dim=1).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(push, z2.mean(dim=1).numpy(), rtol=1e-5, atol=1e-6)
    # Eq. 5-6: the summed cross-entropy's gradient of head weight row c is -(Z1_c - Z2_c)
    model.zero_grad()
    nn.functional.cross_entropy(model(torch.as_tensor(x)), torch.as_tensor(y), reduction="sum").backward()
    np.testing.assert_allclose(model.head.weight.grad.double().numpy(), -(z1 - z2).numpy(), rtol=1e-4, atol=1e-5)


def test_forces_are_nonnegative_for_relu_features_and_independent_of_batching():
    x, y = _data(n=50)
    model = build_model("dnn", (6,), 4, seed=1)
    pull, push = class_forces(model, x, y, 4, batch_size=7)
    assert pull.shape == push.shape == (4,) and pull.dtype == np.float32
    assert np.all(pull >= 0) and np.all(push >= 0) and push.sum() > 0
    np.testing.assert_allclose(class_forces(model, x, y, 4, batch_size=1000), (pull, push), rtol=1e-5)
    assert model.training


def test_any_model_whose_last_layer_is_linear_works_and_absent_classes_pull_nothing():
    x, y = _data(n=20, classes=2)
    model = nn.Sequential(nn.Linear(6, 5), nn.Sigmoid(), nn.Linear(5, 3))
    pull, push = class_forces(model, x, y, 3)
    assert pull[2] == 0 and push[2] > 0
    with pytest.raises(ValueError, match="'model' parameter"):
        class_forces(nn.Sequential(nn.ReLU()), x, y, 3)
    with pytest.raises(ValueError, match="'model' parameter"):
        class_forces(model, x, y, 4)
    with pytest.raises(ValueError, match="'y' parameter"):
        class_forces(model, x, y + 5, 3)


def test_class_forces_signal_round_trip_and_rejections():
    sig = ClassForces.from_arrays({"pull": np.ones(3, np.float32), "push": np.zeros(3, np.float32)}, num_classes=3)
    assert {k: v.nbytes for k, v in sig.to_arrays().items()} == {"pull": 12, "push": 12}
    with pytest.raises(SignalError, match="'push' has shape"):
        ClassForces.from_arrays({"pull": np.ones(3), "push": np.ones(4)}, num_classes=3)
    with pytest.raises(SignalError, match="NaN or Inf"):
        ClassForces.from_arrays({"pull": np.ones(3), "push": np.array([1, np.inf, 0])}, num_classes=3)
    with pytest.raises(SignalError, match="negative"):
        ClassForces.from_arrays({"pull": -np.ones(3), "push": np.ones(3)}, num_classes=3, non_negative=True)
    ClassForces.from_arrays({"pull": -np.ones(3), "push": np.ones(3)}, num_classes=3)
    limit = float(np.finfo(np.float32).max)
    ClassForces.from_arrays({"pull": np.full(3, -limit), "push": np.full(3, limit)}, num_classes=3)
    for huge in (np.array([0.0, 1e200, 0.0]), np.array([0.0, -1e39, 0.0])):
        with pytest.raises(SignalError, match="beyond float32's range"):
            ClassForces.from_arrays({"pull": np.ones(3), "push": huge}, num_classes=3)
    with pytest.raises(SignalError, match="missing"):
        ClassForces.from_arrays({"pull": np.ones(3)}, num_classes=3)


def test_query_handler_replies_two_float32_class_vectors_from_the_train_split():
    rc = small_run_config()
    initial = Experiment.from_run_config(rc).initial_model()
    content = RecordDict({keys.ARRAYS: initial, keys.CONFIG: ConfigRecord({keys.SERVER_ROUND: 1})})
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    msg = Message(content, dst_node_id=7, message_type=keys.query_type(keys.FORCES_ACTION))
    msg.metadata.__dict__["_message_id"] = "m1"
    ctx = Context(
        run_id=1, node_id=7, node_config={"partition-id": 2, "num-partitions": 6}, state=RecordDict(), run_config=rc
    )
    signal = app(msg, ctx).content[keys.SIGNAL]
    arrays = {name: arr.numpy() for name, arr in signal.items()}
    assert sorted(arrays) == ["pull", "push"]
    assert all(a.shape == (10,) and a.dtype == np.float32 for a in arrays.values())
    assert sum(a.nbytes for a in arrays.values()) == 2 * 10 * 4
    assert np.count_nonzero(arrays["pull"]) == rc["labels-per-group"]
