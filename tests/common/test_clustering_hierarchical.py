"""common.clustering.hierarchical on inputs whose answer is obvious."""

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score, silhouette_score

from common.clustering.hierarchical import (
    AUTO_MIN_SHARE,
    agglomerative,
    auto_cut,
    centroids,
    check_distance_matrix,
    cut_linkage,
    cut_tree,
    join_small_clusters,
    linkage_tree,
    most_within_tolerance,
    nearest,
    pairwise_distances,
    relabel_by_appearance,
    undecided_reason,
)


def _blobs(seed=0):
    rng = np.random.default_rng(seed)
    truth = np.repeat([0, 1], 10)
    x = rng.normal(scale=0.1, size=(20, 5)) + np.where(truth[:, None] == 0, 0.0, 10.0)
    return x, truth


def test_pairwise_distances_match_the_definition():
    x = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])
    d = pairwise_distances(x)
    np.testing.assert_allclose(d, [[0, 5, 10], [5, 0, 5], [10, 5, 0]])
    assert pairwise_distances(x[:1]).shape == (1, 1)
    np.testing.assert_allclose(pairwise_distances(x, "cityblock")[0, 1], 7.0)


@pytest.mark.parametrize(
    "bad, match",
    [(np.zeros(3), "'vectors'"), (np.array([[np.nan, 1.0]]), "'vectors'"), (np.zeros((0, 2)), "'vectors'")],
)
def test_pairwise_distances_rejects_bad_vectors(bad, match):
    with pytest.raises(ValueError, match=match):
        pairwise_distances(bad)
    with pytest.raises(ValueError, match="'metric'"):
        pairwise_distances(np.ones((2, 2)), metric="hamming-ish")


@pytest.mark.parametrize("linkage", ["average", "complete", "single"])
def test_two_separated_blobs_give_ari_one_by_threshold_and_by_count(linkage):
    x, truth = _blobs()
    d = pairwise_distances(x)
    by_count = agglomerative(d, num_clusters=2, linkage=linkage)
    by_threshold = agglomerative(d, threshold=5.0, linkage=linkage)
    assert adjusted_rand_score(truth, by_count) == 1.0
    np.testing.assert_array_equal(by_count, by_threshold)
    assert by_count[0] == 0


def test_threshold_extremes_give_one_cluster_or_one_per_point():
    x, _ = _blobs()
    d = pairwise_distances(x)
    off = d[~np.eye(len(d), dtype=bool)]
    assert set(agglomerative(d, threshold=off.max() * 1.01)) == {0}
    np.testing.assert_array_equal(agglomerative(d, threshold=off.min() * 0.99), np.arange(20))
    np.testing.assert_array_equal(agglomerative(d, num_clusters=20), np.arange(20))
    assert agglomerative(np.zeros((1, 1)), threshold=1.0).tolist() == [0]


def test_agglomerative_rejects_bad_arguments():
    d = pairwise_distances(_blobs()[0])
    with pytest.raises(ValueError, match="'linkage'.*'ward' needs Euclidean feature vectors"):
        agglomerative(d, num_clusters=2, linkage="ward")
    with pytest.raises(ValueError, match="'linkage'"):
        agglomerative(d, num_clusters=2, linkage="centroid")
    with pytest.raises(ValueError, match="exactly one must be given"):
        agglomerative(d)
    with pytest.raises(ValueError, match="exactly one must be given"):
        agglomerative(d, threshold=1.0, num_clusters=2)
    with pytest.raises(ValueError, match="'num_clusters'"):
        agglomerative(d, num_clusters=21)
    with pytest.raises(ValueError, match="'threshold'"):
        agglomerative(d, threshold=-1.0)
    with pytest.raises(ValueError, match="'distances'.*symmetric"):
        agglomerative(np.array([[0.0, 1.0], [2.0, 0.0]]), num_clusters=1)
    with pytest.raises(ValueError, match="'distances'.*square"):
        agglomerative(np.ones((2, 3)), num_clusters=1)
    with pytest.raises(ValueError, match="'distances'.*non-negative"):
        check_distance_matrix(-np.ones((2, 2)), "x")


def test_relabel_by_appearance():
    np.testing.assert_array_equal(relabel_by_appearance(np.array([7, 7, 2, 9, 2])), [0, 0, 1, 2, 1])


def test_centroids_and_nearest_assign_new_points_to_their_blob():
    x, truth = _blobs()
    c = centroids(x, truth)
    np.testing.assert_allclose(c[1], x[10:].mean(axis=0))
    rng = np.random.default_rng(3)
    new = np.vstack([rng.normal(scale=0.1, size=(3, 5)), 10.0 + rng.normal(scale=0.1, size=(3, 5))])
    np.testing.assert_array_equal(nearest(new, c), [0, 0, 0, 1, 1, 1])
    with_empty = centroids(x, truth, num_clusters=3)
    assert np.isnan(with_empty[2]).all()
    np.testing.assert_array_equal(nearest(new, with_empty[[2, 0, 1]]), [1, 1, 1, 2, 2, 2])
    with pytest.raises(ValueError, match="'references'"):
        nearest(new, np.full((2, 5), np.nan))
    with pytest.raises(ValueError, match="'labels'"):
        centroids(x, truth[:-1])
    with pytest.raises(ValueError, match="'num_clusters'"):
        centroids(x, truth, num_clusters=1)


def test_auto_cut_finds_the_number_of_blobs_by_silhouette():
    rng = np.random.default_rng(0)
    for k in (2, 3, 6):
        centres = rng.normal(scale=10.0, size=(k, 4))
        truth = np.repeat(np.arange(k), 5)
        x = centres[truth] + rng.normal(scale=0.3, size=(len(truth), 4))
        labels, score = auto_cut(pairwise_distances(x))
        assert adjusted_rand_score(truth, labels) == 1.0 and score > 0.8
    # two tight blobs far apart are not split further into noise
    x = np.concatenate([rng.normal(size=(8, 2)) * 0.1, rng.normal(size=(8, 2)) * 0.1 + 50])
    labels, _ = auto_cut(pairwise_distances(x), "complete")
    assert len(set(labels.tolist())) == 2
    assert auto_cut(np.zeros((4, 4)))[1] is None and set(auto_cut(np.zeros((4, 4)))[0].tolist()) == {0}
    with pytest.raises(ValueError, match="'max_clusters'"):
        auto_cut(pairwise_distances(x), max_clusters=1)


def test_weighted_linkage_is_wpgma_not_upgma():
    x = np.array([[0.0], [1.0], [3.0], [10.0]])
    # {0, 1} merge at 1; with 3.0 at (3 + 2) / 2 = 2.5; then with 10.0: WPGMA ((10 + 9) / 2 + 7) / 2 = 8.25,
    # UPGMA (10 + 9 + 7) / 3 = 8.67
    dist = pairwise_distances(x)
    assert agglomerative(dist, threshold=8.3, linkage="weighted").tolist() == [0, 0, 0, 0]
    assert agglomerative(dist, threshold=8.3, linkage="average").tolist() == [0, 0, 0, 1]
    assert agglomerative(dist, threshold=8.25, linkage="weighted").tolist() == [0, 0, 0, 1]  # merges below only
    assert agglomerative(dist, num_clusters=2, linkage="weighted").tolist() == [0, 0, 0, 1]


def test_auto_cut_keeps_close_groups_apart_where_the_best_silhouette_merges_them():
    # three groups of 8; two of them 6 apart, the third 20 away: the best silhouette (0.817 at 2
    # clusters) merges the close pair, whose split scores 0.799 (within the 0.02 tolerance); 4: 0.644
    rng = np.random.default_rng(3)
    truth = np.repeat([0, 1, 2], 8)
    centres = np.array([[0.0, 0, 0, 0], [6.0, 0, 0, 0], [20.0, 0, 0, 0]])
    d = pairwise_distances(centres[truth] + rng.normal(scale=0.5, size=(24, 4)))
    labels, score = auto_cut(d)
    assert adjusted_rand_score(truth, labels) == 1.0 and 0.79 < score < 0.81
    coarse, best = auto_cut(d, tolerance=0.0)  # the best silhouette alone
    assert len(set(coarse.tolist())) == 2 and best > score


def test_auto_cut_keeps_one_cluster_without_structure_and_checks_tolerance():
    rng = np.random.default_rng(0)
    d = pairwise_distances(rng.normal(size=(40, 100)))  # no groups: every cut scores below 0.1
    labels, score = auto_cut(d)
    assert set(labels.tolist()) == {0} and score is None
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="'tolerance'"):
            auto_cut(d, tolerance=bad)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cosine"])
def test_gram_distances_in_bands_equal_scipy_for_short_vectors_and_a_zero_one(metric):
    """Bands of 2 rows cover all 7 rows; norms below 1 and distances below 1 survive; a zero
    vector is at cosine distance 1 from every other."""
    from scipy.spatial.distance import cdist

    from common.clustering.hierarchical import _gram_distances

    rng = np.random.default_rng(3)
    x = rng.normal(scale=0.05, size=(7, 4))
    x[3] = 0.0
    x[5] = x[4]
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.nan_to_num(cdist(x, x, metric), nan=1.0)
    np.fill_diagonal(expected, 0.0)
    for block in (2, 1024):
        np.testing.assert_allclose(_gram_distances(x, metric, block=block), expected, atol=1e-6)


def test_undecided_reason_tells_too_few_clients_from_alike_signals_from_no_structure():
    """Three clients are enough for a silhouette; only all-zero distances are alike signals."""
    apart = np.ones((3, 3)) - np.eye(3)
    assert undecided_reason(apart[:2, :2]).startswith("2 clients, fewer than the 3")
    assert undecided_reason(apart).startswith("no cut scores a silhouette above")
    assert undecided_reason(np.zeros((3, 3))) == "all clients' signals are alike"
    assert undecided_reason(None).startswith("no cut of the sample scores")
    assert "under 1%" not in undecided_reason(apart), "3 clients: no cluster is joined"
    big = np.ones((200, 200)) - np.eye(200)
    assert undecided_reason(big).endswith("or every cluster but one holds under 1% of the clients: no group structure")


def _tied_distances(n: int, seed: int) -> np.ndarray:
    """Small integer distances: many equal heights, where a cut's tie-breaking shows."""
    rng = np.random.default_rng(seed)
    d = rng.integers(1, 5, size=(n, n)).astype(float)
    d = np.triu(d, 1)
    return d + d.T


@pytest.mark.parametrize("linkage", ["average", "complete", "single"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cuts_equal_scikit_learn_at_every_count_and_threshold_with_ties(linkage, seed):
    from sklearn.cluster import AgglomerativeClustering

    for d in (_tied_distances(17, seed), pairwise_distances(np.random.default_rng(seed).normal(size=(17, 3)))):
        tree = linkage_tree(d, linkage)
        for k in range(1, 18):
            ref = AgglomerativeClustering(n_clusters=k, metric="precomputed", linkage=linkage).fit_predict(d)
            np.testing.assert_array_equal(agglomerative(d, num_clusters=k, linkage=linkage), relabel_by_appearance(ref))
            np.testing.assert_array_equal(cut_linkage(tree, num_clusters=k), relabel_by_appearance(ref))
        for t in [0.0, 0.5, *np.unique(d), float(d.max()) + 1.0]:
            ref = AgglomerativeClustering(
                n_clusters=None, metric="precomputed", linkage=linkage, distance_threshold=t, compute_full_tree=True
            ).fit_predict(d)
            np.testing.assert_array_equal(agglomerative(d, threshold=t, linkage=linkage), relabel_by_appearance(ref))


def test_weighted_cuts_equal_scipys_cut_tree_without_ties():
    """WPGMA has no scikit-learn reference; scipy's cut_tree breaks equal heights its own way."""
    from scipy.cluster import hierarchy
    from scipy.spatial.distance import squareform

    d = pairwise_distances(np.random.default_rng(3).normal(size=(15, 4)))
    tree = hierarchy.linkage(squareform(d), method="weighted")
    for k in range(1, 16):
        ref = relabel_by_appearance(hierarchy.cut_tree(tree, n_clusters=k).ravel())
        np.testing.assert_array_equal(agglomerative(d, num_clusters=k, linkage="weighted"), ref)


def test_a_given_tree_is_cut_instead_of_building_one():
    d = _tied_distances(12, 4)
    other = linkage_tree(_tied_distances(12, 5), "average")
    np.testing.assert_array_equal(
        cut_tree(d, threshold=0.0, num_clusters=3, tree=other),
        cut_tree(_tied_distances(12, 5), threshold=0.0, num_clusters=3),
    )
    assert cut_tree(d, threshold=0.0, num_clusters=40, tree=other).max() == 11  # clipped to N, as without a tree


def test_auto_cut_tries_the_largest_allowed_number_of_clusters():
    """Four tight groups of 1-D points, ``max_clusters=4``: the cut into 4 (the top of the range) is found."""
    truth = np.repeat(np.arange(4), [2, 2, 2, 3])
    x = 10.0 * truth + 0.01 * np.arange(truth.size)
    labels, score = auto_cut(np.abs(x[:, None] - x[None, :]), max_clusters=4)
    assert adjusted_rand_score(truth, labels) == 1.0
    assert score is not None and score > 0.9


def test_most_within_tolerance_takes_the_finest_partition_near_the_best_score():
    candidates = [(2, 0.50), (3, 0.49), (4, 0.47), (5, -np.inf)]
    assert most_within_tolerance(candidates, 0.0) == 0  # the best score
    assert most_within_tolerance(candidates, 0.01) == 1  # 3 clusters, 0.01 below: within (inclusive)
    assert most_within_tolerance(candidates, 0.02) == 1  # 4 clusters are 0.03 below: not within
    assert most_within_tolerance(candidates, 0.5) == 2  # -inf is never within a finite tolerance
    assert most_within_tolerance([(3, 0.2), (3, 0.2)], 0.0) == 0  # ties keep the first
    assert most_within_tolerance([(2, 0.2), (4, 0.2)], 0.0) == 1  # equal best scores: the most clusters
    with pytest.raises(ValueError, match="'candidates' parameter of most_within_tolerance"):
        most_within_tolerance([], 0.0)


def _two_groups_and_noisy_clients(seed, n, noisy=6):
    """Two groups of n / 2 updates (centre plus noise); ``noisy`` of them with 4 times the noise: far
    from everyone, yet nearest their own group."""
    rng = np.random.default_rng(seed)
    truth = np.repeat([0, 1], n // 2)
    centres = 2 * rng.normal(size=(2, 50))
    x = centres[truth] + rng.normal(size=(n, 50))
    far = rng.choice(n, noisy, replace=False)
    x[far] = centres[truth[far]] + 4 * rng.normal(size=(noisy, 50))
    return pairwise_distances(x), truth


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_auto_cut_joins_clients_cut_off_alone_to_their_nearest_group(seed):
    d, truth = _two_groups_and_noisy_clients(seed, 300)
    kept, _ = auto_cut(d, min_share=0.0)  # the finest cut near the best silhouette peels them off
    assert kept.max() + 1 > 2 and adjusted_rand_score(truth, kept) < 1.0
    labels, score = auto_cut(d)  # clusters under 1% of the 300 clients (3) join
    assert adjusted_rand_score(truth, labels) == 1.0 and labels.tolist() == sorted(labels.tolist())
    assert score == pytest.approx(silhouette_score(d, labels, metric="precomputed"))


def test_auto_cut_keeps_every_cluster_below_200_clients():
    d, truth = _two_groups_and_noisy_clients(0, 198)
    assert int(AUTO_MIN_SHARE * 198) < 2 <= int(AUTO_MIN_SHARE * 200)
    kept, _ = auto_cut(d, min_share=0.0)
    assert np.bincount(kept).min() == 1, "the cut has clients alone to join"
    np.testing.assert_array_equal(auto_cut(d)[0], kept)
    assert adjusted_rand_score(truth, auto_cut(d, min_share=2 / 198)[0]) == 1.0, "a share of 2 would join them"
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="'min_share' parameter of auto_cut"):
            auto_cut(d, min_share=bad)


def test_join_small_clusters_moves_each_small_member_to_its_nearest_large_cluster():
    x = np.array([0.0, 0.1, 0.2, 10.0, 10.1, 10.2, 4.0, 7.0, 30.0])
    d = np.abs(x[:, None] - x[None, :])
    labels = np.array([5, 5, 5, 2, 2, 2, 9, 9, 7])  # 4 and 7 together, 30 alone
    joined = join_small_clusters(d, labels, 3)
    assert joined.tolist() == [0, 0, 0, 1, 1, 1, 0, 1, 1], "4 is nearest 0.2, 7 and 30 nearest 10.x"
    assert join_small_clusters(d, labels, 2).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 1], "only 30 is alone"
    for untouched in (0, 1):
        assert join_small_clusters(d, labels, untouched) is labels
    assert join_small_clusters(d, labels, 4) is labels, "no cluster of 4: nothing to join"
    assert join_small_clusters(d, np.zeros(9, dtype=np.int64), 9).tolist() == [0] * 9


def test_auto_cut_keeps_one_cluster_when_all_but_one_cluster_are_under_the_share():
    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(size=(297, 5)), 40 + rng.normal(size=(3, 5))])  # 3 far clients: 1% of 300
    d = pairwise_distances(x)
    kept, _ = auto_cut(d, min_share=0.0)
    assert kept.max() + 1 >= 2
    labels, score = auto_cut(d, min_share=0.011)  # int(0.011 * 300) = 3: the cluster of 3 is not under it
    assert labels.max() + 1 >= 2
    labels, score = auto_cut(d, min_share=0.014)  # 4: it is
    assert set(labels.tolist()) == {0} and score is None


def test_cosine_puts_a_zero_row_at_1_from_every_other_row_on_both_paths(monkeypatch):
    """A client whose update did not move has no direction: FL+HC's default cosine must not turn it into NaN
    (which stops the whole clustering) and gives it the same distances through pdist and through BLAS."""
    import common.clustering.hierarchical as hierarchical
    from common.clustering.oneshot import Cut, flhc_clusters

    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(size=(6, 20)), np.zeros((1, 20))])
    exact = hierarchical.pairwise_distances(x, "cosine")
    assert np.isfinite(exact).all() and exact[6, :6].tolist() == [1.0] * 6 and exact[6, 6] == 0.0
    monkeypatch.setattr(hierarchical, "PDIST_MAX_ROWS", 2)
    np.testing.assert_allclose(hierarchical.pairwise_distances(x, "cosine"), exact, atol=1e-9)
    found = flhc_clusters(list(x), Cut(0.0), "cosine", 0)
    assert len(found.labels) == 7
