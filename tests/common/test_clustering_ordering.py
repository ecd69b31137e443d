"""common.clustering.ordering: clients grouped by cluster for the distance plots."""

import numpy as np
import pytest

from common.clustering.ordering import cluster_spans, order_by_cluster, order_matrix
from server import plots


def test_order_by_cluster_is_stable_and_the_plots_use_it():
    labels = np.array([2, 0, 1, 0, 2, 1])
    np.testing.assert_array_equal(order_by_cluster(labels), [1, 3, 2, 5, 0, 4])
    assert plots.order_by_cluster is order_by_cluster
    with pytest.raises(ValueError, match="'labels'"):
        order_by_cluster(np.zeros((2, 2)))


def test_cluster_spans_and_order_matrix_make_diagonal_blocks():
    labels = np.array([1, 0, 1, 0])
    dist = (labels[:, None] != labels[None, :]).astype(float)
    ordered, sorted_labels = order_matrix(dist, labels)
    np.testing.assert_array_equal(ordered, [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]])
    starts, ends = cluster_spans(sorted_labels)
    np.testing.assert_array_equal(starts, [0, 2])
    np.testing.assert_array_equal(ends, [2, 4])
    assert cluster_spans(np.array([])).__len__() == 2 and cluster_spans(np.array([]))[0].size == 0
    with pytest.raises(ValueError, match="'matrix'"):
        order_matrix(np.zeros((3, 3)), labels)


@pytest.mark.parametrize("labels", [np.array([]), np.array([2, 2, 5]), np.array([0.0, 1.0, 1.0, 3.0])])
def test_cluster_spans_are_int64_indices_one_pair_per_cluster(labels):
    starts, ends = cluster_spans(labels)
    assert starts.dtype == ends.dtype == np.int64  # slicing by them needs integers, whatever the labels' type
    assert len(starts) == len(ends) == len(np.unique(labels))
    np.testing.assert_array_equal(np.diff(np.r_[0, ends]), ends - starts)  # contiguous, covering every client


def test_order_by_cluster_keeps_client_order_inside_a_cluster_beyond_a_short_array():
    # numpy's default sort is stable only for short arrays (insertion sort): 80 tied labels expose it
    labels = np.tile([1, 0], 40)
    np.testing.assert_array_equal(order_by_cluster(labels), np.r_[np.arange(1, 80, 2), np.arange(0, 80, 2)])
