"""Louvain on FLIC's similarity graph; Sattler's bi-partition and its index mapping."""

import re

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering.bipartition import (
    bipartition,
    mean_update_ratio,
    sattler_bipartition,
    nearest_separation,
    separation,
    should_split,
    split_cluster,
    update_norms,
)
from common.clustering.louvain import louvain_labels, similarity_graph
from common.clustering.similarity import sketch_rows


def _two_blocks(rng, n=12):
    truth = np.repeat([0, 1], n // 2)
    s = np.where(truth[:, None] == truth[None, :], 1.9, 0.2) + rng.uniform(0, 0.05, (n, n))
    s = (s + s.T) / 2
    perm = rng.permutation(n)
    return s[np.ix_(perm, perm)], truth[perm]


def test_louvain_finds_two_obvious_communities_deterministically():
    s, truth = _two_blocks(np.random.default_rng(0))
    labels = louvain_labels(s, seed=5)
    assert adjusted_rand_score(truth, labels) == 1.0
    assert labels[0] == 0 and set(labels) == {0, 1}
    for seed in (0, 1, 2):
        np.testing.assert_array_equal(louvain_labels(s, seed=seed), louvain_labels(s, seed=seed))


def test_louvain_resolution_and_degenerate_graphs():
    s, _ = _two_blocks(np.random.default_rng(1))
    assert len(set(louvain_labels(s, resolution=100.0))) == len(s)
    weak = np.where(s > 1, 1.2, 1.0)
    assert len(set(louvain_labels(weak, resolution=1.0))) == 2
    assert len(set(louvain_labels(weak, resolution=0.5))) == 1
    np.testing.assert_array_equal(louvain_labels(np.zeros((3, 3))), [0, 1, 2])
    np.testing.assert_array_equal(louvain_labels(np.array([[2.0]])), [0])
    with pytest.raises(ValueError, match="'resolution' parameter of louvain_labels"):
        louvain_labels(s, resolution=0.0)
    with pytest.raises(ValueError, match="'similarity' parameter of similarity_graph"):
        similarity_graph(np.array([[1.0, -0.5], [-0.5, 1.0]]))
    assert similarity_graph(s).number_of_edges() == len(s) * (len(s) - 1) // 2


def test_update_norms_ratio_and_relative_split_criterion():
    mean_norm, rms, max_norm = update_norms(np.array([[3.0, 0.0], [-3.0, 0.0], [0.0, 4.0]]))
    assert mean_norm == pytest.approx(4 / 3) and rms == pytest.approx(np.sqrt(34 / 3)) and max_norm == 4.0
    rng = np.random.default_rng(0)
    # Unit updates with pairwise cosine 0.25: the ratio is 0.5 whatever the sample size.
    base = rng.normal(size=400)
    for m in (2, 5, 50):
        est = np.mean(
            [
                mean_update_ratio(
                    np.stack(
                        [
                            0.5 * base / np.linalg.norm(base) + np.sqrt(0.75) * v / np.linalg.norm(v)
                            for v in rng.normal(size=(m, 400))
                        ]
                    )
                )
                ** 2
                for _ in range(200)
            ]
        )
        assert est == pytest.approx(0.25, abs=0.03)
    assert mean_update_ratio(np.ones((3, 4))) == pytest.approx(1.0)
    assert mean_update_ratio(np.array([[1.0, 0.0], [-1.0, 0.0]])) == 0.0
    assert np.isnan(mean_update_ratio(np.ones((1, 4))))
    kw = {"eps1": 0.5, "eps2": 1.6, "split_after": 20}
    assert should_split(0.3, 2.0, 3, 21, **kw)
    assert not should_split(0.3, 2.0, 3, 20, **kw)
    assert not should_split(0.3, 2.0, 2, 21, **kw)
    assert not should_split(0.6, 2.0, 3, 21, **kw)
    assert not should_split(float("nan"), 2.0, 3, 21, **kw)
    assert not should_split(0.3, 1.5, 3, 21, **kw)
    assert should_split(0.3, 1e-3, 3, 21, **{**kw, "eps2": 0.0})


def test_separation_accepts_distinct_groups_and_rejects_a_split_of_one_group():
    rng = np.random.default_rng(0)
    centre = rng.normal(size=(2, 20))
    groups = np.repeat([0, 1], 6)
    two = centre[groups] + 0.3 * rng.normal(size=(12, 20))
    one = centre[np.zeros(12, dtype=int)] + 0.3 * rng.normal(size=(12, 20))
    for u, separates in ((two, True), (one, False)):
        unit = u / np.linalg.norm(u, axis=1, keepdims=True)
        c = unit @ unit.T
        a, b = bipartition(c)
        cross, intra = separation(c, a, b)
        assert (intra > cross) is separates
        assert cross == pytest.approx(c[np.ix_(a, b)].max())
    assert separation(np.array([[1.0, 0.2], [0.2, 1.0]]), np.array([0]), np.array([1])) == (0.2, 1.0)


def _unit_cosine(u: np.ndarray) -> np.ndarray:
    unit = u / np.linalg.norm(u, axis=1, keepdims=True)
    return unit @ unit.T


@pytest.mark.parametrize("seed", range(5))
def test_nearest_separation_keeps_a_split_of_four_groups_that_the_strict_test_refuses(seed):
    """Four groups split two against two: each half holds two groups that are unlike each other, so
    strict's smallest same-half cosine is between groups; each member's nearest one is in its group."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(4), 5)
    u = rng.normal(size=(4, 50))[groups] + 0.3 * rng.normal(size=(20, 50))
    c = _unit_cosine(u)
    a, b = bipartition(c)
    assert not set(groups[a]) & set(groups[b])  # no group is cut
    cross, nearest = nearest_separation(c, a, b)
    assert nearest > cross
    cross_strict, intra = separation(c, a, b)
    assert cross_strict == cross and intra < cross


@pytest.mark.parametrize("seed", range(5))
def test_nearest_separation_refuses_a_split_of_one_group(seed):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=50) + 0.3 * rng.normal(size=(20, 50))
    c = _unit_cosine(u)
    a, b = bipartition(c)
    cross, nearest = nearest_separation(c, a, b)
    assert nearest <= cross


def test_nearest_separation_is_each_members_best_partner_at_worst():
    c = np.array([[1.0, 0.9, 0.1, 0.0], [0.9, 1.0, 0.2, 0.3], [0.1, 0.2, 1.0, 0.5], [0.0, 0.3, 0.5, 1.0]])
    assert nearest_separation(c, np.array([0, 1]), np.array([2, 3])) == (0.3, 0.5)
    assert nearest_separation(c, np.array([0]), np.array([1, 2, 3])) == (0.9, 0.3)
    assert nearest_separation(np.array([[1.0, 0.2], [0.2, 1.0]]), np.array([0]), np.array([1])) == (0.2, 1.0)


def test_bipartition_separates_opposite_directions():
    u = np.array([[1.0, 0.1], [-1.0, 0.0], [0.9, 0.0], [-1.0, -0.2]])
    c = (u / np.linalg.norm(u, axis=1, keepdims=True)) @ (u / np.linalg.norm(u, axis=1, keepdims=True)).T
    a, b = bipartition(c)
    assert a.tolist() == [0, 2] and b.tolist() == [1, 3]
    with pytest.raises(ValueError, match="n >= 2"):
        bipartition(np.ones((1, 1)))


def test_two_nested_splits_map_positions_back_to_client_ids():
    directions = {0: [1, 0, 0], 1: [-1, 0, 0], 2: [0, 1, 0], 3: [0, -1, 0]}
    group = {10: 0, 31: 0, 17: 1, 42: 1, 5: 2, 66: 2, 23: 3, 8: 3}
    rng = np.random.default_rng(0)
    vec = {
        pid: np.array(directions[g], float) * 3 + np.array([0, 0, 1.0]) + 0.05 * rng.normal(size=3)
        for pid, g in group.items()
    }

    def cos(members):
        u = np.array([vec[p] / np.linalg.norm(vec[p]) for p in members])
        return u @ u.T

    members = [10, 31, 17, 42, 5, 66, 23, 8]
    first, second = split_cluster(members, cos(members))
    for half in (first, second):
        sub1, sub2 = split_cluster(half, cos(half))
        for sub in (sub1, sub2):
            assert set(sub) <= set(half)
            assert len({group[p] for p in sub}) == 1
    # the reference code's bug: positions inside the sub-cluster are not client ids
    a, _ = bipartition(cos(second))
    assert set(a.tolist()) <= set(range(len(second))) and not set(a.tolist()) <= set(second)
    with pytest.raises(ValueError, match="'cosine' parameter of split_cluster"):
        split_cluster([1, 2, 3], np.eye(2))


def test_bipartition_equals_scikit_learn_complete_linkage_and_separation_the_masked_minimum():
    from sklearn.cluster import AgglomerativeClustering

    rng = np.random.default_rng(7)
    for n in (2, 3, 9, 40):
        u = rng.normal(size=(n, 6)) + rng.normal(size=(3, 6))[rng.integers(0, 3, n)]
        c = (u / np.linalg.norm(u, axis=1, keepdims=True)) @ (u / np.linalg.norm(u, axis=1, keepdims=True)).T
        c += 1e-9 * rng.normal(size=c.shape)  # slightly asymmetric, as a float32 Gram may be
        d = np.clip(1.0 - (c + c.T) / 2.0, 0.0, 2.0)
        np.fill_diagonal(d, 0.0)
        labels = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete").fit_predict(d)
        a, b = bipartition(c)
        assert a.tolist() == np.flatnonzero(labels == labels[0]).tolist()
        assert b.tolist() == np.flatnonzero(labels != labels[0]).tolist()
        intra = [c[np.ix_(h, h)][~np.eye(len(h), dtype=bool)].min() for h in (a, b) if len(h) > 1]
        assert separation(c, a, b) == (c[np.ix_(a, b)].max(), min(intra) if intra else 1.0)


def test_update_norms_of_float32_updates_are_float64_totals_without_a_float64_copy():
    """float32 products and block sums (about 1e-6 relative: the criterion's eps1 is 0.5), float64 totals."""
    import tracemalloc

    u = np.random.default_rng(2).normal(size=(50, 20_000)).astype(np.float32)
    u64 = u.astype(np.float64)
    norms = np.linalg.norm(u64, axis=1)
    tracemalloc.start()
    got = update_norms(u)
    ratio = mean_update_ratio(u)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(
        got, (np.linalg.norm(u64.mean(axis=0)), np.sqrt(np.mean(norms**2)), norms.max()), rtol=1e-5
    )
    # the ratio cancels (m ||mean||^2 - mean ||u||^2): float32 sums move it by about 1e-6 / (2 ratio)
    assert ratio == pytest.approx(mean_update_ratio(u64), abs=1e-5)
    assert peak < u.nbytes / 4


def test_sattler_bipartition_cuts_the_seeded_sketch_of_the_given_dimension():
    rng = np.random.default_rng(1)
    updates = list(np.r_[rng.normal(1.0, 1.0, (4, 300)), rng.normal(-1.0, 1.0, (4, 300))])
    pids = list(range(10, 18))
    sketched = list(sketch_rows(updates, 0, sketch_dim=64))
    # seed 0 is the default; sketch_dim reaches the sketch: the same split and cosines as on the sketched rows
    assert sattler_bipartition(pids, updates, sketch_dim=64) == sattler_bipartition(pids, sketched)
    assert sattler_bipartition(pids, updates) != sattler_bipartition(pids, sketched)


def test_separation_reads_an_integer_cosine_matrix_as_floats():
    # cosines of +-1 updates come out exact; the diagonal masked with inf needs a float copy
    c = np.array([[1, 1, -1, -1], [1, 1, -1, -1], [-1, -1, 1, 1], [-1, -1, 1, 1]])
    assert separation(c, np.array([0, 1]), np.array([2, 3])) == (-1.0, 1.0)


@pytest.mark.parametrize("cosine", [np.ones((2, 3)), np.ones(4), np.ones((1, 1))])
def test_bipartition_refuses_a_matrix_that_is_not_square_of_two_or_more(cosine):
    shape = re.escape(str(cosine.shape))
    with pytest.raises(
        ValueError,
        match=r"^The 'cosine' parameter of bipartition must be a"
        rf" square \(n, n\) array with n >= 2\. Got shape {shape}",
    ):
        bipartition(cosine)


def test_should_split_only_strictly_below_eps1_and_strictly_above_eps2():
    """Sattler's criterion is strict on both sides: a ratio at eps1 or a norm at eps2 keeps the cluster."""
    kw = {"eps1": 0.4, "eps2": 1.6, "split_after": 0}
    assert should_split(0.399, 1.601, 3, 1, **kw)
    assert not should_split(0.4, 1.601, 3, 1, **kw)
    assert not should_split(0.399, 1.6, 3, 1, **kw)


def test_update_norms_of_a_long_sequence_sum_every_chunk():
    """1,100 rows arrive as a sequence (stacked 512 at a time): the norms are those of the whole array."""
    u = np.random.default_rng(5).normal(1.0, 1.0, (1100, 3))
    np.testing.assert_allclose(update_norms(list(u)), update_norms(u), rtol=1e-12)
    np.testing.assert_allclose(update_norms(u)[0], np.linalg.norm(u.mean(axis=0)), rtol=1e-12)
    small = 1e-3 * u  # every norm below 1: the largest is the largest norm, not a floor at 1
    np.testing.assert_allclose(update_norms(list(small))[2], np.linalg.norm(small, axis=1).max(), rtol=1e-12)


def test_update_norms_of_one_update_in_a_sequence_and_of_none():
    assert update_norms([np.array([3.0, 4.0])]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError, match=r"The 'updates' parameter of update_norms must be a non-empty"):
        update_norms([])
