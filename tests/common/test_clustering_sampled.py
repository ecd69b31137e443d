"""The sampled-and-assign server steps (common.clustering.sampled) against the exact steps."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import sampled
from common.clustering.bipartition import mean_update_ratio, sattler_bipartition, update_norms
from common.clustering.oneshot import Cut, fedclust_clusters, flhc_clusters
from common.clustering.sampled import (
    GRAPH_SAMPLE_SIZE,
    SAMPLE_ABOVE,
    sample_rows,
    sampled_flic,
    sattler_split,
    use_sample,
)
from common.clustering.similarity import UpdateSimilarity
from common.clustering.subspaces import SAMPLE_SIZE
from common.params import run_config_keys

N = SAMPLE_SIZE + 500  # the smallest federation where a sample leaves clients to assign


def planted(n: int, groups: int, dim: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Balanced shuffled labels and rows: a Gaussian centre per group plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.arange(n) % groups)
    centres = rng.standard_normal((groups, dim))
    return truth, (centres[truth] + noise * rng.standard_normal((n, dim))).astype(np.float32)


def test_use_sample_threshold():
    assert not use_sample(SAMPLE_ABOVE, SAMPLE_ABOVE)
    assert use_sample(SAMPLE_ABOVE + 1, SAMPLE_ABOVE)
    assert not use_sample(10**6, 0)  # 0: exact at every size


def test_sample_rows_seeded_distinct_sorted():
    a, b = sample_rows(N, np.random.default_rng(3)), sample_rows(N, np.random.default_rng(3))
    assert np.array_equal(a, b) and len(a) == SAMPLE_SIZE == len(np.unique(a))
    assert np.all(np.diff(a) > 0)
    assert not np.array_equal(a, sample_rows(N, np.random.default_rng(4)))
    assert np.array_equal(sample_rows(5, np.random.default_rng(0)), np.arange(5))


@pytest.mark.parametrize("cut", [Cut(threshold=0.0, num_clusters=4), Cut(threshold=0.0)])
def test_fedclust_sampled_matches_exact(cut):
    truth, x = planted(N, 4, 12, 0.3)
    exact = fedclust_clusters(x, cut, sample_above=0)
    got = fedclust_clusters(x, cut, sample_above=N - 1, seed=1)
    assert exact.distances is not None and exact.distances.shape == (N, N)
    assert got.distances is None  # no N x N matrix
    a_exact, a_got = adjusted_rand_score(truth, exact.labels), adjusted_rand_score(truth, got.labels)
    assert a_exact > 0.99 and abs(a_got - a_exact) <= 0.01
    assert (got.silhouette is None) == (exact.silhouette is None)


def test_fedclust_threshold_honoured():
    _, x = planted(N, 3, 6, 0.3)
    assert fedclust_clusters(x, Cut(0.0, 3), sample_above=N).distances is not None  # N <= threshold: exact
    assert fedclust_clusters(x, Cut(0.0, 3), sample_above=N - 1).distances is None


def test_sampled_assignment_follows_the_rows():
    """A client outside the sample joins its own group, not the one at its position in the sample."""
    truth, x = planted(N, 5, 8, 0.2, seed=2)
    labels, sample, distances = sampled.sampled_cut(
        x, lambda d: fedclust_cut(d, 5), np.random.default_rng(0), metric="euclidean", exact=True
    )
    rest = np.setdiff1d(np.arange(N), sample)
    assert distances.shape == (SAMPLE_SIZE, SAMPLE_SIZE) and len(rest) == N - SAMPLE_SIZE
    assert adjusted_rand_score(truth[rest], labels[rest]) == pytest.approx(1.0)
    assert adjusted_rand_score(truth, labels) == pytest.approx(1.0)


def fedclust_cut(distances: np.ndarray, k: int) -> np.ndarray:
    from common.clustering.oneshot import cut_distances

    return cut_distances(distances, Cut(0.0, k))[0]


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "cityblock"])
def test_flhc_sampled_matches_exact(metric):
    truth, x = planted(N, 3, 10, 0.3, seed=5)
    rows = list(x)
    exact = flhc_clusters(rows, Cut(0.0, 3), metric, 0, sample_above=0)
    got = flhc_clusters(rows, Cut(0.0, 3), metric, 0, sample_above=1)
    assert got.distances is None
    assert abs(adjusted_rand_score(truth, got.labels) - adjusted_rand_score(truth, exact.labels)) <= 0.01


def _ask(pids: list[int], x: np.ndarray):
    at = {p: i for i, p in enumerate(pids)}
    return lambda ids: (list(ids), [x[at[p]] for p in ids])


def test_sampled_bipartition_matches_exact_and_is_bounded(monkeypatch):
    truth, x = planted(N, 2, 30, 0.3, seed=7)
    pids = list(range(100, 100 + N))  # client ids, not positions
    first, second, cross, intra = sattler_bipartition(pids, list(x))
    shapes: list[tuple[int, ...]] = []
    real = sampled.cosine_matrix

    def spy(a, b):
        shapes.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(sampled, "cosine_matrix", spy)
    split = sattler_split(pids, _ask(pids, x), sample_above=SAMPLE_ABOVE if N > SAMPLE_ABOVE else 1)
    assert split is not None
    (s_first, s_second), s_cross, s_intra = split.halves, split.cross, split.intra
    assert shapes == [(SAMPLE_SIZE, SAMPLE_SIZE)]  # never (N, N)
    assert sorted(s_first + s_second) == pids

    def labels(a, b):
        out = np.zeros(N, dtype=int)
        out[np.asarray(b) - 100] = 1
        return out

    exact_ari = adjusted_rand_score(truth, labels(first, second))
    assert exact_ari == pytest.approx(1.0)
    assert adjusted_rand_score(truth, labels(s_first, s_second)) >= exact_ari - 0.01
    assert intra > cross and s_intra > s_cross  # Sattler's criterion holds on the sample too


def test_sattler_split_threshold_and_seed():
    _, x = planted(N, 2, 30, 1.0, seed=8)
    pids = list(range(N))
    exact = sattler_split(pids, _ask(pids, x), sample_above=0)
    assert exact is not None and exact.sizes == [len(h) for h in exact.halves]
    assert (*exact.halves, exact.cross, exact.intra) == sattler_bipartition(pids, list(x))
    again = sattler_split(pids, _ask(pids, x), sample_above=N)  # up to sample_above: exact
    assert again is not None and (again.halves, again.cross, again.sizes) == (exact.halves, exact.cross, exact.sizes)
    a = sattler_split(pids, _ask(pids, x), seed=3, sample_above=N - 1)
    assert a is not None and sum(a.sizes) == SAMPLE_SIZE
    assert a.halves == sattler_split(pids, _ask(pids, x), seed=3, sample_above=N - 1).halves  # type: ignore[union-attr]
    assert (a.cross, a.intra) != (exact.cross, exact.intra)  # the criteria come from the sample's cosines


def test_sampled_flic_matches_exact():
    n, size = GRAPH_SAMPLE_SIZE + 300, GRAPH_SAMPLE_SIZE
    truth, x = planted(n, 4, 40, 0.5, seed=9)
    store = UpdateSimilarity(dense=False)
    pids = list(range(n))
    store.update(pids, x)
    exact, res_exact, graph_pids, graph = sampled_flic(store, pids, 1.0, 0, sample_above=0)
    assert graph_pids == pids and graph.shape == (n, n)
    got, res, graph_pids, graph = sampled_flic(store, pids, 1.0, 0, sample_above=n - 1)
    assert res == res_exact == 1.0 and len(graph_pids) == size and graph.shape == (size, size)
    a_exact, a_got = adjusted_rand_score(truth, exact), adjusted_rand_score(truth, got)
    assert a_exact > 0.99 and abs(a_got - a_exact) <= 0.01


def test_sparse_similarity_equals_dense():
    rng = np.random.default_rng(0)
    dense, lazy = UpdateSimilarity(), UpdateSimilarity(dense=False)
    for _ in range(3):
        pids = rng.choice(60, size=25, replace=False).tolist()
        u = rng.standard_normal((25, 16))
        dense.update(pids, u)
        lazy.update(pids, u)
    assert lazy._s.size == 0  # no N x N matrix kept
    np.testing.assert_allclose(lazy.matrix(), dense.matrix(), atol=1e-6)
    some, other = dense.pids[:7], dense.pids[3:20]
    np.testing.assert_allclose(lazy.between(some, other), dense.between(some, other), atol=1e-6)
    np.testing.assert_allclose(dense.between(some, other), dense.matrix(some + other)[:7, 7:], atol=1e-6)


def test_update_norms_of_a_sequence_equal_the_array():
    rng = np.random.default_rng(1)
    u = (rng.standard_normal((1100, 9)) + 0.3).astype(np.float32)  # three chunks of 512
    got, want = update_norms(list(u)), update_norms(u)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert mean_update_ratio(list(u)) == pytest.approx(mean_update_ratio(u), rel=1e-6)


@pytest.mark.parametrize(
    ("module", "cls", "key"),
    [
        ("strategies.fedclust", "FedClustParams", "fedclust-sample-above"),
        ("strategies.flhc", "FLHCParams", "flhc-sample-above"),
        ("strategies.flic", "FLICParams", "flic-sample-above"),
        ("strategies.cfl_sattler", "CFLSattlerParams", "cfl-sattler-sample-above"),
        ("strategies.cfl_gp", "CFLGPParams", "cfl-gp-sample-above"),
        ("strategies.flag", "FLAGParams", "flag-sample-above"),
    ],
)
def test_sample_above_keys(module, cls, key):
    import importlib

    params = getattr(importlib.import_module(module), cls)
    assert run_config_keys(params)["sample_above"] == key
    assert params().sample_above == SAMPLE_ABOVE
    assert params(sample_above=0).sample_above == 0
    with pytest.raises(ValueError, match=f"The '{key}' parameter of .* must be an int >= 0. Got -1 instead."):
        params(sample_above=-1)
