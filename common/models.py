"""The models umbel trains, each split into a feature extractor and a last linear layer.

Every model is a :class:`Classifier` whose ``forward(x)`` is ``head(features(x))``:
``features`` maps an input batch to feature vectors ``v`` of shape ``(batch, d)`` (the input of
the last layer) and ``head`` is the last ``nn.Linear(d, num_outputs)``. CFLGT needs ``v`` for its
class forces and FedClust uploads only ``head``'s weight and bias.

- ``"dnn"``: the 2-layer DNN that CFLGT uses on FashionMNIST (Flatten, Linear(F, 200), ReLU).
- ``"lenet5"``: LeNet-5 (FedClust; CFLGT on CIFAR-10/SVHN) for images at least 28x28.
- ``"linear"``: a linear model on the flattened input (also the regression model).
- ``"resnet18"``: torchvision's ResNet-18 adapted to small images (meant for GPUs).

``num_classes == 0`` means regression: the head has a single output.

The user's own model is ``"package.module:factory"``, where ``factory(input_shape,
num_classes)`` returns any ``nn.Module``. :func:`find_head` finds the classifier head of any
model (an attribute ``head``, else the last ``nn.Linear`` reached in the forward pass); every
client-side signal that needs the last layer goes through it, never through parameter names.
"""

from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from common.data import TASKS
from common.validation import check_choice, check_int

MODELS: tuple[str, ...] = ("dnn", "lenet5", "linear", "resnet18")
IMAGE_MODELS: tuple[str, ...] = ("lenet5", "resnet18")
FLAT_MODELS: tuple[str, ...] = ("dnn", "linear")

DNN_HIDDEN = 200
LENET5_MIN_SIDE = 28
RESNET_SMALL_IMAGE_MAX_SIDE = 64


class Classifier(nn.Module):
    """A model whose last layer is a separate linear ``head``.

    Parameters
    ----------
    features : nn.Module
        Maps an input batch ``(batch, *input_shape)`` to feature vectors ``(batch, d)``.
    head : nn.Linear
        The last layer, ``(batch, d) -> (batch, num_outputs)``.
    """

    def __init__(self, features: nn.Module, head: nn.Linear) -> None:
        super().__init__()
        self.features = features
        self.head = head

    @property
    def feature_dim(self) -> int:
        """``d``, the size of the feature vector entering ``head``."""
        return self.head.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the outputs ``(batch, num_outputs)`` for inputs ``(batch, *input_shape)``."""
        return self.head(self.features(x))


def check_model(name: str, input_shape: tuple[int, ...], task: str) -> None:
    """Check that model ``name`` can be built for inputs of ``input_shape`` and ``task``.

    Parameters
    ----------
    name : str
        One of :data:`MODELS`.
    input_shape : tuple of int
        The shape of one sample: ``(F,)`` for tabular data, ``(C, H, W)`` for images.
    task : {"classification", "regression"}
        Regression needs ``"linear"`` or ``"dnn"``.

    Raises
    ------
    ValueError
        Naming ``'model'`` for an unknown name or a model that cannot take these inputs
        (``lenet5`` or ``resnet18`` on non-images, ``lenet5`` on images smaller than 28x28, an
        image model for regression), ``'input_shape'`` for a shape that is not a non-empty
        tuple of positive ints and ``'task'`` for an unknown task.
    """
    _check_model(name, input_shape, task, "check_model")


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int = 0) -> nn.Module:
    """Build model ``name`` (or the user's ``"package.module:factory"``) with weights drawn from ``seed``.

    The global torch RNG is left as it was; one seed always gives the same ``state_dict``.

    Parameters
    ----------
    name : str
        One of :data:`MODELS`.
    input_shape : tuple of int
        The shape of one sample, ``(F,)`` or ``(C, H, W)``.
    num_classes : int
        Number of classes ``C`` (head outputs); ``0`` means regression (one output).
    seed : int, default=0
        Seed of the initial weights.

    Returns
    -------
    nn.Module
        A :class:`Classifier` for built-in names, whatever the factory returns otherwise.

    Raises
    ------
    ValueError
        As :func:`check_model`, and naming ``'num_classes'`` or ``'seed'`` when negative.
    """
    num_classes = check_int(num_classes, "num_classes", "build_model", low=0)
    seed = check_int(seed, "seed", "build_model", low=0)
    task = "regression" if num_classes == 0 else "classification"
    shape = _check_model(name, input_shape, task, "build_model")
    outputs = max(num_classes, 1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if is_factory(name):
            model = load_factory(name)(shape, num_classes)
            if not isinstance(model, nn.Module):
                raise ValueError(
                    f"The 'model' parameter of the run config must name a factory that returns a "
                    f"torch.nn.Module. Got {name!r}, which returned {type(model).__name__} instead."
                )
            return model
        if name == "dnn":
            return _dnn(shape, outputs)
        if name == "lenet5":
            return _lenet5(shape, outputs)
        if name == "linear":
            return Classifier(nn.Flatten(), nn.Linear(math.prod(shape), outputs))
        return _resnet18(shape, outputs)


def is_factory(name: str) -> bool:
    """Whether ``name`` names the user's model factory (``"package.module:factory"``)."""
    return isinstance(name, str) and ":" in name


def load_factory(name: str) -> Callable[[tuple[int, ...], int], nn.Module]:
    """Import the user's factory ``"package.module:factory"`` (``factory`` may be dotted).

    Raises
    ------
    ValueError
        Naming ``'model'`` if the module cannot be imported or holds no such callable.
    """
    module_name, _, attr = name.partition(":")
    expected = (
        "The 'model' parameter of the run config must be one of "
        f"{MODELS} or 'package.module:factory' importable on the server and on every client"
    )
    try:
        target: object = importlib.import_module(module_name)
    except Exception as err:  # an import runs arbitrary code: any error means "not importable"
        raise ValueError(
            f"{expected}. Got {name!r}, whose module cannot be imported ({type(err).__name__}: {err}) instead. "
            f"Install its package or put the folder that holds {module_name.split('.')[0]!r} on PYTHONPATH, "
            "on the server and on every client (Flower's ClientApp processes import it too)."
        ) from err
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not attr or not callable(target):
        raise ValueError(f"{expected}. Got {name!r}, but {module_name} has no callable {attr!r} instead.")
    return target


@dataclass(frozen=True, eq=False)
class Head:
    """A model's classifier head: its last ``nn.Linear`` and that module's name in the model."""

    module: nn.Linear
    name: str

    @property
    def weight_key(self) -> str:
        """The ``state_dict`` key of the head's weight."""
        return f"{self.name}.weight" if self.name else "weight"


HEAD_NEEDED = (
    "an nn.Linear classifier head: an attribute 'head', or the last nn.Linear of the forward "
    "pass, whose output is the model's output"
)


@torch.no_grad()
def find_head(
    model: nn.Module, input_shape: Sequence[int], num_outputs: int | None = None, needed_by: str = "this run"
) -> Head:
    """Find the classifier head of ``model`` with one seeded forward pass of two samples.

    The head is the attribute ``head`` when it is an ``nn.Linear`` reached in the forward pass,
    else the last ``nn.Linear`` reached. The model's mode, device and the global RNG are left
    as they were.

    Parameters
    ----------
    model : nn.Module
    input_shape : sequence of int
        The shape of one sample.
    num_outputs : int, optional
        When given, the head must have this many outputs.
    needed_by : str
        Who needs the head (named in the error), e.g. ``"strategy 'cflgt' (class forces)"``.

    Raises
    ------
    ValueError
        Naming ``'model'``, what is needed and ``needed_by``, if no ``nn.Linear`` is reached,
        if the head's output is not the model's output, or if it has the wrong size.
    """
    shape = _check_input_shape(input_shape, "find_head")
    seen: list[tuple[nn.Linear, torch.Tensor]] = []
    hooks = [
        m.register_forward_hook(lambda mod, _inp, out: seen.append((mod, out)))
        for m in model.modules()
        if isinstance(m, nn.Linear)
    ]
    was_training = model.training
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    try:
        model.eval()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            x = torch.randn((2, *shape), device=device)
        output = model(x)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    owner = f"{needed_by}"
    if not seen:
        raise ValueError(
            f"The 'model' parameter of the run config must have {HEAD_NEEDED}, which {owner} needs. "
            f"Got {type(model).__name__}, whose forward pass reaches no nn.Linear, instead."
        )
    attribute = getattr(model, "head", None)
    reached = [m for m, _ in seen]
    head = attribute if isinstance(attribute, nn.Linear) and attribute in reached else reached[-1]
    head_out = [out for m, out in seen if m is head][-1]
    if not isinstance(output, torch.Tensor) or output.shape != head_out.shape or not torch.equal(output, head_out):
        raise ValueError(
            f"The 'model' parameter of the run config must have {HEAD_NEEDED}, which {owner} needs. "
            f"Got {type(model).__name__}, whose output is not the output of its last nn.Linear "
            f"({type(head).__name__}({head.in_features}, {head.out_features})), instead."
        )
    if num_outputs is not None and head.out_features != num_outputs:
        raise ValueError(
            f"The 'model' parameter of the run config must end in a head with {num_outputs} outputs "
            f"(num-classes), which {owner} needs. Got a head with {head.out_features} instead."
        )
    name = next(n for n, m in model.named_modules() if m is head)
    return Head(head, name)


def _check_model(name: str, input_shape: Sequence[int], task: str, owner: str) -> tuple[int, ...]:
    if is_factory(name):
        check_choice(task, "task", owner, TASKS)
        load_factory(name)
        return _check_input_shape(input_shape, owner)
    check_choice(name, "model", owner, MODELS)
    check_choice(task, "task", owner, TASKS)
    shape = _check_input_shape(input_shape, owner)
    if task == "regression" and name not in FLAT_MODELS:
        raise ValueError(
            f"The 'model' parameter of {owner} must be one of {FLAT_MODELS} for "
            f"task 'regression'. Got {name!r} instead."
        )
    if name in IMAGE_MODELS and len(shape) != 3:
        raise ValueError(
            f"The 'model' parameter of {owner} must be one of {FLAT_MODELS} for "
            f"non-image inputs of shape {shape} (images are (C, H, W)). Got {name!r} instead."
        )
    if name == "lenet5" and min(shape[1:]) < LENET5_MIN_SIDE:
        raise ValueError(
            f"The 'model' parameter of {owner} must be a model other than 'lenet5' for "
            f"images smaller than {LENET5_MIN_SIDE}x{LENET5_MIN_SIDE} (input_shape {shape}). "
            f"Got {name!r} instead."
        )
    return shape


def _dnn(shape: tuple[int, ...], outputs: int) -> Classifier:
    features = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), DNN_HIDDEN), nn.ReLU())
    return Classifier(features, nn.Linear(DNN_HIDDEN, outputs))


def _lenet5(shape: tuple[int, ...], outputs: int) -> Classifier:
    channels, height, width = shape
    # LeNet-5 was made for 32x32 inputs; 28x28 (MNIST-like) ones are padded up to that size.
    padding = 2 if min(height, width) < 32 else 0

    def after(side: int) -> int:
        side = (side + 2 * padding - 4) // 2
        return (side - 4) // 2

    flat = 16 * after(height) * after(width)
    features = nn.Sequential(
        nn.Conv2d(channels, 6, kernel_size=5, padding=padding),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
    )
    return Classifier(features, nn.Linear(84, outputs))


def _resnet18(shape: tuple[int, ...], outputs: int) -> Classifier:
    channels, height, width = shape
    from torchvision.models import resnet18  # ~1.7 s to import, for this model only

    net = resnet18(weights=None)
    small = max(height, width) <= RESNET_SMALL_IMAGE_MAX_SIDE
    if small:
        net.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    elif channels != 3:
        net.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    layers: list[nn.Module] = [net.conv1, net.bn1, net.relu]
    if not small:
        layers.append(net.maxpool)
    layers += [net.layer1, net.layer2, net.layer3, net.layer4, net.avgpool, nn.Flatten()]
    return Classifier(nn.Sequential(*layers), nn.Linear(net.fc.in_features, outputs))


def _check_input_shape(input_shape: Sequence[int], owner: str) -> tuple[int, ...]:
    ok = (
        isinstance(input_shape, (tuple, list))
        and len(input_shape) > 0
        and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and int(s) > 0 for s in input_shape)
    )
    if not ok:
        raise ValueError(
            f"The 'input_shape' parameter of {owner} must be a non-empty tuple of positive "
            f"ints, (F,) or (C, H, W). Got {input_shape!r} instead."
        )
    return tuple(int(s) for s in input_shape)
