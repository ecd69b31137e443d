"""CFL-GP's spectral helpers refuse bad input with the whole sentence (parameter, function, range,
value) and take the values at each bound: written for the mutation run's survivors in
``common.clustering.spectral`` (a check's name, owner or bound changed, an error's wording)."""

from __future__ import annotations

import re
import warnings
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


@pytest.fixture
def randomised(monkeypatch):
    """Every SVD of more than 10 entries randomised, every ``G`` "large": the seed (and the power
    iterations or restarts) each draw gets."""
    drawn: dict[str, list] = {"svd": [], "kmeans": []}
    svd, kmeans = spectral.randomized_svd, spectral.KMeans

    def spy_svd(*args, **kwargs):
        drawn["svd"].append((kwargs["random_state"], kwargs.get("n_iter")))
        return svd(*args, **kwargs)

    def spy_kmeans(*args, **kwargs):
        drawn["kmeans"].append((kwargs.get("random_state"), kwargs.get("n_init")))
        return kmeans(*args, **kwargs)

    monkeypatch.setattr(spectral, "GRAM_MAX_COLUMNS", 1)
    monkeypatch.setattr(spectral, "RANDOMIZED_MIN_SIZE", 10)
    monkeypatch.setattr(spectral, "randomized_svd", spy_svd)
    monkeypatch.setattr(spectral, "KMeans", spy_kmeans)
    return drawn


WIDE = np.random.default_rng(1).normal(size=(8, 12))
BLOCKS = WIDE.T.reshape(12, 2, 4).copy()
COUNTS = np.ones((12, 2), dtype=np.int64)
COUNTS[[1, 5], 0] = 0
GROUPS = np.arange(12) % 2


@pytest.mark.parametrize(
    ("call", "svd_seed", "kmeans_seed"),
    [
        (lambda: spectral.singular_values(WIDE), 0, None),
        (lambda: spectral.singular_values(WIDE, 3), 3, None),
        (lambda: spectral.top_left_singular_vectors(WIDE, 2), 0, None),
        (lambda: spectral.top_left_singular_vectors(WIDE, 2, 3), 3, None),
        (lambda: spectral.left_vectors_and_values(WIDE, 2), 0, None),
        (lambda: spectral.left_vectors_and_values(WIDE, 2, 3), 3, None),
        (lambda: spectral.project(WIDE, 2), 0, None),
        (lambda: spectral.project(WIDE, 2, 3), 3, None),
        (lambda: spectral.kmeans_labels(WIDE.T, 2), None, 0),
        (lambda: spectral.kmeans_labels(WIDE.T, 2, 3), None, 3),
        (lambda: spectral.spectral_clustering(WIDE, 2, GROUPS), 0, 0),
        (lambda: spectral.spectral_clustering(WIDE, 2, GROUPS, 3), 3, 3),
        (lambda: spectral.estimate_num_clusters(WIDE, 3), 0, 0),
        (lambda: spectral.estimate_num_clusters(WIDE, 3, 3), 3, 3),
        (lambda: spectral.impute_blocks(BLOCKS, COUNTS, GROUPS, rank=2, iters=2), 0, None),
        (lambda: spectral.impute_blocks(BLOCKS, COUNTS, GROUPS, rank=2, iters=2, seed=3), 3, None),
        (lambda: spectral.completed_profile(BLOCKS, COUNTS, GROUPS), 0, None),
        (lambda: spectral.completed_profile(BLOCKS, COUNTS, GROUPS, 3), 3, None),
    ],
)
def test_every_randomised_step_draws_from_the_seed_given_or_zero(randomised, call, svd_seed, kmeans_seed):
    call()
    assert set(randomised["svd"]) == ({(svd_seed, 7)} if svd_seed is not None else set())
    assert set(randomised["kmeans"]) == ({(kmeans_seed, 10)} if kmeans_seed is not None else set())


def test_cflgp_clusters_imputes_with_the_impute_seed_and_clusters_with_the_seed(randomised):
    spectral.cflgp_clusters(BLOCKS, COUNTS, GROUPS, impute_seed=3, seed=5)
    assert randomised["svd"] == [(3, 7)] * spectral.IMPUTE_ITERS + [(5, 7)]
    assert randomised["kmeans"] == [(5, 10)]


@pytest.mark.parametrize(
    ("shape", "k", "min_size", "randomised_svd"),
    [((6, 10), 2, 59, True), ((6, 10), 3, 59, False), ((6, 10), 2, 60, False)],
)
def test_top_left_singular_vectors_randomise_only_above_the_size_and_below_half_the_rank(
    monkeypatch, shape, k, min_size, randomised_svd
):
    calls = []
    svd = spectral.randomized_svd
    monkeypatch.setattr(spectral, "RANDOMIZED_MIN_SIZE", min_size)
    monkeypatch.setattr(spectral, "randomized_svd", lambda *a, **kw: calls.append(k) or svd(*a, **kw))
    u, s = spectral.top_left_singular_vectors(np.random.default_rng(0).normal(size=shape), k)
    assert (u.shape, s.shape, bool(calls)) == ((shape[0], k), (k,), randomised_svd)


@pytest.mark.parametrize(("shape", "count"), [((3, 7), 3), ((4, 5), 4), ((4, 6), 3)])
def test_singular_values_are_all_of_them_in_float64_unless_both_sides_and_the_size_are_large(monkeypatch, shape, count):
    monkeypatch.setattr(spectral, "GRAM_MAX_COLUMNS", 3)
    monkeypatch.setattr(spectral, "RANDOMIZED_MIN_SIZE", 20)
    g = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    values = spectral.singular_values(g)
    assert (values.shape, values.dtype) == ((count,), np.float64)
    np.testing.assert_allclose(values, np.linalg.svd(g.astype(np.float64))[1][:count], rtol=1e-5)


def test_spectral_clustering_of_a_wide_profile_gives_its_min_rows_n_singular_values():
    assert spectral.spectral_clustering(WIDE[:3, :5], 2, np.arange(5) % 2)[2].shape == (3,)


def test_singular_values_of_a_rank_one_profile_are_zero_not_nan():
    g = np.outer([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(spectral.singular_values(g), [np.sqrt(30.0 * 15.0), 0, 0, 0], atol=1e-7)


def test_left_singular_vectors_are_unit_below_a_singular_value_of_one_and_zero_at_zero():
    g = np.zeros((4, 3))
    g[0, 0], g[1, 1] = 0.5, 0.25
    u, s = spectral.top_left_singular_vectors(g, 3)
    np.testing.assert_array_equal(s, [0.5, 0.25, 0.0])
    np.testing.assert_array_equal(np.abs(u), [[1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]])
    rng = np.random.default_rng(0)
    for _ in range(4):  # float32 rank 3 of 4: the Gram matrix rounds its zero eigenvalue either way
        a = rng.normal(size=(50, 3)).astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            u, s = spectral.top_left_singular_vectors(np.c_[a, a @ np.array([1, 2, 3], np.float32)], 4)
        np.testing.assert_array_equal(u[:, s == 0], 0.0)
    assert s[3] == 0.0


def test_align_labels_takes_float_labels_and_returns_int64():
    aligned = spectral.align_labels(np.array([1.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0]), 2)
    assert aligned.dtype == np.int64
    np.testing.assert_array_equal(aligned, [0, 0, 1])


def test_spectral_features_are_each_clients_coordinates_on_the_singular_vectors(monkeypatch):
    g = np.zeros((4, 3))
    g[0, 0], g[1, 1] = 3.0, 1.0
    labels, features, values = spectral.spectral_clustering(g, 2, np.array([0, 1, 1]))
    np.testing.assert_array_equal(labels, [0, 1, 1])
    np.testing.assert_allclose(np.abs(features), [[3, 0], [0, 1], [0, 0]], atol=1e-12)
    one, _, _ = spectral.spectral_clustering(g, 1, np.zeros(3, dtype=np.int64))
    assert one.dtype == np.int64
    np.testing.assert_array_equal(one, 0)
    monkeypatch.setattr(spectral, "GRAM_MAX_COLUMNS", 1)
    monkeypatch.setattr(spectral, "RANDOMIZED_MIN_SIZE", 1)
    labels, features, values = spectral.spectral_clustering(g, 2, np.array([0, 1, 1]))
    np.testing.assert_array_equal(labels, [0, 1, 1])
    np.testing.assert_allclose(np.abs(features), [[3, 0], [0, 1], [0, 0]], atol=1e-6)


SQUARE = np.array([[-1, -1, 1, 1, -1, -1, 1, 1], [-1, -1, 1, 1, 1, 1, -1, -1], [0] * 8], dtype=np.float64)
"""Two clients at each corner of a square, A A B B C C D D (A and B opposite)."""


def test_estimate_num_clusters_fits_and_scores_only_the_clients_given():
    estimate = spectral.estimate_num_clusters(SQUARE, 7, scored=np.arange(4))
    # A A B B: k = 3 finds two distinct clusters, and k = 4 would leave no point a neighbour of its own cluster
    assert estimate.silhouettes == {2: 1.0}
    assert (estimate.num_clusters, estimate.gap_dims) == (2, 2)
    np.testing.assert_allclose(estimate.singular_values, [np.sqrt(8), np.sqrt(8), 0], atol=1e-12)
    assert estimate.labels[0] == estimate.labels[1] != estimate.labels[2] == estimate.labels[3]


@pytest.mark.parametrize(("peak", "found", "searched"), [(3, 3, 13), (12, 12, 22), (13, 2, 12)])
def test_estimate_num_clusters_stops_after_patience_ks_without_a_better_silhouette(monkeypatch, peak, found, searched):
    """Silhouette 0.5 at k = 2, 0.1 after it, 0.9 at ``peak``: a peak 10 k after the last best is not reached."""
    assert spectral.ESTIMATE_PATIENCE == 10
    g = np.random.default_rng(0).normal(size=(50, 60))
    scores = {2: 0.5, peak: 0.9}
    monkeypatch.setattr(spectral, "silhouette_score", lambda f, labels: scores.get(len(np.unique(labels)), 0.1))
    estimate = spectral.estimate_num_clusters(g, 40)
    assert estimate.num_clusters == found and len(np.unique(estimate.labels)) == found
    assert max(estimate.silhouettes) == searched


def test_estimate_num_clusters_breaks_ties_towards_fewer(monkeypatch):
    monkeypatch.setattr(spectral, "silhouette_score", lambda features, labels: 0.5)
    estimate = spectral.estimate_num_clusters(SQUARE, 7)
    assert sorted(estimate.silhouettes) == [2, 3, 4]  # four distinct corners: k > 4 finds fewer clusters
    assert estimate.num_clusters == 2


def test_estimate_num_clusters_of_integers_is_that_of_the_same_floats():
    g = np.random.default_rng(0).integers(0, 10, size=(4, 7))
    ints, floats = spectral.estimate_num_clusters(g, 3), spectral.estimate_num_clusters(g.astype(float), 3)
    np.testing.assert_allclose(ints.singular_values, floats.singular_values, rtol=1e-12)
    assert ints.silhouettes == pytest.approx(floats.silhouettes)


def test_largest_gap_looks_at_most_at_every_gap_there_is():
    assert spectral.largest_gap(np.array([3.0, 2.0, 0.0]), 5) == 2


@pytest.mark.parametrize(("shape", "counts"), [((3, 1, 2), [[1], [1], [0]]), ((3, 2, 1), [[1, 1], [1, 1], [0, 1]])])
def test_impute_blocks_at_full_rank_keep_the_cluster_means(shape, counts):
    blocks = np.random.default_rng(0).normal(size=shape)
    blocks[2, 0] = 0.0
    out = spectral.impute_blocks(blocks, np.array(counts), np.zeros(3, dtype=np.int64), rank=5)
    np.testing.assert_allclose(out[2, 0], blocks[:2, 0].mean(axis=0), atol=1e-12)
    np.testing.assert_array_equal(out[:2], blocks[:2])


def test_impute_blocks_with_no_block_answered_return_them_as_given():
    blocks = np.random.default_rng(0).normal(size=(3, 1, 2))
    np.testing.assert_array_equal(spectral.impute_blocks(blocks, np.zeros((3, 1)), np.zeros(3), rank=1), blocks)


def test_completed_profile_fills_every_unanswered_block_whatever_the_other_counts():
    blocks = np.array([[[1.0, 2.0]], [[0.0, 0.0]]])
    np.testing.assert_allclose(
        spectral.completed_profile(blocks, np.array([[2], [0]]), np.zeros(2)), [[1, 1], [2, 2]], atol=1e-12
    )


@pytest.mark.parametrize(
    "step",
    [
        lambda b, overwrite: spectral.completed_profile(b, COUNTS, GROUPS, **overwrite),
        lambda b, overwrite: spectral.cflgp_clusters(b, COUNTS, GROUPS, impute_seed=0, seed=0, **overwrite),
    ],
)
def test_the_blocks_are_filled_in_place_only_when_asked(step):
    blocks = BLOCKS.copy()
    step(blocks, {})
    np.testing.assert_array_equal(blocks, BLOCKS)
    step(blocks, {"overwrite_blocks": True})
    assert not np.array_equal(blocks[[1, 5], 0], BLOCKS[[1, 5], 0])
    np.testing.assert_array_equal(blocks[COUNTS > 0], BLOCKS[COUNTS > 0])


def test_kmeans_labels_and_update_block_keep_their_documented_dtypes():
    assert spectral.kmeans_labels(np.array([[0.0], [0.1], [5.0]]), 2).dtype == np.int64
    assert spectral.update_block(np.zeros(2), np.ones(2), 0).dtype == np.float32


def test_left_vectors_of_a_zero_singular_value_are_finite_whatever_fresh_memory_holds():
    # freed NaN buffers of the scale's size: numpy hands them out again, so a scale left
    # unwritten (np.divide's where= without out=) shows as NaN instead of a lucky 0
    rng = np.random.default_rng(0)
    for cols, rank, k in ((6, 2, 4), (9, 3, 5), (12, 2, 7)):
        g = rng.normal(size=(40, rank)) @ rng.normal(size=(rank, cols))
        g[:, rank:] = 0.0
        for _ in range(3):
            poison = [np.full(k, np.nan) for _ in range(8)]
            del poison
            u, s = spectral.left_vectors_and_values(g, k)
            assert np.isfinite(u).all() and np.isfinite(s).all()
            np.testing.assert_allclose(s[rank:], 0.0, atol=1e-6)
