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


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions save, kept for inspection (the PNG is still written)."""
    import server.plots as plots

    figures = []
    save = plots._save

    def keep(fig, path, title):
        figures.append(fig)
        return save(fig, path, title)

    monkeypatch.setattr(plots, "_save", keep)
    return figures


def test_plot_accuracy_draws_the_mean_the_clipped_band_and_the_marks(tmp_path, drawn):
    mean = [0.5, None, 0.9]
    plot_accuracy([1, 2, 3], mean, [0.1, 0.1, 0.2], tmp_path / "a.png", title="T", marks=[2])
    (fig,) = drawn
    (ax,) = fig.axes
    mean_line, mark = ax.get_lines()
    np.testing.assert_array_equal(mean_line.get_xdata(), [1, 2, 3])
    np.testing.assert_array_equal(mean_line.get_ydata(), [0.5, np.nan, 0.9])
    assert list(mark.get_xdata()) == [2, 2] and mark.get_label() == "clustering (round 2)"
    band = np.concatenate([path.vertices for path in ax.collections[0].get_paths()])[:, 1]
    assert band.max() == pytest.approx(1.0) and band.min() == pytest.approx(0.4)
    assert (ax.get_xlabel(), ax.get_ylabel(), fig._suptitle.get_text()) == ("round", "local test accuracy", "T")


def test_plot_clustering_draws_known_ari_points_and_the_cluster_count(tmp_path, drawn):
    plot_clustering([1, 2, 3, 4], [None, 0.4, 1.0, 1.0], [1, 1, 3, 3], tmp_path / "c.png")
    top, bottom = drawn[0].axes
    (ari,) = top.get_lines()
    np.testing.assert_array_equal(ari.get_xdata(), [2, 3, 4])
    np.testing.assert_array_equal(ari.get_ydata(), [0.4, 1.0, 1.0])
    (count,) = bottom.get_lines()
    np.testing.assert_array_equal(count.get_ydata(), [1, 1, 3, 3])
    assert (top.get_ylabel(), bottom.get_ylabel(), bottom.get_xlabel()) == ("ARI", "number of clusters", "round")


def test_plot_distance_matrix_shows_the_matrix_ordered_by_cluster_with_borders(tmp_path, drawn):
    matrix = np.arange(16, dtype=float).reshape(4, 4)
    labels = np.array([1, 0, 1, 0])
    plot_distance_matrix(matrix, labels, tmp_path / "d.png")
    ax, bar = drawn[0].axes
    order = [1, 3, 0, 2]
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), matrix[np.ix_(order, order)])
    borders = ax.get_lines()
    assert len(borders) == 2 and {tuple(line.get_xdata()) for line in borders} >= {(1.5, 1.5)}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
    assert bar.get_ylabel() == "distance"
