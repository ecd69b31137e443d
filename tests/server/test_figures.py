"""The algorithms' own figures draw what the strategy recorded: series, values, marks and labels."""

from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.figure import Figure

from server.figures.cfl_gp import singular_values
from server.figures.cfl_sattler import cfl_sattler_norms
from server.figures.flag import flag_sweep


@pytest.fixture
def drawn(monkeypatch):
    """Every figure saved during the test (the PNG is still written)."""
    figures = []
    save = Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def test_cfl_sattler_norms_draw_each_cluster_its_thresholds_and_splits(tmp_path, drawn):
    norms = [
        {"cluster": 0, "round": 1, "ratio": 0.9, "max-norm": 2.0},
        {"cluster": 0, "round": 2, "ratio": 0.3, "max-norm": 3.0},
        {"cluster": 1, "round": 3, "ratio": 0.5, "max-norm": 1.0},
    ]
    strategy = SimpleNamespace(
        norms=norms,
        params=SimpleNamespace(eps1=0.4, eps2=1.5),
        splits=[{"round": 2}],
        attempts=[{"round": 3, "kept": False}, {"round": 2, "kept": True}],
        eps2_floor=lambda: 1.6,  # above eps2: the relative floor, the bound the split criterion uses
    )
    (path,) = cfl_sattler_norms(strategy, tmp_path)
    assert path.name == "cfl-norms.png" and path.exists()
    top, bottom = drawn[0].axes
    lines = {line.get_label(): line for line in top.get_lines()}
    np.testing.assert_array_equal(lines["cluster 0"].get_ydata(), [0.9, 0.3])
    np.testing.assert_array_equal(lines["cluster 1"].get_xdata(), [3])
    assert list(lines["eps1 = 0.4"].get_ydata()) == [0.4, 0.4]
    assert list(lines["split"].get_xdata()) == [2, 2]
    assert list(lines["no separation"].get_xdata()) == [3, 3]
    max_norms = [list(line.get_ydata()) for line in bottom.get_lines()[:2]]
    assert max_norms == [[2.0, 3.0], [1.0]]
    floor = {line.get_label(): line for line in bottom.get_lines()}["eps2 floor = 1.6"]
    assert list(floor.get_ydata()) == [1.6, 1.6]
    assert bottom.get_xlabel() == "round" and bottom.get_ylabel() == "max ||update_i||"


def test_flag_sweep_draws_clusters_accuracy_and_the_chosen_alpha(tmp_path, drawn):
    sweep = [
        {"alpha": 0.8, "num-clusters": 1, "accuracy": 0.5},
        {"alpha": 0.5, "num-clusters": 3, "accuracy": None},
        {"alpha": 0.2, "num-clusters": 6, "accuracy": 0.7},
    ]
    paths = flag_sweep(SimpleNamespace(sweep=sweep, chosen_alpha=0.2), tmp_path)
    assert [p.name for p in paths] == ["flag-sweep.png", "flag-sweep.json"]
    bars, line = drawn[0].axes
    assert [patch.get_height() for patch in bars.patches] == [1, 3, 6]
    accuracy, chosen = line.get_lines()
    np.testing.assert_array_equal(accuracy.get_ydata(), [0.5, np.nan, 0.7])
    assert list(chosen.get_xdata()) == [0.2, 0.2] and chosen.get_label() == "chosen alpha 0.2"
    assert bars.get_xlabel() == "HC threshold alpha" and bars.xaxis_inverted()
    assert flag_sweep(SimpleNamespace(sweep=[], chosen_alpha=None), tmp_path / "none") == []


def test_cfl_gp_spectrum_marks_the_largest_gap(tmp_path, drawn):
    spectra = [(2, np.array([9.0, 8.0, 1.0, 0.5])), (4, np.array([9.0, 8.5, 7.5, 0.2]))]
    strategy = SimpleNamespace(spectra=spectra, params=SimpleNamespace(max_clusters=3), estimate=None, k=3)
    (path,) = singular_values(strategy, tmp_path)
    assert path.name == "singular-values.png"
    (ax,) = drawn[0].axes
    first, last, gap = ax.get_lines()
    np.testing.assert_array_equal(first.get_ydata(), [9.0, 8.0, 1.0, 0.5])
    np.testing.assert_array_equal(last.get_xdata(), [1, 2, 3, 4])
    # the last spectrum falls most after its third value: the gap line sits between 3 and 4
    assert list(gap.get_xdata()) == [3.5, 3.5] and gap.get_label() == "largest gap: after 3"
    assert ax.get_ylabel() == "singular value of G"
    assert singular_values(SimpleNamespace(spectra=[]), tmp_path / "none") == []


def test_cfl_gp_spectrum_shows_an_estimated_k_and_gap_beyond_the_max_clusters_models(tmp_path, drawn):
    """4 models before the estimate, K = 12 after it, the gap after 11: the curves reach 2 * 12 + 2 values."""
    from common.clustering.spectral import NumClustersEstimate

    values = np.linspace(30.0, 1.0, 30)
    estimate = NumClustersEstimate(12, 11, values, {12: 0.9}, np.zeros(24, dtype=np.int64), 12)
    strategy = SimpleNamespace(
        spectra=[(2, values), (4, values)], params=SimpleNamespace(max_clusters=4), estimate=estimate, k=12
    )
    singular_values(strategy, tmp_path)
    (ax,) = drawn[0].axes
    first, last, at_estimate, gap = ax.get_lines()
    assert len(first.get_xdata()) == len(last.get_xdata()) == len(at_estimate.get_xdata()) == 26
    assert list(gap.get_xdata()) == [11.5, 11.5]


@pytest.mark.parametrize("dims, shown", [(8, 8), (0, 2)])
def test_cfl_gp_spectrum_titles_the_directions_k_was_scored_on(tmp_path, drawn, dims, shown):
    """An estimate saved before ``dims`` existed (0) projected on App. G's s, and the title says so."""
    from common.clustering.spectral import NumClustersEstimate

    estimate = NumClustersEstimate(3, 2, np.array([9.0, 8.0, 1.0]), {3: 0.9}, np.zeros(4, dtype=np.int64), dims)
    strategy = SimpleNamespace(
        spectra=[(2, np.array([9.0, 8.0, 1.0]))], params=SimpleNamespace(max_clusters=8), estimate=estimate, k=3
    )
    singular_values(strategy, tmp_path)
    (ax,) = drawn[0].axes
    assert ax.get_title() == f"CFL-GP profile spectrum (K = 3 from the silhouette on {shown} directions)"
