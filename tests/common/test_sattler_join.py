"""Sattler's sampled split without projecting the joined updates (issue 31 item 1): ``CountSketch.adjoint``,
``fold_rows``' ``nearer`` and ``join_halves`` against the sketched comparison they replace, and the store
that keeps a seeded sample of the clients above ``sample-above`` (``kept_clients``, ``kept_store``)."""

from __future__ import annotations

import numpy as np
import pytest

from common.clustering import similarity as sim
from common.clustering.bipartition import fold_rows
from common.clustering.sampled import (
    join_halves,
    kept_clients,
    kept_store,
    nearest_means,
    sample_rows,
    sattler_split,
    scan_sketch,
)
from common.clustering.similarity import CountSketch, UpdateSimilarity

DIM, K = 400, 24


def _rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, DIM)) * rng.uniform(0.1, 4.0, size=(n, 1))).astype(np.float32)


def test_the_adjoint_gives_the_products_in_the_sketch():
    sketch = CountSketch(DIM, K, seed=2)
    x, u = _rows(6, 1), np.random.default_rng(3).standard_normal((3, K))
    np.testing.assert_allclose(x.astype(np.float64) @ sketch.adjoint(u).T, sketch.project(x) @ u.T, rtol=1e-5)
    np.testing.assert_array_equal(sketch.adjoint(u[0]), sketch.adjoint(u)[0])
    assert sketch.adjoint(u).shape == (3, DIM)
    with pytest.raises(ValueError, match=r"'u' parameter of CountSketch.adjoint must have shape \(m, 24\)"):
        sketch.adjoint(np.zeros((3, K + 1)))


@pytest.mark.parametrize("threads", [1, 3])
def test_join_halves_through_the_adjoint_gives_the_sketched_comparisons_sides_and_sums(monkeypatch, threads):
    monkeypatch.setattr(sim, "row_threads", lambda: threads)
    sketch = CountSketch(DIM, K, seed=5)
    x = _rows(150, 6)
    x[[3, 77]] = 0.0  # a zero update ties exactly: it goes to half 0, as nearest_means decides
    rng = np.random.default_rng(7)
    # two directions of very different norms: the comparison is by cosine, so each must count as a unit
    directions = rng.standard_normal((2, K)) * np.array([[30.0], [0.05]])
    want = nearest_means(sketch.project(x), directions, "cosine")
    assert 0.2 < want.mean() < 0.8
    sides, sums = join_halves(list(x), directions, sketch=sketch)
    np.testing.assert_array_equal(sides, want)
    assert want[3] == want[77] == 0
    for h in (0, 1):
        np.testing.assert_allclose(sums[h], x[want == h].astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-4)
    whole = rng.standard_normal((2, DIM)) * np.array([[0.01], [50.0]])  # no sketch: the directions are whole
    np.testing.assert_array_equal(join_halves(list(x), whole)[0], nearest_means(x, whole, "cosine"))


def test_fold_rows_nearer_writes_each_rows_group_and_sums_by_it():
    x = _rows(40, 8)
    nearer = np.random.default_rng(9).standard_normal((2, DIM))
    groups = np.full(len(x), -1, dtype=np.int64)
    squares, sums = fold_rows(list(x), groups, 2, nearer=nearer)
    want = (x.astype(np.float64) @ nearer[1] > x.astype(np.float64) @ nearer[0]).astype(np.int64)
    np.testing.assert_array_equal(groups, want)
    np.testing.assert_allclose(sums[1], x[want == 1].astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(squares, (x.astype(np.float64) ** 2).sum(axis=1), rtol=1e-5)
    with pytest.raises(ValueError, match=r"'nearer' parameter of fold_rows must be an array of shape \(2, 400\)"):
        fold_rows(list(x), groups, 3, nearer=nearer)
    with pytest.raises(ValueError, match="'nearer' parameter of fold_rows"):
        fold_rows(list(x), groups, 2, nearer=nearer[:, :10])
    with pytest.raises(ValueError, match=r"into 'groups', an int array of shape \(40,\)"):
        fold_rows(list(x), np.zeros(len(x)), 2, nearer=nearer)


def test_kept_clients_are_all_up_to_sample_above_then_the_seeded_sample_of_a_first_split():
    clients = list(range(1000, 1060))[::-1]
    assert kept_clients(clients, 4, 0) is None and kept_clients(clients, 4, 60) is None
    assert kept_clients(clients, 4, 59, size=60) is None  # a sample of all of them: every client's kept
    kept = kept_clients(clients, 4, 59, size=12)
    assert kept is not None and len(kept) == 12 and kept == kept_clients(clients, 4, 59, size=12)
    assert kept != kept_clients(clients, 5, 59, size=12)
    first = sorted(clients)
    assert kept == {first[int(i)] for i in sample_rows(len(first), np.random.default_rng(4), 12)}
    # the first split of all of them asks exactly these clients first
    asked: list[list[int]] = []
    x = _rows(60, 10)
    sattler_split(
        first,
        lambda ids: asked.append(list(ids)) or (list(ids), [x[p - 1000] for p in ids]),
        seed=4,
        sample_above=59,
        sample_size=12,
        test="off",
    )
    assert set(asked[0]) == kept


def test_the_kept_store_keeps_the_kept_clients_rows_with_their_own_projections():
    sketch = CountSketch(DIM, K, 1)
    x = _rows(10, 11)
    ids = list(range(20, 30))
    keep = {21, 24, 29}
    store = UpdateSimilarity(sketch, dense=False)
    kept_store(store.keep, keep)(ids, list(x), sketch, sketch.project(x))
    direct = UpdateSimilarity(sketch, dense=False)
    direct.update([21, 24, 29], x[[1, 4, 9]])
    assert store.pids == [21, 24, 29]
    np.testing.assert_array_equal(store.unit_rows([21, 24, 29]), direct.unit_rows([21, 24, 29]))
    kept_store(store.keep, keep)([22, 23], list(x[2:4]), None, None)  # none of them kept: nothing stored
    assert store.pids == [21, 24, 29]
    every = UpdateSimilarity(sketch, dense=False)
    assert kept_store(every.keep, None) == every.keep


def test_scan_sketch_projects_every_update_for_a_store_of_all_and_none_for_a_kept_sample():
    sketch = CountSketch(DIM, K, 1)
    assert scan_sketch(UpdateSimilarity(sketch), None) is sketch
    assert scan_sketch(UpdateSimilarity(sketch), {1, 2}) is None  # the store projects its few rows itself
    assert scan_sketch(UpdateSimilarity(), None) is None  # whole updates: nothing to project
