"""Issue 31's reads in reused blocks: row_blocks, CountSketch a row at a time, NormSums, Sattler's
split of a sample with the rest joined in batches (``sattler_split``: ``split_sample`` + ``join_halves``)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering.bipartition import NormSums, mean_update_ratio, sattler_bipartition, update_norms
from common.clustering.blocks import row_blocks
from common.clustering.oneshot import Cut, flhc_clusters
from common.clustering.sampled import half_sums, join_halves, sample_rows, sattler_split, split_sample
from common.clustering.similarity import CountSketch, UpdateSimilarity, sketch_rows


def _in_memory(pids: list[int], x: np.ndarray):
    """An ``ask`` that answers from ``x`` (row ``i`` is ``pids[i]``'s update), recording the requests."""
    at = {p: i for i, p in enumerate(pids)}
    asked: list[list[int]] = []

    def ask(ids: list[int]) -> tuple[list[int], list[np.ndarray]]:
        asked.append(list(ids))
        return list(ids), [x[at[p]] for p in ids]

    ask.asked = asked  # type: ignore[attr-defined]
    return ask


def _planted(n: int, groups: int, dim: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.arange(n) % groups)
    centres = rng.standard_normal((groups, dim))
    return truth, (centres[truth] + noise * rng.standard_normal((n, dim))).astype(np.float32)


@pytest.mark.parametrize("as_list", [True, False])
def test_row_blocks_are_the_rows_in_order_in_one_reused_buffer(as_list):
    x = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
    rows = list(x) if as_list else x
    at = np.array([6, 0, 3, 3, 5])
    seen, bases = [], set()
    for lo, block in row_blocks(rows, at, chunk=2, dtype=np.float64):
        assert block.dtype == np.float64
        seen.append((lo, block.copy()))
        bases.add(id(block.base))
    assert [lo for lo, _ in seen] == [0, 2, 4]
    np.testing.assert_array_equal(np.concatenate([b for _, b in seen]), x[at])
    assert len(bases) == 1  # one buffer, overwritten block after block
    assert list(row_blocks(rows, np.array([], dtype=np.int64))) == []
    whole = [b.copy() for _, b in row_blocks(rows, chunk=4)]
    assert whole[0].dtype == np.float32 and np.array_equal(np.concatenate(whole), x)


def test_count_sketch_a_row_at_a_time_is_x_times_its_matrix():
    rng = np.random.default_rng(0)
    dim, k = 1000, 64
    sketch = CountSketch(dim, k, seed=5)
    # R from the sketch's own buckets and signs, as a dense (d, k) matrix: one signed 1 per row
    r = sketch._by_bucket.T.toarray()
    assert (np.count_nonzero(r, axis=1) == 1).all() and set(np.unique(r)) == {-1.0, 0.0, 1.0}
    x = rng.standard_normal((9, dim)).astype(np.float32)
    want = x.astype(np.float64) @ r
    np.testing.assert_allclose(sketch.project(x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(sketch.project_rows(list(x)), sketch.project(x))
    np.testing.assert_array_equal(sketch.project(x[2]), sketch.project(x)[2])
    np.testing.assert_array_equal(sketch_rows(list(x), 5, sketch_dim=k), sketch.project(x))
    with pytest.raises(ValueError, match="'rows' parameter of CountSketch.project_rows must hold vectors of 1000"):
        sketch.project_rows([x[0], x[1, :10]])


def test_update_similarity_stores_a_list_of_rows_as_the_stacked_array():
    _, x = _planted(40, 2, 300, 0.5, seed=1)
    a, b = UpdateSimilarity(CountSketch(300, 32, 2)), UpdateSimilarity(CountSketch(300, 32, 2))
    a.update(range(40), x)
    b.update(range(40), list(x))
    np.testing.assert_array_equal(a.matrix(), b.matrix())
    with pytest.raises(ValueError, match="must have one row per distinct pid. Got shape \\(40, 300\\) for 39 pids"):
        b.update(range(39), list(x))


def test_norm_sums_row_by_row_equal_update_norms_of_the_array():
    rng = np.random.default_rng(2)
    u = (rng.standard_normal((1100, 9)) + 0.3).astype(np.float32)
    sums = NormSums()
    sums.add_rows(list(u[:700]))
    sums.add(u[700:])
    np.testing.assert_allclose(sums.norms(), update_norms(u.astype(np.float64)), rtol=1e-6)
    assert sums.count == 1100
    assert sums.ratio() == pytest.approx(mean_update_ratio(u.astype(np.float64)), rel=1e-6)
    # the largest norm is a row's, not the sum's: a plausible slip that a mean-norm test would miss
    assert sums.norms()[2] == pytest.approx(float(np.linalg.norm(u, axis=1).max()), rel=1e-6)
    with pytest.raises(ValueError, match="'updates' parameter of update_norms must be a non-empty"):
        NormSums().norms()
    with pytest.raises(ValueError, match="Got shape \\(3,\\) instead"):
        sums.add_rows([np.zeros(3)])


def test_join_halves_sides_and_sums():
    truth, x = _planted(700, 2, 50, 0.4, seed=3)
    means = np.stack([x[truth == g].mean(axis=0) for g in (0, 1)]).astype(np.float64)
    sides, sums = join_halves(list(x), means)
    assert adjusted_rand_score(truth, sides) == 1.0
    for h in (0, 1):
        np.testing.assert_allclose(sums[h], x[sides == h].astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)
    given = (np.arange(700) % 2).astype(np.int64)
    sums2 = half_sums(list(x), given)
    np.testing.assert_allclose(sums2[1], x[1::2].astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(sums2[0], x[0::2].astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)


def test_a_sampled_split_asked_in_batches_equals_the_split_asked_at_once():
    """CFLSattler's batched form (sample first, the rest a batch at a time) splits as one request would."""
    truth, x = _planted(2600, 2, 40, 0.8, seed=4)
    pids = list(range(10, 2610))
    # noisy groups: the sample's nearest-partner test fails, so "off" keeps the split and asks the rest
    whole = sattler_split(pids, _in_memory(pids, x), sample_above=1, batch=len(pids), test="off")
    ask = _in_memory(pids, x)
    split = sattler_split(pids, ask, sample_above=1, batch=140, test="off")
    assert whole is not None and split is not None and split.kept
    assert split.halves == whole.halves and (split.cross, split.intra) == (whole.cross, whole.intra)
    at = sample_rows(len(pids), np.random.default_rng(0))
    assert ask.asked[0] == [pids[i] for i in at]  # the sample first, then 140 at a time
    assert [len(a) for a in ask.asked[1:]] == [140] * 4 + [600 - 4 * 140]
    assert split.sizes == np.bincount(split_sample([x[i] for i in at], seed=0).sides).tolist()
    labels = np.isin(pids, split.halves[1]).astype(int)
    assert adjusted_rand_score(truth, labels) == 1.0
    exact_first, exact_second, _, _ = sattler_bipartition(pids, list(x))
    assert adjusted_rand_score(truth, np.isin(pids, exact_second)) == 1.0
    np.testing.assert_allclose(split.means[1], x[labels == 1].mean(axis=0), rtol=1e-4, atol=1e-4)


def test_a_sample_is_sketched_as_the_exact_step_would_sketch_all_members(monkeypatch):
    from common.clustering import sampled, similarity
    from common.clustering.subspaces import SAMPLE_SIZE

    n, dim = SAMPLE_SIZE + 200, 5000
    monkeypatch.setattr(similarity, "AUTO_SKETCH_BYTES", (SAMPLE_SIZE + 100) * dim * 4)  # N over it, the sample not
    truth, x = _planted(n, 2, dim, 0.5, seed=6)
    widths: list[int] = []
    real_cos, real_dist = sampled.cosine_matrix, sampled.pairwise_distances
    monkeypatch.setattr(sampled, "cosine_matrix", lambda a, b: widths.append(a.shape[1]) or real_cos(a, b))
    monkeypatch.setattr(sampled, "pairwise_distances", lambda r, m: widths.append(r.shape[1]) or real_dist(r, m))
    split = sattler_split(list(range(n)), _in_memory(list(range(n)), x), sample_above=1)
    assert split is not None
    second = split.halves[1]
    labels = flhc_clusters(list(x), Cut(0.0, 2), "euclidean", 0, sample_above=1).labels
    assert widths == [similarity.AUTO_SKETCH_DIM, similarity.AUTO_SKETCH_DIM]
    assert adjusted_rand_score(truth, np.isin(np.arange(n), second)) == 1.0
    assert adjusted_rand_score(truth, labels) == 1.0
    split_sample([x[i] for i in range(50)], seed=0)  # its own size: whole
    assert widths[-1] == dim
