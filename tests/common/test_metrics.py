"""Tests for common.metrics."""

import math

import numpy as np
import pytest

from common.metrics import (
    cluster_sizes,
    deep_bytes,
    clustering_scores,
    final_mean,
    first_round_reaching,
    mean_std,
    process_resources,
)


def test_scores_ignore_relabelling():
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert clustering_scores(truth, np.array([5, 5, 3, 3, 0, 0])) == pytest.approx((1.0, 1.0))


def test_one_cluster_for_several_groups_scores_zero():
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert clustering_scores(truth, np.zeros(6, dtype=int)) == pytest.approx((0.0, 0.0))


def test_clients_without_group_are_ignored():
    truth = np.array([0, 0, 1, 1, -1, -1])
    # The two ungrouped clients would break the match if they counted.
    assignment = np.array([1, 1, 0, 0, 1, 0])
    assert clustering_scores(truth, assignment) == pytest.approx((1.0, 1.0))
    assert clustering_scores(np.full(3, -1), np.arange(3)) is None


def test_partial_agreement_is_between_zero_and_one():
    ari, ami = clustering_scores(np.array([0, 0, 0, 1, 1, 1]), np.array([0, 0, 1, 1, 1, 1]))
    assert 0.0 < ari < 1.0 and 0.0 < ami < 1.0


def test_scores_need_matching_shapes():
    with pytest.raises(ValueError, match="The 'assignment' parameter of clustering_scores"):
        clustering_scores(np.zeros(4), np.zeros(3))


def test_mean_std():
    assert mean_std([1.0, 3.0]) == (2.0, 1.0)
    assert mean_std([1.0, None, float("nan"), 3.0]) == (2.0, 1.0)
    assert all(math.isnan(v) for v in mean_std([]))


def test_final_mean_uses_last_rounds_not_best():
    values = [0.1 * i for i in range(20)]
    assert final_mean(values) == pytest.approx((1.8 + 1.9) / 2)
    assert final_mean([0.2, 0.9, 0.5]) == pytest.approx(0.5)
    assert final_mean([0.2, 0.4, 0.6, 0.8], fraction=0.5) == pytest.approx(0.7)
    assert final_mean([0.3, None, 0.5, None]) == pytest.approx(0.5)
    assert math.isnan(final_mean([]))
    with pytest.raises(ValueError, match="The 'fraction' parameter of final_mean"):
        final_mean([1.0], fraction=0.0)


def test_first_round_reaching():
    rounds = [1, 2, 3, 4]
    assert first_round_reaching(rounds, [None, 0.5, 1.0 - 1e-12, 1.0]) == 3
    assert first_round_reaching(rounds, [0.2, 0.5, 0.9, None]) is None
    assert first_round_reaching(rounds, [0.2, 0.5, 0.9, 0.95], target=0.9) == 3
    with pytest.raises(ValueError, match="The 'values' parameter"):
        first_round_reaching(rounds, [1.0])


def test_cluster_sizes_counts_empty_clusters():
    assert cluster_sizes(np.array([0, 2, 2, 0, 2]), 4) == [2, 0, 3, 0]
    assert cluster_sizes({10: 1, 11: 1, 12: -1}, 2) == [0, 2]
    assert cluster_sizes(np.array([], dtype=int), 2) == [0, 0]
    with pytest.raises(ValueError, match="The 'assignment' parameter of cluster_sizes"):
        cluster_sizes(np.array([0, 3]), 3)


def test_deep_bytes_counts_what_an_object_reaches_once():
    small = deep_bytes({i: [i] for i in range(10)})
    large = deep_bytes({i: [i] for i in range(1000)})
    assert 50 * small < large < 200 * small  # linear in the entries, not in their number squared
    data = np.zeros(10_000)
    assert deep_bytes({"a": data}) > data.nbytes
    assert deep_bytes({"a": data, "b": data}) < 2 * data.nbytes  # shared: counted once


def test_deep_bytes_follows_attributes_but_not_skipped_ones():
    class Holder:
        def __init__(self) -> None:
            self.kept = np.zeros(1000)
            self.link = np.zeros(100_000)

    assert deep_bytes(Holder()) > 800_000
    assert 8000 < deep_bytes(Holder(), skip=frozenset({"link"})) < 20_000


def test_process_resources_reports_peak_rss_and_cpu():
    resources = process_resources()
    assert resources["peak-rss-mb"] > 10 and resources["cpu-seconds"] > 0
