"""FLAG's math (common/clustering/flag.py) on hand-made subspaces, counts and updates."""

from __future__ import annotations

import numpy as np
import pytest

from common.clustering.flag import (
    choose_threshold,
    class_angles,
    class_weights,
    data_similarity,
    elbow,
    gradient_angles,
    min_max,
    proximity,
    sweep_cuts,
    threshold_grid,
    weighted_class_similarity,
)

E1, E2, E3 = (np.eye(3)[:, [i]] for i in range(3))
# client 0 holds classes 0 (e1) and 1 (e2); client 1 holds 0 (45 degrees from e1) and 2; client 2 holds 1 (e2)
BASES = [{0: E1, 1: E2}, {0: (E1 + E2) / np.sqrt(2), 2: E3}, {1: E2}]
# ln(n + 1): class 0 ln4 vs ln16 (ratio 2), class 1 ln2 vs ln8 (ratio 3)
COUNTS = np.array([[3, 1, 0], [15, 0, 5], [0, 7, 0]])
V_WEIGHTED = np.array([[0, 195, 90], [195, 0, 270], [90, 270, 0]], dtype=float)
V_UNIFORM = np.array([[0, 135, 60], [135, 0, 180], [60, 180, 0]], dtype=float)
UPDATES = np.array([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])
G = np.array([[0, 90, 180], [90, 0, 90], [180, 90, 0]], dtype=float)


def test_class_angles_eq3() -> None:
    angles = class_angles(BASES, 3)
    np.testing.assert_allclose(angles[0], [[0, 45, 180], [45, 0, 180], [180, 180, 0]], atol=1e-6)
    np.testing.assert_allclose(angles[1], [[0, 180, 0], [180, 0, 180], [0, 180, 0]], atol=1e-6)
    np.testing.assert_allclose(angles[2], [[0, 180, 0], [180, 0, 180], [0, 180, 0]], atol=1e-6)


def test_class_weights_eq4_eq5() -> None:
    w = class_weights(COUNTS, delta=0.5)
    # raw ratios 1 (diagonal), 2, 3 -> 0.5, 1.0, 1.5; one holder -> 1.5; no holder -> 1
    np.testing.assert_allclose(w[0], [[0.5, 1.0, 1.5], [1.0, 0.5, 1.5], [1.5, 1.5, 1.0]])
    np.testing.assert_allclose(w[1], [[0.5, 1.5, 1.5], [1.5, 1.0, 1.5], [1.5, 1.5, 0.5]])
    np.testing.assert_allclose(w[2], [[1.0, 1.5, 1.0], [1.5, 0.5, 1.5], [1.0, 1.5, 1.0]])
    narrow = class_weights(COUNTS, delta=0.2)
    assert narrow.min() == pytest.approx(0.8) and narrow.max() == pytest.approx(1.2)
    np.testing.assert_array_equal(class_weights(None, num_clients=3, num_classes=2), np.ones((2, 3, 3)))


def test_weighted_class_similarity_eq6() -> None:
    angles = class_angles(BASES, 3)
    np.testing.assert_allclose(weighted_class_similarity(angles, class_weights(COUNTS, 0.5)), V_WEIGHTED, atol=1e-6)
    uniform = class_weights(None, num_clients=3, num_classes=3)
    np.testing.assert_allclose(weighted_class_similarity(angles, uniform), V_UNIFORM, atol=1e-6)
    with pytest.raises(ValueError, match="'weights'"):
        weighted_class_similarity(angles, np.ones((3, 2, 2)))


def test_gradient_angles_eq2() -> None:
    np.testing.assert_allclose(gradient_angles(UPDATES), G, atol=1e-6)
    zero = gradient_angles(np.array([[1.0, 1.0], [0.0, 0.0]]))
    np.testing.assert_allclose(zero, [[0, 90], [90, 0]])
    with pytest.raises(ValueError, match="'updates'"):
        gradient_angles(np.array([[np.nan, 1.0]]))


def test_min_max_and_combination() -> None:
    np.testing.assert_allclose(min_max(np.array([[2.0, 4.0], [6.0, 10.0]])), [[0, 0.25], [0.5, 1]])
    np.testing.assert_array_equal(min_max(np.full((2, 2), 7.0)), np.zeros((2, 2)))
    a = proximity(V_WEIGHTED, G, beta=0.5)
    np.testing.assert_allclose(a, [[0, 11 / 18, 2 / 3], [11 / 18, 0, 3 / 4], [2 / 3, 3 / 4, 0]])


def test_beta_extremes_are_data_only_and_gradient_only() -> None:
    np.testing.assert_allclose(proximity(V_WEIGHTED, G, beta=1.0), V_WEIGHTED / 270)
    np.testing.assert_allclose(proximity(V_WEIGHTED, G, beta=0.0), G / 180)


def test_threshold_grid_and_cuts() -> None:
    np.testing.assert_allclose(threshold_grid(0.25), [1, 0.75, 0.5, 0.25])
    np.testing.assert_allclose(threshold_grid(0.3), [1, 0.7, 0.4, 0.1])
    assert len(threshold_grid(0.1)) == 10 and threshold_grid(0.1)[-1] == pytest.approx(0.1)
    np.testing.assert_allclose(threshold_grid(1.0), [1.0])
    d = np.array([[0, 0.1, 0.9, 0.9], [0.1, 0, 0.9, 0.9], [0.9, 0.9, 0, 0.1], [0.9, 0.9, 0.1, 0]])
    cuts = sweep_cuts(d, [1.0, 0.5, 0.05])
    np.testing.assert_array_equal(cuts[0], [0, 0, 0, 0])
    np.testing.assert_array_equal(cuts[1], [0, 0, 1, 1])
    np.testing.assert_array_equal(cuts[2], [0, 1, 2, 3])


def test_elbow_on_a_made_up_curve() -> None:
    k = [1, 2, 3, 5, 10, 20]
    acc = [0.5, 0.7, 0.9, 0.92, 0.93, 0.9]
    assert elbow(k, acc) == 2
    perm = [4, 0, 5, 2, 1, 3]
    assert elbow([k[i] for i in perm], [acc[i] for i in perm]) == perm.index(2)
    assert elbow([1, 4], [0.6, 0.8]) == 1
    assert elbow([1, 2, 3], [0.7, 0.7, 0.7]) == 0
    assert elbow([2, 3, 4, 5], [0.80, 0.87, 0.91, 0.96]) == 3  # still rising: no knee yet, take the end
    with pytest.raises(ValueError, match="'accuracy'"):
        elbow([1, 2], [0.5])


def test_elbow_takes_the_fewest_clusters_on_a_tied_plateau() -> None:
    # the sweep reuses a score when the sampled clients are cut alike: equal accuracies at several counts
    assert elbow([1, 2, 4, 8, 26], [0.55, 0.90, 0.90, 0.90, 0.90]) == 1
    assert elbow([1, 3, 5, 9, 26], [0.40, 0.60, 0.95, 0.95, 0.95]) == 2
    assert elbow([26, 9, 5, 3, 1], [0.95, 0.95, 0.95, 0.60, 0.40]) == 2  # order of the sweep does not matter


def test_elbow_is_not_pushed_to_the_end_by_noise_on_the_plateau() -> None:
    rng = np.random.default_rng(0)
    k = [1, 2, 3, 4, 6, 9, 14, 26]
    for _ in range(20):
        acc = [0.5, 0.7, 0.93, *(0.93 + rng.uniform(-0.004, 0.004, 5))]
        acc[-1] = max(acc) + 0.003  # the noisy far end is the best, by less than the tolerance
        assert elbow(k, acc) == 2
    # beyond the tolerance the extra clusters are worth it
    assert elbow([1, 2, 3, 4], [0.5, 0.9, 0.9, 0.97]) == 3
    assert elbow([1, 2, 3, 4], [0.5, 0.9, 0.9, 0.97], tol=0.1) == 1
    with pytest.raises(ValueError, match="'tol'"):
        elbow([1, 2, 3], [0.5, 0.6, 0.7], tol=-1)


@pytest.mark.parametrize(
    ("num_clusters", "accuracy", "name"),
    [([1, None, 3], [0.5, 0.6, 0.7], "'num_clusters'"), ([1, 2, 3], [0.5, None, 0.7], "'accuracy'")],
)
def test_elbow_refuses_a_missing_value_naming_the_sequence(num_clusters, accuracy, name) -> None:
    # None reads as NaN (not a TypeError from an object array) and is refused as not finite
    with pytest.raises(ValueError, match=rf"The {name} parameter of elbow must be .* Got shape \(3,\) instead\."):
        elbow(num_clusters, accuracy)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: proximity(V_WEIGHTED, G, beta=1.5), "'beta'"),
        (lambda: proximity(V_WEIGHTED, G, beta=-0.1), "'beta'"),
        (lambda: class_weights(COUNTS, delta=-0.1), "'delta'"),
        (lambda: class_weights(COUNTS, delta=1.2), "'delta'"),
        (lambda: threshold_grid(0.0), "'step'"),
        (lambda: threshold_grid(1.5), "'step'"),
        (lambda: class_weights(-COUNTS), "'counts'"),
        (lambda: class_angles(BASES, 2), "'bases'"),
        (lambda: class_angles([], 2), "'bases'"),
    ],
)
def test_bad_parameters_name_themselves(call, name) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_choose_threshold_takes_the_first_alpha_of_the_elbow_clustering() -> None:
    # a sweep from alpha 1 down: counts repeat where the cut does not change
    counts = [1, 2, 2, 3, 5, 5, 5, 8, 26]
    acc = [0.56, 0.80, 0.80, 0.87, 0.96, 0.96, 0.96, 0.97, 0.955]
    assert choose_threshold(counts, acc) == 4
    assert choose_threshold(counts, [None, *acc[1:]]) == 4
    assert choose_threshold([1, 2], [None, None]) is None
    with pytest.raises(ValueError, match="'accuracy'"):
        choose_threshold([1, 2], [0.5])


def test_data_similarity_is_eq3_to_eq6() -> None:
    np.testing.assert_allclose(data_similarity(BASES, COUNTS, 3, 0.5), V_WEIGHTED, atol=1e-6)
    np.testing.assert_allclose(data_similarity(BASES, None, 3), V_UNIFORM, atol=1e-6)


def test_elbow_at_zero_tol_takes_the_first_best_and_reads_a_best_last_point_as_no_knee() -> None:
    # at tol 0 the best count itself reaches the best (>=), and a last point equal to the best has no knee
    assert elbow([1, 2, 3], [0.1, 0.9, 0.5], tol=0.0) == 1
    assert elbow([1, 2, 3, 4], [0.1, 0.8, 0.85, 0.9], tol=0.0) == 3


def test_elbow_of_one_repeated_count_is_the_first_that_reaches_the_best() -> None:
    # no spread of counts: no chord to measure against (0 / 0), the plateau rule decides
    assert elbow([2, 2, 2], [0.1, 0.9, 0.5]) == 1


def test_elbow_refuses_an_empty_sweep_and_a_negative_tol_by_name() -> None:
    with pytest.raises(
        ValueError,
        match=r"The 'num_clusters' parameter of elbow must be a finite non-empty 1-D sequence\. Got shape \(0,\)",
    ):
        elbow([], [])
    with pytest.raises(ValueError, match=r"The 'tol' parameter of elbow must be a float >= 0\.0\. Got -1\.0 instead\."):
        elbow([1, 2, 3], [0.5, 0.6, 0.7], tol=-1)


def test_elbow_is_the_point_farthest_above_the_chord_of_the_normalised_curve() -> None:
    # the knee decides (the last point is below the best): both axes min-max scaled, chord first to last point
    assert elbow([12, 14, 15, 19, 20], [0.42, 0.57, 0.60, 0.70, 0.66]) == 2
    assert elbow([3, 6, 12, 14, 26, 27], [0.72, 0.56, 0.64, 0.69, 0.86, 0.58]) == 4  # the first point is not the lowest


def test_data_similarity_is_eq6_of_eq3_and_eq5_with_odd_clients_and_a_class_no_one_holds() -> None:
    rng = np.random.default_rng(8)
    classes = 5  # class 0: no client holds it
    holds = [{1, 2}, {2, 3}, {1, 4}, {3}, {1, 2, 3, 4}, {4}]
    bases = [{c: np.linalg.qr(rng.standard_normal((6, 2)))[0] for c in sorted(h)} for h in holds]
    counts = np.zeros((6, classes))
    for i, h in enumerate(holds):
        counts[i, sorted(h)] = rng.integers(1, 40, size=len(h))
    counts[0, 2] = 0  # a basis of class 2 but no sample of it
    counts[3, 4] = 9  # samples of class 4 but no basis
    for delta in (0.5, 0.2):
        want = weighted_class_similarity(class_angles(bases, classes), class_weights(counts, delta))
        np.testing.assert_allclose(data_similarity(bases, counts, classes, delta), want, atol=1e-9)
    uniform = weighted_class_similarity(class_angles(bases, classes), class_weights(None, num_clients=6, num_classes=5))
    np.testing.assert_allclose(data_similarity(bases, None, classes), uniform, atol=1e-9)
