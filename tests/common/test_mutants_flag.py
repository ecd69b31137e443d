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
    return flag.flag_sample(bases, args.pop("counts", None), updates, num_classes, **args)


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
    (
        lambda: flag.class_weights(np.array([[1.0], [None]], dtype=object)),
        _whole(
            "The 'counts' parameter of class_weights must be a non-negative finite (N, C) array. "
            "Got shape (2, 1) with minimum nan instead."
        ),
    ),
    (
        lambda: flag.data_similarity(BASES, np.array([[1.0], [None]], dtype=object), 1),
        _whole(
            "The 'counts' parameter of data_similarity must be a non-negative finite array of shape (2, 1). "
            "Got shape (2, 1) instead."
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
        lambda: flag.weighted_class_similarity(np.zeros((1, 2, 3)), np.zeros((1, 2, 3))),
        _whole("The 'angles' parameter of weighted_class_similarity must have shape (C, N, N). Got (1, 2, 3) instead."),
    ),
    (
        lambda: flag.weighted_class_similarity(np.zeros((0, 2, 2)), np.zeros((0, 2, 2))),
        _whole("The 'angles' parameter of weighted_class_similarity must have shape (C, N, N). Got (0, 2, 2) instead."),
    ),
    (
        lambda: flag.weighted_class_similarity(np.zeros((1, 2, 2)), np.zeros((1, 3, 3))),
        _whole(
            "The 'weights' parameter of weighted_class_similarity must have shape (1, 2, 2). Got (1, 3, 3) instead."
        ),
    ),
    (
        lambda: flag.gradient_angles(np.array([[1.0, 0.0], [0.0, None]], dtype=object)),
        _whole(
            "The 'updates' parameter of gradient_angles must be a finite non-empty (N, P) array. "
            "Got shape (2, 2) instead."
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
    (
        lambda: _sample(counts=np.ones((1, 1))),
        _whole(
            "The 'counts' parameter of flag_sample must be a non-negative finite array of shape (2, 1). "
            "Got shape (1, 1) instead."
        ),
    ),
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


ORTHOGONAL = [{0: E[:, [0]]}, {0: E[:, [1]]}, {0: E[:, [2]]}]
"""Three clients holding class 0 with orthogonal bases: every angle is 90 degrees."""


@pytest.mark.parametrize(
    ("bases", "counts", "expected"),
    [
        # ln 2, ln 4, ln 16: ratios 2, 4, 2 of w_max 4 give weights 0.5 + 1/3, 1.5, 0.5 + 1/3
        (ORTHOGONAL, [[1.0], [3.0], [15.0]], [[0, 75, 135], [75, 0, 75], [135, 75, 0]]),
        # a client without a basis but with one sample: 180 x its Eq. 5 weight to a holder
        ([{0: E[:, [0]]}, {}, {0: E[:, [1]]}], [[3.0], [1.0], [15.0]], [[0, 150, 75], [150, 0, 270], [75, 270, 0]]),
    ],
)
def test_data_similarity_weighs_a_class_of_one_sample_as_held(bases, counts, expected):
    np.testing.assert_allclose(flag.data_similarity(bases, np.array(counts), 1, 0.5), expected)


def test_data_similarity_rescales_by_a_given_w_max():
    """Counts 1 and 3 (log ratio 2) with the federation's w_max 3: the middle weight 1."""
    v = flag.data_similarity(ORTHOGONAL[:2], np.array([[1.0], [3.0]]), 1, 0.5, w_max=3.0)
    np.testing.assert_allclose(v, [[0, 90], [90, 0]])


def test_class_weights_of_equal_counts_are_one():
    np.testing.assert_array_equal(flag.class_weights(np.array([[2.0], [2.0]])), np.ones((1, 2, 2)))


def test_min_max_scales_any_positive_span_and_keeps_the_shape_of_a_constant_matrix():
    np.testing.assert_array_equal(flag.min_max(np.array([[0.0, 0.5], [0.5, 0.0]])), [[0, 1], [1, 0]])
    out = flag.min_max(np.full((2, 3), 7.0))
    assert out.shape == (2, 3) and not out.any()


def test_flag_helpers_return_float64_and_int64_as_documented_for_other_input_dtypes():
    angles = np.array([[[0, 90], [90, 0]]], dtype=object)
    similarity = flag.weighted_class_similarity(angles, np.full((1, 2, 2), 2, dtype=object))
    assert similarity.dtype == np.float64
    np.testing.assert_array_equal(similarity, [[0, 180], [180, 0]])
    scaled = flag.min_max(np.array([[0, 2], [2, 0]]))
    assert scaled.dtype == np.float64
    np.testing.assert_array_equal(scaled, [[0, 1], [1, 0]])
    (labels,) = flag.sweep_cuts(np.zeros((1, 1)), [0.5])
    assert labels.dtype == np.int64 and labels.tolist() == [0]


THREE = [{0: E[:, [0]]}, {0: E[:, [1]]}, {0: E[:, [0]]}]
THREE_UPDATES = [np.array([1.0, 0.0]), np.array([1.0, 0.0]), np.array([0.0, 1.0])]
"""V and G of these disagree: V parts client 1 from 0 and 2, G parts client 2 from 0 and 1."""


def test_flag_distances_and_sample_pass_beta_and_delta_on():
    for beta in (0.0, 1.0):
        a, v, g = flag.flag_distances(THREE, None, THREE_UPDATES, 1, beta=beta, delta=0.5, seed=0)
        np.testing.assert_array_equal(a, flag.min_max(v if beta else g))
        sample = _sample(bases=THREE, updates=THREE_UPDATES, beta=beta)
        np.testing.assert_array_equal(sample.proximity, flag.min_max(sample.data if beta else sample.gradient))
    counts = np.array([[1.0], [3.0]])
    _, v, _ = flag.flag_distances(ORTHOGONAL[:2], counts, UPDATES, 1, beta=0.5, delta=0.0, seed=0)
    np.testing.assert_array_equal(v, [[0, 90], [90, 0]])
    np.testing.assert_array_equal(_sample(bases=ORTHOGONAL[:2], counts=counts, delta=0.0).data, [[0, 90], [90, 0]])


@pytest.mark.parametrize(
    ("counts", "w_max"),
    [(None, 1.0), (np.zeros((2, 1)), 1.0), (np.array([[1.0], [3.0]]), 2.0)],
)
def test_flag_sample_keeps_the_largest_log_count_ratio(counts, w_max):
    """ln 4 / ln 2 = 2; without counts, or with no class held by count, 1."""
    assert _sample(counts=counts).w_max == w_max


def test_flag_sample_of_one_client_is_that_client():
    sample = flag.flag_sample(BASES[:1], None, UPDATES[:1], 1, beta=0.5, delta=0.5, seed=0)
    assert sample.positions.tolist() == [0] and sample.proximity.shape == (1, 1)


def test_flag_proximity_is_exact_unless_sample_above_is_given():
    assert flag.flag_proximity(THREE, None, THREE_UPDATES, 1, beta=0.5, delta=0.5, seed=0)[3] is None
    assert flag.flag_proximity(THREE, None, THREE_UPDATES, 1, beta=0.5, delta=0.5, seed=0, sample_above=2)[3]


def test_sketched_updates_give_the_sample_the_exact_forms_gradient_block(monkeypatch):
    """Updates sketched to 4 coordinates (the thresholds lowered): the sample keeps the seed's sketch,
    its rows are the sketched updates, and its G is that of the exact form with the same seed."""
    from common.clustering import similarity

    monkeypatch.setattr(similarity, "AUTO_SKETCH_BYTES", 0)
    monkeypatch.setattr(similarity, "AUTO_SKETCH_DIM", 4)
    updates = list(np.random.default_rng(0).normal(size=(3, 16)))
    sample = _sample(bases=THREE, updates=updates, seed=3)
    assert sample.sketch is not None and sample.sketch.sketch_dim == 4 and sample.rows.shape == (3, 4)
    np.testing.assert_array_equal(sample.rows, sample.sketch.project_rows(updates))
    _, _, g, _ = flag.flag_proximity(THREE, None, updates, 1, beta=0.5, delta=0.5, seed=3)
    np.testing.assert_allclose(sample.gradient, g)
    assert _sample(bases=THREE, updates=updates, seed=3, size=2).rows.shape == (2, 4)
