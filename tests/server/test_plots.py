"""Tests for server.plots: PNGs are written, no figure is left open, inputs are checked."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from server.plots import (
    order_by_cluster,
    plot_accuracy,
    plot_clustering,
    plot_distance_matrix,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert plt.get_fignums() == []


def test_order_by_cluster_is_stable_and_contiguous():
    labels = np.array([2, 0, 1, 0, 2, 1])
    order = order_by_cluster(labels)
    np.testing.assert_array_equal(order, [1, 3, 2, 5, 0, 4])
    np.testing.assert_array_equal(labels[order], [0, 0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match="The 'labels' parameter"):
        order_by_cluster(np.zeros((2, 2)))


def test_plot_accuracy_writes_png(tmp_path):
    rounds = np.arange(1, 11)
    mean = np.linspace(0.3, 0.9, 10).tolist()
    mean[3] = None
    path = plot_accuracy(rounds, mean, [0.05] * 10, tmp_path / "sub" / "acc.png", title="FedAvg")
    assert path == tmp_path / "sub" / "acc.png"
    _assert_png(path)


def test_plot_clustering_skips_missing_ari(tmp_path):
    path = plot_clustering([1, 2, 3, 4], [None, 0.4, 1.0, 1.0], [1, 1, 3, 3], tmp_path / "c.png")
    _assert_png(path)
    _assert_png(plot_clustering([1, 2], [None, None], [1, 2], tmp_path / "none.png"))


def test_plot_distance_matrix_writes_png(tmp_path):
    rng = np.random.default_rng(0)
    points = rng.normal(size=(8, 2))
    matrix = np.linalg.norm(points[:, None] - points[None], axis=-1)
    labels = np.array([1, 0, 1, 2, 0, 2, 1, 0])
    _assert_png(plot_distance_matrix(matrix, labels, tmp_path / "d.png", title="t"))
    _assert_png(plot_distance_matrix(-matrix, labels, tmp_path / "s.png", kind="similarity"))


@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda p: plot_accuracy([1, 2, 3], [0.1, 0.2], [0.0] * 3, p), "mean"),
        (lambda p: plot_clustering([1, 2], [1.0, 1.0], [1], p), "num_clusters"),
        (lambda p: plot_distance_matrix(np.zeros((3, 2)), np.zeros(3), p), "matrix"),
        (lambda p: plot_distance_matrix(np.zeros((3, 3)), np.zeros(2), p), "labels"),
        (lambda p: plot_distance_matrix(np.zeros((2, 2)), np.zeros(2), p, kind="x"), "kind"),
    ],
)
def test_bad_inputs_raise_and_write_nothing(tmp_path, call, param):
    path = tmp_path / "bad.png"
    with pytest.raises(ValueError, match=f"The '{param}' parameter"):
        call(path)
    assert not path.exists()
    assert plt.get_fignums() == []
