"""The update store's factory and the sketches' input: written for the mutation run's survivors in
``common.clustering.similarity`` (``update_similarity``'s arguments dropped or swapped, its sketch or
its ``dense`` flag lost; the sketches' float32 input; the Gaussian sketch's checks and default block;
the store's defaults, errors, zero and short updates and its ``S`` kept in [0, 2])."""

from __future__ import annotations

import re

import numpy as np
import pytest

from common.clustering import similarity as sim


def test_update_similarity_sketches_with_the_given_dimension_and_seed_and_keeps_s_dense_for_few_clients():
    store = sim.update_similarity(4, 10, 3, 7)
    assert store.dense is True
    assert isinstance(store.sketch, sim.CountSketch)
    x = np.arange(10.0)
    np.testing.assert_array_equal(store.sketch.project(x), sim.CountSketch(10, 3, 7).project(x))
    plain = sim.update_similarity(4, 10, 0, 7)
    assert plain.sketch is None and plain.dense is True


def test_update_similarity_of_many_large_updates_sketches_automatically_and_keeps_no_dense_s():
    """100,000 clients of 10,000 floats are 4 GB (> AUTO_SKETCH_BYTES): sketched though sketch_dim is 0;
    above SAMPLE_ABOVE clients S is not kept."""
    n, dim = 100_000, 10_000
    store = sim.update_similarity(n, dim, 0, 0)
    assert store.dense is False
    assert isinstance(store.sketch, sim.CountSketch)
    assert store.sketch.sketch_dim == sim.auto_sketch_dim(n, dim, 0) > 0


def test_sketches_project_float64_input_to_float32_rows():
    x = np.random.default_rng(0).normal(size=(3, 10))
    for sketch in (sim.CountSketch(10, 4, 0), sim.GaussianSketch(10, 4, 0)):
        out = sketch.project(x)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, sketch.project(x.astype(np.float32)))


def test_the_similarity_without_a_dense_s_is_one_plus_the_cosines_as_with_it() -> None:
    updates = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, -2.0, 0.0]], dtype=np.float32)
    want = 1.0 + np.array([[1.0, 0.5**0.5, 0.0], [0.5**0.5, 1.0, -(0.5**0.5)], [0.0, -(0.5**0.5), 1.0]])
    for dense in (True, False):
        store = sim.UpdateSimilarity(dense=dense)
        store.update([7, 3, 5], updates)
        np.testing.assert_allclose(store.matrix(), want, atol=1e-6)
        np.testing.assert_allclose(store.matrix([5, 7]), want[np.ix_([2, 0], [2, 0])], atol=1e-6)


@pytest.mark.parametrize("name", ["dim", "sketch_dim", "block"])
def test_gaussian_sketch_refuses_a_size_below_one_by_name(name):
    sizes = {"dim": 4, "sketch_dim": 2, "block": 8} | {name: 0}
    with pytest.raises(
        ValueError, match=rf"^The '{name}' parameter of GaussianSketch must be an int >= 1\. Got 0 instead\.$"
    ):
        sim.GaussianSketch(sizes["dim"], sizes["sketch_dim"], 0, block=sizes["block"])


def test_gaussian_sketch_takes_sizes_of_one():
    out = sim.GaussianSketch(1, 1, 0, block=1).project(np.array([0.0]))
    assert out.shape == (1,) and out[0] == 0.0


def test_gaussian_sketch_draws_its_matrix_in_blocks_of_4096_rows_by_default():
    x = np.random.default_rng(1).normal(size=(2, 4100))
    np.testing.assert_array_equal(
        sim.GaussianSketch(4100, 3, 5).project(x), sim.GaussianSketch(4100, 3, 5, block=4096).project(x)
    )


def test_gaussian_sketch_names_itself_and_the_shape_of_input_of_another_width():
    with pytest.raises(
        ValueError,
        match=r"^The 'x' parameter of GaussianSketch\.project must have 4 columns\. Got shape \(3,\) instead\.$",
    ):
        sim.GaussianSketch(4, 2, 0).project(np.zeros(3))


def test_an_update_similarity_keeps_s_dense_by_default():
    assert sim.UpdateSimilarity().dense is True


def test_an_empty_update_of_an_empty_store_stores_nothing_and_one_sketched_row_is_stored():
    store = sim.UpdateSimilarity()
    rows = store.update([], np.zeros((0, 5)))
    assert rows.shape == (0, 0) and rows.dtype == np.float32 and store.pids == []
    sketched = sim.UpdateSimilarity(sim.CountSketch(3, 2, 0))
    np.testing.assert_array_equal(sketched.update([7], [np.ones(3)]), sim.CountSketch(3, 2, 0).project(np.ones((1, 3))))
    assert sketched.pids == [7]


_ROWS = "The 'updates' parameter of UpdateSimilarity.update must have one row per distinct pid. "


@pytest.mark.parametrize(
    "sketch, updates, message",
    [
        (
            sim.CountSketch(3, 2, 0),
            [np.zeros(3), np.zeros(4)],
            (
                "The 'rows' parameter of CountSketch.project_rows must hold vectors of 3 numbers. "
                "Got shape (4,) at row 1 instead."
            ),
        ),
        (
            None,
            5.0,
            _ROWS + "Got shape () for 2 pids instead.",
        ),
        (
            None,
            np.zeros((3, 4)),
            _ROWS + "Got shape (3, 4) for 2 pids instead.",
        ),
    ],
)
def test_update_similarity_refuses_updates_that_do_not_match_its_pids_by_name(sketch, updates, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        sim.UpdateSimilarity(sketch).update([0, 1], updates)


def test_a_zero_update_has_cosine_zero_and_short_updates_are_scaled_to_unit_norm():
    store = sim.UpdateSimilarity()
    store.update([0, 1, 2], np.array([[0.0, 0.0, 0.0], [0.3, 0.4, 0.0], [0.0, 0.5, 0.0]]))
    np.testing.assert_allclose(store.matrix(), [[1.0, 1.0, 1.0], [1.0, 2.0, 1.8], [1.0, 1.8, 2.0]], atol=1e-6)
    units = store.unit_rows([1, 2])
    assert units.dtype == np.float32
    np.testing.assert_allclose(units, [[0.6, 0.8, 0.0], [0.0, 1.0, 0.0]], atol=1e-7)


def test_s_stays_in_zero_two_where_float32_cosines_round_past_one():
    """This float32 update's unit vector has a float32 dot product with itself of 1 + 2^-23."""
    x = np.array(
        [
            0.7293493747711182,
            0.806139349937439,
            -0.4763767421245575,
            0.16333994269371033,
            -1.2926461696624756,
            -0.4718131422996521,
            1.37795090675354,
        ],
        dtype=np.float32,
    )
    store = sim.UpdateSimilarity()
    store.update([0, 1, 2], np.stack([x, -x, x]))
    s = store.matrix()
    assert s.min() == 0.0 and s.max() == 2.0
    assert (s[0, 1], s[0, 2]) == (0.0, 2.0)


@pytest.mark.parametrize("gram_entries", [1 << 26, 1])
def test_cosines_of_rows_shorter_than_one_are_those_of_their_directions(monkeypatch, gram_entries):
    monkeypatch.setattr(sim, "FLOAT32_GRAM_ENTRIES", gram_entries)
    x = np.array([[0.3, 0.4], [0.0, 0.5]], dtype=np.float32)
    np.testing.assert_allclose(sim.cosine_matrix(x, x), [[1.0, 0.8], [0.8, 1.0]], atol=1e-6)


def test_auto_sketch_dim_refuses_a_negative_count_by_name():
    with pytest.raises(
        ValueError, match=r"^The 'num_clients' parameter of auto_sketch_dim must be an int >= 0\. Got -1 instead\.$"
    ):
        sim.auto_sketch_dim(-1, 10)
    assert sim.auto_sketch_dim(3, 10) == 0


@pytest.mark.parametrize(("dim", "sketch_dim", "name"), [(0, 2, "dim"), (3, 0, "sketch_dim")])
def test_count_sketch_refuses_a_size_below_one_by_name(dim, sketch_dim, name):
    with pytest.raises(
        ValueError, match=rf"^The '{name}' parameter of CountSketch must be an int >= 1\. Got 0 instead\.$"
    ):
        sim.CountSketch(dim, sketch_dim, 0)


def test_count_sketch_of_size_one_is_the_input_up_to_sign():
    out = sim.CountSketch(1, 1, 0).project(np.array([[3.0]]))
    assert np.abs(out).tolist() == [[3.0]]


def test_count_sketch_sends_each_coordinate_to_one_bucket_with_a_sign_and_uses_every_bucket():
    sketch = sim.CountSketch(200, 4, 5)
    rows = sketch.project(np.eye(200))
    assert rows.shape == (200, 4)
    assert ((rows != 0).sum(axis=1) == 1).all() and set(np.abs(rows[rows != 0]).tolist()) == {1.0}
    assert set(np.flatnonzero(rows)[:] % 4) == {0, 1, 2, 3}, "bucket 0 must be drawn too"
    assert {-1.0, 1.0} <= set(rows[rows != 0].tolist())


@pytest.mark.parametrize(("a", "b"), [(np.ones(3), np.ones((2, 3))), (np.ones((2, 3)), np.ones(3))])
def test_cosine_matrix_refuses_a_one_dimensional_side_by_name(a, b):
    with pytest.raises(ValueError, match=r"^The 'a' and 'b' parameters of cosine_matrix must be 2-D arrays"):
        sim.cosine_matrix(a, b)


@pytest.mark.parametrize("name", ["dim", "sketch_dim"])
def test_auto_sketch_dim_refuses_a_negative_size_by_name(name):
    sizes = {"num_clients": 3, "dim": 10, "sketch_dim": 0} | {name: -2}
    with pytest.raises(ValueError, match=rf"^The '{name}' parameter of auto_sketch_dim must be an int >= 0\. Got -2"):
        sim.auto_sketch_dim(**sizes)


def test_auto_sketch_dim_sketches_only_strictly_above_both_bounds():
    dim = sim.AUTO_SKETCH_DIM + 1
    at_bytes = sim.AUTO_SKETCH_BYTES // (4 * dim)
    assert at_bytes * 4 * dim <= sim.AUTO_SKETCH_BYTES < (at_bytes + 1) * 4 * dim
    assert sim.auto_sketch_dim(at_bytes, dim) == 0, "at most AUTO_SKETCH_BYTES stay exact"
    assert sim.auto_sketch_dim(at_bytes + 1, dim) == sim.AUTO_SKETCH_DIM
    wide = 2 * sim.AUTO_SKETCH_DIM
    assert sim.AUTO_SKETCH_BYTES % (4 * wide) == 0
    exact = sim.AUTO_SKETCH_BYTES // (4 * wide)
    assert sim.auto_sketch_dim(exact, wide) == 0, "exactly AUTO_SKETCH_BYTES is not above it"
    assert sim.auto_sketch_dim(exact + 1, wide) == sim.AUTO_SKETCH_DIM
    assert sim.auto_sketch_dim(10**9, sim.AUTO_SKETCH_DIM) == 0, "a dimension of AUTO_SKETCH_DIM is not above it"


def test_use_sample_only_above_the_bound():
    assert not sim.use_sample(100, 100) and sim.use_sample(101, 100) and not sim.use_sample(10**6, 0)


def test_sketch_rows_of_one_row_and_of_a_list_are_that_stack():
    one = [np.array([1.0, 2.0, 3.0])]
    np.testing.assert_array_equal(sim.sketch_rows(one, 0, exact=True), [[1.0, 2.0, 3.0]])
    rows = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    out = sim.sketch_rows(rows, 0)
    assert isinstance(out, np.ndarray) and out.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    array = np.arange(6.0).reshape(3, 2)
    assert sim.sketch_rows(array, 0) is array or np.shares_memory(sim.sketch_rows(array, 0), array)


def test_sketch_rows_reads_the_length_from_the_first_row():
    with pytest.raises(ValueError, match=r"vectors of one length 3\."):
        sim.sketch_rows([np.ones(3), np.ones(2), np.ones(2)], 0)


@pytest.mark.parametrize(
    ("affinity", "limit", "want"),
    [
        ({0, 1, 2, 3}, None, 4),
        ({0, 1, 2, 3}, "2", 2),
        ({0, 1, 2, 3}, "8", 4),
        ({0, 1, 2, 3}, "1", 1),
        ({0, 1, 2, 3}, "0", 4),
        ({0, 1, 2, 3}, "x", 4),
        ({0}, None, 1),
    ],
)
def test_row_threads_are_the_usable_cpus_capped_by_omp_num_threads(monkeypatch, affinity, limit, want):
    monkeypatch.setattr(sim.os, "sched_getaffinity", lambda pid: affinity, raising=False)
    monkeypatch.setattr(sim.os, "cpu_count", lambda: 64)
    if limit is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", limit)
    assert sim.row_threads() == want


@pytest.mark.parametrize(("cpus", "want"), [(6, 6), (None, 1)])
def test_row_threads_without_affinity_count_the_cpus(monkeypatch, cpus, want):
    monkeypatch.delattr(sim.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(sim.os, "cpu_count", lambda: cpus)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert sim.row_threads() == want


@pytest.mark.parametrize(("count", "threads", "slices"), [(7, 1, 1), (7, 2, 2), (7, 3, 3), (2, 5, 2), (7, 0, 3)])
def test_over_rows_cuts_the_rows_into_one_indexed_slice_per_thread(monkeypatch, count, threads, slices):
    import threading

    monkeypatch.setattr(sim, "row_threads", lambda: 3)
    seen: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def work(lo: int, hi: int, t: int) -> None:
        with lock:
            seen.append((lo, hi, t))

    sim.over_rows(count, work, threads)
    seen.sort()
    assert [t for _, _, t in seen] == list(range(slices)), "each slice gets its own index, from 0"
    assert [lo for lo, _, _ in seen] == [0] + [hi for _, hi, _ in seen[:-1]] and seen[-1][1] == count
    assert all(isinstance(v, int) for s in seen for v in s)


def test_over_rows_without_a_thread_count_uses_row_threads(monkeypatch):
    monkeypatch.setattr(sim, "row_threads", lambda: 3)
    slices: list[int] = []
    sim.over_rows(9, lambda lo, hi, t: slices.append(t))
    assert sorted(slices) == [0, 1, 2]


def test_over_rows_runs_one_slice_on_the_callers_thread():
    import threading

    names: list[str] = []
    sim.over_rows(5, lambda lo, hi, t: names.append(threading.current_thread().name), threads=1)
    assert names == [threading.current_thread().name]


def test_over_rows_works_in_a_forked_child_after_the_parent_used_its_pool():
    import multiprocessing

    sim.over_rows(4, lambda lo, hi, t: None, threads=2)
    child = multiprocessing.get_context("fork").Process(target=sim.over_rows, args=(4, _nothing, 2))
    child.start()
    child.join(timeout=30)
    hung = child.exitcode is None
    if hung:
        child.kill()
    assert not hung and child.exitcode == 0, "a forked child must not wait on its parent's pool threads"


def _nothing(lo: int, hi: int, t: int) -> None:
    return None


def test_cosine_matrix_float32_path_gives_a_zero_row_cosine_0_whatever_fresh_memory_holds(monkeypatch):
    # freed NaN buffers of the factors' sizes: numpy hands them out again, so a factor left
    # unwritten (np.divide's where= without out=) shows as NaN instead of a lucky 0
    monkeypatch.setattr(sim, "FLOAT32_GRAM_ENTRIES", 0)
    rng = np.random.default_rng(0)
    for m in (3, 5, 8, 17, 64, 200):
        a = rng.normal(size=(m, 3)).astype(np.float32)
        a[1] = 0.0
        b = rng.normal(size=(m + 1, 3)).astype(np.float32)
        b[2] = 0.0
        for _ in range(3):
            poison = [np.full(n, np.nan) for n in (m, m + 1) for _ in range(8)]
            del poison
            cos = sim.cosine_matrix(a, b)
            assert np.isfinite(cos).all()
            assert (cos[1] == 0).all() and (cos[:, 2] == 0).all()


def test_unit_rows_into_out_normalise_in_place_and_keep_a_zero_row():
    from common.clustering.similarity import unit_rows

    x = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]])
    got = unit_rows(x, out=x)
    assert got is x
    np.testing.assert_allclose(x, [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]])
    fresh = np.array([[1.0, 1.0]])
    np.testing.assert_allclose(unit_rows(fresh), [[2**-0.5, 2**-0.5]])
    assert fresh.tolist() == [[1.0, 1.0]]  # without out, the input is left as it was


def test_a_summed_store_keeps_each_clients_sum_of_its_updates_not_its_latest():
    """Client 0 sends (1, 0) then (0, 1): its row is the direction of (1, 1), 45 degrees from client 1's
    (1, 0); the store of latest updates has it at 90 degrees. A third update (-1, -1) brings the sum to 0."""
    from common.clustering.similarity import UpdateSimilarity

    for dense in (True, False):
        summed, last = UpdateSimilarity(dense=dense, summed=True), UpdateSimilarity(dense=dense)
        for store in (summed, last):
            store.update([0, 1], np.array([[1.0, 0.0], [2.0, 0.0]]))
            store.update([0], np.array([[0.0, 1.0]]))
        assert summed.matrix([0, 1])[0, 1] == pytest.approx(1.0 + 2**-0.5)
        assert last.matrix([0, 1])[0, 1] == pytest.approx(1.0)
        np.testing.assert_allclose(summed.unit_rows([0]), [[2**-0.5, 2**-0.5]], atol=1e-7)
        summed.update([1, 0], np.array([[5.0, 0.0], [-1.0, -1.0]]))  # client 1's sum (7, 0): still e0
        np.testing.assert_allclose(summed.unit_rows([0, 1]), [[0.0, 0.0], [1.0, 0.0]], atol=1e-7)
        summed.update([0], np.array([[0.0, -3.0]]))  # from a zero sum: the new update alone
        np.testing.assert_allclose(summed.unit_rows([0]), [[0.0, -1.0]], atol=1e-7)


def test_a_summed_sketched_store_holds_the_sketch_of_the_sum():
    from common.clustering.similarity import UpdateSimilarity, update_similarity

    rng = np.random.default_rng(3)
    rounds = [rng.normal(size=(3, 500)) for _ in range(4)]
    summed = update_similarity(3, 500, 64, seed=5, summed=True)
    for r in rounds:
        summed.update([0, 1, 2], r)
    once = UpdateSimilarity(summed.sketch)
    once.update([0, 1, 2], np.sum(rounds, axis=0))
    np.testing.assert_allclose(summed.unit_rows([0, 1, 2]), once.unit_rows([0, 1, 2]), atol=1e-5)
    np.testing.assert_allclose(summed.matrix(), once.matrix(), atol=1e-5)
    assert summed.summed and not update_similarity(3, 500, 64, seed=5).summed
