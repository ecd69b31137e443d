"""CFLGT's trajectory math: distances, Affinity Propagation, nearest exemplar, Hopkins, CV."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering.trajectories import (
    AP_RETRIES,
    affinity_propagation,
    coefficient_of_variation,
    hopkins_statistic,
    nearest_exemplar,
    share_points,
    trajectories_from_forces,
    trajectory_distances,
    trajectory_points,
)
from tests.helpers.forces import fitted_groups


def _groups(seed=0, per_group=8, noise=0.01):
    """Three groups of 4-point trajectories around far-apart shapes."""
    rng = np.random.default_rng(seed)
    shapes = np.array(
        [[[0, 0], [1, 0], [1, 1], [0, 1]], [[5, 5], [6, 5], [6, 6], [5, 6]], [[0, 9], [3, 9], [0, 6], [3, 6]]],
        dtype=float,
    )
    truth = np.repeat(np.arange(3), per_group)
    points = shapes[truth] + rng.normal(0, noise, size=(len(truth), 4, 2))
    return points, truth


def test_distance_is_mean_pointwise_l2():
    a = np.array([[[0, 0], [0, 0]]], dtype=float)
    b = np.array([[[3, 4], [0, 1]], [[0, 0], [0, 0]]], dtype=float)
    np.testing.assert_allclose(trajectory_distances(a, b), [[(5 + 1) / 2, 0.0]])
    points, _ = _groups()
    d = trajectory_distances(points)
    np.testing.assert_allclose(d, d.T)
    np.testing.assert_allclose(np.diag(d), 0)
    perm = np.random.default_rng(1).permutation(4)
    np.testing.assert_allclose(trajectory_distances(points[:, perm]), d)


def test_distance_rejects_bad_shapes():
    with pytest.raises(ValueError, match="'a' parameter"):
        trajectory_distances(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="'b' parameter"):
        trajectory_distances(np.zeros((3, 4, 2)), np.zeros((2, 5, 2)))
    with pytest.raises(ValueError, match="'a' parameter"):
        trajectory_distances(np.full((2, 4, 2), np.nan))


def test_trajectories_from_forces_stacks_pull_and_push():
    t = trajectories_from_forces([[1, 2]], [[3, 4]])
    np.testing.assert_array_equal(t, [[[1, 3], [2, 4]]])
    with pytest.raises(ValueError, match="'push' parameter"):
        trajectories_from_forces([[1, 2]], [[3, 4, 5]])


def test_affinity_propagation_finds_obvious_groups_without_their_number():
    points, truth = _groups()
    result = affinity_propagation(trajectory_distances(points), seed=0)
    assert result.converged
    assert adjusted_rand_score(truth, result.labels) == 1.0
    assert len(result.exemplars) == 3
    assert [result.labels[e] for e in result.exemplars] == [0, 1, 2]


def test_preference_controls_the_number_of_clusters_and_median_is_sklearns():
    points, _ = _groups()
    d = trajectory_distances(points)
    assert affinity_propagation(d, preference="median").preference == pytest.approx(np.median(-d))
    assert len(affinity_propagation(d, preference=-1e6).exemplars) == 1
    assert len(affinity_propagation(d, preference=0.0).exemplars) == len(points)


def test_midrange_preference_is_halfway_between_the_least_and_the_most_similar_pair():
    d = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]])
    assert affinity_propagation(d, preference="midrange").preference == -2.5
    assert affinity_propagation(np.zeros((1, 1)), preference="midrange").preference == 0.0
    two = np.array([[0.0, 2.0], [2.0, 0.0]])  # the midrange is the one pair's similarity: a tie, one cluster
    assert affinity_propagation(two, preference="midrange").labels.tolist() == [0, 0]
    assert affinity_propagation(two, preference="median").labels.tolist() == [0, 1]


def test_midrange_keeps_two_tight_groups_of_unequal_size_that_the_median_splits():
    """Six and four clients, tight groups 1 apart: within-group pairs and the diagonal are 52 of the 100
    similarities, so their median lies among the within-group ones and AP splits the tighter groups; the
    midrange lies halfway to the other group."""
    rng = np.random.default_rng(0)
    truth = np.repeat([0, 1], [6, 4])
    points = np.where(truth[:, None, None] == 0, 0.0, 1.0) + rng.uniform(0, 0.03, size=(10, 1, 2))
    d = trajectory_distances(points)
    median = affinity_propagation(d, preference="median")
    assert len(median.exemplars) > 2
    midrange = affinity_propagation(d, preference="midrange")
    assert len(midrange.exemplars) == 2 and adjusted_rand_score(truth, midrange.labels) == 1.0


def test_silhouette_preference_keeps_the_groups_a_far_client_makes_the_midrange_merge():
    """Three groups 5-10 apart and one client about 100 away: the midrange falls to half the liar's distance
    and AP merges the groups; the preference of best silhouette keeps them, the liar a cluster of its own."""
    points, truth = _groups()
    liar = np.full((1, 4, 2), 100.0)
    d = trajectory_distances(np.concatenate([points, liar]))
    midrange = affinity_propagation(d, preference="midrange")
    assert adjusted_rand_score(truth, midrange.labels[:-1]) < 0.5
    best = affinity_propagation(d, preference="silhouette")
    assert adjusted_rand_score(truth, best.labels[:-1]) == 1.0 and len(best.exemplars) == 4
    assert best.labels[-1] not in best.labels[:-1]
    assert affinity_propagation(trajectory_distances(points), preference="silhouette").labels.tolist() == (
        affinity_propagation(trajectory_distances(points), preference=best.preference).labels.tolist()
    )


def test_silhouette_preference_is_the_grids_best_the_lower_on_a_tie_and_one_cluster_below_the_floor(monkeypatch):
    import common.clustering.trajectories as tr

    points, truth = _groups()
    d = trajectory_distances(points)
    off = -d[~np.eye(len(d), dtype=bool)]
    grid = np.linspace(off.min(), off.max(), tr.SILHOUETTE_GRID)
    scores = {3: 0.6, 4: 0.6}  # every 3- and 4-cluster run ties: the lowest preference among them wins
    monkeypatch.setattr(tr, "silhouette_score", lambda dist, labels, metric: scores.get(len(np.unique(labels)), 0.05))
    best = affinity_propagation(d, preference="silhouette")
    runs = [affinity_propagation(d, preference=float(p)) for p in grid]
    first = next(r for r in runs if len(r.exemplars) in scores)
    assert best.preference == first.preference and best.labels.tolist() == first.labels.tolist()
    scores.clear()  # nothing above AUTO_MIN_SILHOUETTE (0.1): one cluster around the medoid
    flat = affinity_propagation(d, preference="silhouette")
    assert flat.labels.tolist() == [0] * len(d) and flat.exemplars.tolist() == [int(np.argmin(d.sum(axis=1)))]
    assert flat.preference == off.min()


def test_silhouette_preference_keeps_one_cluster_for_fewer_than_three_or_identical_points():
    two = np.array([[0.0, 2.0], [2.0, 0.0]])
    assert affinity_propagation(two, preference="silhouette").labels.tolist() == [0, 0]
    assert affinity_propagation(np.zeros((5, 5)), preference="silhouette").labels.tolist() == [0] * 5
    assert affinity_propagation(np.zeros((1, 1)), preference="silhouette").exemplars.tolist() == [0]


def test_silhouette_preference_reports_an_ap_that_converged_at_no_preference_as_not_converged():
    """As the other rules do: CFLGT's warning and its ``ap-converged`` diagnostic read ``converged``."""
    d = np.array([[0.0, 1.0, 5.0], [1.0, 0.0, 5.0], [5.0, 5.0, 0.0]])
    stuck = affinity_propagation(d, preference="silhouette", max_iter=1, retries=())
    assert not stuck.converged and stuck.labels.tolist() == [0, 0, 0] and stuck.exemplars.tolist() == [0]
    assert not affinity_propagation(d, preference="midrange", max_iter=1, retries=()).converged
    assert affinity_propagation(d, preference="silhouette").converged


def test_silhouette_preference_records_the_least_similarity_for_every_one_cluster_outcome():
    """Two points: the preference AP keeps them together at, as the midrange records, not 0 (two clusters)."""
    two = np.array([[0.0, 2.0], [2.0, 0.0]])
    kept = affinity_propagation(two, preference="silhouette")
    assert kept.preference == affinity_propagation(two, preference="midrange").preference == -2.0
    assert affinity_propagation(two, preference=kept.preference).labels.tolist() == [0, 0]


def test_affinity_propagation_degenerate_and_bad_input():
    assert affinity_propagation(np.zeros((1, 1))).labels.tolist() == [0]
    assert affinity_propagation(np.zeros((4, 4))).labels.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="'damping' parameter"):
        affinity_propagation(np.zeros((2, 2)), damping=1.0)
    with pytest.raises(ValueError, match="'distances' parameter"):
        affinity_propagation(np.array([[0, 1], [2, 0]]))
    with pytest.raises(ValueError, match="'preference' parameter"):
        affinity_propagation(np.zeros((2, 2)), preference="mean")


def test_nonconvergence_gives_one_cluster():
    points, _ = _groups(noise=1.0)
    result = affinity_propagation(trajectory_distances(points), max_iter=2, convergence_iter=1)
    assert not result.converged and set(result.labels.tolist()) == {0}
    assert result.damping == AP_RETRIES[-1][0]


def _ring(groups=4, per_group=2, seed=9):
    """Groups of near-identical trajectories on a circle: AP oscillates at damping 0.5 on this one."""
    angles = np.linspace(0, 2 * np.pi, groups, endpoint=False)
    centres = np.stack([np.cos(angles), np.sin(angles)], 1)[:, None, :].repeat(3, 1)
    rng = np.random.default_rng(seed)
    return np.repeat(centres, per_group, 0) + rng.normal(scale=0.001, size=(groups * per_group, 3, 2))


def test_affinity_propagation_retries_with_heavier_damping_when_it_does_not_converge():
    d = trajectory_distances(_ring())
    # the input oscillates at 0.5 (one run, no retries), and converges at 0.7
    no_retry = affinity_propagation(d, damping=0.5, seed=9, retries=())
    assert not no_retry.converged and len(no_retry.exemplars) == 1
    result = affinity_propagation(d, damping=0.5, seed=9)
    assert result.converged and result.damping == 0.7 and len(result.exemplars) > 1
    truth = np.repeat(np.arange(4), 2)
    assert adjusted_rand_score(truth, result.labels) > 0.5
    assert affinity_propagation(d, damping=0.7, seed=9).damping == 0.7


def test_share_points_on_hand_computed_forces():
    forces = np.array([[[3.0, 0.0], [1.0, 0.0], [0.0, 0.0]], [[-1.0, 2.0], [3.0, 2.0], [0.0, 0.0]]])
    np.testing.assert_allclose(
        share_points(forces),
        [[[np.sqrt(0.75), 0.0], [0.5, 0.0], [0.0, 0.0]], [[-0.5, 0.5**0.5], [np.sqrt(0.75), 0.5**0.5], [0.0, 0.0]]],
    )


def test_share_points_ignore_the_forces_size_but_not_the_classes_that_carry_them():
    forces, truth = fitted_groups()
    assert adjusted_rand_score(truth, affinity_propagation(trajectory_distances(forces)).labels) < 0.5
    shares = trajectory_points(forces, "shares")
    assert adjusted_rand_score(truth, affinity_propagation(trajectory_distances(shares)).labels) == 1.0
    np.testing.assert_allclose(share_points(forces * 7.0), share_points(forces))
    np.testing.assert_array_equal(trajectory_points(forces, "raw"), forces)


def test_trajectory_points_rejects_an_unknown_choice_and_bad_forces():
    forces, _ = fitted_groups()
    with pytest.raises(
        ValueError, match=r"The 'points' parameter of trajectory_points must be one of .*'raw'.*Got 'l2'"
    ):
        trajectory_points(forces, "l2")
    with pytest.raises(ValueError, match=r"The 'trajectories' parameter of share_points must be a finite array"):
        share_points(np.array([[[np.nan, 0.0]]]))


def test_nearest_exemplar():
    points, _ = _groups()
    result = affinity_propagation(trajectory_distances(points))
    newcomers, new_truth = _groups(seed=5, per_group=2)
    labels = nearest_exemplar(newcomers, points[result.exemplars])
    assert adjusted_rand_score(new_truth, labels) == 1.0


def test_hopkins_is_high_for_clusters_and_near_half_for_uniform():
    points, _ = _groups(per_group=30)
    assert hopkins_statistic(points.reshape(len(points), -1), seed=0) > 0.9
    uniform = np.random.default_rng(42).uniform(size=(2000, 2))
    assert hopkins_statistic(uniform, seed=0) == pytest.approx(0.5, abs=0.08)
    assert hopkins_statistic(uniform, seed=3) == hopkins_statistic(uniform, seed=3)
    assert hopkins_statistic(np.ones((5, 2))) == 0.5
    with pytest.raises(ValueError, match="'points' parameter"):
        hopkins_statistic(np.ones((1, 2)))


def test_coefficient_of_variation():
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(0.5)
    assert np.isnan(coefficient_of_variation([0.0, 0.0]))
    with pytest.raises(ValueError, match="'values' parameter"):
        coefficient_of_variation([])


def test_hopkins_equals_its_definition_on_all_pairwise_distances():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(c, 0.3, size=(40, 4)) for c in (0.0, 3.0, 6.0)])
    x[7] = x[8]  # a repeated point: its nearest other point is at 0
    for fraction, seed in ((0.1, 0), (0.5, 1), (1.0, 2)):
        draw = np.random.default_rng(seed)
        m = max(1, round(fraction * len(x)))
        probes = draw.uniform(x.min(axis=0), x.max(axis=0), size=(m, x.shape[1]))
        picked = draw.choice(len(x), size=m, replace=False)
        u = np.sqrt(((probes[:, None] - x[None]) ** 2).sum(-1)).min(axis=1)
        d = np.sqrt(((x[picked][:, None] - x[None]) ** 2).sum(-1))
        d[np.arange(m), picked] = np.inf
        expected = u.sum() / (u.sum() + d.min(axis=1).sum())
        assert hopkins_statistic(x, sample_fraction=fraction, seed=seed) == pytest.approx(expected, rel=1e-12)


def test_hopkins_of_many_points_never_holds_the_probes_distances_to_all_of_them():
    import tracemalloc

    x = np.random.default_rng(0).normal(size=(20_000, 20))
    tracemalloc.start()
    try:
        hopkins_statistic(x, seed=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the (2,000, 20,000) float64 distances of the probes alone would be 320 MB
    assert peak < 64 * 2**20
