"""common.clustering.oneshot: the one-shot algorithms' server steps as pure functions."""

import itertools

import numpy as np
import pytest
from scipy.cluster import hierarchy
from scipy.spatial.distance import pdist, squareform
from sklearn.metrics import adjusted_rand_score

from common.clustering import oneshot, similarity, subspaces
from common.clustering.hierarchical import cut_tree, pairwise_distances
from common.clustering.oneshot import Cut, cut_distances, fedclust_clusters, flhc_clusters, pacfl_clusters
from strategies import FLHC, PACFL, FedClust
from strategies.fedclust import FedClustParams
from strategies.flhc import FLHCParams
from strategies.pacfl import PACFLParams


def _groups(rng, n=12, dim=30, scale=None):
    truth = np.arange(n) % 3
    centres = 5.0 * rng.standard_normal((3, dim))
    x = centres[truth] + 0.1 * rng.standard_normal((n, dim))
    if scale is not None:
        x = x * scale[:, None]
    return x, truth


def test_a_given_count_or_threshold_cuts_as_cut_tree_and_both_zero_is_the_automatic_cut():
    x, truth = _groups(np.random.default_rng(0))
    d = pairwise_distances(x)
    labels, silhouette = cut_distances(d, Cut(threshold=0.0, num_clusters=2, linkage="complete"))
    assert silhouette is None
    np.testing.assert_array_equal(labels, cut_tree(d, threshold=0.0, num_clusters=2, linkage="complete"))
    labels, silhouette = cut_distances(d, Cut(threshold=0.0))
    assert silhouette is not None and labels.max() + 1 == 3


def test_fedclust_cuts_euclidean_distances_of_the_final_layers():
    x, truth = _groups(np.random.default_rng(1))
    found = fedclust_clusters(x, Cut(threshold=1.0, num_clusters=3))
    np.testing.assert_allclose(found.distances, pairwise_distances(x))
    assert len(set(zip(found.labels, truth, strict=True))) == 3


def test_flhc_uses_its_metric():
    rng = np.random.default_rng(2)
    x, truth = _groups(rng, scale=np.repeat([1.0, 10.0], 6))
    euclidean = flhc_clusters(list(x), Cut(threshold=0.0, num_clusters=3), "euclidean", seed=0)
    cosine = flhc_clusters(list(x), Cut(threshold=0.0, num_clusters=3), "cosine", seed=0)
    np.testing.assert_allclose(cosine.distances, pairwise_distances(x, "cosine"), atol=1e-9)
    assert not np.allclose(euclidean.distances, cosine.distances)
    assert len(set(zip(cosine.labels, truth, strict=True))) == 3  # direction, not size


def test_pacfl_above_the_sample_size_clusters_a_sample_and_keeps_no_matrix(monkeypatch):
    rng = np.random.default_rng(3)
    dirs = np.linalg.qr(rng.standard_normal((20, 4)))[0]
    bases = [
        np.linalg.qr(dirs[:, 2 * (i % 2) : 2 * (i % 2) + 2] + 0.01 * rng.standard_normal((20, 2)))[0] for i in range(10)
    ]
    exact = pacfl_clusters(bases, Cut(threshold=30.0), "mean", np.random.default_rng(0))
    assert exact.distances is not None and exact.distances.shape == (10, 10)
    monkeypatch.setattr(subspaces, "SAMPLE_SIZE", 6)
    monkeypatch.setattr(oneshot, "SAMPLE_SIZE", 6)
    sampled = pacfl_clusters(bases, Cut(threshold=30.0), "mean", np.random.default_rng(0))
    assert sampled.distances is None
    np.testing.assert_array_equal(sampled.labels, exact.labels)


def test_the_fl_hc_strategy_clusters_with_the_pure_function(monkeypatch):
    from common.signals.update import ModelUpdate
    from strategies import flhc

    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        return flhc_clusters(*args, **kwargs)

    monkeypatch.setattr(flhc, "flhc_clusters", spy)
    x, truth = _groups(np.random.default_rng(4))
    strategy = flhc.FLHC(params=flhc.FLHCParams(num_clusters=3, flhc_metric="cosine"))
    labels = strategy.cluster_labels([ModelUpdate(delta=row.astype(np.float32)) for row in x])
    cut = calls[0][1]
    assert len(calls) == 1 and (cut.num_clusters, cut.linkage) == (3, "average") and calls[0][2] == "cosine"
    assert len(set(zip(labels, truth, strict=True))) == 3 and strategy.distance_matrix is not None


def test_an_unset_hc_cut_is_automatic():
    assert Cut(0.0).automatic and not Cut(0.0, 2).automatic and not Cut(0.5).automatic
    with pytest.raises(AttributeError):
        Cut(0.0).threshold = 1.0  # frozen


LINKAGES = ("average", "complete", "single", "weighted")


def _cuts_of(tree, n):
    return [hierarchy.fcluster(tree, k, criterion="maxclust") for k in range(1, n + 1)]


def test_each_linkage_reaches_the_cut_by_count_threshold_and_automatic_cut():
    # 12 points on which the four linkages' 3-cluster cuts all differ: a cut that falls back to
    # another linkage gives another partition than scipy's tree of the linkage asked for.
    x = np.random.default_rng(4).normal(size=(12, 2))
    d = squareform(pdist(x))
    by_count = {}
    for linkage in LINKAGES:
        tree = hierarchy.linkage(pdist(x), method=linkage)
        by_count[linkage], _ = cut_distances(d, Cut(threshold=0.0, num_clusters=3, linkage=linkage))
        assert adjusted_rand_score(by_count[linkage], hierarchy.fcluster(tree, 3, criterion="maxclust")) == 1.0
        by_threshold, _ = cut_distances(d, Cut(threshold=1.0, linkage=linkage))
        assert adjusted_rand_score(by_threshold, hierarchy.fcluster(tree, 1.0, criterion="distance")) == 1.0
        automatic, _ = cut_distances(d, Cut(threshold=0.0, linkage=linkage))
        assert any(adjusted_rand_score(automatic, cut) == 1.0 for cut in _cuts_of(tree, 12)), linkage
    for a, b in itertools.combinations(LINKAGES, 2):
        assert adjusted_rand_score(by_count[a], by_count[b]) < 1.0, (a, b)
    average_auto, _ = cut_distances(d, Cut(threshold=0.0, linkage="average"))
    single_tree = hierarchy.linkage(pdist(x), method="single")
    assert not any(adjusted_rand_score(average_auto, cut) == 1.0 for cut in _cuts_of(single_tree, 12))


@pytest.mark.parametrize("linkage", LINKAGES)
@pytest.mark.parametrize("params", [FedClustParams, PACFLParams, FLHCParams])
def test_the_strategies_cut_with_their_linkage(params, linkage):
    strategy = {FedClustParams: FedClust, PACFLParams: PACFL, FLHCParams: FLHC}[params](params=params(linkage=linkage))
    assert strategy.hc_cut.linkage == linkage


def test_flhc_sketches_large_updates_with_its_seed_but_never_for_cityblock(monkeypatch):
    monkeypatch.setattr(similarity, "AUTO_SKETCH_BYTES", 0)  # every update set counts as large
    x = list(np.random.default_rng(0).normal(size=(6, similarity.AUTO_SKETCH_DIM + 64)))
    cut = Cut(threshold=0.0, num_clusters=2)
    sketched = similarity.sketch_rows(x, 0)
    assert sketched.shape == (6, similarity.AUTO_SKETCH_DIM)
    # the defaults are the euclidean metric and seed 0
    np.testing.assert_array_equal(flhc_clusters(x, cut).distances, pairwise_distances(sketched, "euclidean"))
    reseeded = pairwise_distances(similarity.sketch_rows(x, 1), "euclidean")
    np.testing.assert_array_equal(flhc_clusters(x, cut, "euclidean", seed=1).distances, reseeded)
    assert not np.allclose(reseeded, pairwise_distances(sketched, "euclidean"))
    exact_l1 = squareform(pdist(np.stack(x), "cityblock"))
    np.testing.assert_allclose(flhc_clusters(x, cut, "cityblock", seed=0).distances, exact_l1, rtol=1e-9)


def test_pacfl_above_the_sample_size_keeps_the_silhouette_of_the_samples_automatic_cut(monkeypatch):
    rng = np.random.default_rng(3)
    dirs = np.linalg.qr(rng.standard_normal((20, 4)))[0]
    bases = [
        np.linalg.qr(dirs[:, 2 * (i % 2) : 2 * (i % 2) + 2] + 0.01 * rng.standard_normal((20, 2)))[0] for i in range(10)
    ]
    monkeypatch.setattr(subspaces, "SAMPLE_SIZE", 6)
    monkeypatch.setattr(oneshot, "SAMPLE_SIZE", 6)
    seen: list[float | None] = []

    def recorded(distances, cut):
        labels, silhouette = cut_distances(distances, cut)
        seen.append(silhouette)
        return labels, silhouette

    monkeypatch.setattr(oneshot, "cut_distances", recorded)
    sampled = pacfl_clusters(bases, Cut(threshold=0.0), "mean", np.random.default_rng(0))
    assert sampled.distances is None and len(seen) == 1
    assert sampled.silhouette is not None and sampled.silhouette == seen[-1]
