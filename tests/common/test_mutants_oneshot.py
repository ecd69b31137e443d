"""The one-shot steps' sampled forms: what they hand the sampled cut, and where PACFL switches to its
sample. Written for the mutation run's survivors in ``common.clustering.oneshot``."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import oneshot, subspaces
from common.clustering.hierarchical import auto_cut, cut_tree, pairwise_distances
from common.clustering.oneshot import Cut, fedclust_clusters, pacfl_clusters


@pytest.fixture
def handed(monkeypatch):
    """The keyword arguments and the generator's state at every call of ``sampled_cut``."""
    calls = []
    found = oneshot.sampled_cut

    def spy(rows, cut, rng, **kwargs):
        calls.append({**kwargs, "first": rng.bit_generator.state["state"]})
        return found(rows, cut, rng, **kwargs)

    monkeypatch.setattr(oneshot, "sampled_cut", spy)
    return calls


def test_fedclust_samples_exact_euclidean_final_layers_with_seed_0_by_default(handed):
    layers = np.repeat([[0.0, 0.0], [5.0, 5.0]], 4, axis=0) + np.arange(8)[:, None] * 0.01
    found = fedclust_clusters(layers, Cut(0.0, 2), sample_above=5)
    (call,) = handed
    assert (call["metric"], call["seed"], call["exact"]) == ("euclidean", 0, True)
    assert call["first"] == np.random.default_rng(0).bit_generator.state["state"]
    assert found.distances is None and len(set(found.labels[:4])) == 1 and found.labels[0] != found.labels[4]
    fedclust_clusters(layers, Cut(0.0, 2), sample_above=5, seed=3)
    assert handed[1]["seed"] == 3 and handed[1]["exact"] is True
    assert handed[1]["first"] == np.random.default_rng(3).bit_generator.state["state"]


def test_pacfl_cuts_every_client_up_to_the_sample_size_and_a_sample_above(monkeypatch):
    monkeypatch.setattr(oneshot, "SAMPLE_SIZE", 4)
    monkeypatch.setattr(subspaces, "SAMPLE_SIZE", 4)
    e = np.eye(3)
    bases = [e[:, :1], e[:, :1], e[:, 1:2], e[:, 1:2], e[:, :1]]
    exact = pacfl_clusters(bases[:4], Cut(45.0), "smallest", np.random.default_rng(0))
    assert exact.distances is not None and exact.distances.shape == (4, 4)
    np.testing.assert_array_equal(exact.labels, [0, 0, 1, 1])
    sampled = pacfl_clusters(bases, Cut(45.0), "smallest", np.random.default_rng(0))
    assert sampled.distances is None and sampled.labels[4] == sampled.labels[0] != sampled.labels[2]


@pytest.mark.parametrize(("metric", "exact"), [("cityblock", True), ("cosine", False)])
def test_flhc_samples_with_its_metric_and_seed_and_returns_the_sample_cuts_silhouette(handed, metric, exact):
    """Above ``sample_above`` the step cuts its sample (here all 8, under the sampled cut's own size) with
    the metric and the seed given, sketching all but L1 distances; the automatic cut's silhouette comes back."""
    updates = np.repeat(np.eye(3)[:2] * 4.0, 4, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(8, 3))
    found = oneshot.flhc_clusters(list(updates), Cut(0.0), metric=metric, seed=4, sample_above=5)
    (call,) = handed
    assert (call["metric"], call["seed"], call["exact"]) == (metric, 4, exact)
    assert call["first"] == np.random.default_rng(4).bit_generator.state["state"]
    want = auto_cut(pairwise_distances(updates, metric))
    assert found.distances is None
    np.testing.assert_array_equal(found.labels, want[0])
    assert found.silhouette is not None and found.silhouette == pytest.approx(want[1])


def test_flhc_cuts_euclidean_distances_of_all_updates_by_default_sketching_all_but_l1(monkeypatch, handed):
    sketched = []
    sketch = oneshot.sketch_rows
    monkeypatch.setattr(
        oneshot,
        "sketch_rows",
        lambda rows, seed, exact: sketched.append((seed, exact)) or sketch(rows, seed, exact=exact),
    )
    updates = np.repeat(np.eye(3)[:2] * 4.0, 4, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(8, 3))
    found = oneshot.flhc_clusters(list(updates), Cut(0.0, 2))
    np.testing.assert_allclose(found.distances, pairwise_distances(updates, "euclidean"))
    np.testing.assert_array_equal(found.labels, [0] * 4 + [1] * 4)
    oneshot.flhc_clusters(list(updates), Cut(0.0, 2), "cityblock", seed=5)
    oneshot.flhc_clusters(list(updates), Cut(0.0, 2), "cosine", seed=5)
    assert sketched == [(0, False), (5, True), (5, False)] and not handed
    oneshot.flhc_clusters(list(updates), Cut(0.0, 2), sample_above=5)
    assert handed[0]["seed"] == 0 and handed[0]["first"] == np.random.default_rng(0).bit_generator.state["state"]


@pytest.mark.parametrize(
    ("cut", "seed"), [(Cut(0.0, 0, "single"), 2), (Cut(0.0, 3, "single"), 1), (Cut(1.0, 0, "single"), 0)]
)
def test_the_cut_uses_its_linkage_automatic_by_count_or_by_height(cut, seed):
    """Eight random points whose single-linkage cut differs from the average-linkage one."""
    x = np.random.default_rng(seed).normal(size=(8, 2))
    d = pairwise_distances(x)
    if cut.automatic:
        want = auto_cut(d, "single")[0]
    else:
        want = cut_tree(d, threshold=cut.threshold, num_clusters=cut.num_clusters, linkage="single")
    average = Cut(cut.threshold, cut.num_clusters, "average")
    assert adjusted_rand_score(oneshot.fedclust_clusters(x, average).labels, want) < 1, "the case tells the two apart"
    np.testing.assert_array_equal(oneshot.fedclust_clusters(x, cut).labels, want)
    np.testing.assert_array_equal(
        oneshot.flhc_clusters(list(x), cut, "cityblock").distances, pairwise_distances(x, "cityblock")
    )
