"""FeSEM's helpers refuse bad input with the whole sentence (parameter, owner, range, value) and
take the values at each bound: written for the mutation run's survivors in ``common.clustering.fesem``
(a check's name, owner or bound changed, an error's wording)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.clustering import fesem


def _message(name: str, owner: str, allowed: str, got: object) -> str:
    return "^" + re.escape(f"The '{name}' parameter of {owner} must be {allowed}. Got {got!r} instead.") + "$"


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


POINTS = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0]])

REFUSED: list[tuple[Callable[[], Any], str]] = [
    (lambda: fesem.seed_centres(POINTS, 0, _rng()), _message("k", "seed_centres", "an int in the range [1, 3]", 0)),
    (lambda: fesem.seed_centres(POINTS, 4, _rng()), _message("k", "seed_centres", "an int in the range [1, 3]", 4)),
    (lambda: fesem.fesem_clusters(POINTS, 0, _rng()), _message("k", "FeSEM", "an int in the range [1, 3]", 0)),
    (lambda: fesem.fesem_clusters(POINTS, 4, _rng()), _message("k", "FeSEM", "an int in the range [1, 3]", 4)),
    (lambda: fesem.fesem_clusters(POINTS, 2, _rng(), max_iter=0), _message("max_iter", "FeSEM", "an int >= 1", 0)),
    (
        lambda: fesem.fesem_clusters(np.zeros((0, 2)), 1, _rng()),
        "^"
        + re.escape("The 'points' parameter of FeSEM must be a non-empty finite 2-D array. Got shape (0, 2) instead.")
        + "$",
    ),
    (
        lambda: fesem.fesem_clusters(POINTS, 2, _rng(), weights=[1.0, 0.0, 1.0]),
        "^"
        + re.escape("The 'weights' parameter of FeSEM must be 3 positive finite numbers. Got [1.0, 0.0, 1.0] instead.")
        + "$",
    ),
    (
        lambda: fesem.nearest_centres(np.zeros(3), np.zeros((1, 3))),
        "^"
        + re.escape(
            "The 'centres' parameter of nearest_centres must be a non-empty (K, 3) array for points of shape (3,). "
            "Got shape (1, 3) instead."
        )
        + "$",
    ),
    (
        lambda: fesem.nearest_centres(POINTS, np.zeros((2, 3))),
        "^"
        + re.escape(
            "The 'centres' parameter of nearest_centres must be a non-empty (K, 2) array for points of shape (3, 2). "
            "Got shape (2, 3) instead."
        )
        + "$",
    ),
]


@pytest.mark.parametrize(("call", "message"), REFUSED)
def test_fesem_refuses_the_neighbour_of_each_bound_naming_parameter_owner_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_fesem_takes_the_value_at_each_bound():
    """One centre, as many centres as points, one step: each bound itself is allowed."""
    assert len(fesem.seed_centres(POINTS, 1, _rng())) == 1
    assert sorted(fesem.seed_centres(POINTS, 3, _rng())) == [0, 1, 2]
    np.testing.assert_array_equal(fesem.fesem_clusters(POINTS, 1, _rng()).labels, [0, 0, 0])
    assert len(set(fesem.fesem_clusters(POINTS, 3, _rng()).labels.tolist())) == 3
    assert fesem.fesem_clusters(POINTS, 2, _rng(), max_iter=1).iterations == 1


def test_fesem_computes_in_float64_whatever_the_dtype_of_the_points_and_weights() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(0.0, 5.0, size=(3, 5))
    points = np.concatenate([c + rng.normal(0.0, 0.3, size=(10, 5)) for c in centres]).astype(np.float32)
    weights = rng.uniform(1.0, 3.0, size=30).astype(np.float32)
    low = fesem.fesem_clusters(points, 3, np.random.default_rng(4), weights)
    high = fesem.fesem_clusters(points.astype(np.float64), 3, np.random.default_rng(4), weights.astype(np.float64))
    np.testing.assert_array_equal(low.labels, high.labels)
    np.testing.assert_array_equal(low.centres, high.centres)
    assert low.centres.dtype == np.float64
    np.testing.assert_array_equal(
        fesem.squared_distances(points, centres.astype(np.float32)),
        fesem.squared_distances(points.astype(np.float64), centres.astype(np.float32).astype(np.float64)),
    )


def test_squared_distances_read_every_block_of_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fesem, "ROWS", 2)
    points = np.arange(15.0).reshape(5, 3)
    centres = np.array([[0.0, 1.0, 2.0], [9.0, 9.0, 9.0]])
    brute = ((points[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(fesem.squared_distances(points, centres), brute)


def test_seed_centres_weigh_by_squared_distance_however_small_the_distances() -> None:
    points = np.array([[0.0], [0.0], [0.0], [0.01]])  # squared distances sum to 1e-4: still k-means++ weights
    for seed in range(20):
        assert 3 in fesem.seed_centres(points, 2, np.random.default_rng(seed)).tolist()


def test_update_centres_is_each_clusters_weighted_mean_in_float64_and_leaves_its_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole = fesem.update_centres([[0.0], [1.0]], [0, 0], [1.0, 1.0], np.zeros((1, 1), dtype=np.int64))
    assert whole.dtype == np.float64 and whole.tolist() == [[0.5]]
    np.testing.assert_array_equal(fesem.update_centres([[4.0]], [0], [1.0], [[0.0]]), [[4.0]])
    np.testing.assert_array_equal(fesem.update_centres([[4.0], [8.0]], [0, 0], [0.25, 0.75], [[0.0]]), [[7.0]])
    centres = np.array([[0.0], [-3.0]])
    np.testing.assert_array_equal(fesem.update_centres([[2.0], [6.0]], [0, 0], [1.0, 1.0], centres), [[4.0], [-3.0]])
    np.testing.assert_array_equal(centres, [[0.0], [-3.0]])
    monkeypatch.setattr(fesem, "ROWS", 2)
    points = np.arange(5.0)[:, None]
    np.testing.assert_array_equal(fesem.update_centres(points, np.zeros(5, int), np.ones(5), [[0.0]]), [[2.0]])


def test_fesem_gives_up_after_100_steps_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    flips = iter(np.array([[0, 1], [1, 0]] * 200))
    monkeypatch.setattr(fesem, "nearest_centres", lambda points, centres: next(flips))
    assert fesem.fesem_clusters([[0.0], [1.0]], 2, _rng()).iterations == 100
