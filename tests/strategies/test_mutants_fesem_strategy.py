"""FeSEM's automatic K: its cap, the distances it cuts and how the clients above the sample join.
Written for the mutation run's survivors in ``strategies.fesem``."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics.pairwise import cosine_distances

import strategies.fesem as fesem
from common.clustering.hierarchical import AUTO_MAX_CLUSTERS, auto_cut, automatic_max_clusters, pairwise_distances
from strategies.fesem import automatic_labels


@pytest.mark.parametrize(
    ("num_clients", "given", "cap"),
    [(10, 0, 5), (11, 0, 5), (3, 0, 2), (10_000, 0, AUTO_MAX_CLUSTERS), (10, 1, 1), (10, 7, 7)],
)
def test_automatic_max_clusters_is_the_given_cap_else_half_the_clients_within_2_and_the_hc_range(
    num_clients, given, cap
):
    got = automatic_max_clusters(num_clients, given)
    assert got == cap and isinstance(got, int)
    if not given:
        assert automatic_max_clusters(num_clients) == cap


def test_unit_scales_every_nonzero_row_to_length_one_and_keeps_a_zero_row():
    rows = np.array([[0.3, 0.4], [0.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(fesem.unit_rows(rows), [[0.6, 0.8], [0.0, 0.0], [0.6, 0.8]])


@pytest.mark.parametrize(("metric", "seed"), [("cosine", 24), ("cityblock", 3), ("euclidean", 3)])
def test_automatic_labels_cut_the_distances_of_the_metric_given(metric, seed):
    """Nine random vectors whose cut under this metric differs from the cut of another (checked for the
    cosine against the Euclidean distance of unit rows, for cityblock against Euclidean)."""
    x = np.random.default_rng(seed).normal(size=(9, 3))
    if metric == "cosine":
        distances = np.clip(cosine_distances(x), 0.0, None)
        got = automatic_labels(x, 4, 0, origin=np.zeros(3), metric="cosine")
    else:
        distances = pairwise_distances(x, metric)
        got = automatic_labels(x, 4, 0, metric=metric)
    np.testing.assert_array_equal(got, auto_cut((distances + distances.T) / 2.0, max_clusters=4)[0])


def test_automatic_labels_above_the_sample_cut_a_distinct_seeded_sample(monkeypatch):
    monkeypatch.setattr(fesem, "SAMPLE_SIZE", 20)
    handed = []
    sketch = fesem.sketch_rows
    monkeypatch.setattr(fesem, "sketch_rows", lambda rows, seed: handed.append((rows, seed)) or sketch(rows, seed))
    points = np.random.default_rng(0).normal(size=(40, 3)) + np.repeat([[0.0, 0.0, 0.0], [9.0, 0.0, 0.0]], 20, axis=0)
    first = automatic_labels(points, 4, 5)
    again = automatic_labels(points, 4, 5)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(handed[0][0], handed[1][0])
    assert handed[0][1] == 5 and len(np.unique(handed[0][0], axis=0)) == 20


def test_automatic_labels_at_exactly_the_sample_size_keep_the_cut(monkeypatch):
    """A long chain and a tight pair: the chain's far end is nearer the pair's mean than its own, but the
    cut keeps it in the chain; with N = SAMPLE_SIZE nothing is joined by distance."""
    points = np.concatenate([np.arange(9.0), [11.0, 11.2]])[:, None]
    monkeypatch.setattr(fesem, "SAMPLE_SIZE", 12)
    want = automatic_labels(points, 2, 0)
    np.testing.assert_array_equal(want, [0] * 9 + [1] * 2)
    monkeypatch.setattr(fesem, "SAMPLE_SIZE", 11)
    np.testing.assert_array_equal(automatic_labels(points, 2, 0), want)


def test_automatic_labels_above_the_sample_join_the_clusters_found_and_no_other(monkeypatch):
    """Group A spread from 0.2 to 1.8 along e0 and group B at (10, 10): A's clients near the origin join A."""
    monkeypatch.setattr(fesem, "SAMPLE_SIZE", 10)
    a = np.stack([np.linspace(0.2, 1.8, 20), np.zeros(20)], axis=1)
    points = np.concatenate([a, np.full((10, 2), 10.0) + np.random.default_rng(0).normal(scale=0.1, size=(10, 2))])
    labels = automatic_labels(points, 4, 0)
    assert len(set(labels[:20])) == 1 and len(set(labels[20:])) == 1 and labels[0] != labels[20]


def test_automatic_labels_cosine_without_origin_above_the_sample_join_their_clusters(monkeypatch):
    monkeypatch.setattr(fesem, "SAMPLE_SIZE", 10)
    rng = np.random.default_rng(1)
    points = np.repeat(np.eye(3)[:2] * 5.0, 12, axis=0) + rng.normal(scale=0.1, size=(24, 3))
    labels = automatic_labels(points, 4, 0, metric="cosine")
    assert len(set(labels[:12])) == 1 and len(set(labels[12:])) == 1 and labels[0] != labels[12]


def test_automatic_labels_above_the_sample_join_by_update_direction_whatever_the_update_sizes(monkeypatch):
    """A's updates are 100 times longer than B's; the other clients' updates are 30 degrees from B's direction
    and 60 from A's, short as B's, and the models lie far along an orthogonal axis: they join B."""
    monkeypatch.setattr(fesem, "SAMPLE_SIZE", 10)
    rng = np.random.default_rng(2)
    origin = np.array([0.0, 0.0, 0.0, 1e4])
    a = 10.0 * (np.array([1.0, 0.0, 0.0, 0.0]) + rng.normal(scale=0.01, size=(8, 4)) * [1, 1, 1, 0])
    b = 0.1 * (np.array([0.0, 1.0, 0.0, 0.0]) + rng.normal(scale=0.01, size=(8, 4)) * [1, 1, 1, 0])
    odd = 0.1 * np.tile([np.sin(np.pi / 6), np.cos(np.pi / 6), 0.0, 0.0], (10, 1))
    labels = automatic_labels(origin + np.concatenate([a, b, odd]), 2, 0, origin=origin, metric="cosine")
    assert len(set(labels[:8])) == 1 and set(labels[8:]) == {labels[8]} != {labels[0]}
