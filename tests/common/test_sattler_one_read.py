"""Sattler's round read once per update (issue 31 item 1): ``CountSketch``'s float32 sums against a dense
reference, ``fold_rows`` projecting each row in the read of its norm and sum, the store taking rows already
projected (``UpdateSimilarity.keep``'s ``projected``), and ``scan_round`` with the store's sketch."""

from __future__ import annotations

import numpy as np
import pytest

from common.clustering import similarity as sim
from common.clustering.bipartition import fold_rows, scan_round
from common.clustering.similarity import CountSketch, UpdateSimilarity

DIM, K = 900, 48


def _rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, DIM)) * rng.uniform(0.1, 5.0, size=(n, 1)) + 0.3).astype(np.float32)


def test_count_sketch_sums_each_bucket_in_float32_in_coordinate_order():
    sketch = CountSketch(DIM, K, seed=9)
    r = sketch.project(np.eye(DIM, dtype=np.float32))  # (d, k): one signed 1 per coordinate
    assert (np.count_nonzero(r, axis=1) == 1).all()
    buckets, signs = np.argmax(np.abs(r), axis=1), r.sum(axis=1)
    x = _rows(4, 1)
    want = np.zeros((len(x), K), dtype=np.float32)
    for j in range(DIM):  # the definition: coordinate j added to its bucket, in increasing j, in float32
        want[:, buckets[j]] += signs[j] * x[:, j]
    np.testing.assert_array_equal(sketch.project_rows(list(x)), want)
    np.testing.assert_array_equal(sketch.project(x), want)
    np.testing.assert_array_equal(np.stack([sketch.project_row(v) for v in x]), want)
    with pytest.raises(ValueError, match=f"must hold vectors of {DIM} numbers"):
        sketch.project_row(x[0, :10])


@pytest.mark.parametrize("threads", [1, 3])
def test_fold_rows_projects_each_row_as_project_rows_and_keeps_its_norms_and_sums(monkeypatch, threads):
    monkeypatch.setattr(sim, "row_threads", lambda: threads)
    x = _rows(23, 2)
    groups = np.random.default_rng(3).integers(0, 3, size=len(x))
    sketch = CountSketch(DIM, K, seed=4)
    projected = np.full((len(x), K), np.nan, dtype=np.float32)
    squares, sums = fold_rows(list(x), groups, 3, sketch=sketch, projected=projected)
    np.testing.assert_array_equal(projected, sketch.project(x))  # every row, at its own index
    plain_squares, plain_sums = fold_rows(list(x), groups, 3)
    np.testing.assert_array_equal(squares, plain_squares)
    np.testing.assert_array_equal(sums, plain_sums)
    np.testing.assert_allclose(squares, (x.astype(np.float64) ** 2).sum(axis=1), rtol=1e-5)
    for g in range(3):
        np.testing.assert_allclose(sums[g], x[groups == g].astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match=r"'projected' parameter of fold_rows must be an array of shape \(23, 48\)"):
        fold_rows(list(x), groups, 3, sketch=sketch)


def test_the_store_keeps_rows_projected_by_its_own_sketch_and_projects_the_others():
    x = _rows(12, 5)
    direct = UpdateSimilarity(CountSketch(DIM, K, 1), dense=False)
    direct.update(range(12), list(x))
    mine = UpdateSimilarity(CountSketch(DIM, K, 1), dense=False)
    rows = mine.keep(range(12), list(x), CountSketch(DIM, K, 1), CountSketch(DIM, K, 1).project(x))
    np.testing.assert_array_equal(mine.unit_rows(range(12)), direct.unit_rows(range(12)))
    np.testing.assert_array_equal(rows, CountSketch(DIM, K, 1).project(x))
    # rows of another sketch are not this store's: it projects the updates itself
    other = UpdateSimilarity(CountSketch(DIM, K, 1), dense=False)
    assert other.keep(range(12), list(x), CountSketch(DIM, K, 2), CountSketch(DIM, K, 2).project(x)) is None
    np.testing.assert_array_equal(other.unit_rows(range(12)), direct.unit_rows(range(12)))
    with pytest.raises(ValueError, match="'projected' parameter of UpdateSimilarity.update must have one row per pid"):
        UpdateSimilarity(CountSketch(DIM, K, 1)).update(range(12), list(x), projected=np.zeros((11, K)))


@pytest.mark.parametrize("threads", [1, 2])
def test_scan_round_with_the_stores_sketch_projects_each_update_once_into_the_same_store(monkeypatch, threads):
    monkeypatch.setattr(sim, "row_threads", lambda: threads)
    x = _rows(150, 6)
    clusters = np.random.default_rng(7).integers(0, 2, size=len(x))
    pids = list(range(300, 450))
    calls: list[int] = []
    real_row, real_rows = CountSketch.project_row, CountSketch.project_rows
    monkeypatch.setattr(CountSketch, "project_row", lambda self, row: calls.append(1) or real_row(self, row))
    monkeypatch.setattr(
        CountSketch, "project_rows", lambda self, rows: calls.append(len(rows)) or real_rows(self, rows)
    )
    fused = UpdateSimilarity(CountSketch(DIM, K, 0), dense=False)
    sums = scan_round(pids, list(x), clusters, fused.keep, sketch=fused.sketch, block=64)  # type: ignore[arg-type]
    assert sum(calls) == len(x)  # each update projected once
    separate = UpdateSimilarity(CountSketch(DIM, K, 0), dense=False)
    want = scan_round(pids, list(x), clusters, separate.keep, block=64)
    assert fused.pids == separate.pids == pids
    np.testing.assert_array_equal(fused.unit_rows(pids), separate.unit_rows(pids))
    for k in (0, 1):
        assert sums[k].norms() == want[k].norms() and sums[k].count == want[k].count


def test_scan_round_hands_the_store_the_rows_it_projected_and_adds_to_running_sums():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 40)).astype(np.float32)
    sketch = CountSketch(40, 8, 0)
    calls = []

    def store(pids, rows, given_sketch, projected=None):
        calls.append((list(pids), given_sketch, None if projected is None else projected.copy()))

    first = scan_round([0, 1, 2, 3, 4], list(x), [0, 0, 1, 1, 1], store, sketch=sketch, block=64)
    ((pids, given, projected),) = calls
    assert pids == [0, 1, 2, 3, 4] and given is sketch
    np.testing.assert_array_equal(projected, sketch.project(x))
    again = scan_round([0, 1], list(x[:2]), [0, 0], None, first)
    assert again is first and first[0].count == 4 and first[1].count == 3
