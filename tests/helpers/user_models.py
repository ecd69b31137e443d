"""A user's own models, defined outside umbel, for the tests of ``model = "tests.helpers.user_models:..."``.

``small_cnn`` registers its classifier before its hidden layer, so the last ``nn.Linear``
registered is not the last one reached in the forward pass, and it has no ``head`` attribute.
"""

from __future__ import annotations

import math

from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        channels, height, width = input_shape
        self.classifier = nn.Linear(32, num_classes)
        self.conv = nn.Sequential(nn.Conv2d(channels, 8, kernel_size=3, padding=1), nn.ReLU())
        self.hidden = nn.Linear(8 * height * width, 32)

    def forward(self, x):
        return self.classifier(nn.functional.relu(self.hidden(self.conv(x).flatten(1))))


def small_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return SmallCNN(input_shape, num_classes)


class Softmaxed(nn.Module):
    """Ends in a softmax: its last nn.Linear's output is not the model's output."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes), nn.Softmax(dim=1))

    def forward(self, x):
        return self.net(x)


def softmaxed(input_shape, num_classes):
    return Softmaxed(input_shape, num_classes)


def no_linear(input_shape, num_classes):
    """A model with no nn.Linear at all: global average pooling of a convolution."""
    return nn.Sequential(
        nn.Conv2d(input_shape[0], num_classes, kernel_size=3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    )


def not_a_module(input_shape, num_classes):
    return "a string"
