"""CFL-GP's math on hand-made profiles: moving average, round robin, spectral clustering,
label alignment, the singular-value gap rule and K estimation, compression, start state."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import compression, kmodels, spectral


def _profiles(groups: list[int], dim: int = 50, noise: float = 0.05, seed: int = 0) -> np.ndarray:
    """G of shape (dim, N): one random direction per group plus small noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(groups) + 1, dim))
    return (centres[groups] + noise * rng.normal(size=(len(groups), dim))).T


def test_moving_average_is_the_cumulative_mean_and_the_papers_beta_under_round_robin():
    num_models, period = 3, 2
    rng = np.random.default_rng(0)
    block = {k: np.zeros(4, np.float32) for k in range(num_models)}
    seen = {k: [] for k in range(num_models)}
    previous = num_models - 1
    for u in range(10):
        k = spectral.round_robin(previous, num_models)
        previous = k
        t = 1 + u * period
        beta = spectral.moving_average_factor(len(seen[k]))
        assert beta == pytest.approx(1.0 / (t // (num_models * period) + 1))
        new = rng.normal(size=4).astype(np.float32)
        block[k] = spectral.update_block(block[k], new, len(seen[k]))
        seen[k].append(new)
    for k in range(num_models):
        np.testing.assert_allclose(block[k], np.mean(seen[k], axis=0), rtol=1e-5, atol=1e-6)


def test_round_robin_advances_through_every_model_and_wraps():
    order, previous = [], 3
    for _ in range(9):
        previous = spectral.round_robin(previous, 4)
        order.append(previous)
    assert order == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert spectral.round_robin(0, 1) == 0
    with pytest.raises(ValueError, match="'previous'"):
        spectral.round_robin(4, 4)


def test_update_block_rejects_another_shape():
    with pytest.raises(ValueError, match="'new'"):
        spectral.update_block(np.zeros(3), np.zeros(4), 0)


def test_spectral_clustering_recovers_obvious_groups():
    groups = [0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    labels, features, values = spectral.spectral_clustering(_profiles(groups), 3, np.zeros(10, int), seed=1)
    assert adjusted_rand_score(groups, labels) == 1.0
    assert features.shape == (10, 3)
    np.testing.assert_allclose(values, np.linalg.svd(_profiles(groups), compute_uv=False))


def test_alignment_keeps_labels_stable_when_the_partition_is_unchanged():
    groups = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    previous = np.array([2, 2, 2, 0, 0, 0, 1, 1, 1, 1])
    for seed in range(4):
        labels, _, _ = spectral.spectral_clustering(_profiles(list(groups)), 3, previous, seed=seed)
        np.testing.assert_array_equal(labels, previous)


def test_align_labels_maximises_agreement():
    old = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    new = np.array([1, 1, 2, 2, 2, 0, 0, 0])
    aligned = spectral.align_labels(new, old, 3)
    assert (aligned == old).sum() == 7
    assert adjusted_rand_score(new, aligned) == 1.0
    with pytest.raises(ValueError, match="'old'"):
        spectral.align_labels(new, old + 1, 3)


@pytest.mark.parametrize("path", ["gram", "randomised", "exact"])
def test_singular_values_and_vectors_match_the_exact_svd_on_every_path(monkeypatch, path):
    g = _profiles([0, 1, 2, 0, 1, 2, 3, 3], dim=300)
    exact_u, exact_s, _ = np.linalg.svd(g, full_matrices=False)
    np.testing.assert_allclose(spectral.singular_values(g), exact_s, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(spectral.singular_values(g.T), exact_s, rtol=1e-8, atol=1e-8)
    if path != "gram":
        monkeypatch.setattr(spectral, "GRAM_MAX_COLUMNS", 1)
    if path == "randomised":
        monkeypatch.setattr(spectral, "RANDOMIZED_MIN_SIZE", 10)
    u, s = spectral.top_left_singular_vectors(g, 3, seed=0)
    np.testing.assert_allclose(s, exact_s[:3], rtol=1e-6)
    np.testing.assert_allclose(np.abs(u.T @ exact_u[:, :3]), np.eye(3), atol=1e-6)
    features = spectral.project(g, 3, seed=0)
    np.testing.assert_allclose(np.abs(features), np.abs((exact_u[:, :3].T @ g).T), rtol=1e-6, atol=1e-8)


def test_largest_gap_on_a_made_up_spectrum():
    assert spectral.largest_gap(np.array([10.0, 9.0, 8.5, 8.0, 1.0, 0.9, 0.5]), 6) == 4
    assert spectral.largest_gap(np.array([10.0, 9.0, 8.5, 8.0, 1.0, 0.9, 0.5]), 3) == 1
    with pytest.raises(ValueError, match="'values'"):
        spectral.largest_gap(np.array([1.0]), 3)


@pytest.mark.parametrize("num_groups", [2, 4, 5])
def test_estimate_num_clusters_finds_the_groups(num_groups):
    groups = [g for g in range(num_groups) for _ in range(6)]
    estimate = spectral.estimate_num_clusters(_profiles(groups, dim=80), 8, seed=0)
    assert estimate.num_clusters == num_groups
    assert estimate.gap_dims == num_groups - 1  # K groups span K - 1 directions around their mean
    assert estimate.dims == 8
    assert set(estimate.silhouettes) == set(range(2, 9))
    assert adjusted_rand_score(groups, estimate.labels) == 1.0


@pytest.mark.parametrize("num_groups", [2, 3, 5])
def test_estimate_num_clusters_sees_past_a_direction_every_client_shares(num_groups):
    # real profiles: every client's gradient on one model points much the same way
    groups = [g for g in range(num_groups) for _ in range(6)]
    rng = np.random.default_rng(1)
    shared = 8.0 * rng.normal(size=(80, 1))
    g = _profiles(groups, dim=80) + shared
    assert spectral.largest_gap(spectral.singular_values(g), 8) == 1  # uncentred, the shared one stands out
    for projection in spectral.PROJECTIONS:  # App. G's s is the one the shared direction would take
        estimate = spectral.estimate_num_clusters(g, 8, seed=0, projection=projection)
        assert (estimate.num_clusters, estimate.gap_dims) == (num_groups, num_groups - 1), projection
        assert adjusted_rand_score(groups, estimate.labels) == 1.0, projection


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimate_num_clusters_keeps_the_groups_a_far_group_hides_from_the_largest_gap(seed):
    """Five groups, one eight times further out than the others (an early profile's shape): the largest gap
    of the centred spectrum comes after its one direction, and App. G's s = 1 merges the other four; the
    max-clusters leading directions keep all five."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(5), 5)
    centres = rng.normal(size=(5, 80))
    centres[0] *= 8.0
    g = (centres[groups] + 0.05 * rng.normal(size=(len(groups), 80))).T
    paper = spectral.estimate_num_clusters(g, 8, seed=0, projection=spectral.LARGEST_GAP)
    assert (paper.gap_dims, paper.dims, paper.num_clusters) == (1, 1, 2)
    default = spectral.estimate_num_clusters(g, 8, seed=0)
    assert (default.gap_dims, default.dims, default.num_clusters) == (1, 8, 5)
    assert adjusted_rand_score(groups, default.labels) == 1.0


def test_estimate_num_clusters_projects_on_no_more_directions_than_the_profile_has():
    g = _profiles([0, 0, 1, 1, 2, 2, 3, 3, 4, 4], dim=3)
    assert spectral.estimate_num_clusters(g, 8, seed=0).dims == 3
    assert spectral.estimate_num_clusters(_profiles([0, 0, 1, 1, 2, 2], dim=40), 8, seed=0).dims == 5


def test_estimate_num_clusters_refuses_an_unknown_projection():
    with pytest.raises(
        ValueError, match=r"The 'projection' parameter of estimate_num_clusters must be one of .*Got 'gap'"
    ):
        spectral.estimate_num_clusters(_profiles([0, 0, 1, 1]), 3, projection="gap")


@pytest.mark.parametrize("count", [0, 1, 2])
def test_estimate_num_clusters_refuses_fewer_than_3_clients_scored(count):
    """k-means fits the scored clients and a silhouette needs k < their number: 2 leave no k to score."""
    with pytest.raises(
        ValueError,
        match=rf"The 'scored' parameter of estimate_num_clusters must hold at least 3 client positions\. Got {count}",
    ):
        spectral.estimate_num_clusters(_profiles([0, 0, 1, 1, 2]), 3, scored=np.arange(count))


def _masked(seed: int, fraction: float):
    """Blocks (N, K, D) of 4 groups on 4 models around a shared block each; ``fraction`` of them answered."""
    rng = np.random.default_rng(0)
    truth = np.repeat(np.arange(4), 8)
    centres, shared = rng.normal(size=(4, 4, 30)), 3 * rng.normal(size=(4, 30))
    blocks = np.stack([shared + centres[:, g] + 0.1 * rng.normal(size=(4, 30)) for g in truth])
    r = np.random.default_rng(seed)
    counts = (r.random((len(truth), 4)) < fraction).astype(np.int64)
    counts[np.arange(len(truth)), r.integers(0, 4, len(truth))] = 1
    return blocks * counts[:, :, None], counts, truth, r.integers(0, 4, len(truth))


@pytest.mark.parametrize("fraction", [0.5, 0.3])
def test_unanswered_blocks_are_imputed_not_left_at_zero(fraction):
    scores = {"zero": [], "mean": [], "completed": []}
    for seed in range(6):
        blocks, counts, truth, previous = _masked(seed, fraction)
        for name, b in (
            ("zero", blocks),
            ("mean", spectral.impute_blocks(blocks, counts, previous)),
            ("completed", spectral.impute_blocks(blocks, counts, previous, rank=4)),
        ):
            labels, _, _ = spectral.spectral_clustering(spectral.profile_matrix(b), 4, previous, seed)
            scores[name].append(adjusted_rand_score(truth, labels))
    assert np.mean(scores["zero"]) < 0.2
    assert np.mean(scores["completed"]) > 0.8 and np.mean(scores["completed"]) > np.mean(scores["mean"])


def test_impute_blocks_keeps_answered_blocks_and_uses_the_cluster_mean():
    blocks = np.zeros((4, 2, 3))
    blocks[0, 1], blocks[1, 1], blocks[2, 1] = 1.0, 3.0, 10.0
    blocks[:, 0] = np.arange(4)[:, None]
    counts = np.array([[1, 1], [1, 1], [1, 1], [1, 0]])
    out = spectral.impute_blocks(blocks, counts, np.array([0, 0, 1, 0]))
    np.testing.assert_array_equal(out[:3], blocks[:3])
    np.testing.assert_array_equal(out[3, 0], blocks[3, 0])
    np.testing.assert_array_equal(out[3, 1], [2.0, 2.0, 2.0])  # the mean of cluster 0's answers, not 0 or 14 / 3
    with pytest.raises(ValueError, match="'counts'"):
        spectral.impute_blocks(blocks, counts[:2], np.zeros(4))


def test_estimate_num_clusters_checks_its_input():
    with pytest.raises(ValueError, match="'max_clusters'"):
        spectral.estimate_num_clusters(np.ones((5, 6)), 1)
    with pytest.raises(ValueError, match="'matrix'"):
        spectral.estimate_num_clusters(np.ones((5, 2)), 4)


def test_profile_matrix_stacks_each_clients_blocks_in_a_column():
    blocks = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    g = spectral.profile_matrix(blocks)
    assert g.shape == (12, 2)
    np.testing.assert_array_equal(g[:, 1], blocks[1].ravel())


def test_coordinate_subset_is_seeded_sorted_and_distinct():
    a = compression.coordinate_subset(1000, 10, 7)
    np.testing.assert_array_equal(a, compression.coordinate_subset(1000, 10, 7))
    assert len(set(a)) == 10 and np.all(np.diff(a) > 0) and a.max() < 1000
    for seed in range(5):  # nearly every coordinate: a draw with replacement would repeat some
        assert len(set(compression.coordinate_subset(20, 19, seed).tolist())) == 19
    assert not np.array_equal(a, compression.coordinate_subset(1000, 10, 8))
    np.testing.assert_array_equal(compression.coordinate_subset(5, 5, 3), np.arange(5))
    assert compression.compressed_size(159010, 100.0) == 1591
    assert compression.compressed_size(10, 1.0) == 10
    assert compression.compressed_size(10, 20.0) == 1, "never below one coordinate, and not above"
    with pytest.raises(ValueError, match="'ratio'"):
        compression.compressed_size(10, 0.5)
    assert compression.block_seed(0, 1) == compression.block_seed(0, 1) != compression.block_seed(0, 2)


def test_random_partition_is_balanced_and_seeded():
    pids = list(range(10))
    a = kmodels.random_partition(pids, 3, np.random.default_rng(0))
    assert a == kmodels.random_partition(pids, 3, np.random.default_rng(0))
    assert sorted(np.bincount(list(a.values()))) == [3, 3, 4]
    assert a != kmodels.random_partition(pids, 3, np.random.default_rng(1))


def test_redraw_like_keeps_shapes_and_constants_and_draws_the_rest():
    rng = np.random.default_rng(0)
    arrays = {
        "w": rng.uniform(-0.1, 0.1, (20, 5)).astype(np.float32),
        "b": np.zeros(5, np.float32),
        "bn": np.ones(4, np.float32),
        "one": np.array([0.5], np.float32),
        "n": np.array([3]),
    }
    out = kmodels.redraw_like(arrays, np.random.default_rng(1))
    assert {k: (v.shape, v.dtype) for k, v in out.items()} == {k: (v.shape, v.dtype) for k, v in arrays.items()}
    for kept in ("b", "bn", "n"):
        np.testing.assert_array_equal(out[kept], arrays[kept])
    assert not np.allclose(out["w"], arrays["w"]) and np.abs(out["w"]).max() <= np.abs(arrays["w"]).max()
    assert out["one"][0] != 0.5 and abs(out["one"][0]) <= 0.5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hard_impute_equals_the_rank_r_formula_band_by_band(monkeypatch, dtype):
    """Each iteration sets the missing blocks to those of u u^T G (u: top-r left singular vectors)."""
    rng = np.random.default_rng(5)
    blocks = rng.standard_normal((9, 3, 7)).astype(dtype)
    counts = (rng.random((9, 3)) > 0.4).astype(np.int64)
    counts[:, 0] = 1  # every client answered block 0, so the cluster means come from real answers
    labels = np.arange(9) % 2
    start = spectral.impute_blocks(blocks, counts, labels, rank=0)
    expected = start.astype(np.float64)
    missing = counts == 0
    for _ in range(3):
        g = expected.reshape(9, -1).T
        u = np.linalg.svd(g, full_matrices=False)[0][:, :2]
        low = (u @ (u.T @ g)).T.reshape(expected.shape)
        expected[missing] = low[missing]
        expected = expected.astype(dtype).astype(np.float64)  # stored at the blocks' precision
    monkeypatch.setattr(spectral, "IMPUTE_BAND", 2)
    got = spectral.impute_blocks(blocks, counts, labels, rank=2, iters=3)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got[~missing], blocks[~missing])


def test_left_projection_in_bands_equals_the_product():
    rng = np.random.default_rng(6)
    u, g = rng.standard_normal((50, 3)), rng.standard_normal((50, 8)).astype(np.float32)
    np.testing.assert_allclose(spectral._left_project(u, g, band=7), u.T @ g.astype(np.float64), rtol=1e-12)


def test_overwrite_blocks_fills_the_callers_array_with_the_same_result():
    rng = np.random.default_rng(7)
    blocks = rng.standard_normal((8, 2, 5)).astype(np.float32)
    counts = np.ones((8, 2), dtype=np.int64)
    counts[::3, 1] = 0
    labels = np.arange(8) % 2
    copied = spectral.impute_blocks(blocks, counts, labels, rank=2)
    assert np.all(blocks[::3, 1] != copied[::3, 1])  # the input is untouched by default
    mine = blocks.copy()
    assert spectral.impute_blocks(mine, counts, labels, rank=2, overwrite_blocks=True) is mine
    np.testing.assert_array_equal(mine, copied)


def test_impute_blocks_fills_a_cluster_without_answers_from_every_answered_client():
    """Block 0: cluster 0 answered by client 0, cluster 1 by nobody, cluster 2 by client 4. Client 1 gets its
    cluster's mean; clients 2 and 3 the mean over all answered clients; answered blocks stay."""
    blocks = np.zeros((5, 1, 2))
    blocks[0, 0], blocks[4, 0] = (1.0, 2.0), (3.0, 6.0)
    counts = np.array([[1], [0], [0], [0], [1]])
    out = spectral.impute_blocks(blocks, counts, np.array([0, 0, 1, 1, 2]))
    np.testing.assert_array_equal(out[:, 0], [[1.0, 2.0], [1.0, 2.0], [2.0, 4.0], [2.0, 4.0], [3.0, 6.0]])
    assert not blocks[1:4].any()  # a copy


def test_estimate_num_clusters_scores_k_up_to_one_below_the_number_of_clients():
    """Four clients in two pairs, ``max_clusters=8``: k runs 2..3 (a silhouette needs k <= N - 1)."""
    rng = np.random.default_rng(0)
    g = np.repeat(rng.normal(size=(30, 2)), [2, 2], axis=1) + 0.01 * rng.normal(size=(30, 4))
    estimate = spectral.estimate_num_clusters(g, 8)
    assert sorted(estimate.silhouettes) == [2, 3]
    assert estimate.num_clusters == 2
    assert adjusted_rand_score([0, 0, 1, 1], estimate.labels) == 1.0
    assert set(spectral.estimate_num_clusters(g[:, 1:], 8).silhouettes) == {2}  # 3 clients are enough


def test_the_estimates_gap_searches_k_max_plus_one_values_of_a_profile_too_large_for_its_gram_matrix(monkeypatch):
    """20 groups of 4 clients span 19 centred directions: the largest gap comes after 19, beyond the
    ``SPECTRUM_VALUES`` (16) a large profile's spectrum keeps by default."""
    rng = np.random.default_rng(0)
    g = np.repeat(rng.normal(scale=10.0, size=(60, 20)), 4, axis=1) + rng.normal(scale=0.01, size=(60, 80))
    exact = spectral.estimate_num_clusters(g, 20, projection=spectral.LARGEST_GAP)
    monkeypatch.setattr(spectral, "GRAM_MAX_COLUMNS", 10)
    monkeypatch.setattr(spectral, "RANDOMIZED_MIN_SIZE", 100)
    large = spectral.estimate_num_clusters(g, 20, projection=spectral.LARGEST_GAP)
    assert exact.gap_dims == large.gap_dims == large.dims == 19
    assert len(large.singular_values) == 21 and large.num_clusters == 20


def test_kmeans_on_rows_fits_those_rows_and_places_every_other_by_the_nearest_fitted_mean(monkeypatch):
    """Rows 0-3 fit (two pairs, means 0.1 and 10.0); row 4 (4.5) joins the nearer mean, {0, 1}, though its
    nearest fitted row is row 2 (8.0); row 5 (30.0), which k-means on all six rows would keep alone, joins
    {2, 3}."""
    x = np.array([[0.0], [0.2], [8.0], [12.0], [4.5], [30.0]])
    fitted: list[int] = []
    real = spectral.KMeans.fit_predict
    monkeypatch.setattr(spectral.KMeans, "fit_predict", lambda self, f: fitted.append(len(f)) or real(self, f))
    labels = spectral.kmeans_labels(x, 2, seed=0, rows=np.arange(4))
    assert fitted == [4]
    assert labels[0] == labels[1] == labels[4] != labels[2] == labels[3] == labels[5]
    assert labels.dtype == np.int64 and labels.shape == (6,)
    everything = spectral.kmeans_labels(x, 2, seed=0)
    assert everything[5] != everything[2]


def test_blocks_within_is_the_budget_over_one_blocks_bytes_for_every_client_at_least_one():
    assert compression.blocks_within(10, 100, budget=10 * 100 * 4 * 3 + 399) == 3
    assert compression.blocks_within(10, 100, budget=1) == 1
    assert compression.blocks_within(1000, 9939) == compression.PROFILE_BUDGET_BYTES // (1000 * 9939 * 4) == 13


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: compression.blocks_within(0, 5), r"'num_clients' parameter of blocks_within must be an int >= 1"),
        (lambda: compression.blocks_within(5, 0), r"'size' parameter of blocks_within must be an int >= 1"),
        (lambda: compression.compressed_size(0, 2.0), r"'dim' parameter of compressed_size must be an int >= 1\."),
        (lambda: compression.compressed_size(10, 0.5), r"'ratio' parameter of compressed_size must be a float >= 1\.0"),
        (lambda: compression.coordinate_subset(0, 1, 0), r"'dim' parameter of coordinate_subset must be an int >= 1\."),
        (
            lambda: compression.coordinate_subset(5, 6, 0),
            r"'size' parameter of coordinate_subset must be an int in the range \[1, 5\]\. Got 6",
        ),
        (
            lambda: compression.coordinate_subset(5, 0, 0),
            r"'size' parameter of coordinate_subset must be an int in the range \[1, 5\]\. Got 0",
        ),
        (lambda: compression.coordinate_subset(5, 2, -1), r"'seed' parameter of coordinate_subset must be an int >= 0"),
        (lambda: compression.block_seed(-1, 0), r"'run_seed' parameter of block_seed must be an int >= 0\. Got -1"),
        (lambda: compression.block_seed(0, -1), r"'block' parameter of block_seed must be an int >= 0\. Got -1"),
    ],
)
def test_compression_helpers_refuse_bad_input_naming_the_parameter_the_function_and_the_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_left_singular_vectors_of_an_integer_tall_matrix_are_those_of_its_floats():
    ints = np.array([[2, 1], [1, 3], [0, 1], [4, 0], [1, 1]])
    for k in (1, 2):
        got = spectral.top_left_singular_vectors(ints, k)[0]
        want = spectral.top_left_singular_vectors(ints.astype(np.float64), k)[0]
        assert np.abs(got).sum() > 0, "integer input must not give zero vectors"
        np.testing.assert_allclose(np.abs(got), np.abs(want), atol=1e-12)
        u, _, _ = np.linalg.svd(ints.astype(np.float64), full_matrices=False)
        np.testing.assert_allclose(np.abs(got), np.abs(u[:, :k]), atol=1e-10)
