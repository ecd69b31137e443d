"""CFLGT's trajectory steps: every check names its parameter and function and refuses the bound's neighbour;
results keep their documented types on every path.

Written for the mutation run's survivors in common/clustering/trajectories.py (docs/mutation-strategies.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.clustering.trajectories import (
    affinity_propagation,
    cluster_trajectories,
    coefficient_of_variation,
    hopkins_statistic,
    nearest_exemplar,
    trajectories_from_forces,
    trajectory_distances,
)

SQUARE = np.array([[0.0, 1.0], [1.0, 0.0]])
ONE_POINT = np.zeros((3, 1, 2))
POINTS = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])


def _full(sentence: str) -> str:
    return f"^{re.escape(sentence)}$"


BAD_INPUT: list[Any] = [
    pytest.param(
        lambda: trajectories_from_forces(np.zeros((2, 3)), np.zeros((2, 4))),
        "The 'push' parameter of trajectories_from_forces must be a finite array of shape (N, C) like 'pull' (2, 3). "
        "Got shape (2, 4) instead.",
        id="push-shape",
    ),
    pytest.param(
        lambda: trajectories_from_forces(np.zeros(3), np.zeros(3)),
        "The 'pull' parameter of trajectories_from_forces must be a finite array of shape (N, C) like 'pull' (3,). "
        "Got shape (3,) instead.",
        id="pull-1d",
    ),
    *[
        pytest.param(
            lambda s=shape: cluster_trajectories(np.zeros(s)),
            "The 'trajectories' parameter of cluster_trajectories must be a finite array of shape (N, C, 2) "
            f"with C >= 1. Got shape {shape} instead.",
            id=f"trajectories-{shape}",
        )
        for shape in [(2, 3, 3), (3, 2), (2, 0, 2), (2, 2)]
    ],
    *[
        pytest.param(
            lambda a=a, b=b: trajectory_distances(a, b),
            "The '{}' parameter of trajectory_distances must be a finite array of shape (N, C, 2) with C >= 1. "
            "Got shape {} instead.".format(*bad),
            id=f"distances-{bad[0]}",
        )
        for a, b, bad in [
            (np.zeros((2, 3)), None, ("a", (2, 3))),
            (ONE_POINT, np.zeros((2, 1, 3)), ("b", (2, 1, 3))),
        ]
    ],
    pytest.param(
        lambda: trajectory_distances(np.zeros((2, 3, 2)), np.zeros((4, 5, 2))),
        "The 'b' parameter of trajectory_distances must have C = 3 points like 'a'. Got 5 instead.",
        id="distances-C",
    ),
    pytest.param(
        lambda: cluster_trajectories(ONE_POINT, max_points=0),
        "The 'max_points' parameter of cluster_trajectories must be an int >= 1. Got 0 instead.",
        id="max_points-0",
    ),
    *[
        pytest.param(
            lambda d=d: affinity_propagation(d),
            "The 'distances' parameter of affinity_propagation must be a symmetric, finite, non-negative (N, N) "
            f"array with N >= 1. Got shape {d.shape} instead.",
            id=f"distances-{why}",
        )
        for why, d in [
            ("negative", -SQUARE),
            ("empty", np.zeros((0, 0))),
            ("not-square", np.zeros((2, 3))),
            ("nan", np.array([[0.0, np.nan], [np.nan, 0.0]])),
            ("asymmetric", np.array([[0.0, 1.0], [2.0, 0.0]])),
            ("1d", np.zeros(2)),
        ]
    ],
    pytest.param(
        lambda: affinity_propagation(SQUARE, damping=math.nextafter(0.5, 0.0)),
        f"The 'damping' parameter of affinity_propagation must be a float in the range [0.5, 1.0). "
        f"Got {math.nextafter(0.5, 0.0)!r} instead.",
        id="damping-below",
    ),
    pytest.param(
        lambda: affinity_propagation(SQUARE, damping=1.0),
        "The 'damping' parameter of affinity_propagation must be a float in the range [0.5, 1.0). Got 1.0 instead.",
        id="damping-1",
    ),
    pytest.param(
        lambda: affinity_propagation(SQUARE, max_iter=0),
        "The 'max_iter' parameter of affinity_propagation must be an int >= 1. Got 0 instead.",
        id="max_iter-0",
    ),
    pytest.param(
        lambda: affinity_propagation(SQUARE, convergence_iter=0),
        "The 'convergence_iter' parameter of affinity_propagation must be an int >= 1. Got 0 instead.",
        id="convergence_iter-0",
    ),
    pytest.param(
        lambda: affinity_propagation(SQUARE, preference="high"),
        "The 'preference' parameter of affinity_propagation must be one of ('median', 'midrange', 'silhouette') "
        "or a float. "
        "Got 'high' instead.",
        id="preference-str",
    ),
    pytest.param(
        lambda: hopkins_statistic(np.zeros((1, 2))),
        "The 'points' parameter of hopkins_statistic must be a finite (N, p) array with N >= 2. "
        "Got shape (1, 2) instead.",
        id="points-1",
    ),
    *[
        pytest.param(
            lambda f=f: hopkins_statistic(POINTS, sample_fraction=f),
            f"The 'sample_fraction' parameter of hopkins_statistic must be a float in the range (0.0, 1.0]. "
            f"Got {f!r} instead.",
            id=f"sample_fraction-{f}",
        )
        for f in (0.0, math.nextafter(1.0, 2.0))
    ],
    pytest.param(
        lambda: coefficient_of_variation(np.zeros(0)),
        "The 'values' parameter of coefficient_of_variation must be a non-empty finite array. Got 0 values instead.",
        id="values-empty",
    ),
]


@pytest.mark.parametrize(("call", "sentence"), BAD_INPUT)
def test_each_check_names_its_parameter_and_function(call: Callable[[], Any], sentence: str) -> None:
    with pytest.raises(ValueError, match=_full(sentence)):
        call()


def test_each_bound_itself_is_accepted() -> None:
    assert cluster_trajectories(ONE_POINT, max_points=1).result.labels.tolist() == [0, 0, 0]
    assert cluster_trajectories(np.zeros((3, 1, 2))).sample.tolist() == [0, 1, 2]
    for kwargs in ({"damping": 0.5}, {"max_iter": 1}, {"convergence_iter": 1}):
        assert affinity_propagation(np.zeros((1, 1)), **kwargs).converged
    assert 0.0 <= hopkins_statistic(POINTS[:2], sample_fraction=1.0) <= 1.0
    assert 0.0 <= hopkins_statistic(POINTS, sample_fraction=math.nextafter(0.0, 1.0)) <= 1.0


def test_forces_stack_as_float64_points_even_from_integer_input() -> None:
    out = trajectories_from_forces(np.array([[1, 2]]), np.array([[3, 4]]))
    assert out.dtype == np.float64
    assert out.tolist() == [[[1.0, 3.0], [2.0, 4.0]]]


@pytest.mark.parametrize("n", [1, 3])
def test_identical_inputs_are_one_converged_cluster_with_int64_labels_and_the_given_damping(n: int) -> None:
    result = affinity_propagation(np.zeros((n, n)), damping=0.75)
    assert result.labels.dtype == np.int64 and result.exemplars.dtype == np.int64
    assert result.labels.tolist() == [0] * n and result.exemplars.tolist() == [0]
    assert result.preference == 0.0 and result.converged is True and result.damping == 0.75


def test_two_far_groups_are_two_converged_clusters_with_int64_labels() -> None:
    d = np.array(
        [
            [0.0, 0.1, 9.0, 9.2, 9.1],
            [0.1, 0.0, 9.0, 9.1, 9.3],
            [9.0, 9.0, 0.0, 0.2, 0.3],
            [9.2, 9.1, 0.2, 0.0, 0.25],
            [9.1, 9.3, 0.3, 0.25, 0.0],
        ]
    )
    result = affinity_propagation(d, damping=0.6)
    assert result.labels.dtype == np.int64 and result.exemplars.dtype == np.int64
    assert result.labels.tolist() == [0, 0, 1, 1, 1]
    # The median similarity: the 13th of the 25 values of -d (12 far pairs below it).
    assert result.converged is True and result.damping == 0.6 and result.preference == -0.3


def test_a_sampled_clustering_keeps_the_sample_run_s_preference_convergence_and_damping() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([[[0.0, 0.0]], [[10.0, 10.0]]])
    points = np.concatenate(
        [centres[0] + 0.01 * rng.standard_normal((6, 1, 2)), centres[1] + 0.01 * rng.standard_normal((6, 1, 2))]
    )
    found = cluster_trajectories(points, damping=0.6, max_points=5, seed=3)
    full = cluster_trajectories(points[found.sample], damping=0.6, seed=3).result
    assert len(found.sample) == 5 and found.result.labels.dtype == np.int64
    assert found.result.preference == full.preference and found.result.converged is True
    assert found.result.damping == 0.6
    assert found.result.labels[:6].tolist() == [found.result.labels[0]] * 6
    assert found.result.labels[6:].tolist() == [found.result.labels[6]] * 6 != [found.result.labels[0]] * 6


def test_nearest_exemplar_is_an_int64_index() -> None:
    labels = nearest_exemplar(np.array([[[0.0, 0.0]], [[5.0, 5.0]]]), np.array([[[4.0, 4.0]], [[0.0, 1.0]]]))
    assert labels.dtype == np.int64 and labels.tolist() == [1, 0]


def test_coefficient_of_variation_is_nan_only_at_a_zero_mean() -> None:
    assert math.isnan(coefficient_of_variation(np.array([-1.0, 1.0])))
    assert coefficient_of_variation(np.array([1.0, 1.0])) == 0.0
    assert coefficient_of_variation(np.array([1.0, 3.0])) == pytest.approx(0.5)


def test_hopkins_needs_only_two_points_and_samples_without_replacement() -> None:
    assert hopkins_statistic(POINTS[:2], sample_fraction=1.0) > 0.0
    # Every point picked once: a point picked twice would add its distance to its nearest twice.
    x = np.array([[0.0], [1.0], [3.0]])
    values = {hopkins_statistic(x, sample_fraction=1.0, seed=s) for s in range(20)}
    assert all(0.0 < v < 1.0 for v in values)


FIVE = np.array(
    [
        [0.0, 0.1, 9.0, 9.2, 9.1],
        [0.1, 0.0, 9.0, 9.1, 9.3],
        [9.0, 9.0, 0.0, 0.2, 0.3],
        [9.2, 9.1, 0.2, 0.0, 0.25],
        [9.1, 9.3, 0.3, 0.25, 0.0],
    ]
)


def test_a_run_that_never_converges_is_one_cluster_flagged_unconverged_with_its_preference() -> None:
    result = affinity_propagation(FIVE, max_iter=1, retries=())
    assert result.converged is False and result.preference == -0.3 and result.damping == 0.5
    assert result.labels.tolist() == [0] * 5 and result.exemplars.tolist() == [0]


def test_identical_inputs_are_one_cluster_whatever_the_preference() -> None:
    # AP itself would make each of equal points its own exemplar under a preference above their similarity.
    assert affinity_propagation(np.zeros((3, 3)), preference=1.0).labels.tolist() == [0, 0, 0]


def test_two_distinct_points_run_ap_and_a_degenerate_run_is_no_error() -> None:
    apart = affinity_propagation(SQUARE, preference=0.0)
    assert apart.labels.tolist() == [0, 1] and apart.converged is True
    # Similarities equal to the preference: scikit-learn warns (a UserWarning, not a ConvergenceWarning).
    tied = affinity_propagation(SQUARE, preference=-1.0)
    assert tied.labels.dtype == np.int64 and len(tied.labels) == 2


def test_cluster_trajectories_passes_its_preference_to_ap() -> None:
    points = np.array([[[0.0, 0.0]], [[0.0, 0.1]], [[9.0, 9.0]], [[9.0, 9.1]]])
    assert cluster_trajectories(points).result.labels.tolist() == [0, 0, 1, 1]
    assert cluster_trajectories(points, preference=-1000.0).result.labels.tolist() == [0, 0, 0, 0]


def test_the_sample_is_drawn_without_replacement_from_the_seed() -> None:
    points = np.arange(24, dtype=np.float64).reshape(12, 1, 2)
    first = cluster_trajectories(points, max_points=11, seed=3).sample
    assert len(np.unique(first)) == 11 and np.array_equal(first, np.sort(first))
    assert np.array_equal(cluster_trajectories(points, max_points=11, seed=3).sample, first)
    others = {tuple(cluster_trajectories(points, max_points=6, seed=s).sample.tolist()) for s in range(4)}
    assert len(others) > 1


def test_hopkins_probes_span_each_column_s_own_range() -> None:
    # An even grid in [0, 1] x [100, 101]: Hopkins near 0.5. Probes drawn over [0, 101] in both
    # columns would lie far from every point (H near 1).
    grid = np.stack(np.meshgrid(np.linspace(0, 1, 6), np.linspace(100, 101, 6)), axis=-1).reshape(-1, 2)
    assert all(hopkins_statistic(grid, sample_fraction=0.5, seed=s) < 0.8 for s in range(5))


@pytest.fixture
def ap_runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every scikit-learn AffinityPropagation that affinity_propagation builds."""
    from sklearn.cluster import AffinityPropagation

    from common.clustering import trajectories

    runs: list[dict[str, Any]] = []

    def recording(**kwargs: Any) -> AffinityPropagation:
        runs.append(kwargs)
        return AffinityPropagation(**kwargs)

    monkeypatch.setattr(trajectories, "AffinityPropagation", recording)
    return runs


def test_ap_runs_once_with_scikit_learns_iteration_defaults_and_seed_zero(ap_runs: list[dict[str, Any]]) -> None:
    assert affinity_propagation(FIVE).converged
    assert ap_runs == [
        {
            "affinity": "precomputed",
            "damping": 0.5,
            "preference": -0.3,
            "max_iter": 1000,
            "convergence_iter": 15,
            "random_state": 0,
        }
    ]


@pytest.mark.parametrize(
    ("damping", "schedule"),
    [(0.5, [(0.5, 1), (0.7, 2), (0.9, 4)]), (0.6, [(0.6, 1), (0.7, 2), (0.9, 4)]), (0.7, [(0.7, 1), (0.9, 4)])],
)
def test_ap_retries_only_at_heavier_damping_with_more_iterations(
    ap_runs: list[dict[str, Any]], damping: float, schedule: list[tuple[float, int]]
) -> None:
    """One iteration (or a few) never converges (15 stable ones are needed): every retry runs, each at a floor
    above the given damping, with twice and four times the iterations."""
    result = affinity_propagation(FIVE, damping=damping, max_iter=1, convergence_iter=15, seed=4)
    assert [(run["damping"], run["max_iter"]) for run in ap_runs] == schedule
    assert all(run["convergence_iter"] == 15 and run["random_state"] == 4 for run in ap_runs)
    assert result.converged is False and result.damping == 0.9


def test_cluster_trajectories_runs_ap_with_its_seed_and_damping(ap_runs: list[dict[str, Any]]) -> None:
    points = np.array([[[0.0, 0.0]], [[0.0, 0.1]], [[9.0, 9.0]], [[9.0, 9.1]]])
    cluster_trajectories(points, damping=0.6, seed=3)
    cluster_trajectories(points)
    assert [(run["damping"], run["random_state"]) for run in ap_runs] == [(0.6, 3), (0.5, 0)]


def test_the_default_seed_is_zero() -> None:
    points = np.arange(24, dtype=np.float64).reshape(12, 1, 2)
    assert np.array_equal(
        cluster_trajectories(points, max_points=6).sample, cluster_trajectories(points, max_points=6, seed=0).sample
    )
    assert not np.array_equal(
        cluster_trajectories(points, max_points=6, seed=1).sample, cluster_trajectories(points, max_points=6).sample
    )
    x = np.random.default_rng(7).normal(size=(20, 3))
    assert hopkins_statistic(x) == hopkins_statistic(x, seed=0) != hopkins_statistic(x, seed=1)


def test_every_entry_point_reads_an_object_array_of_numbers_as_float64() -> None:
    pull, push = np.array([[1.0, 2.0]]), np.array([[3.0, 4.0]])
    for stacked in (
        trajectories_from_forces(pull.astype(object), push),
        trajectories_from_forces(pull, push.astype(object)),
    ):
        assert stacked.dtype == np.float64 and stacked.tolist() == [[[1.0, 3.0], [2.0, 4.0]]]
    points = np.array([[[0.0, 0.0]], [[3.0, 4.0]]])
    assert trajectory_distances(points.astype(object)).tolist() == [[0.0, 5.0], [5.0, 0.0]]
    assert affinity_propagation(FIVE.astype(object)).labels.tolist() == [0, 0, 1, 1, 1]
    assert coefficient_of_variation(np.array([1.0, 3.0], dtype=object)) == 0.5
    assert hopkins_statistic(POINTS.astype(object), seed=1) == hopkins_statistic(POINTS, seed=1)


def test_hopkins_of_ten_points_at_a_tenth_draws_one_probe_and_one_point() -> None:
    x = np.array(
        [
            [0.0, 0.0],
            [1.0, 0.0],
            [0.0, 2.0],
            [4.0, 4.0],
            [5.0, 4.0],
            [4.0, 6.0],
            [9.0, 0.0],
            [9.0, 1.0],
            [0.0, 9.0],
            [1.0, 9.0],
        ]
    )
    draw = np.random.default_rng(2)
    probe = draw.uniform(x.min(axis=0), x.max(axis=0), size=(1, 2))
    picked = draw.choice(10, size=1, replace=False)
    u = np.sqrt(((x - probe) ** 2).sum(axis=1)).min()
    w = np.sort(np.sqrt(((x - x[picked]) ** 2).sum(axis=1)))[1]
    assert hopkins_statistic(x, sample_fraction=0.1, seed=2) == pytest.approx(u / (u + w), rel=1e-12)


def test_nearest_distances_in_blocks_of_one_query_cover_every_query():
    from common.clustering.trajectories import _nearest_distances

    queries = np.array([[0.0], [1.0], [2.5], [7.0], [9.0]])
    points = np.array([[0.5], [3.0], [6.0], [10.0]])
    want = np.abs(queries - points.T).min(axis=1)
    np.testing.assert_allclose(_nearest_distances(queries, points, block=4), want)
    np.testing.assert_allclose(_nearest_distances(queries, points), want)
