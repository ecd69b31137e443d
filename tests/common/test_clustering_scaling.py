"""The large-N paths of the clustering math agree with the small-N ones (issue 10, server scaling)."""

import numpy as np
import pytest
from scipy.linalg import subspace_angles
from scipy.spatial.distance import pdist, squareform
from sklearn.metrics import adjusted_rand_score

from common.clustering import (
    hierarchical,
    louvain,
    similarity,
    spectral,
    subspaces,
    trajectories,
)
from common.clustering.flag import (
    class_angles,
    class_weights,
    data_similarity,
    sweep_cuts,
    threshold_grid,
    weighted_class_similarity,
)
from common.clustering.hierarchical import (
    agglomerative,
    is_symmetric,
    pairwise_distances,
)
from common.clustering.similarity import (
    AUTO_SKETCH_DIM,
    CountSketch,
    auto_sketch_dim,
    cosine_matrix,
    sketch_rows,
)


def _blobs(rng, n, dim, groups, spread=0.05):
    truth = rng.permutation(np.arange(n) % groups)
    centers = rng.standard_normal((groups, dim))
    return centers[truth] + spread * rng.standard_normal((n, dim)), truth


def _loop_angles(bases, measure, one_missing=90.0, both_missing=0.0):
    n = len(bases)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            a, b = bases[i], bases[j]
            if a is None or b is None:
                value = both_missing if a is None and b is None else one_missing
            elif measure.startswith("reference"):  # the pair-by-pair definition in subspaces.py
                value = subspaces.subspace_angle(a, b, measure)
            else:
                angles = np.sort(np.degrees(subspace_angles(a, b)))
                value = {"smallest": angles[0], "sum": angles.sum(), "mean": angles.mean()}[measure]
            out[i, j] = out[j, i] = value
    return out


@pytest.mark.parametrize("measure", subspaces.MEASURES)
def test_vectorised_angles_match_scipy_pair_by_pair(measure, monkeypatch):
    rng = np.random.default_rng(0)
    bases = [rng.standard_normal((30, int(rng.integers(1, 5)))) for _ in range(25)]
    bases[4] = bases[9] = None
    bases[7] = np.column_stack([bases[6][:, 0], bases[6][:, 0]]) if bases[6] is not None else bases[7]
    bases[11] = bases[12] + 1e-7 * rng.standard_normal(bases[12].shape)
    monkeypatch.setattr(subspaces, "BLOCK_ENTRIES", 50)  # many blocks
    got = subspaces.pairwise_subspace_angles(bases, measure, one_missing=180.0, both_missing=3.0)
    np.testing.assert_allclose(got, _loop_angles(bases, measure, 180.0, 3.0), atol=1e-6)
    assert np.all(np.diag(got) == 0) and np.array_equal(got, got.T)


def test_class_similarity_one_class_at_a_time_equals_the_stacked_formula():
    rng = np.random.default_rng(1)
    n, c = 30, 6
    bases, counts = [], np.zeros((n, c))
    for i in range(n):
        held = rng.choice(c, size=int(rng.integers(1, 4)), replace=False)
        bases.append({int(k): rng.standard_normal((20, 3)) for k in held})
        counts[i, held] = rng.integers(1, 400, size=len(held))
    counts[0, next(k for k in range(c) if k not in bases[0])] = 7  # a count without a basis
    counts[1, next(iter(bases[1]))] = 0  # a basis without a count
    for cnt in (counts, None):
        for delta in (0.0, 0.5, 1.0):
            old = weighted_class_similarity(
                class_angles(bases, c), class_weights(cnt, delta, num_clients=n, num_classes=c)
            )
            np.testing.assert_allclose(data_similarity(bases, cnt, c, delta), old, rtol=1e-12, atol=1e-9)
    with pytest.raises(ValueError, match="'counts' parameter of data_similarity"):
        data_similarity(bases, counts[:3], c)
    with pytest.raises(ValueError, match="'bases' parameter of data_similarity"):
        data_similarity([{9: bases[0][next(iter(bases[0]))]}], None, c)


@pytest.mark.parametrize("linkage", hierarchical.LINKAGES)
def test_sweep_from_one_tree_equals_one_fit_per_threshold(linkage):
    rng = np.random.default_rng(2)
    for n in (1, 2, 7, 40):
        x = rng.standard_normal((n, 3))
        d = squareform(pdist(x)) / max(1e-12, squareform(pdist(x)).max() if n > 1 else 1.0)
        alphas = threshold_grid(0.05)
        old = [agglomerative(d, threshold=float(a), linkage=linkage) for a in alphas]
        for a, b in zip(sweep_cuts(d, alphas, linkage), old, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cosine"])
def test_blas_distances_match_pdist_above_the_row_limit(metric, monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((120, 40)).astype(np.float32)
    exact = pairwise_distances(x, metric)
    monkeypatch.setattr(hierarchical, "PDIST_MAX_ROWS", 50)
    assert 120 * 120 * 40 < hierarchical.PDIST_MAX_WORK
    fast = pairwise_distances(x, metric)
    np.testing.assert_allclose(fast, exact, rtol=1e-7, atol=1e-9)
    assert np.array_equal(fast, fast.T) and np.all(np.diag(fast) == 0)


def test_is_symmetric_is_allclose_band_by_band():
    rng = np.random.default_rng(4)
    m = rng.standard_normal((70, 70))
    m = m + m.T
    assert is_symmetric(m, block=8)
    m[60, 3] += 1e-3
    assert not is_symmetric(m, block=8) and not np.allclose(m, m.T)


def test_louvain_on_the_knn_graph_finds_obvious_groups(monkeypatch):
    rng = np.random.default_rng(5)
    truth = rng.permutation(np.arange(120) % 2)
    center = rng.standard_normal(20)
    x = np.where(truth[:, None] == 0, center, -center) + 0.3 * rng.standard_normal((120, 20))
    s = 1.0 + cosine_matrix(x, x)
    dense = louvain.louvain_labels(s, seed=1)
    monkeypatch.setattr(louvain, "DENSE_MAX_NODES", 50)
    assert adjusted_rand_score(truth, dense) == 1.0
    assert adjusted_rand_score(truth, louvain.louvain_labels(s, seed=1)) == 1.0
    # the dense graph of 1 + cos merges groups at cosine 0; the k-NN graph separates them
    x, truth = _blobs(rng, 160, 20, 4, spread=0.3)
    s = 1.0 + cosine_matrix(x, x)
    sparse_labels = louvain.louvain_labels(s, seed=1)
    assert adjusted_rand_score(truth, sparse_labels) == 1.0
    np.testing.assert_array_equal(sparse_labels, louvain.louvain_labels(s, seed=1))
    assert louvain.similarity_graph(s).number_of_edges() <= 160 * louvain.KNN


def test_knn_edges_are_the_symmetrised_nearest_neighbours():
    rng = np.random.default_rng(6)
    s = rng.uniform(0, 2, (12, 12))
    s = (s + s.T) / 2
    i, j = louvain.knn_edges(s, 2, block=5)
    assert np.all(i < j) and len(set(zip(i.tolist(), j.tolist(), strict=True))) == len(i)
    np.fill_diagonal(s, -np.inf)
    wanted = {(min(a, b), max(a, b)) for a in range(12) for b in np.argsort(-s[a])[:2].tolist()}
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == wanted
    for a, b in zip(louvain.knn_edges(s, 2), (i, j), strict=True):  # the block size only batches the rows
        np.testing.assert_array_equal(a, b)
    # integer similarities (distinct, so no tie decides): the diagonal is masked in a float copy
    counts = np.zeros((12, 12), dtype=np.int64)
    counts[np.triu_indices(12, 1)] = rng.permutation(66) + 1
    counts += counts.T
    for a, b in zip(louvain.knn_edges(counts, 2), louvain.knn_edges(counts.astype(float), 2), strict=True):
        np.testing.assert_array_equal(a, b)
    heads, tails = louvain.knn_edges(np.zeros((1, 1)), 3)  # one node: no edge
    assert heads.size == tails.size == 0 and heads.dtype == tails.dtype == np.int64


def test_sampled_affinity_propagation_equals_plain_ap_below_the_limit_and_places_the_rest():
    rng = np.random.default_rng(7)
    truth = rng.permutation(np.arange(120) % 3)
    points = rng.uniform(0, 5, (3, 10, 2))[truth] + 0.05 * rng.standard_normal((120, 10, 2))
    found = trajectories.cluster_trajectories(points, seed=3)
    plain = trajectories.affinity_propagation(trajectories.trajectory_distances(points), seed=3)
    np.testing.assert_array_equal(found.result.labels, plain.labels)
    np.testing.assert_array_equal(found.sample, np.arange(120))
    sampled = trajectories.cluster_trajectories(points, seed=3, max_points=40)
    assert sampled.sample.shape == (40,) and sampled.distances.shape == (40, 40)
    assert adjusted_rand_score(truth, sampled.result.labels) == 1.0
    np.testing.assert_array_equal(
        sampled.result.labels[sampled.result.exemplars], np.arange(len(sampled.result.exemplars))
    )
    np.testing.assert_array_equal(
        sampled.result.labels, trajectories.cluster_trajectories(points, seed=3, max_points=40).result.labels
    )
    with pytest.raises(ValueError, match="'max_points' parameter of cluster_trajectories"):
        trajectories.cluster_trajectories(points, max_points=0)


def test_ap_on_a_sample_finds_the_planted_groups_where_ap_on_every_point_splits_them():
    """Median-preference AP finds more clusters the more points it sees; the default sample does not."""
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 5, 1000)
    points = rng.uniform(0.0, 4.0, size=(5, 10, 2))[truth] + 0.3 * rng.standard_normal((1000, 10, 2))
    sampled = trajectories.cluster_trajectories(points, seed=0)
    assert len(sampled.sample) == trajectories.AP_MAX_POINTS < 1000
    assert adjusted_rand_score(truth, sampled.result.labels) == 1.0
    every = trajectories.cluster_trajectories(points, seed=0, max_points=None)
    assert len(every.sample) == 1000 and len(every.result.exemplars) > 8


def test_large_profile_spectral_clustering_uses_the_top_singular_values(monkeypatch):
    rng = np.random.default_rng(8)
    truth = rng.permutation(np.arange(90) % 3)
    g = (rng.standard_normal((3, 120))[truth] + 0.1 * rng.standard_normal((90, 120))).T.astype(np.float32)
    exact = np.linalg.svd(g.astype(np.float64), compute_uv=False)
    monkeypatch.setattr(spectral, "GRAM_MAX_COLUMNS", 20)
    monkeypatch.setattr(spectral, "RANDOMIZED_MIN_SIZE", 100)
    labels, features, values = spectral.spectral_clustering(g, 3, np.zeros(90, dtype=np.int64), seed=0)
    assert values.shape == (spectral.SPECTRUM_VALUES,) and features.shape == (90, 3)
    np.testing.assert_allclose(values[:3], exact[:3], rtol=1e-4)
    assert adjusted_rand_score(truth, labels) == 1.0
    np.testing.assert_allclose(spectral.singular_values(g)[:3], exact[:3], rtol=1e-4)
    assert spectral.estimate_num_clusters(g, 4, seed=0).num_clusters == 3


def test_count_sketch_is_seeded_and_keeps_cosines():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((20, 5000)).astype(np.float32)
    x[10:] += 2 * x[:10]
    sketch = CountSketch(5000, 512, seed=3)
    np.testing.assert_array_equal(sketch.project(x), CountSketch(5000, 512, seed=3).project(x))
    assert not np.allclose(sketch.project(x), CountSketch(5000, 512, seed=4).project(x))
    np.testing.assert_allclose(sketch.project(x[0]), sketch.project(x)[0], rtol=1e-6)
    assert np.max(np.abs(cosine_matrix(x, x) - cosine_matrix(sketch.project(x), sketch.project(x)))) < 0.15
    with pytest.raises(ValueError, match="'x' parameter of CountSketch.project"):
        sketch.project(x[:, :10])
    with pytest.raises(ValueError, match="'sketch_dim' parameter of CountSketch"):
        CountSketch(10, 0, seed=0)


def test_updates_are_sketched_only_when_they_would_pass_the_budget(monkeypatch):
    assert auto_sketch_dim(1000, 159_010) == 0
    assert auto_sketch_dim(10_000, 159_010) == AUTO_SKETCH_DIM
    assert auto_sketch_dim(10_000, 159_010, 256) == 256 and auto_sketch_dim(10**6, 100) == 0
    with pytest.raises(ValueError, match="'num_clients' parameter of auto_sketch_dim"):
        auto_sketch_dim(-1, 10)
    rng = np.random.default_rng(10)
    x, truth = _blobs(rng, 60, 6000, 3, spread=1.0)
    rows = [r.astype(np.float32) for r in x]
    np.testing.assert_array_equal(sketch_rows(rows, 0), np.stack(rows))
    monkeypatch.setattr("common.clustering.similarity.AUTO_SKETCH_BYTES", 1000)
    sketched = sketch_rows(rows, 0)
    assert sketched.shape == (60, AUTO_SKETCH_DIM)
    np.testing.assert_array_equal(sketch_rows(rows, 0, exact=True), np.stack(rows))
    labels = agglomerative(pairwise_distances(sketched), num_clusters=3)
    assert adjusted_rand_score(truth, labels) == 1.0
    with pytest.raises(ValueError, match="'rows' parameter of sketch_rows"):
        sketch_rows([rows[0], rows[1][:5]], 0)


def test_large_float32_cosines_skip_float64_copies_and_agree(monkeypatch):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 500)).astype(np.float32)
    a[5] = 0.0
    exact = similarity.cosine_matrix(a.astype(np.float64), a.astype(np.float64))
    monkeypatch.setattr(similarity, "FLOAT32_GRAM_ENTRIES", 10)
    fast = similarity.cosine_matrix(a, a)
    assert fast.dtype == np.float64 and np.all(fast[5] == 0.0)
    np.testing.assert_allclose(fast, exact, atol=1e-5)
    b = (rng.standard_normal((25, 500)) * rng.uniform(0.1, 10.0, size=(25, 1))).astype(np.float32)
    b[3] = 0.0
    cross = similarity.cosine_matrix(a, b)
    assert cross.shape == (40, 25) and np.all(cross[:, 3] == 0.0)
    monkeypatch.setattr(similarity, "FLOAT32_GRAM_ENTRIES", 1 << 26)
    np.testing.assert_allclose(cross, similarity.cosine_matrix(a, b), atol=1e-5)


def test_closed_form_smallest_angle_equals_the_eigensolver_path(monkeypatch):
    rng = np.random.default_rng(5)
    d = 40
    shared = np.linalg.qr(rng.standard_normal((d, 3)))[0]
    bases = [rng.standard_normal((d, int(rng.integers(1, 4)))) for _ in range(40)]
    bases[0] = bases[1] = shared  # identical: every cosine 1
    bases[2] = shared @ np.linalg.qr(rng.standard_normal((3, 3)))[0]  # same span, rotated basis
    bases[3] = np.eye(d)[:, :3]
    bases[4] = np.eye(d)[:, 3:6]  # orthogonal to bases[3]: every cosine 0
    bases[5] = np.eye(d)[:, [0, 3, 6]] @ np.diag([1.0, 1.0, 1.0])  # shares one axis with 3 and 4 each
    bases[6] = shared + 1e-6 * rng.standard_normal((d, 3))  # a tiny angle to bases[0]
    bases[7] = np.column_stack([shared[:, :2], shared[:, 0] * 0.5 + shared[:, 1]])  # rank 2 in 3 columns
    monkeypatch.setattr(subspaces, "BLOCK_ENTRIES", 200)
    fast = subspaces.pairwise_subspace_angles(bases, "smallest")
    monkeypatch.setattr(subspaces, "CLOSED_FORM_MAX_RANK", 0)
    exact = subspaces.pairwise_subspace_angles(bases, "smallest")
    np.testing.assert_allclose(fast, exact, atol=1e-5)
    np.testing.assert_allclose(fast, _loop_angles(bases, "smallest"), atol=1e-5)
    assert fast[0, 1] < 1e-5 and fast[0, 2] < 1e-5 and abs(fast[3, 4] - 90.0) < 1e-9
    assert fast[3, 5] < 1e-6 and 0 < fast[0, 6] < 1e-3
    assert np.array_equal(fast, fast.T)


@pytest.mark.parametrize("measure", subspaces.MEASURES)
def test_angles_to_references_equal_the_pairwise_matrix(measure):
    rng = np.random.default_rng(8)
    bases = [rng.standard_normal((30, int(rng.integers(1, 6)))) for _ in range(20)]
    bases[3] = np.zeros((30, 2))  # rank 0
    bases[5] = bases[6] + 1e-8 * rng.standard_normal(bases[6].shape)
    full = subspaces.pairwise_subspace_angles(bases, measure)
    got = subspaces.angles_between(bases[:14], bases[14:] + [bases[6], bases[3]], measure)
    np.testing.assert_allclose(got[:, :6], full[:14, 14:], atol=1e-5)
    np.testing.assert_allclose(got[:, 6], full[:14, 6], atol=1e-5)
    np.testing.assert_allclose(np.delete(got[:, 7], 3), np.delete(full[:14, 3], 3), atol=1e-5)  # but itself


@pytest.mark.parametrize("measure", ["mean", "reference"])
def test_sampled_subspace_clusters_are_exact_below_the_sample_size_and_place_the_rest(measure, monkeypatch):
    rng = np.random.default_rng(9)
    truth = rng.permutation(np.arange(60) % 3)
    classes = [np.linalg.qr(rng.standard_normal((40, 2)))[0] for _ in range(6)]
    bases = [
        np.column_stack(
            [
                classes[2 * g] + 0.05 * rng.standard_normal((40, 2)),
                classes[2 * g + 1] + 0.05 * rng.standard_normal((40, 2)),
            ]
        )
        for g in truth
    ]

    def cut(d):
        return agglomerative(d, num_clusters=3)

    labels, sample, matrix = subspaces.sampled_clusters(bases, measure, cut, np.random.default_rng(0))
    assert sample.tolist() == list(range(60))
    assert labels.tolist() == cut(subspaces.pairwise_subspace_angles(bases, measure)).tolist()
    monkeypatch.setattr(subspaces, "SAMPLE_SIZE", 15)
    monkeypatch.setattr(subspaces, "REFERENCES_PER_CLUSTER", 3)
    labels, sample, matrix = subspaces.sampled_clusters(bases, measure, cut, np.random.default_rng(0))
    assert len(sample) == 15 and matrix.shape == (15, 15)
    assert (
        labels[sample].tolist() == cut(subspaces.pairwise_subspace_angles([bases[i] for i in sample], measure)).tolist()
    )
    assert adjusted_rand_score(truth, labels) == 1.0
