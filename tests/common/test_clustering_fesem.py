"""FeSEM's clustering step on hand-made points whose right answer is obvious."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering.fesem import (
    fesem_clusters,
    nearest_centres,
    seed_centres,
    squared_distances,
    update_centres,
)


def _blobs(seed: int, k: int = 3, per: int = 8, d: int = 20, spread: float = 0.3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=5.0, size=(k, d))
    truth = np.repeat(np.arange(k), per)
    return centres[truth] + rng.normal(scale=spread, size=(k * per, d)), truth, centres


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_planted_blobs_are_recovered_with_their_centres(seed):
    points, truth, centres = _blobs(seed)
    found = fesem_clusters(points, 3, np.random.default_rng(seed))
    assert adjusted_rand_score(truth, found.labels) == 1.0
    for k in range(3):  # each centre is its members' mean, near the planted one
        members = points[found.labels == k]
        assert np.allclose(found.centres[k], members.mean(axis=0))
    matched = np.argmin(squared_distances(found.centres, centres), axis=1)
    assert sorted(matched) == [0, 1, 2]
    expected = sum(((points[found.labels == k] - found.centres[k]) ** 2).sum() for k in range(3))
    assert found.inertia == pytest.approx(expected)


def test_same_generator_seed_same_clustering_and_the_seeds_come_from_it():
    points, _, _ = _blobs(5, k=4, spread=2.0)
    a = fesem_clusters(points, 4, np.random.default_rng(11))
    b = fesem_clusters(points, 4, np.random.default_rng(11))
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.centres, b.centres)
    seeds = {tuple(seed_centres(points, 4, np.random.default_rng(s))) for s in range(6)}
    assert len(seeds) > 1  # the generator, not a fixed rule, picks the seeds


def test_e_step_takes_the_l2_nearest_centre_not_the_most_aligned():
    centres = np.array([[1.0, 0.0], [10.0, 1.0]])
    # (2, 0) points along centre 0 (cosine 1) but is 1 away from it and 8.06 from centre 1: L2 picks 0;
    # (9, 0) is nearer centre 1 in L2 though aligned with centre 0.
    assert list(nearest_centres(np.array([[2.0, 0.0], [9.0, 0.0]]), centres)) == [0, 1]


def test_m_step_weights_each_member_and_keeps_an_empty_centre():
    points = np.array([[0.0, 0.0], [4.0, 0.0], [10.0, 10.0]])
    labels = np.array([0, 0, 0])
    old = np.array([[1.0, 1.0], [7.0, 7.0]])
    new = update_centres(points, labels, np.array([3.0, 1.0, 0.5]), old)
    assert new[0] == pytest.approx([(4.0 + 5.0) / 4.5, 5.0 / 4.5])
    assert np.array_equal(new[1], old[1])
    unweighted = update_centres(points[:2], labels[:2], np.ones(2), old)
    assert unweighted[0] == pytest.approx([2.0, 0.0])
    weighted = update_centres(points[:2], labels[:2], np.array([3.0, 1.0]), old)
    assert weighted[0] == pytest.approx([1.0, 0.0])


def test_kmeans_plus_plus_seeds_are_distinct_even_with_duplicate_points():
    points = np.array([[0.0, 0.0]] * 5 + [[1.0, 1.0]])
    for seed in range(5):
        chosen = seed_centres(points, 3, np.random.default_rng(seed))
        assert len(set(chosen.tolist())) == 3


def test_one_centre_is_the_weighted_mean():
    points, _, _ = _blobs(0)
    w = np.arange(1, len(points) + 1, dtype=float)
    found = fesem_clusters(points, 1, np.random.default_rng(0), w)
    assert set(found.labels) == {0} and np.allclose(found.centres[0], np.average(points, axis=0, weights=w))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"k": 0}, r"The 'k' parameter of FeSEM must be an int in the range \[1, 6\]. Got 0 instead"),
        ({"k": 7}, r"The 'k' parameter of FeSEM must be an int in the range \[1, 6\]. Got 7 instead"),
        ({"weights": np.zeros(6)}, r"The 'weights' parameter of FeSEM must be 6 positive finite numbers"),
        ({"weights": np.ones(5)}, r"The 'weights' parameter of FeSEM must be 6 positive finite numbers"),
        ({"points": np.full((6, 2), np.nan)}, r"The 'points' parameter of FeSEM must be a non-empty finite 2-D"),
    ],
)
def test_bad_input_is_an_error_naming_the_parameter(kwargs, match):
    args = {"points": np.arange(12.0).reshape(6, 2), "k": 2, "rng": np.random.default_rng(0), **kwargs}
    with pytest.raises(ValueError, match=match):
        fesem_clusters(**args)


def test_centres_of_another_width_are_refused():
    with pytest.raises(ValueError, match=r"The 'centres' parameter of nearest_centres must be a non-empty \(K, 3\)"):
        nearest_centres(np.zeros((2, 3)), np.zeros((2, 4)))


def test_fesem_clusters_stops_after_max_iter_steps_with_the_last_step_s_centres_and_labels():
    """Uniform points need several E/M steps; ``max_iter=1`` returns exactly one M-step's centres and the
    E-step after it, and counts one iteration."""
    p = np.random.default_rng(4).uniform(size=(200, 2))
    w = np.ones(len(p))
    assert 2 < fesem_clusters(p, 5, np.random.default_rng(0)).iterations < 100  # stops once no label changes
    seeds = p[seed_centres(p, 5, np.random.default_rng(0))]
    centres = update_centres(p, nearest_centres(p, seeds), w, seeds)
    one = fesem_clusters(p, 5, np.random.default_rng(0), max_iter=1)
    assert one.iterations == 1
    np.testing.assert_allclose(one.centres, centres)
    np.testing.assert_array_equal(one.labels, nearest_centres(p, centres))
