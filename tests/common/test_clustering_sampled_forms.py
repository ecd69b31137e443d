"""Issue 31's fast and sampled forms against the exact ones: the inner-product nearest mean,
FLIC's join from community sums, CFL-GP's sampled spectral step."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.metrics import adjusted_rand_score

from common.clustering import sampled, spectral
from common.clustering.flic import flic_clusters, join_by_modularity
from common.clustering.sampled import assign_nearest, join_by_sums, nearest_means, sampled_cflgp
from common.clustering.similarity import UpdateSimilarity
from common.clustering.subspaces import SAMPLE_SIZE

N = SAMPLE_SIZE + 500


def _near_ties(rng: np.random.Generator, means: np.ndarray, count: int) -> np.ndarray:
    """Rows almost halfway between means 0 and 1 (their distances differ in the 6th digit)."""
    mid = (means[0] + means[1]) / 2
    step = (means[1] - means[0]) / np.linalg.norm(means[1] - means[0])
    off = 1e-3 * rng.standard_normal((count, means.shape[1]))
    off -= np.outer(off @ step, step)  # perpendicular to the two means' axis: equidistant but for the 1e-6
    return mid + np.outer(rng.choice([-1e-6, 1e-6], size=count), step) + off


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cosine", "cityblock"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nearest_means_is_cdists_argmin(metric, dtype):
    rng = np.random.default_rng(0)
    means = rng.standard_normal((7, 3000)) * rng.uniform(0.5, 3.0, size=(7, 1))  # unequal norms
    rows = np.concatenate(
        [means[rng.integers(0, 7, 400)] + 2.0 * rng.standard_normal((400, 3000)), _near_ties(rng, means, 50)]
    )
    block = rows.astype(dtype)
    want = np.argmin(cdist(block.astype(np.float64), means, metric=metric), axis=1)
    got = nearest_means(block, means, metric)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_nearest_means_ignores_the_row_norm_only():
    """The nearest mean is not the one of largest inner product (a dropped ``||c||^2`` would pass that)."""
    means = np.array([[10.0, 0.0], [1.0, 0.0]])
    x = np.array([[1.2, 0.0]])
    assert nearest_means(x, means, "euclidean")[0] == 1
    assert nearest_means(x, means, "cosine")[0] == 0  # same direction: a tie of cosine 1, the first wins
    assert nearest_means(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0], [0.0, 5.0]]), "cosine")[0] == 1


def test_assign_nearest_of_float32_rows_in_chunks():
    rng = np.random.default_rng(1)
    means = rng.standard_normal((5, 64))
    rows = [r.astype(np.float32) for r in means[rng.integers(0, 5, 1300)] + rng.standard_normal((1300, 64))]
    at = np.arange(3, 1300, 2)
    want = np.argmin(cdist(np.stack(rows)[at].astype(np.float64), means), axis=1)
    np.testing.assert_array_equal(assign_nearest(rows, at, means), want)
    assert assign_nearest(rows, np.array([], dtype=np.int64), means).shape == (0,)


def test_join_by_sums_equals_join_by_modularity():
    rng = np.random.default_rng(2)
    truth = rng.permutation(np.arange(900) % 4)
    x = rng.standard_normal((4, 50))[truth] + 0.8 * rng.standard_normal((900, 50))
    store = UpdateSimilarity(dense=False)
    store.update(list(range(900)), x)
    graph_pids, newcomers = list(range(0, 900, 3)), [p for p in range(900) if p % 3]
    graph = store.matrix(graph_pids)
    labels, used = flic_clusters(graph, 1.0, 0)
    assert adjusted_rand_score(truth[graph_pids], labels) > 0.99
    for resolution in (used, 0.4):
        want = join_by_modularity(store.between(newcomers, graph_pids), graph, labels, resolution)
        got = join_by_sums(store, newcomers, graph_pids, graph, labels, resolution)
        np.testing.assert_array_equal(got, want)
    assert adjusted_rand_score(truth[newcomers], got) > 0.99


@pytest.mark.slow
def test_sampled_flic_condensed_equals_links():
    rng = np.random.default_rng(3)
    n = sampled.GRAPH_SAMPLE_SIZE + 400
    truth = rng.permutation(np.arange(n) % 3)
    store = UpdateSimilarity(dense=False)
    store.update(list(range(n)), rng.standard_normal((3, 30))[truth] + 0.7 * rng.standard_normal((n, 30)))
    fast = sampled.sampled_flic(store, list(range(n)), 1.0, 0, sample_above=n - 1)[0]
    slow = sampled.sampled_flic(store, list(range(n)), 1.0, 0, sample_above=n - 1, condensed=False)[0]
    np.testing.assert_array_equal(fast, slow)
    assert adjusted_rand_score(truth, fast) > 0.99


def planted_profile(n: int, k: int, dim: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Truth ``(n,)``, blocks ``(n, k, dim)`` float32 (a centre per group and block plus noise), counts."""
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.arange(n) % k)
    centres = rng.standard_normal((k, k, dim))
    blocks = (centres[truth] + noise * rng.standard_normal((n, k, dim))).astype(np.float32)
    return truth, blocks, np.ones((n, k), dtype=np.int64)


@pytest.mark.slow
def test_sampled_cflgp_matches_exact():
    truth, blocks, counts = planted_profile(N, 4, 30, 2.0, seed=4)
    previous = np.random.default_rng(5).integers(0, 4, size=N)
    exact, _, _ = spectral.cflgp_clusters(blocks, counts, previous, impute_seed=0, seed=1)
    got, features, values, sample = sampled_cflgp(blocks, counts, previous, impute_seed=0, seed=1, sample_above=N - 1)
    assert len(sample) == SAMPLE_SIZE and features.shape == (N, 4) and values.ndim == 1
    a_exact, a_got = adjusted_rand_score(truth, exact), adjusted_rand_score(truth, got)
    assert a_exact > 0.9 and abs(a_got - a_exact) <= 0.01
    # aligned with ``previous`` as the exact step: as many clients keep their cluster
    assert np.sum(got == previous) == pytest.approx(np.sum(exact == previous), abs=0.02 * N)
    # the rest follow their own group (not their position), the sample's labels are k-means' own
    rest = np.setdiff1d(np.arange(N), sample)
    assert adjusted_rand_score(truth[rest], got[rest]) == pytest.approx(a_got, abs=0.01)


def test_sampled_cflgp_threshold_and_exact_key():
    truth, blocks, counts = planted_profile(300, 3, 8, 0.5, seed=6)
    previous = np.zeros(300, dtype=np.int64)
    previous[:100], previous[100:200] = 1, 2
    exact = spectral.cflgp_clusters(blocks, counts, previous, impute_seed=0, seed=2)
    for above in (0, 300):  # 0: exact at every size; N <= threshold: exact
        labels, features, values, sample = sampled_cflgp(
            blocks, counts, previous, impute_seed=0, seed=2, sample_above=above
        )
        np.testing.assert_array_equal(labels, exact[0])
        np.testing.assert_array_equal(values, exact[2])
        np.testing.assert_array_equal(sample, np.arange(300))
    labels, _, _, sample = sampled_cflgp(blocks, counts, previous, impute_seed=0, seed=2, sample_above=299)
    assert len(sample) == 300  # a sample of 2,000 holds all 300: same partition by another route
    assert adjusted_rand_score(labels, exact[0]) == pytest.approx(1.0)


def test_sampled_cflgp_seeded():
    _, blocks, counts = planted_profile(N, 3, 10, 1.0, seed=7)
    previous = np.zeros(N, dtype=np.int64)
    runs = [sampled_cflgp(blocks, counts, previous, impute_seed=0, seed=s, sample_above=1) for s in (3, 3, 4)]
    np.testing.assert_array_equal(runs[0][3], runs[1][3])
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert not np.array_equal(runs[0][3], runs[2][3])


@pytest.mark.slow
def test_cflgp_strategy_passes_its_sample_above_key(monkeypatch):
    """``cfl-gp-sample-above`` reaches the step; the picture is the sample's (here all 6 clients)."""
    import strategies.cfl_gp as cfl_gp
    from client.app import app as client_app
    from server.experiment import Experiment
    from server.inprocess import InProcessGrid
    from tests.helpers import small_run_config

    seen: list[int] = []
    real = cfl_gp.sampled_cflgp
    monkeypatch.setattr(cfl_gp, "sampled_cflgp", lambda *a, **k: seen.append(k["sample_above"]) or real(*a, **k))
    rc = small_run_config(
        strategy="cfl-gp",
        rounds=1,
        **{"local-epochs": 1, "eval-every": 100, "num-clusters": 2, "cfl-gp-sample-above": 3},
    )
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    strategy.start(
        InProcessGrid(client_app, rc, rc["num-clients"]), exp.initial_model(), expected_clients=rc["num-clients"]
    )
    assert seen == [3]
    assert strategy.distance_matrix.shape == (6, 6) and sorted(strategy.distance_pids) == list(range(6))
    with pytest.raises(ValueError, match="The 'cfl-gp-sample-above' parameter of CFLGP must be an int >= 0. Got -1"):
        cfl_gp.CFLGPParams(sample_above=-1)


def test_fesem_steps_in_blocks_equal_the_whole_arrays():
    """FeSEM's E- and M-steps convert ``ROWS`` replies at a time; the result is the whole-array one."""
    from common.clustering.fesem import ROWS, squared_distances, update_centres

    rng = np.random.default_rng(8)
    points = rng.standard_normal((2 * ROWS + 77, 9)).astype(np.float32)
    centres = rng.standard_normal((4, 9))
    labels, weights = rng.integers(0, 3, len(points)), rng.uniform(0.1, 5.0, len(points))  # centre 3: no members
    np.testing.assert_allclose(squared_distances(points, centres), cdist(points, centres, "sqeuclidean"), rtol=1e-9)
    got = update_centres(points, labels, weights, centres)
    for k in range(3):
        want = np.average(points[labels == k].astype(np.float64), axis=0, weights=weights[labels == k])
        np.testing.assert_allclose(got[k], want, rtol=1e-10)
    np.testing.assert_array_equal(got[3], centres[3])
