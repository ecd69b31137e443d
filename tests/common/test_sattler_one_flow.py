"""Sattler's split as one flow (``sampled.sattler_split``): each update sketched once, the same labels as
the former two-sketch form, the sampled split against the exact one, and ``scan_round``'s round."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import similarity as sim
from common.clustering.bipartition import SEPARATIONS, NormSums, bipartition, scan_round, update_norms
from common.clustering.sampled import cluster_means, nearest_means, sample_rows, sattler_split
from common.clustering.similarity import CountSketch, UpdateSimilarity, cosine_matrix, sketch_rows

DIM, K = 300, 32


def _planted(n: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two opposed groups (Sattler's setting: their updates point apart) plus Gaussian noise, float32."""
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.arange(n) % 2)
    centre = rng.standard_normal(DIM)
    x = np.where(truth[:, None] == 0, centre, -centre) + noise * rng.standard_normal((n, DIM))
    return truth, x.astype(np.float32)


def _ask(pids: list[int], x: np.ndarray, asked: list[list[int]] | None = None):
    at = {p: i for i, p in enumerate(pids)}

    def ask(ids: list[int]) -> tuple[list[int], list[np.ndarray]]:
        if asked is not None:
            asked.append(list(ids))
        return list(ids), [x[at[p]] for p in ids]

    return ask


def _store(similarity: UpdateSimilarity):
    return similarity.keep


def _former(pids: list[int], x: np.ndarray, sample: np.ndarray, seed: int) -> tuple[np.ndarray, float, float]:
    """The two-sketch form before this change: the sample sketched again for its cosines, the halves'
    unit means in float64 (``cluster_means``), every other member to the nearer mean."""
    rows = sketch_rows([x[i] for i in sample], seed, sketch_dim=K)
    cos = cosine_matrix(rows, rows)
    a, b = bipartition(cos)
    cross, intra = SEPARATIONS["nearest"](cos, a, b)
    sides = np.zeros(len(sample), dtype=np.int64)
    sides[b] = 1
    means = cluster_means([x[i] for i in sample], np.arange(len(sample)), sides, "cosine")
    labels = nearest_means(x.astype(np.float64), means, "cosine")
    labels[sample] = sides
    return labels, cross, intra


def test_the_one_sketch_split_gives_the_former_two_sketch_labels_and_sketches_each_update_once(monkeypatch):
    n, seed = 900, 4
    truth, x = _planted(n, 0.7, seed=1)
    pids = list(range(50, 50 + n))
    sample = sample_rows(n, np.random.default_rng(seed), 300)
    want, cross, intra = _former(pids, x, sample, seed)
    projected: list[int] = []
    real = CountSketch.project_rows
    monkeypatch.setattr(CountSketch, "project_rows", lambda self, rows: projected.append(len(rows)) or real(self, rows))
    store = UpdateSimilarity(CountSketch(DIM, K, seed), dense=False)
    split = sattler_split(
        pids, _ask(pids, x), store=_store(store), sketch_dim=K, seed=seed, sample_above=1, sample_size=300, batch=250
    )
    assert split is not None and split.kept
    got = np.isin(pids, split.halves[1]).astype(np.int64)
    np.testing.assert_array_equal(got, want)  # equal labels, the half of the sample's first member first
    assert (split.cross, split.intra) == (cross, intra)
    assert adjusted_rand_score(truth, got) == 1.0
    assert sum(projected) == n  # each update projected once: into the store, and its rows split
    assert sorted(store.pids) == pids
    stored = CountSketch(DIM, K, seed).project(x).astype(np.float64)  # each client's own row, not another's
    np.testing.assert_allclose(store.unit_rows(pids), stored / np.linalg.norm(stored, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(split.means[1], x[got == 1].mean(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("store_sketch", [CountSketch(DIM, K, 5), CountSketch(DIM, K + 1, 4), None])
def test_a_store_of_another_sketch_leaves_the_split_as_without_a_store(store_sketch):
    n, seed = 700, 4
    _, x = _planted(n, 0.7, seed=2)
    pids = list(range(n))
    plain = sattler_split(pids, _ask(pids, x), sketch_dim=K, seed=seed, sample_above=1, sample_size=200)
    store = UpdateSimilarity(store_sketch, dense=False)
    stored = sattler_split(
        pids, _ask(pids, x), store=_store(store), sketch_dim=K, seed=seed, sample_above=1, sample_size=200
    )
    assert plain is not None and stored is not None
    assert (stored.halves, stored.cross, stored.intra) == (plain.halves, plain.cross, plain.intra)
    assert sorted(store.pids) == pids  # every member's fresh update stored all the same


def test_the_sampled_split_finds_the_exact_splits_groups_on_planted_groups():
    n, seed = 2400, 0
    truth, x = _planted(n, 1.0, seed=3)
    pids = list(range(n))
    exact = sattler_split(pids, _ask(pids, x), sketch_dim=K, seed=seed)
    asked: list[list[int]] = []
    sampled = sattler_split(pids, _ask(pids, x, asked), sketch_dim=K, seed=seed, sample_above=n - 1, batch=700)
    assert exact is not None and sampled is not None and exact.kept and sampled.kept
    exact_ari = adjusted_rand_score(truth, np.isin(pids, exact.halves[1]))
    sampled_ari = adjusted_rand_score(truth, np.isin(pids, sampled.halves[1]))
    assert exact_ari == pytest.approx(1.0) and sampled_ari >= exact_ari - 0.01
    assert exact.sizes == [len(h) for h in exact.halves] and sum(sampled.sizes) == len(asked[0]) < n
    assert sorted(p for a in asked for p in a) == pids  # every member asked once


def test_a_split_that_does_not_separate_asks_the_sample_only():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((600, DIM)).astype(np.float32)  # no groups: the nearest test fails
    asked: list[list[int]] = []
    pids = list(range(600))
    split = sattler_split(pids, _ask(pids, x, asked), sketch_dim=K, sample_above=1, sample_size=200, test="strict")
    assert split is not None and not split.kept and split.intra <= split.cross
    assert len(asked) == 1 and len(asked[0]) == 200
    assert sattler_split(pids, lambda ids: (ids[:2], [x[0], x[1]]), sample_above=1) is None  # under 3 replies


def test_scan_round_stores_every_update_once_and_sums_each_clusters_norms():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((150, DIM)) + 0.5).astype(np.float32)
    clusters = rng.integers(0, 3, size=150)
    pids = list(range(1000, 1150))
    store = UpdateSimilarity(CountSketch(DIM, K, 0))
    calls: list[int] = []

    def keep(ids, block, sketch, projected):
        calls.append(len(ids))
        return store.keep(ids, block, sketch, projected)

    sums = scan_round(pids, list(x), clusters, keep, {2: NormSums()}, block=64)
    assert calls == [64, 64, 22] and store.pids == pids
    direct = UpdateSimilarity(CountSketch(DIM, K, 0))
    direct.update(pids, x)
    np.testing.assert_allclose(store.matrix(), direct.matrix(), atol=1e-6)
    assert sorted(sums) == [0, 1, 2]
    for k in range(3):
        np.testing.assert_allclose(sums[k].norms(), update_norms(x[clusters == k].astype(np.float64)), rtol=1e-5)
        assert sums[k].count == int((clusters == k).sum())


def test_the_stored_rows_are_the_projection_before_the_unit_scaling():
    x = np.random.default_rng(6).standard_normal((5, DIM)).astype(np.float32)
    store = UpdateSimilarity(CountSketch(DIM, K, 1))
    rows = store.update(range(5), list(x))
    np.testing.assert_array_equal(rows, CountSketch(DIM, K, 1).project(x))
    plain = UpdateSimilarity()
    np.testing.assert_array_equal(plain.update(range(5), x), x)
    assert sim.CountSketch(DIM, K, 1).project(x).dtype == np.float32
