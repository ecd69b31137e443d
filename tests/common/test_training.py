"""Tests for common.training: SGD loops, FedProx, evaluation, device choice."""

import numpy as np
import pytest
import torch
from torch import nn

from common.models import build_model
from common.training import evaluate, get_device, train


def _blobs(n=120, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    centres = np.array([[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0]])
    x = centres[y] + rng.normal(scale=0.3, size=(n, 2))
    return x.astype(np.float32), y.astype(np.int64)


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_train_reduces_loss_on_separable_data():
    x, y = _blobs()
    model = build_model("dnn", (2,), num_classes=3, seed=0)
    loss_before, acc_before = evaluate(model, x, y)
    last = train(model, x, y, epochs=20, batch_size=16, lr=0.05, momentum=0.9)
    loss_after, acc_after = evaluate(model, x, y)
    assert loss_after < 0.1 < loss_before
    assert acc_after == 1.0 and acc_before < 1.0
    assert 0.0 <= last < 0.2
    assert next(model.parameters()).device.type == "cpu"


def test_same_seed_gives_same_weights_and_other_seed_differs():
    x, y = _blobs()
    runs = []
    for seed in (5, 5, 6):
        model = build_model("dnn", (2,), num_classes=3, seed=0)
        train(model, x, y, epochs=2, batch_size=8, lr=0.1, seed=seed)
        runs.append(_flat(model))
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)
    assert not torch.equal(runs[0], runs[2])


def test_proximal_term_keeps_weights_near_start():
    x, y = _blobs()
    start = build_model("dnn", (2,), num_classes=3, seed=0)
    distances = {}
    for mu in (0.0, 1.0):
        model = build_model("dnn", (2,), num_classes=3, seed=0)
        train(model, x, y, epochs=5, batch_size=16, lr=0.1, proximal_mu=mu)
        distances[mu] = float((_flat(model) - _flat(start)).norm())
    assert 0.0 < distances[1.0] < 0.8 * distances[0.0]


def test_evaluate_hand_made_classifier():
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
    x = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]], dtype=np.float32)
    y = np.array([0, 1, 1, 1], dtype=np.int64)
    loss, acc = evaluate(model, x, y, batch_size=3)
    expected = nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(y)).item()
    assert acc == pytest.approx(0.75)
    assert loss == pytest.approx(expected, rel=1e-6)
    assert model.training


def test_regression_fits_a_line():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(200, 1)).astype(np.float32)
    y = (2.0 * x[:, 0] - 0.5).astype(np.float32)
    model = build_model("linear", (1,), num_classes=0, seed=0)
    _, r2_before = evaluate(model, x, y, task="regression")
    train(model, x, y, epochs=60, batch_size=20, lr=0.1, task="regression")
    mse, r2 = evaluate(model, x, y, task="regression")
    assert r2 > 0.999 > r2_before
    assert mse < 1e-3
    assert model.head.weight.item() == pytest.approx(2.0, abs=0.02)


def test_get_device():
    assert get_device("cpu") == torch.device("cpu")
    assert get_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="The 'device' parameter of get_device"):
        get_device("tpu")
    with pytest.raises(ValueError, match="The 'device' parameter of get_device"):
        get_device("cuda:99")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_gpu_raises():
    with pytest.raises(ValueError, match="The 'device' parameter"):
        get_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_train_on_cuda_returns_model_on_cpu():
    x, y = _blobs()
    model = build_model("dnn", (2,), num_classes=3)
    train(model, x, y, epochs=1, batch_size=16, lr=0.1, device=get_device("cuda"))
    evaluate(model, x, y, device=get_device("cuda"))
    assert all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"epochs": 0}, "epochs"),
        ({"batch_size": 0}, "batch_size"),
        ({"lr": 0.0}, "lr"),
        ({"momentum": 1.0}, "momentum"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"proximal_mu": -1.0}, "proximal_mu"),
        ({"task": "ranking"}, "task"),
    ],
)
def test_train_checks_parameters(kwargs, param):
    x, y = _blobs(10)
    model = build_model("linear", (2,), num_classes=3)
    args = {"epochs": 1, "batch_size": 4, "lr": 0.1} | kwargs
    with pytest.raises(ValueError, match=f"The '{param}' parameter of train"):
        train(model, x, y, **args)


def test_empty_or_mismatched_data_raises():
    model = build_model("linear", (2,), num_classes=3)
    empty_x = np.zeros((0, 2), dtype=np.float32)
    empty_y = np.zeros(0, dtype=np.int64)
    with pytest.raises(ValueError, match="The 'x' parameter of train"):
        train(model, empty_x, empty_y, epochs=1, batch_size=4, lr=0.1)
    with pytest.raises(ValueError, match="The 'x' parameter of evaluate"):
        evaluate(model, empty_x, empty_y)
    x, y = _blobs(10)
    with pytest.raises(ValueError, match="The 'y' parameter of train"):
        train(model, x, y[:-1], epochs=1, batch_size=4, lr=0.1)
