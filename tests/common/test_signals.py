"""Typed signals: the shared checks and the model-losses signal."""

import numpy as np
import pytest

from common.signals import SignalError, check_names, require_array
from common.signals.losses import ModelLosses


def test_require_array_accepts_matching_shape_with_free_sizes():
    arr = np.ones((3, 4), dtype=np.float32)
    assert require_array({"x": arr}, "x", (None, 4), "test") is arr


@pytest.mark.parametrize(
    "arrays, shape, message",
    [
        ({}, (3,), "'x' is missing"),
        ({"x": np.ones((2, 3), np.float32)}, (3,), r"shape \[2, 3\], expected \[3\]"),
        ({"x": np.ones(4, np.float32)}, (3,), r"shape \[4\], expected \[3\]"),
        ({"x": np.ones(3, np.int64)}, (3,), "dtype int64, expected floating"),
        ({"x": np.array([1.0, np.nan, 2.0], np.float32)}, (3,), "NaN or Inf"),
        ({"x": np.array([0.0, 1e200, 0.0])}, (3,), "'x' holds a value beyond float32's range"),
        ({"x": np.array([0.0, -1e39, 0.0])}, (3,), "'x' holds a value beyond float32's range"),
    ],
)
def test_require_array_rejects(arrays, shape, message):
    with pytest.raises(SignalError, match=message):
        require_array(arrays, "x", shape, "test")


def test_require_array_accepts_float32s_extremes_in_either_width():
    """Every signal travels as float32: its largest values pass, as float32 or float64 (an in-process reply)."""
    top = float(np.finfo(np.float32).max)
    for dtype in (np.float32, np.float64):
        arr = np.array([-top, 0.0, top], dtype)
        assert require_array({"x": arr}, "x", (3,), "test") is arr
    assert require_array({"x": np.zeros((0, 2))}, "x", (None, 2), "test").shape == (0, 2)


def test_check_names_lists_missing_and_extra():
    with pytest.raises(SignalError, match=r"missing \['a'\], unexpected \['b'\]"):
        check_names({"b": np.zeros(1)}, ["a"], "test")


def test_model_losses_round_trip_and_best():
    sig = ModelLosses.from_arrays(ModelLosses(np.array([0.7, 0.2, 0.2])).to_arrays(), num_models=3)
    assert sig.losses.dtype == np.float32 and sig.best() == 1


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"losses": np.ones(2, np.float32)}, "expected \\[3\\]"),
        ({"losses": np.array([1.0, -1.0, 0.5], np.float32)}, "negative"),
        ({"losses": np.ones(3, np.float32), "x": np.ones(1)}, "unexpected \\['x'\\]"),
    ],
)
def test_model_losses_rejects(arrays, message):
    with pytest.raises(SignalError, match=message):
        ModelLosses.from_arrays(arrays, num_models=3)
