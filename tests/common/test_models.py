"""Tests for common.models: shapes, the features/head split, determinism, input checks."""

import numpy as np
import pytest
import torch
from torch import nn

from common.models import MODELS, Classifier, build_model, check_model


@pytest.mark.parametrize(
    ("name", "input_shape", "feature_dim"),
    [
        ("dnn", (1, 8, 8), 200),
        ("dnn", (1, 28, 28), 200),
        ("lenet5", (1, 28, 28), 84),
        ("lenet5", (3, 32, 32), 84),
        ("linear", (1, 8, 8), 64),
        ("linear", (5,), 5),
        ("resnet18", (3, 32, 32), 512),
    ],
)
def test_forward_shapes_and_split(name, input_shape, feature_dim):
    model = build_model(name, input_shape, num_classes=10, seed=1)
    assert isinstance(model, Classifier)
    assert isinstance(model.head, nn.Linear)
    assert model.feature_dim == feature_dim
    model.eval()
    x = torch.randn(2, *input_shape)
    with torch.no_grad():
        out = model(x)
        v = model.features(x)
        split = model.head(v)
    assert out.shape == (2, 10)
    assert v.shape == (2, feature_dim)
    torch.testing.assert_close(split, out)


def test_lenet5_matches_classic_layout():
    model = build_model("lenet5", (1, 28, 28), num_classes=10)
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    linears = [m for m in model.features if isinstance(m, nn.Linear)]
    assert [(c.out_channels, c.kernel_size) for c in convs] == [(6, (5, 5)), (16, (5, 5))]
    assert convs[0].padding == (2, 2)
    assert [(m.in_features, m.out_features) for m in linears] == [(400, 120), (120, 84)]
    cifar = build_model("lenet5", (3, 32, 32), num_classes=10)
    assert cifar.features[0].in_channels == 3 and cifar.features[0].padding == (0, 0)


def test_resnet18_adapts_to_small_grey_images():
    model = build_model("resnet18", (1, 16, 16), num_classes=4)
    conv1 = model.features[0]
    assert conv1.in_channels == 1 and conv1.kernel_size == (3, 3) and conv1.stride == (1, 1)
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.features)
    assert model(torch.randn(2, 1, 16, 16)).shape == (2, 4)


def test_regression_has_one_output():
    model = build_model("linear", (1,), num_classes=0)
    assert model(torch.zeros(3, 1)).shape == (3, 1)


@pytest.mark.parametrize("name", ["dnn", "lenet5", "linear"])
def test_same_seed_same_weights_and_global_rng_untouched(name):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = build_model(name, (1, 28, 28), num_classes=10, seed=7)
    b = build_model(name, (1, 28, 28), num_classes=10, seed=7)
    c = build_model(name, (1, 28, 28), num_classes=10, seed=8)
    torch.testing.assert_close(torch.rand(3), expected_next)
    for key, value in a.state_dict().items():
        torch.testing.assert_close(value, b.state_dict()[key])
    assert not torch.equal(a.head.weight, c.head.weight)


def test_lenet5_on_digits_raises():
    with pytest.raises(ValueError, match="'model'.*lenet5"):
        check_model("lenet5", (1, 8, 8), "classification")
    with pytest.raises(ValueError, match="'model'"):
        build_model("lenet5", (1, 8, 8), num_classes=10)


def test_unknown_model_lists_known_ones():
    with pytest.raises(ValueError, match="'model'") as info:
        check_model("vgg", (3, 32, 32), "classification")
    assert all(name in str(info.value) for name in MODELS)


@pytest.mark.parametrize(
    ("name", "shape", "task"),
    [
        ("resnet18", (10,), "classification"),
        ("lenet5", (784,), "classification"),
        ("lenet5", (1, 28, 28), "regression"),
    ],
)
def test_impossible_combinations_name_model(name, shape, task):
    with pytest.raises(ValueError, match="The 'model' parameter"):
        check_model(name, shape, task)


@pytest.mark.parametrize(
    ("name", "shape", "task"),
    [
        ("dnn", (1,), "regression"),
        ("linear", (1,), "regression"),
        ("resnet18", (1, 8, 8), "classification"),
        ("dnn", (np.int64(1), np.int64(8), np.int64(8)), "classification"),
    ],
)
def test_accepted_combinations_build_and_run(name, shape, task):
    # What check_model accepts must build and map a batch of that shape to one output per class.
    check_model(name, shape, task)
    outputs = 1 if task == "regression" else 3
    model = build_model(name, tuple(int(s) for s in shape), outputs).eval()
    with torch.no_grad():
        out = model(torch.zeros((2, *(int(s) for s in shape))))
    assert out.shape == (2, outputs)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"input_shape": ()}, "input_shape"),
        ({"input_shape": (1, 0, 8)}, "input_shape"),
        ({"num_classes": -1}, "num_classes"),
        ({"seed": -3}, "seed"),
    ],
)
def test_build_model_checks_parameters(kwargs, param):
    args = {"name": "dnn", "input_shape": (1, 8, 8), "num_classes": 10, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=f"The '{param}' parameter of build_model"):
        build_model(**args)


def test_unknown_task_raises():
    with pytest.raises(ValueError, match="'task'"):
        check_model("dnn", (4,), "ranking")
