"""CFL-GP's spectral helpers refuse bad input with the whole sentence (parameter, function, range,
value) and take the values at each bound: written for the mutation run's survivors in
``common.clustering.spectral`` (a check's name, owner or bound changed, an error's wording)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.clustering import spectral


def _message(name: str, owner: str, allowed: str, got: object) -> str:
    return "^" + re.escape(f"The '{name}' parameter of {owner} must be {allowed}. Got {got!r} instead.") + "$"


TALL = np.arange(12.0).reshape(4, 3) ** 1.5  # rank 3: min(shape) = 3
PROFILE = np.random.default_rng(0).normal(size=(6, 4))

REFUSED: list[tuple[Callable[[], Any], str]] = [
    (
        lambda: spectral.moving_average_factor(-1),
        _message("previous_updates", "moving_average_factor", "an int >= 0", -1),
    ),
    (lambda: spectral.round_robin(0, 0), _message("num_models", "round_robin", "an int >= 1", 0)),
    (lambda: spectral.round_robin(3, 3), _message("previous", "round_robin", "an int in the range [0, 2]", 3)),
    (lambda: spectral.round_robin(-1, 3), _message("previous", "round_robin", "an int in the range [0, 2]", -1)),
    (
        lambda: spectral.top_left_singular_vectors(TALL, 0),
        _message("k", "top_left_singular_vectors", "an int in the range [1, 3]", 0),
    ),
    (
        lambda: spectral.top_left_singular_vectors(TALL, 4),
        _message("k", "top_left_singular_vectors", "an int in the range [1, 3]", 4),
    ),
    (
        lambda: spectral.left_vectors_and_values(TALL, 0),
        _message("k", "left_vectors_and_values", "an int in the range [1, 3]", 0),
    ),
    (
        lambda: spectral.left_vectors_and_values(TALL, 4),
        _message("k", "left_vectors_and_values", "an int in the range [1, 3]", 4),
    ),
    (lambda: spectral.project(TALL, 0), _message("dims", "project", "an int in the range [1, 3]", 0)),
    (lambda: spectral.project(TALL, 4), _message("dims", "project", "an int in the range [1, 3]", 4)),
    (lambda: spectral.align_labels([0], [0], 0), _message("num_clusters", "align_labels", "an int >= 1", 0)),
    (
        lambda: spectral.spectral_clustering(TALL, 0, np.zeros(3, int)),
        _message("k", "spectral_clustering", "an int in the range [1, 3]", 0),
    ),
    (
        lambda: spectral.spectral_clustering(TALL, 4, np.zeros(3, int)),
        _message("k", "spectral_clustering", "an int in the range [1, 3]", 4),
    ),
    (lambda: spectral.largest_gap(np.array([3.0, 1.0]), 0), _message("max_dims", "largest_gap", "an int >= 1", 0)),
    (
        lambda: spectral.estimate_num_clusters(PROFILE, 1),
        _message("max_clusters", "estimate_num_clusters", "an int >= 2", 1),
    ),
    (
        lambda: spectral.impute_blocks(np.zeros((2, 1, 2)), np.array([[1], [0]]), np.zeros(2), rank=-1),
        _message("rank", "impute_blocks", "an int >= 0", -1),
    ),
    (
        lambda: spectral.impute_blocks(np.zeros((2, 1, 2)), np.array([[1], [0]]), np.zeros(2), rank=1, iters=-1),
        _message("iters", "impute_blocks", "an int >= 0", -1),
    ),
    (
        lambda: spectral.update_block(np.zeros(3), np.zeros(2), 0),
        "^" + re.escape("The 'new' parameter of update_block must have shape (3,). Got shape (2,) instead.") + "$",
    ),
    (
        lambda: spectral.profile_matrix(np.zeros((2, 3))),
        "^"
        + re.escape("The 'blocks' parameter of profile_matrix must be 3-D (N, K, D). Got shape (2, 3) instead.")
        + "$",
    ),
    (
        lambda: spectral.align_labels([0, 2], [0, 1], 2),
        "^" + re.escape("The 'new' parameter of align_labels must be 2 labels in [0, 2). Got [0, 2] instead.") + "$",
    ),
    (
        lambda: spectral.align_labels([0, 1], [0, -1], 2),
        "^" + re.escape("The 'old' parameter of align_labels must be 2 labels in [0, 2). Got [0, -1] instead.") + "$",
    ),
    (
        lambda: spectral.largest_gap(np.array([1.0]), 1),
        "^"
        + re.escape("The 'values' parameter of largest_gap must hold at least 2 singular values. Got 1 instead.")
        + "$",
    ),
    (
        lambda: spectral.estimate_num_clusters(PROFILE[:, :2], 2),
        "^"
        + re.escape(
            "The 'matrix' parameter of estimate_num_clusters must have at least 3 columns (clients). "
            "Got shape (6, 2) instead."
        )
        + "$",
    ),
    (
        lambda: spectral.impute_blocks(np.zeros((2, 1, 2)), np.zeros((2, 2)), np.zeros(2)),
        "^" + re.escape("The 'counts' parameter of impute_blocks must have shape (2, 1). Got (2, 2) instead.") + "$",
    ),
    (
        lambda: spectral.impute_blocks(np.zeros((2, 1, 2)), np.zeros((2, 1)), np.zeros(3)),
        "^" + re.escape("The 'labels' parameter of impute_blocks must have shape (2,). Got (3,) instead.") + "$",
    ),
]


@pytest.mark.parametrize(("call", "message"), REFUSED)
def test_spectral_helpers_refuse_the_neighbour_of_each_bound_naming_parameter_function_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_spectral_helpers_take_the_value_at_each_bound():
    """The bound itself is allowed: a check tightened by one (``low=1`` to ``low=2``) fails here."""
    assert spectral.moving_average_factor(0) == 1.0
    assert spectral.round_robin(0, 1) == 0
    assert spectral.round_robin(2, 3) == 0
    assert spectral.round_robin(0, 3) == 1
    for k in (1, 3):
        assert spectral.top_left_singular_vectors(TALL, k)[0].shape == (4, k)
        assert spectral.left_vectors_and_values(TALL, k)[0].shape == (4, k)
        assert spectral.project(TALL, k).shape == (3, k)
        assert spectral.spectral_clustering(TALL, k, np.zeros(3, int))[0].shape == (3,)
    np.testing.assert_array_equal(spectral.align_labels([0, 0], [0, 0], 1), [0, 0])
    assert spectral.largest_gap(np.array([3.0, 1.0]), 1) == 1
    assert spectral.estimate_num_clusters(PROFILE, 2).num_clusters == 2
    blocks, counts = np.ones((2, 1, 2)), np.array([[1], [0]])
    np.testing.assert_array_equal(spectral.impute_blocks(blocks * [[[1]], [[0]]], counts, np.zeros(2), rank=0), 1.0)
    np.testing.assert_array_equal(
        spectral.impute_blocks(blocks * [[[1]], [[0]]], counts, np.zeros(2), rank=1, iters=0), 1.0
    )


def test_the_randomised_svd_is_the_seeds_whatever_numpys_global_state_and_keeps_float32() -> None:
    from common.clustering.spectral import _top_svd

    g = np.random.default_rng(0).standard_normal((60, 40)).astype(np.float32)
    np.random.seed(1)
    first = _top_svd(g, 5, seed=3)
    np.random.seed(2)
    second = _top_svd(g, 5, seed=3)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    assert all(part.dtype == np.float32 for part in first), "float32 stays float32"
    u, values, vt = _top_svd(g.astype(np.float16), 5, seed=3)
    assert values.dtype == np.float64, "anything but float32 is computed in float64"
    np.testing.assert_allclose(values, np.linalg.svd(g.astype(np.float16).astype(np.float64))[1][:5], rtol=1e-4)
    assert _top_svd(g[:4], 10, seed=3)[1].shape == (3,), "at most min(shape) - 1 components"
