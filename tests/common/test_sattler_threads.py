"""Sattler's step in threads (issue 31 item 1): ``over_rows``, ``CountSketch.project_rows`` and ``fold_rows``
split the rows between threads; the split's halves, criteria and the round's norms stay the one-thread ones,
and the sampled split gives the exact split's groups (``bipartition.sattler_bipartition``, the paper's form)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import similarity as sim
from common.clustering.bipartition import NormSums, fold_rows, sattler_bipartition, scan_round
from common.clustering.sampled import sattler_split
from common.clustering.similarity import CountSketch, UpdateSimilarity, over_rows

DIM, K = 700, 64


def _planted(n: int, groups: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.arange(n) % groups)
    centres = rng.standard_normal((groups, DIM))
    return truth, (centres[truth] + noise * rng.standard_normal((n, DIM))).astype(np.float32)


def _ask(pids: list[int], x: np.ndarray):
    at = {p: i for i, p in enumerate(pids)}
    return lambda ids: (list(ids), [x[at[p]] for p in ids])


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_over_rows_gives_each_row_to_one_slice_in_the_pools_threads(threads):
    seen = np.zeros(11, dtype=np.int64)
    slices: dict[int, tuple[int, int, str]] = {}

    def work(lo: int, hi: int, t: int) -> None:
        seen[lo:hi] += 1
        slices[t] = (lo, hi, threading.current_thread().name)

    over_rows(11, work, threads)
    assert (seen == 1).all() and sorted(slices) == list(range(threads))
    assert sorted(lo for lo, _, _ in slices.values()) == [slices[t][0] for t in range(threads)]  # in order
    names = {name for _, _, name in slices.values()}
    assert names == {"MainThread"} if threads == 1 else all(n.startswith("umbel-rows") for n in names)
    over_rows(0, work, threads)  # nothing to do: no call
    assert (seen == 1).all()


def test_an_error_in_a_slice_is_raised_by_over_rows():
    def work(lo: int, hi: int, t: int) -> None:
        if t == 1:
            raise ValueError(f"slice {lo}:{hi}")

    with pytest.raises(ValueError, match="slice 3:6"):
        over_rows(6, work, 2)


def test_row_threads_follows_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert sim.row_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "64")
    assert 1 <= sim.row_threads() <= 64
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    assert sim.row_threads() >= 1


@pytest.mark.parametrize("threads", [2, 3])
def test_the_sketch_in_threads_is_the_one_thread_sketch(monkeypatch, threads):
    x = np.random.default_rng(0).standard_normal((37, DIM)).astype(np.float32)
    sketch = CountSketch(DIM, K, 3)
    monkeypatch.setattr(sim, "row_threads", lambda: 1)
    one = sketch.project_rows(list(x))
    monkeypatch.setattr(sim, "row_threads", lambda: threads)
    np.testing.assert_array_equal(sketch.project_rows(list(x)), one)
    np.testing.assert_allclose(one, x.astype(np.float64) @ sketch._by_bucket.T.toarray(), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="must hold vectors of 700 numbers. Got shape \\(5,\\) at row 20"):
        sketch.project_rows([*x[:20], np.zeros(5, dtype=np.float32)])


@pytest.mark.parametrize("threads", [1, 3])
def test_fold_rows_sums_each_group_and_squares_each_row(monkeypatch, threads):
    monkeypatch.setattr(sim, "row_threads", lambda: threads)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((40, DIM)) + 0.3).astype(np.float32)
    groups = rng.integers(0, 3, size=40)
    groups[:2] = 2  # group 1 need not come first; each row to its own group, not the slice's first
    squares, sums = fold_rows(list(x), groups, 4)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(squares, (x64**2).sum(axis=1), rtol=1e-5)
    for g in range(3):
        np.testing.assert_allclose(sums[g], x64[groups == g].sum(axis=0), rtol=1e-4, atol=1e-4)
    assert not sums[3].any() and sums.dtype == np.float64
    assert fold_rows(list(x), groups, 4, squares=False)[0].shape == (0,)
    with pytest.raises(ValueError, match="'rows' parameter of fold_rows must hold vectors of one length 700"):
        fold_rows([x[0], x[1, :3]], np.zeros(2, dtype=np.int64), 1)


def test_scan_round_in_threads_equals_the_norms_of_the_stacked_clusters(monkeypatch):
    monkeypatch.setattr(sim, "row_threads", lambda: 3)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((90, DIM)) + 0.5).astype(np.float32)
    x[7] *= 9.0  # the largest norm is one row's, in one cluster
    clusters = rng.integers(0, 2, size=90)
    store = UpdateSimilarity(CountSketch(DIM, K, 0), dense=False)
    sums = scan_round(list(range(90)), list(x), clusters, store.keep, block=16)
    for k in (0, 1):
        stacked = NormSums()
        stacked.add(x[clusters == k])
        np.testing.assert_allclose(sums[k].norms(), stacked.norms(), rtol=1e-5)
        assert sums[k].count == stacked.count and sums[k].ratio() == pytest.approx(stacked.ratio(), rel=1e-5)
    monkeypatch.setattr(sim, "row_threads", lambda: 1)
    direct = UpdateSimilarity(CountSketch(DIM, K, 0), dense=False)
    direct.update(list(range(90)), list(x))
    np.testing.assert_array_equal(store.unit_rows(range(90)), direct.unit_rows(range(90)))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_sampled_split_in_threads_gives_the_exact_splits_groups(monkeypatch, threads):
    """The reference is the exact split of every member (``sattler_bipartition``, unchanged by the threads):
    the sampled split, asked in batches, puts every member on the same side of the same partition."""
    monkeypatch.setattr(sim, "row_threads", lambda: threads)
    n, seed = 1500, 3
    truth, x = _planted(n, 2, 1.2, seed=7)
    pids = list(range(100, 100 + n))
    first, second, cross, intra = sattler_bipartition(pids, list(x), sketch_dim=K, seed=seed)
    exact = np.isin(pids, second)
    assert intra > cross and adjusted_rand_score(truth, exact) == 1.0
    store = UpdateSimilarity(CountSketch(DIM, K, seed), dense=False)
    split = sattler_split(
        pids,
        _ask(pids, x),
        store=store.keep,
        sketch_dim=K,
        seed=seed,
        sample_above=1,
        sample_size=400,
        batch=300,
    )
    assert split is not None and split.kept
    sampled = np.isin(pids, split.halves[1])
    assert adjusted_rand_score(exact, sampled) == 1.0
    for h, half in enumerate(split.halves):
        np.testing.assert_allclose(split.means[h], x[np.isin(pids, half)].mean(axis=0), rtol=1e-4, atol=1e-4)
    if threads == 2:  # the same halves and criteria as in one thread
        monkeypatch.setattr(sim, "row_threads", lambda: 1)
        one = sattler_split(pids, _ask(pids, x), sketch_dim=K, seed=seed, sample_above=1, sample_size=400, batch=300)
        assert one is not None and (one.halves, one.cross, one.intra) == (split.halves, split.cross, split.intra)


def test_a_store_returns_its_rows_only_in_the_sketch_it_projects_by():
    x = np.random.default_rng(3).standard_normal((6, DIM)).astype(np.float32)
    sketch = CountSketch(DIM, K, 2)
    assert sketch == CountSketch(DIM, K, 2) and hash(sketch) == hash(CountSketch(DIM, K, 2))
    assert (
        sketch != CountSketch(DIM, K, 3)
        and sketch != CountSketch(DIM, K + 1, 2)
        and sketch != CountSketch(DIM + 1, K, 2)
    )
    store = UpdateSimilarity(CountSketch(DIM, K, 2), dense=False)
    rows = store.keep(range(3), list(x[:3]), sketch)
    assert rows is not None
    np.testing.assert_array_equal(rows, sketch.project(x[:3]))
    assert store.keep(range(3, 5), list(x[3:5]), CountSketch(DIM, K, 9)) is None
    assert store.keep([5], list(x[5:]), None) is None
    assert store.pids == list(range(6))  # stored whatever the sketch asked
    assert UpdateSimilarity().keep(range(2), x[:2], sketch) is None  # kept whole: not in the sketch


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork only")
def test_a_forked_child_projects_in_threads_of_its_own():
    import os
    import signal

    sketch = CountSketch(DIM, K, 1)
    x = np.random.default_rng(4).standard_normal((8, DIM)).astype(np.float32)
    want = sketch.project(x)
    over_rows(4, lambda lo, hi, t: None, 2)  # the parent's pool exists before the fork
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool threads are gone; a pool of its own projects
        ok = False
        signal.alarm(20)  # a child left waiting on the parent's threads ends here, failing the test
        try:
            sim.row_threads = lambda: 2  # type: ignore[assignment]
            ok = bool(np.array_equal(sketch.project_rows(list(x)), want))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
