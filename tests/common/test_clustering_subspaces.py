"""common.clustering.subspaces: principal angles and the PACFL distance matrix."""

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering.hierarchical import agglomerative
from common.clustering.subspaces import (
    pairwise_subspace_angles,
    principal_angles,
    stack_bases,
    subspace_angle,
)


def _e(*idx, d=6):
    return np.eye(d)[:, list(idx)]


def test_principal_angles_of_known_subspaces():
    np.testing.assert_allclose(principal_angles(_e(0, 1), _e(0, 1)), [0, 0], atol=1e-6)
    np.testing.assert_allclose(principal_angles(_e(0, 1), _e(1, 2)), [0, 90], atol=1e-6)
    tilted = np.array([[1.0], [1.0], [0], [0], [0], [0]])
    np.testing.assert_allclose(principal_angles(_e(0), tilted), [45.0])
    assert subspace_angle(_e(0, 1), _e(1, 2), "sum") == pytest.approx(90.0)
    assert subspace_angle(_e(0, 1), _e(1, 2), "mean") == pytest.approx(45.0)
    assert subspace_angle(_e(0, 1), 3.0 * _e(1, 0)) == pytest.approx(0.0, abs=1e-6)


def test_bad_bases_are_rejected_by_name():
    with pytest.raises(ValueError, match="'b'"):
        principal_angles(_e(0), np.eye(5)[:, :1])
    with pytest.raises(ValueError, match="'a'"):
        principal_angles(np.ones(6), _e(0))
    with pytest.raises(ValueError, match="'measure'"):
        subspace_angle(_e(0), _e(1), "largest")
    with pytest.raises(ValueError, match="'bases'"):
        pairwise_subspace_angles([])
    with pytest.raises(ValueError, match="'bases'"):
        pairwise_subspace_angles([_e(0), np.eye(5)[:, :1]])
    with pytest.raises(ValueError, match="'one_missing'"):
        pairwise_subspace_angles([_e(0), None], one_missing=-1.0)
    with pytest.raises(ValueError, match="'per_class'"):
        stack_bases([])


def test_missing_bases_take_the_given_values_for_a_per_class_matrix():
    m = pairwise_subspace_angles([_e(0), None, None, _e(1)], one_missing=180.0, both_missing=0.0)
    expected = np.array([[0, 180, 180, 90], [180, 0, 0, 180], [180, 0, 0, 180], [90, 180, 180, 0]])
    np.testing.assert_allclose(m, expected, atol=1e-6)


def test_angles_between_stacked_class_bases_separate_two_groups_as_pacfl_clusters_them():
    rng = np.random.default_rng(0)
    d = 40
    class_dirs = np.linalg.qr(rng.normal(size=(d, 4)))[0]

    def client(classes):
        return [np.linalg.qr(class_dirs[:, [c]] + 0.002 * rng.normal(size=(d, 1)))[0] for c in classes]

    clients = [client([0, 1]) for _ in range(5)] + [client([2, 3]) for _ in range(5)]
    dist = pairwise_subspace_angles([stack_bases(b) for b in clients], "smallest")  # as PACFL's distances
    assert dist.shape == (10, 10) and np.allclose(dist, dist.T) and np.allclose(np.diag(dist), 0)
    assert dist[:5, :5].max() < 5.0 < dist[:5, 5:].min()
    labels = agglomerative(dist, threshold=30.0)
    assert adjusted_rand_score(np.repeat([0, 1], 5), labels) == 1.0
    assert stack_bases(clients[0]).shape == (d, 2)


def test_reference_measure_compares_columns_not_spans():
    rotated = np.array([[1.0, 1.0], [1.0, -1.0], [0, 0], [0, 0], [0, 0], [0, 0]]) / np.sqrt(2)
    assert subspace_angle(_e(0, 1), rotated, "smallest") == pytest.approx(0.0, abs=1e-6)
    assert subspace_angle(_e(0, 1), rotated, "reference") == pytest.approx(45.0)
    assert subspace_angle(_e(0, 1), _e(1, 2), "reference") == pytest.approx(0.0, abs=1e-6)
    assert subspace_angle(-2.0 * _e(3), _e(3), "reference") == pytest.approx(0.0, abs=1e-6)
    assert subspace_angle(_e(0), _e(1), "reference") == pytest.approx(90.0)
    m = pairwise_subspace_angles([_e(0, 1), rotated, _e(2)], "reference")
    np.testing.assert_allclose(m, [[0, 45, 90], [45, 0, 90], [90, 90, 0]], atol=1e-6)


@pytest.mark.parametrize("measure", ["mean", "sum", "smallest"])
def test_angles_between_on_two_threads_are_the_one_thread_angles_block_for_block(monkeypatch, measure):
    from common.clustering import subspaces

    rng = np.random.default_rng(4)
    first = [rng.normal(size=(30, 3)) for _ in range(37)] + [rng.normal(size=(30, 2)) for _ in range(5)]
    second = [rng.normal(size=(30, 3)) for _ in range(6)]
    monkeypatch.setattr(subspaces, "BLOCK_ENTRIES", 6 * 9 * 4)  # 4 bases a block: many blocks a thread
    monkeypatch.setattr(subspaces, "row_threads", lambda: 1)
    one = subspaces.angles_between(first, second, measure)
    monkeypatch.setattr(subspaces, "row_threads", lambda: 2)
    two = subspaces.angles_between(first, second, measure)
    np.testing.assert_allclose(two, one, rtol=0, atol=1e-9)
    exact = np.array([[subspaces.subspace_angle(a, b, measure) for b in second] for a in first])
    np.testing.assert_allclose(two, exact, atol=1e-6)
