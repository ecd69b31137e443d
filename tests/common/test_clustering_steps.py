"""The pure server steps of FLIC and CFL-GP (common.clustering.flic / spectral) that the strategies
and benchmarks/scaling.py share."""

import numpy as np

from common.clustering import spectral
from common.clustering.flic import flic_clusters, louvain_by_silhouette
from common.clustering.louvain import louvain_labels


def _similarity(rng, n=12):
    truth = np.arange(n) % 2
    x = np.where(truth[:, None] == 0, [1.0, 0.0], [0.0, 1.0]) + 0.1 * rng.standard_normal((n, 2))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return 1.0 + x @ x.T, truth


def test_flic_uses_a_given_resolution_and_picks_one_by_silhouette_without():
    s, truth = _similarity(np.random.default_rng(0))
    labels, resolution = flic_clusters(s, 0.7, seed=3)
    assert resolution == 0.7
    np.testing.assert_array_equal(labels, louvain_labels(s, 0.7, 3))
    labels, resolution = flic_clusters(s, None, seed=3)
    expected, gamma = louvain_by_silhouette(s, 3)
    assert resolution == gamma
    np.testing.assert_array_equal(labels, expected)


def test_cflgp_imputes_unanswered_blocks_before_the_spectral_step():
    rng = np.random.default_rng(1)
    n, k, d = 10, 2, 6
    truth = np.arange(n) % k
    centres = rng.standard_normal((k, k, d))
    blocks = (centres[truth] + 0.05 * rng.standard_normal((n, k, d))).astype(np.float32)
    counts = np.ones((n, k), dtype=np.int64)
    previous = truth.copy()
    labels, _, values = spectral.cflgp_clusters(blocks, counts, previous, impute_seed=0, seed=5)
    expected = spectral.spectral_clustering(spectral.profile_matrix(blocks), k, previous, 5)
    np.testing.assert_array_equal(labels, expected[0])
    np.testing.assert_allclose(values, expected[2])
    counts[0, 1], blocks[0, 1] = 0, 0.0
    _, _, values = spectral.cflgp_clusters(blocks, counts, previous, impute_seed=0, seed=5)
    imputed = spectral.impute_blocks(blocks, counts, previous, rank=k, seed=0)
    assert not np.allclose(imputed[0, 1], 0.0)
    np.testing.assert_allclose(
        values, spectral.spectral_clustering(spectral.profile_matrix(imputed), k, previous, 5)[2]
    )


def test_sattler_bipartition_returns_client_ids_of_opposed_groups_and_their_separation():
    from common.clustering.bipartition import sattler_bipartition

    rng = np.random.default_rng(2)
    direction = rng.standard_normal(50)
    pids = [10, 3, 7, 42, 5, 8]
    updates = [(1 if i % 2 == 0 else -1) * direction + 0.1 * rng.standard_normal(50) for i in range(6)]
    first, second, cross, intra = sattler_bipartition(pids, updates, seed=0)
    assert sorted(map(sorted, (first, second))) == [[3, 8, 42], [5, 7, 10]]
    assert intra > 0.9 and cross < -0.9
