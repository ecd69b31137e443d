"""FLAG's helpers refuse bad input with the whole sentence (parameter, function, range, value) and
take the values at each bound: written for the mutation run's survivors in
``common.clustering.flag`` (a check's name, owner or bound changed, an error's wording)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.clustering import flag


def _whole(text: str) -> str:
    return "^" + re.escape(text) + "$"


def _message(name: str, owner: str, allowed: str, got: object) -> str:
    return _whole(f"The '{name}' parameter of {owner} must be {allowed}. Got {got!r} instead.")


E = np.eye(3)
BASES = [{0: E[:, :1]}, {0: E[:, 1:2]}]
D2 = np.array([[0.0, 1.0], [1.0, 0.0]])
D3 = np.ones((3, 3)) - np.eye(3)
UPDATES = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]


def _sample(**kw: Any) -> flag.FlagSample:
    args: dict[str, Any] = {"beta": 0.5, "delta": 0.5, "seed": 0, **kw}
    bases, updates, num_classes = args.pop("bases", BASES), args.pop("updates", UPDATES), args.pop("num_classes", 1)
    return flag.flag_sample(bases, None, updates, num_classes, **args)


REFUSED: list[tuple[Callable[[], Any], str]] = [
    (lambda: flag.class_angles(BASES, 0), _message("num_classes", "class_angles", "an int >= 1", 0)),
    (
        lambda: flag.class_angles([], 1),
        _whole(
            "The 'bases' parameter of class_angles must hold one mapping per client. Got an empty sequence instead."
        ),
    ),
    (
        lambda: flag.class_angles([{2: E[:, :1]}], 2),
        _whole("The 'bases' parameter of class_angles must only hold classes in [0, 2). Got classes [2] instead."),
    ),
    (
        lambda: flag.class_weights(None, delta=-0.1, num_clients=1, num_classes=1),
        _message("delta", "class_weights", "a float in the range [0.0, 1.0]", -0.1),
    ),
    (
        lambda: flag.class_weights(None, delta=1.1, num_clients=1, num_classes=1),
        _message("delta", "class_weights", "a float in the range [0.0, 1.0]", 1.1),
    ),
    (
        lambda: flag.class_weights(None, eps=0.0, num_clients=1, num_classes=1),
        _message("eps", "class_weights", "a float > 0.0", 0.0),
    ),
    (
        lambda: flag.class_weights(None, num_clients=0, num_classes=1),
        _message("num_clients", "class_weights", "an int >= 1", 0),
    ),
    (
        lambda: flag.class_weights(None, num_clients=1, num_classes=0),
        _message("num_classes", "class_weights", "an int >= 1", 0),
    ),
    (
        lambda: flag.class_weights(np.array([[-1.0]])),
        _whole(
            "The 'counts' parameter of class_weights must be a non-negative finite (N, C) array. "
            "Got shape (1, 1) with minimum -1.0 instead."
        ),
    ),
    (
        lambda: flag.class_weights(np.zeros((0, 2))),
        _whole(
            "The 'counts' parameter of class_weights must be a non-negative finite (N, C) array. "
            "Got shape (0, 2) with minimum None instead."
        ),
    ),
    (lambda: flag.data_similarity(BASES, None, 0), _message("num_classes", "data_similarity", "an int >= 1", 0)),
    (
        lambda: flag.data_similarity(BASES, None, 1, 1.5),
        _message("delta", "data_similarity", "a float in the range [0.0, 1.0]", 1.5),
    ),
    (
        lambda: flag.data_similarity(BASES, np.ones((1, 1)), 1),
        _whole(
            "The 'counts' parameter of data_similarity must be a non-negative finite array of shape (2, 1). "
            "Got shape (1, 1) instead."
        ),
    ),
    (
        lambda: flag.data_similarity(BASES, np.array([[1.0], [-1.0]]), 1),
        _whole(
            "The 'counts' parameter of data_similarity must be a non-negative finite array of shape (2, 1). "
            "Got shape (2, 1) instead."
        ),
    ),
    (
        lambda: flag.weighted_class_similarity(np.zeros((2, 2)), np.zeros((2, 2))),
        _whole("The 'angles' parameter of weighted_class_similarity must have shape (C, N, N). Got (2, 2) instead."),
    ),
    (
        lambda: flag.weighted_class_similarity(np.zeros((1, 2, 2)), np.zeros((1, 3, 3))),
        _whole(
            "The 'weights' parameter of weighted_class_similarity must have shape (1, 2, 2). Got (1, 3, 3) instead."
        ),
    ),
    (
        lambda: flag.gradient_angles(np.zeros((0, 2))),
        _whole(
            "The 'updates' parameter of gradient_angles must be a finite non-empty (N, P) array. "
            "Got shape (0, 2) instead."
        ),
    ),
    (
        lambda: flag.min_max(np.array([])),
        _whole("The 'matrix' parameter of min_max must be a finite non-empty array. Got shape (0,) instead."),
    ),
    (
        lambda: flag.proximity(D2, D2, beta=1.5),
        _message("beta", "proximity", "a float in the range [0.0, 1.0]", 1.5),
    ),
    (
        lambda: flag.proximity(D2, D2, beta=-0.5),
        _message("beta", "proximity", "a float in the range [0.0, 1.0]", -0.5),
    ),
    (
        lambda: flag.proximity(-D2, D2),
        _whole(
            "The 'data' parameter of proximity must hold finite non-negative distances. "
            "Got a negative, NaN or Inf entry instead."
        ),
    ),
    (
        lambda: flag.proximity(D2, -D2),
        _whole(
            "The 'gradient' parameter of proximity must hold finite non-negative distances. "
            "Got a negative, NaN or Inf entry instead."
        ),
    ),
    (
        lambda: flag.proximity(D2, D3),
        _whole("The 'gradient' parameter of proximity must have shape (2, 2). Got (3, 3) instead."),
    ),
    (lambda: _sample(num_classes=0), _message("num_classes", "flag_sample", "an int >= 1", 0)),
    (lambda: _sample(size=1), _message("size", "flag_sample", "an int >= 2", 1)),
    (
        lambda: _sample(updates=UPDATES[:1]),
        _whole("The 'updates' parameter of flag_sample must hold one update per client (2). Got 1 instead."),
    ),
    (
        lambda: _sample(bases=[]),
        _whole("The 'bases' parameter of flag_sample must hold one mapping per client. Got an empty sequence instead."),
    ),
    (
        lambda: flag.threshold_grid(0.0),
        _message("step", "threshold_grid", "a float in the range (0.0, 1.0]", 0.0),
    ),
    (
        lambda: flag.threshold_grid(1.5),
        _message("step", "threshold_grid", "a float in the range (0.0, 1.0]", 1.5),
    ),
    (lambda: flag.sweep_cuts(D2, [-0.1]), _message("alphas", "sweep_cuts", "a float >= 0.0", -0.1)),
    (
        lambda: flag.sweep_cuts(D2, [0.5], "median"),
        _message("linkage", "sweep_cuts", "one of {'average', 'complete', 'single', 'weighted'}", "median"),
    ),
    (
        lambda: flag.sweep_cuts(np.zeros((2, 3)), [0.5]),
        _whole(
            "The 'distances' parameter of sweep_cuts must be a non-empty square (N, N) array. Got shape (2, 3) instead."
        ),
    ),
    (lambda: flag.elbow([1, 2], [0.5, 0.6], tol=-0.1), _message("tol", "elbow", "a float >= 0.0", -0.1)),
    (
        lambda: flag.elbow([], []),
        _whole(
            "The 'num_clusters' parameter of elbow must be a finite non-empty 1-D sequence. Got shape (0,) instead."
        ),
    ),
    (
        lambda: flag.elbow([1, 2], [0.5]),
        _whole("The 'accuracy' parameter of elbow must be 2 finite values. Got shape (1,) instead."),
    ),
    (
        lambda: flag.choose_threshold([1, 2], [0.5]),
        _whole("The 'accuracy' parameter of choose_threshold must have 2 entries. Got 1 instead."),
    ),
]


@pytest.mark.parametrize(("call", "message"), REFUSED)
def test_flag_helpers_refuse_bad_input_naming_parameter_function_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_flag_helpers_take_the_value_at_each_bound():
    """One class and one client, delta and beta at 0 and 1, the smallest positive eps, a sample of 2,
    a step of 1, a threshold of 0, tol 0: each bound itself is allowed."""
    assert flag.class_angles(BASES, 1).shape == (1, 2, 2)
    for delta in (0.0, 1.0):
        np.testing.assert_array_equal(flag.class_weights(None, delta=delta, num_clients=1, num_classes=1), [[[1.0]]])
        assert flag.data_similarity(BASES, None, 1, delta).shape == (2, 2)
    assert flag.class_weights(np.ones((2, 1)), eps=1e-12).shape == (1, 2, 2)
    for beta in (0.0, 1.0):
        assert flag.proximity(D2, D2, beta=beta).shape == (2, 2)
    assert len(_sample(size=2).positions) == 2
    np.testing.assert_array_equal(flag.threshold_grid(1.0), [1.0])
    np.testing.assert_array_equal(flag.sweep_cuts(D2, [0.0])[0], [0, 1])
    assert flag.elbow([1, 2], [0.5, 0.6], tol=0.0) == 1
