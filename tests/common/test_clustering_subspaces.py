"""common.clustering.subspaces: principal angles and the PACFL distance matrix."""

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering.hierarchical import agglomerative
from common.clustering.subspaces import (
    PER_CLASS,
    class_angles_between,
    client_distances,
    client_distances_between,
    pairwise_class_angles,
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


def _tilted(degrees, d=6):
    """A unit column at ``degrees`` from e0 towards e5."""
    t = np.radians(degrees)
    return (np.cos(t) * np.eye(d)[:, 0] + np.sin(t) * np.eye(d)[:, 5])[:, None]


def test_per_class_angles_average_over_the_classes_either_client_holds():
    """Class 1 held by both at 30 degrees apart; class 0 by the first only (90); class 2 by neither of
    the first two (left out, though the third client holds it): (90 + 30) / 2."""
    a = {0: _e(2), 1: _e(0)}
    b = {1: _tilted(30)}
    c = {2: _e(3)}
    m = pairwise_class_angles([a, b, c])
    assert m[0, 1] == pytest.approx(60.0) and m[1, 0] == pytest.approx(60.0)
    assert m[0, 2] == pytest.approx(90.0) and m[1, 2] == pytest.approx(90.0)
    assert np.all(np.diag(m) == 0.0)
    assert pairwise_class_angles([a, b], one_missing=0.0)[0, 1] == pytest.approx(15.0)
    np.testing.assert_allclose(class_angles_between([a, b], [b, c, a]), m[[0, 1]][:, [1, 2, 0]], atol=1e-9)
    assert class_angles_between([a], [b], one_missing=0.0)[0, 0] == pytest.approx(15.0)


def test_per_class_angles_take_the_within_measure_inside_a_class():
    """One class held by both, spans sharing e0 and 90 degrees apart in their second direction."""
    a, b = {4: _e(0, 1)}, {4: _e(0, 2)}
    assert pairwise_class_angles([a, b])[0, 1] == pytest.approx(45.0)  # mean of 0 and 90
    assert pairwise_class_angles([a, b], within="smallest")[0, 1] == pytest.approx(0.0, abs=1e-6)
    assert class_angles_between([a], [b], within="sum")[0, 0] == pytest.approx(90.0)


def test_per_class_tells_apart_clients_whose_stacked_bases_look_alike():
    """Two groups hold classes {0, 1} and {0, 2}; classes 1 and 2 look alike (3 degrees apart) while a
    class's bases vary by about 6 degrees between clients: stacked, the groups mix; class by class, a
    class one group lacks keeps them 60 degrees apart."""
    rng = np.random.default_rng(5)
    d = 30
    base = np.linalg.qr(rng.normal(size=(d, 2)))[0]
    dirs = {
        0: base[:, [0]],
        1: base[:, [1]],
        2: np.cos(np.radians(3)) * base[:, [1]] + np.sin(np.radians(3)) * base[:, [0]],
    }

    def client(classes):
        return {c: np.linalg.qr(dirs[c] + 0.02 * rng.normal(size=(d, 1)))[0] for c in classes}

    truth = np.repeat([0, 1], 6)
    clients = [client([0, 1] if g == 0 else [0, 2]) for g in truth]
    per_class = client_distances(clients, PER_CLASS)
    stacked = client_distances(clients, "mean")
    np.testing.assert_allclose(
        stacked, pairwise_subspace_angles([stack_bases([c[k] for k in sorted(c)]) for c in clients], "mean")
    )
    assert per_class[:6, 6:].min() > 50.0 > per_class[:6, :6].max() + 20.0
    assert adjusted_rand_score(truth, agglomerative(per_class, num_clusters=2)) == 1.0
    assert adjusted_rand_score(truth, agglomerative(stacked, num_clusters=2)) < 0.5
    np.testing.assert_allclose(client_distances_between(clients[:2], clients, PER_CLASS), per_class[:2], atol=1e-9)


def test_client_distances_refuse_a_stacked_basis_for_the_per_class_measure():
    with pytest.raises(
        ValueError,
        match="The 'clients' parameter of client_distances must hold one mapping class -> basis per client "
        "for measure 'per-class'. Got ndarray instead.",
    ):
        client_distances([_e(0), _e(1)], PER_CLASS)
    with pytest.raises(ValueError, match="'clients' parameter of client_distances_between"):
        client_distances_between([{0: _e(0)}], [_e(1)], PER_CLASS)
    with pytest.raises(ValueError, match="The 'measure' parameter of client_distances must be one of"):
        client_distances([{0: _e(0)}], "largest")
    with pytest.raises(ValueError, match="'within' parameter of pairwise_class_angles"):
        pairwise_class_angles([{0: _e(0)}], within=PER_CLASS)
    with pytest.raises(ValueError, match="'one_missing' parameter of class_angles_between"):
        class_angles_between([{0: _e(0)}], [{0: _e(0)}], one_missing=-1.0)
