"""FLIC's incremental similarity S = 1 + cos and the seeded Gaussian sketch."""

import numpy as np
import pytest

from common.clustering.similarity import GaussianSketch, UpdateSimilarity, cosine_matrix


def test_cosine_matrix_on_hand_made_vectors():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    b = np.array([[3.0, 0.0], [-1.0, -1.0]])
    np.testing.assert_allclose(cosine_matrix(a, b), [[1.0, -np.sqrt(0.5)], [0.0, -np.sqrt(0.5)], [0.0, 0.0]])
    with pytest.raises(ValueError, match="'a' and 'b' parameters of cosine_matrix"):
        cosine_matrix(a, np.zeros((2, 3)))


def test_only_the_sampled_rows_change_and_never_sampled_clients_are_absent():
    sim = UpdateSimilarity()
    sim.update([3, 7], np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    assert sim.pids == [3, 7] and 5 not in sim
    np.testing.assert_allclose(sim.matrix(), [[2.0, 1.0], [1.0, 2.0]])
    sim.update([5], np.array([[-1.0, 0.0, 0.0]]))
    before = sim.matrix([3, 7])
    np.testing.assert_allclose(sim.matrix(), [[2.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    # client 7 retrains: only its row and column move; 3-5 keeps its value
    sim.update([7], np.array([[1.0, 1.0, 0.0]]))
    after = sim.matrix()
    c = 1 + np.sqrt(0.5)
    np.testing.assert_allclose(after, [[2.0, c, 0.0], [c, 2.0, 2 - c], [0.0, 2 - c, 2.0]])
    assert before[0, 0] == after[0, 0]
    with pytest.raises(ValueError, match="unseen \\[9\\]"):
        sim.matrix([3, 9])


def test_incremental_equals_a_full_recomputation_of_the_latest_updates():
    rng = np.random.default_rng(0)
    sim, latest = UpdateSimilarity(), {}
    for _ in range(30):
        pids = sorted(rng.choice(40, size=4, replace=False).tolist())
        ups = rng.normal(size=(4, 16))
        sim.update(pids, ups)
        latest.update(dict(zip(pids, ups, strict=True)))
    full = 1 + cosine_matrix(np.array([latest[p] for p in sim.pids]), np.array([latest[p] for p in sim.pids]))
    np.testing.assert_allclose(sim.matrix(), full, atol=1e-5)
    assert sorted(sim.pids) == sorted(latest)


def test_bad_update_shapes_are_refused():
    sim = UpdateSimilarity()
    with pytest.raises(ValueError, match="one row per distinct pid"):
        sim.update([1, 1], np.zeros((2, 3)))
    sim.update([1], np.ones((1, 3)))
    with pytest.raises(ValueError, match="must have 3 columns"):
        sim.update([2], np.ones((1, 4)))


def test_gaussian_sketch_is_seeded_block_independent_and_keeps_cosines():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(1, 5000))
    x = np.vstack([base + 0.5 * rng.normal(size=(1, 5000)), base, rng.normal(size=(1, 5000))])
    cached = GaussianSketch(5000, 512, seed=3, block=1000)
    uncached = GaussianSketch(5000, 512, seed=3, block=1000, cache_bytes=0)
    np.testing.assert_allclose(cached.project(x), uncached.project(x), rtol=1e-5)
    assert not np.allclose(cached.project(x), GaussianSketch(5000, 512, seed=4, block=1000).project(x))
    true, sketched = cosine_matrix(x, x), cosine_matrix(cached.project(x), cached.project(x))
    assert np.max(np.abs(true - sketched)) < 0.15
    sim = UpdateSimilarity(cached)
    sim.update([0, 1, 2], x)
    np.testing.assert_allclose(sim.matrix(), 1 + sketched, atol=1e-5)
    with pytest.raises(ValueError, match="'sketch_dim' parameter of GaussianSketch"):
        GaussianSketch(10, 0, seed=0)


def test_gaussian_sketch_sums_every_block_of_its_seeded_matrix_scaled_by_one_over_root_k():
    """``dim`` not a multiple of ``block``: the projection is ``x @ R`` with ``R``'s block ``b`` drawn from
    ``default_rng([seed, b])`` and scaled by ``1 / sqrt(k)`` (norms kept on average), the last block short."""
    dim, k, seed, block = 10, 256, 3, 4
    sketch = GaussianSketch(dim, k, seed, block=block)
    r = np.vstack(
        [
            np.random.default_rng([seed, b]).standard_normal((min(block, dim - b * block), k), dtype=np.float32)
            for b in range(3)
        ]
    ) / np.float32(np.sqrt(k))
    x = np.random.default_rng(0).standard_normal((5, dim)).astype(np.float32)
    np.testing.assert_allclose(sketch.project(x), x @ r, rtol=1e-5, atol=1e-5)
    single = sketch.project(x[0])
    assert single.shape == (k,)
    np.testing.assert_allclose(single, x[0] @ r, rtol=1e-5, atol=1e-5)
    assert 0.8 < float(np.mean(np.linalg.norm(r, axis=1))) < 1.2


def test_count_sketch_hashes_with_random_signs():
    """Each coordinate goes to one bucket with a sign of +-1: the sketch of all-ones sums to the signs' sum,
    about 0 (E <Sx, Sy> = <x, y> needs both signs), not to ``dim``."""
    from common.clustering.similarity import CountSketch

    dim = 4000
    out = CountSketch(dim, 32, seed=1).project(np.ones(dim, dtype=np.float32))
    assert out.shape == (32,)
    assert abs(float(out.sum())) < 0.1 * dim
    assert out.min() < 0 < out.max()
