"""The hierarchical-clustering helpers refuse bad input with the whole sentence (parameter, function,
range, value) and take the values at each bound: written for the mutation run's survivors in
``common.clustering.hierarchical`` (a check's name, owner or bound changed, an error's wording)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.clustering import hierarchical as hc


def _whole(text: str) -> str:
    return "^" + re.escape(text) + "$"


def _message(name: str, owner: str, allowed: str, got: object) -> str:
    return _whole(f"The '{name}' parameter of {owner} must be {allowed}. Got {got!r} instead.")


D2 = np.array([[0.0, 1.0], [1.0, 0.0]])
D3 = np.array([[0.0, 1.0, 9.0], [1.0, 0.0, 9.0], [9.0, 9.0, 0.0]])
LINKS = "one of {'average', 'complete', 'single', 'weighted'}"
METRICS = "one of {'cityblock', 'cosine', 'euclidean', 'sqeuclidean'}"


def _matrix_errors(owner: str, call: Callable[[np.ndarray], Any]) -> list[tuple[Callable[[], Any], str]]:
    """The three refusals of ``check_distance_matrix`` as ``owner`` words them."""
    return [
        (
            lambda: call(np.zeros((2, 3))),
            _whole(
                f"The 'distances' parameter of {owner} must be a non-empty square (N, N) array. "
                "Got shape (2, 3) instead."
            ),
        ),
        (
            lambda: call(-D2),
            _whole(
                f"The 'distances' parameter of {owner} must hold finite non-negative distances. "
                "Got a negative, NaN or Inf entry instead."
            ),
        ),
        (
            lambda: call(np.array([[0.0, 1.0], [2.0, 0.0]])),
            _whole(
                f"The 'distances' parameter of {owner} must be symmetric. "
                "Got a largest asymmetry of np.float64(1.0) instead."
            ),
        ),
    ]


REFUSED: list[tuple[Callable[[], Any], str]] = [
    (
        lambda: hc.pairwise_distances(np.zeros((0, 2))),
        _whole(
            "The 'vectors' parameter of pairwise_distances must be a non-empty 2-D array (N, D). "
            "Got shape (0, 2) instead."
        ),
    ),
    (
        lambda: hc.pairwise_distances(np.array([[np.nan, 0.0]])),
        _whole("The 'vectors' parameter of pairwise_distances must hold finite values. Got NaN or Inf instead."),
    ),
    (
        lambda: hc.pairwise_distances(np.eye(2), "manhattan"),
        _message("metric", "pairwise_distances", METRICS, "manhattan"),
    ),
    *_matrix_errors("agglomerative", lambda d: hc.agglomerative(d, num_clusters=1)),
    (
        lambda: hc.agglomerative(D2, num_clusters=1, linkage="ward"),
        _whole(
            "The 'linkage' parameter of agglomerative must be one of ('average', 'complete', 'single', 'weighted'); "
            "'ward' needs Euclidean feature vectors and cannot use precomputed distances. Got 'ward' instead."
        ),
    ),
    (
        lambda: hc.agglomerative(D2, num_clusters=1, linkage="median"),
        _message("linkage", "agglomerative", LINKS, "median"),
    ),
    (
        lambda: hc.agglomerative(D2),
        _whole(
            "The 'threshold' and 'num_clusters' parameters of agglomerative: exactly one must be given. "
            "Got threshold=None, num_clusters=None instead."
        ),
    ),
    (
        lambda: hc.agglomerative(D2, threshold=1.0, num_clusters=1),
        _whole(
            "The 'threshold' and 'num_clusters' parameters of agglomerative: exactly one must be given. "
            "Got threshold=1.0, num_clusters=1 instead."
        ),
    ),
    (
        lambda: hc.agglomerative(D2, num_clusters=0),
        _message("num_clusters", "agglomerative", "an int in the range [1, 2]", 0),
    ),
    (
        lambda: hc.agglomerative(D2, num_clusters=3),
        _message("num_clusters", "agglomerative", "an int in the range [1, 2]", 3),
    ),
    (lambda: hc.agglomerative(D2, threshold=-0.5), _message("threshold", "agglomerative", "a float >= 0.0", -0.5)),
    (
        lambda: hc.centroids(np.zeros((2, 1)), np.array([0, -1])),
        _whole(
            "The 'labels' parameter of centroids must be 2 non-negative integers. Got shape (2,), dtype int64 instead."
        ),
    ),
    (
        lambda: hc.centroids(np.zeros((2, 1)), np.array([0.0, 1.0])),
        _whole(
            "The 'labels' parameter of centroids must be 2 non-negative integers. "
            "Got shape (2,), dtype float64 instead."
        ),
    ),
    (
        lambda: hc.centroids(np.zeros((2, 1)), np.array([0, 1]), num_clusters=1),
        _message("num_clusters", "centroids", "an int >= 2", 1),
    ),
    (
        lambda: hc.centroids(np.zeros((0, 1)), np.array([], dtype=int)),
        _whole("The 'vectors' parameter of centroids must be a non-empty 2-D array (N, D). Got shape (0, 1) instead."),
    ),
    (
        lambda: hc.nearest(np.zeros((2, 2)), np.full((1, 2), np.nan)),
        _whole(
            "The 'references' parameter of nearest must be a (K, 2) array with a finite row. Got shape (1, 2) instead."
        ),
    ),
    (
        lambda: hc.nearest(np.zeros((2, 2)), np.zeros((1, 3))),
        _whole(
            "The 'references' parameter of nearest must be a (K, 2) array with a finite row. Got shape (1, 3) instead."
        ),
    ),
    (
        lambda: hc.nearest(np.zeros((2, 0)), np.zeros((1, 0))),
        _whole("The 'vectors' parameter of nearest must be a non-empty 2-D array (N, D). Got shape (2, 0) instead."),
    ),
    *_matrix_errors("auto_cut", hc.auto_cut),
    (lambda: hc.auto_cut(D3, "median"), _message("linkage", "auto_cut", LINKS, "median")),
    (lambda: hc.auto_cut(D3, max_clusters=1), _message("max_clusters", "auto_cut", "an int >= 2", 1)),
    (
        lambda: hc.most_within_tolerance([], 0.0),
        _whole("The 'candidates' parameter of most_within_tolerance must not be empty. Got [] instead."),
    ),
    (
        lambda: hc.auto_cut(D3, tolerance=1.0),
        _message("tolerance", "auto_cut", "a float in the range [0.0, 1.0)", 1.0),
    ),
    (
        lambda: hc.auto_cut(D3, tolerance=-0.01),
        _message("tolerance", "auto_cut", "a float in the range [0.0, 1.0)", -0.01),
    ),
]


@pytest.mark.parametrize(("call", "message"), REFUSED)
def test_hierarchical_helpers_refuse_bad_input_naming_parameter_function_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_hierarchical_helpers_take_the_value_at_each_bound():
    """One cluster and N clusters, threshold 0, K = labels.max() + 1, max_clusters 2 and tolerance 0
    are each allowed: a check tightened by one fails here."""
    np.testing.assert_array_equal(hc.agglomerative(D2, num_clusters=1), [0, 0])
    np.testing.assert_array_equal(hc.agglomerative(D2, num_clusters=2), [0, 1])
    np.testing.assert_array_equal(hc.agglomerative(D2, threshold=0.0), [0, 1])
    np.testing.assert_array_equal(
        hc.centroids(np.array([[1.0], [3.0]]), np.array([0, 1]), num_clusters=2), [[1.0], [3.0]]
    )
    np.testing.assert_array_equal(hc.auto_cut(D3, max_clusters=2, tolerance=0.0)[0], [0, 0, 1])
    np.testing.assert_array_equal(hc.nearest(np.array([[0.0], [5.0]]), np.array([[np.nan], [4.0]])), [1, 1])


def test_pairwise_distances_of_two_rows_is_their_distance():
    np.testing.assert_array_equal(hc.pairwise_distances(np.array([[0.0], [3.0]])), [[0.0, 3.0], [3.0, 0.0]])


def test_cityblock_distances_above_the_inner_product_switch_are_scipys():
    """Cityblock has no inner-product form: above PDIST_MAX_ROWS it must still be scipy's, exactly."""
    from scipy.spatial.distance import cdist

    x = np.random.default_rng(0).integers(0, 5, size=(hc.PDIST_MAX_ROWS + 1, 2)).astype(float)
    np.testing.assert_array_equal(hc.pairwise_distances(x, "cityblock"), cdist(x, x, "cityblock"))


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "sqeuclidean"])
def test_inner_product_distances_of_repeated_rows_are_finite_and_never_negative(metric):
    """Above PDIST_MAX_ROWS the distances come from inner products, where rounding may put a repeated
    row's distance a hair below zero: clipped at 0 (a negative entry fails check_distance_matrix, and
    its square root is NaN)."""
    rng = np.random.default_rng(1)
    x = np.repeat(rng.normal(size=(hc.PDIST_MAX_ROWS // 2 + 1, 7)) * 1e3, 2, axis=0)
    d = hc.pairwise_distances(x, metric)
    assert np.isfinite(d).all() and (d >= 0).all() and d.max() <= (2.0 if metric == "cosine" else np.inf)


def test_a_distance_matrix_is_read_as_float64_and_symmetric_to_1e_8_relative_and_1e_10_absolute():
    assert hc.check_distance_matrix(np.array([[0, 1], [1, 0]]), "x").dtype == np.float64
    assert not hc.is_symmetric(np.array([[0.0, 1.0], [1.0 + 1e-6, 0.0]]))
    assert not hc.is_symmetric(np.array([[0.0, 1e-9], [0.0, 0.0]]))
    assert hc.is_symmetric(np.array([[0.0, 1.0], [1.0 + 1e-9, 0.0]]))


def test_agglomerative_labels_are_int64_for_one_client_and_take_a_matrix_symmetric_within_tolerance():
    assert hc.agglomerative(np.zeros((1, 1)), num_clusters=1).dtype == np.int64
    near = np.array([[0.1, 1.0, 5.0], [1.0 + 1e-12, 0.1, 5.0], [5.0, 5.0, 0.1]])  # scipy's own checks would refuse it
    np.testing.assert_array_equal(hc.agglomerative(near, num_clusters=2), [0, 0, 1])


def test_nearest_refuses_references_that_are_not_2d_by_name():
    with pytest.raises(
        ValueError,
        match=_whole(
            "The 'references' parameter of nearest must be a (K, 2) array with a finite row. Got shape (2,) instead."
        ),
    ):
        hc.nearest(np.zeros((2, 2)), np.zeros(2))


def test_nearest_and_auto_cut_label_as_int64():
    assert hc.nearest(np.array([[0.0]]), np.array([[1.0]])).dtype == np.int64
    labels, silhouette = hc.auto_cut(D2)
    assert (labels.dtype, silhouette) == (np.int64, None)


def test_auto_cut_keeps_one_cluster_of_identical_clients_and_takes_a_nearly_symmetric_matrix():
    labels, silhouette = hc.auto_cut(np.zeros((3, 3)))
    np.testing.assert_array_equal(labels, [0, 0, 0])
    assert silhouette is None
    near = np.array([[0.0, 1.0, 9.0], [1.0 + 1e-12, 0.0, 9.0], [9.0, 9.0, 0.0]])
    np.testing.assert_array_equal(hc.auto_cut(near, max_clusters=2)[0], [0, 0, 1])


def test_cut_tree_cuts_at_the_threshold_unless_given_a_positive_count_which_it_caps_at_n():
    np.testing.assert_array_equal(hc.cut_tree(D3, threshold=2.0), [0, 0, 1])  # num_clusters' default: not given
    np.testing.assert_array_equal(hc.cut_tree(D3, threshold=2.0, num_clusters=1), [0, 0, 0])
    np.testing.assert_array_equal(hc.cut_tree(np.zeros((1, 1)), threshold=0.0, num_clusters=3), [0])


def test_linkage_tree_defaults_to_average_linkage():
    np.testing.assert_array_equal(hc.linkage_tree(D3), hc.linkage_tree(D3, "average"))


EQUIDISTANT = np.ones((4, 4)) - np.eye(4)
THREE_PAIRS = np.array(
    [
        [0.0, 0.1, 5.0, 5.0, 5.0, 5.0],
        [0.1, 0.0, 5.0, 5.0, 5.0, 5.0],
        [5.0, 5.0, 0.0, 0.1, 5.0, 5.0],
        [5.0, 5.0, 0.1, 0.0, 5.0, 5.0],
        [5.0, 5.0, 5.0, 5.0, 0.0, 0.1],
        [5.0, 5.0, 5.0, 5.0, 0.1, 0.0],
    ]
)


def _two_pairs(inside: float) -> np.ndarray:
    """Points 0, 1 and 2, 3 ``inside`` apart, 10 across."""
    return np.array(
        [[0.0, inside, 10.0, 10.0], [inside, 0.0, 10.0, 10.0], [10.0, 10.0, 0.0, inside], [10.0, 10.0, inside, 0.0]]
    )


def test_auto_cut_keeps_equidistant_clients_together():
    """No cut of a tree whose merges all tie has two clusters below N: nothing is scored."""
    for n in (3, 4):
        labels, silhouette = hc.auto_cut(EQUIDISTANT[:n, :n])
        np.testing.assert_array_equal(labels, np.zeros(n))
        assert silhouette is None


def test_auto_cut_finds_equidistant_groups_that_no_two_cluster_cut_separates():
    """Three tight pairs at one distance: the tree has no two-cluster cut (the top merges tie), so K = 2 is
    skipped and K = 3 taken; each point is 0.1 from its own pair and 5 from the others, silhouette 0.98."""
    labels, silhouette = hc.auto_cut(THREE_PAIRS)
    np.testing.assert_array_equal(labels, [0, 0, 1, 1, 2, 2])
    assert silhouette == pytest.approx(0.98)


def test_auto_cut_keeps_one_cluster_at_a_best_silhouette_of_exactly_the_minimum():
    """Pairs 9 apart inside: each point scores (10 - 9) / 10 = 0.1, not above the minimum; 8 inside scores 0.2."""
    assert hc.AUTO_MIN_SILHOUETTE == 0.1
    labels, silhouette = hc.auto_cut(_two_pairs(9.0))
    np.testing.assert_array_equal(labels, [0, 0, 0, 0])
    assert silhouette is None
    labels, silhouette = hc.auto_cut(_two_pairs(8.0))
    np.testing.assert_array_equal(labels, [0, 0, 1, 1])
    assert silhouette == pytest.approx(0.2)


def test_centroids_default_to_one_row_per_label_up_to_the_largest():
    c = hc.centroids(np.array([[1.0], [3.0], [5.0]]), np.array([1, 0, 1]))
    np.testing.assert_array_equal(c, [[3.0], [3.0]])


def test_nearest_reads_references_of_any_numeric_array_as_float64():
    x = np.array([[0.0], [5.0]])
    for references in (np.array([[0], [4]]), np.array([[0.0], [4.0]], dtype=object)):
        np.testing.assert_array_equal(hc.nearest(x, references), [0, 1])


@pytest.mark.parametrize("distances", [np.array(1.0), np.zeros(3)])
def test_cut_tree_refuses_distances_that_are_not_a_matrix_by_name(distances):
    shape = distances.shape
    with pytest.raises(
        ValueError,
        match=_whole(
            f"The 'distances' parameter of agglomerative must be a non-empty square (N, N) array. Got shape {shape} "
            "instead."
        ),
    ):
        hc.cut_tree(distances, threshold=1.0, num_clusters=2)
