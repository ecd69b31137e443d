"""FLIC's graph steps (common/clustering/louvain.py, flic.py): checks by name, the k-NN graph against a
brute-force one, the silhouette sweep's bounds and ties, and the seed passed through.

Written for the mutation run's survivors in these modules (docs/mutation-strategies.md).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import louvain
from common.clustering.flic import flic_clusters, join_by_modularity, louvain_by_silhouette
from common.clustering.louvain import knn_edges, louvain_labels, similarity_graph


def _full(sentence: str) -> str:
    return f"^{re.escape(sentence)}$"


def blocks(sizes: tuple[int, ...], inside: float = 1.9, across: float = 0.1) -> np.ndarray:
    """A ``1 + cos``-like similarity of planted groups: ``inside`` within a group, ``across`` between."""
    n = sum(sizes)
    s = np.full((n, n), across)
    start = 0
    for size in sizes:
        s[start : start + size, start : start + size] = inside
        start += size
    np.fill_diagonal(s, 2.0)
    return s


def seed_sensitive() -> np.ndarray:
    """14 random unit vectors' ``1 + cos``: no planted structure, so Louvain's node order (its seed) matters."""
    x = np.random.default_rng(5).standard_normal((14, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return 1.0 + x @ x.T


@pytest.mark.parametrize("shape", [(2, 3), (0, 0), (3,)])
def test_similarity_graph_refuses_a_matrix_that_is_not_square_by_name(shape: tuple[int, ...]) -> None:
    sentence = (
        "The 'similarity' parameter of similarity_graph must be a non-empty square (n, n) array. "
        f"Got shape {shape} instead."
    )
    with pytest.raises(ValueError, match=_full(sentence)):
        similarity_graph(np.ones(shape))


@pytest.mark.parametrize("resolution", [0.0, -1.0, float("inf"), float("nan")])
def test_louvain_labels_refuses_a_resolution_outside_zero_to_infinity_by_name(resolution: float) -> None:
    sentence = (
        "The 'resolution' parameter of louvain_labels must be a float in the range (0.0, inf). "
        f"Got {resolution!r} instead."
    )
    with pytest.raises(ValueError, match=_full(sentence)):
        louvain_labels(blocks((2, 2)), resolution)


def test_louvain_labels_are_int64_numbered_by_first_appearance() -> None:
    labels = louvain_labels(blocks((2, 3))[::-1, ::-1].copy())
    assert labels.dtype == np.int64 and labels.tolist() == [0, 0, 0, 1, 1]


def test_the_dense_graph_is_complete_up_to_its_bound_and_sparse_above(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(louvain, "DENSE_MAX_NODES", 5)
    monkeypatch.setattr(louvain, "KNN", 1)
    assert similarity_graph(blocks((5,))).number_of_edges() == 10
    assert similarity_graph(blocks((6,))).number_of_edges() < 15


def _brute_knn(s: np.ndarray, k: int) -> set[tuple[int, int]]:
    n = len(s)
    edges = set()
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for j in sorted(others, key=lambda j: -s[i, j])[: min(k, n - 1)]:
            edges.add((min(i, j), max(i, j)))
    return edges


@pytest.mark.parametrize(("k", "block"), [(1, 1024), (2, 1024), (3, 4), (1, 7), (50, 1024)])
def test_knn_edges_are_the_brute_force_symmetrised_nearest_neighbours(k: int, block: int) -> None:
    x = np.random.default_rng(1).standard_normal((30, 4))
    s = 1.0 + np.corrcoef(x)
    i, j = knn_edges(s, k, block=block)
    assert i.dtype == np.int64 and j.dtype == np.int64
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == _brute_knn(s, k)


def test_knn_edges_of_one_neighbour_keep_node_zero_s_own_nearest() -> None:
    s = np.array([[0.0, 0.5, 0.1], [0.5, 0.0, 0.9], [0.1, 0.9, 0.0]])
    i, j = knn_edges(s, 1)
    assert list(zip(i.tolist(), j.tolist(), strict=True)) == [(0, 1), (1, 2)]


def test_knn_edges_with_k_at_least_n_minus_one_keep_every_pair() -> None:
    s = blocks((2, 2))
    s[0, 3] = s[3, 0] = 0.0
    i, _ = knn_edges(s, 5)
    assert len(i) == 6


def test_louvain_by_silhouette_refuses_empty_or_non_positive_resolutions_by_name() -> None:
    for bad in ([], [0.5, 0.0]):
        sentence = (
            "The 'resolutions' parameter of louvain_by_silhouette must be a non-empty sequence of floats > 0. "
            f"Got {bad!r} instead."
        )
        with pytest.raises(ValueError, match=_full(sentence)):
            louvain_by_silhouette(blocks((2, 2)), resolutions=bad)


def test_louvain_by_silhouette_keeps_the_first_of_equal_partitions() -> None:
    # Every resolution finds the two groups: one silhouette, and the smallest resolution is kept.
    labels, resolution = louvain_by_silhouette(blocks((4, 4)))
    assert labels.tolist() == [0] * 4 + [1] * 4 and resolution == 0.5


def test_louvain_by_silhouette_scores_a_cut_into_n_minus_one_communities() -> None:
    # 0.5 to 1.0 keep the three nodes together (no silhouette); 1.1 is the first to part the far one.
    labels, resolution = louvain_by_silhouette(blocks((2, 1)))
    assert labels.tolist() == [0, 0, 1] and resolution == 1.1


def test_louvain_by_silhouette_without_a_scored_cut_takes_the_resolution_nearest_one() -> None:
    labels, resolution = louvain_by_silhouette(np.full((2, 2), 2.0))
    assert labels.tolist() == [0, 0] and resolution == 1.0


def test_louvain_by_silhouette_reads_a_similarity_rounded_above_two_as_distance_zero() -> None:
    s = blocks((3, 3))
    s[0, 1] = s[1, 0] = 2.0 + 1e-12
    labels, resolution = louvain_by_silhouette(s)
    assert labels.tolist() == [0, 0, 0, 1, 1, 1] and resolution == 0.5


def test_the_seed_reaches_louvain_in_both_of_flic_s_steps() -> None:
    s = seed_sensitive()
    assert _different(louvain_labels(s, 1.0, 1), louvain_labels(s, 1.0, 0))
    labels, used = flic_clusters(s, 1.0, seed=1)
    assert used == 1.0 and np.array_equal(labels, louvain_labels(s, 1.0, 1))
    by_silhouette = louvain_by_silhouette(s, seed=1)[0]
    assert _different(by_silhouette, louvain_by_silhouette(s, seed=0)[0])
    assert np.array_equal(flic_clusters(s, None, seed=1)[0], by_silhouette)


def _different(a: np.ndarray, b: np.ndarray) -> bool:
    """Two different partitions (not a relabelling of one another)."""
    return bool(adjusted_rand_score(a, b) < 1.0)


def test_join_by_modularity_refuses_a_similarity_of_the_wrong_shape_by_name() -> None:
    sentence = (
        "The 'links' parameter of join_by_modularity must have shape (m, n) with n = len(labels) = 3 and "
        "'similarity' shape (n, n). Got (1, 3) and (2, 2) instead."
    )
    with pytest.raises(ValueError, match=_full(sentence)):
        join_by_modularity(np.ones((1, 3)), np.ones((2, 2)), np.array([0, 0, 1]))


def test_louvain_by_silhouette_measures_distance_as_two_minus_the_similarity() -> None:
    # Two groups of two subgroups of 3: similarity 1.7 within a subgroup, 1.2 within a group, 0.2 across,
    # so distances 0.3, 0.8 and 1.8. Silhouette of the 2 groups: a = (2 * 0.3 + 3 * 0.8) / 5 = 0.6,
    # b = 1.8, s = 0.667; of the 4 subgroups: a = 0.3, b = 0.8, s = 0.625. The 2 groups win.
    s = np.full((12, 12), 0.2)
    for group in range(2):
        s[6 * group : 6 * group + 6, 6 * group : 6 * group + 6] = 1.2
        for sub in range(2):
            start = 6 * group + 3 * sub
            s[start : start + 3, start : start + 3] = 1.7
    np.fill_diagonal(s, 2.0)
    labels, _ = louvain_by_silhouette(s)
    assert labels.tolist() == [0] * 6 + [1] * 6


def test_clustering_round_is_a_whole_round_for_an_odd_number_of_rounds() -> None:
    from common.clustering.flic import clustering_round

    assert clustering_round(None, 0, 7) == 4 and isinstance(clustering_round(None, 0, 7), int)
    assert clustering_round(9, 0, 7) == 4


def test_split_disagreeing_looks_past_a_community_of_one_and_keeps_a_mean_cosine_of_exactly_zero() -> None:
    from common.clustering.flic import split_disagreeing

    cos = np.array(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.6, -0.5],
            [0.0, 0.6, 1.0, -0.5],
            [0.0, -0.5, -0.5, 1.0],
        ]
    )
    # client 0 alone in community 0 (listed first); client 3 disagrees with the rest of community 1
    np.testing.assert_array_equal(split_disagreeing(1.0 + cos, np.array([0, 1, 1, 1])), [0, 1, 1, 2])
    neutral = np.array([[1.0, 0.0], [0.0, 1.0]])  # a mean cosine of 0 is not below 0: kept together
    np.testing.assert_array_equal(split_disagreeing(1.0 + neutral, np.array([0, 0])), [0, 0])


@pytest.mark.parametrize(
    ("args", "name", "bound"),
    [
        ((1.0, 0, 1), "num_clients", "an int >= 1"),
        ((1.0, 1, 0), "per_round", "an int in the range [1, 1]"),
    ],
)
def test_rounds_for_updates_refuses_counts_below_one_by_name(args: tuple, name: str, bound: str) -> None:
    from common.clustering.flic import rounds_for_updates

    with pytest.raises(ValueError, match=f"^The '{name}' parameter of rounds_for_updates must be {re.escape(bound)}"):
        rounds_for_updates(*args)
    assert rounds_for_updates(1.0, 1, 1) == 1, "one client sending one update a round: one round"


@pytest.mark.parametrize("tolerance", [-0.1, 1.0])
def test_louvain_by_silhouette_refuses_a_tolerance_outside_zero_to_one_by_name(tolerance: float) -> None:
    sentence = (
        "The 'tolerance' parameter of louvain_by_silhouette must be a float in the range [0.0, 1.0). "
        f"Got {tolerance!r} instead."
    )
    with pytest.raises(ValueError, match=_full(sentence)):
        louvain_by_silhouette(blocks((2, 2)), tolerance=tolerance)


def test_louvain_by_silhouette_stops_at_the_first_resolution_that_gives_singletons_and_keeps_its_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from common.clustering import flic

    tried = []
    monkeypatch.setattr(flic, "louvain_labels", lambda s, gamma, seed: tried.append((gamma, seed)) or np.arange(len(s)))
    labels, resolution = louvain_by_silhouette(np.zeros((3, 3)), seed=7, resolutions=[0.5, 1.5, 0.9, 2.0])
    assert tried == [(0.5, 7), (0.9, 7)], "singletons at 0.5; then the unscored fallback nearest 1.0"
    assert labels.tolist() == [0, 1, 2] and resolution == 0.9


def test_split_disagreeing_refuses_labels_of_the_wrong_length_with_the_whole_sentence() -> None:
    from common.clustering.flic import split_disagreeing

    sentence = (
        "The 'labels' parameter of split_disagreeing must have one label per row of 'similarity'. "
        "Got 3 labels for shape (2, 2) instead."
    )
    with pytest.raises(ValueError, match=_full(sentence)):
        split_disagreeing(np.ones((2, 2)), np.array([0, 0, 1]))


def test_louvain_labels_and_the_silhouette_sweep_default_to_seed_zero() -> None:
    s = seed_sensitive()
    np.testing.assert_array_equal(louvain_labels(s, 1.0), louvain_labels(s, 1.0, 0))
    np.testing.assert_array_equal(louvain_by_silhouette(s)[0], louvain_by_silhouette(s, seed=0)[0])


@pytest.mark.parametrize(
    ("upper", "lower"),
    [(1.0, 1.5), (1000.0, 1000.0 + 5e-6), (1.0, 1.0 + 2e-6)],
)
def test_similarity_graph_refuses_a_matrix_asymmetric_by_more_than_one_millionth_with_the_whole_sentence(
    upper: float, lower: float
) -> None:
    sentence = (
        "The 'similarity' parameter of similarity_graph must be symmetric, finite and non-negative. "
        "Got a matrix that is not instead."
    )
    with pytest.raises(ValueError, match=_full(sentence)):
        similarity_graph(np.array([[2.0, upper], [lower, 2.0]]))


def test_similarity_graph_takes_a_matrix_asymmetric_within_one_millionth() -> None:
    graph = similarity_graph(np.array([[2.0, 1.0], [1.0 + 5e-7, 2.0]]))
    assert graph.number_of_nodes() == 2 and graph.edges[0, 1]["weight"] == 1.0


def test_join_by_modularity_takes_whole_number_labels_of_any_dtype() -> None:
    s = blocks((2, 2))
    links = np.array([[1.9, 1.9, 0.1, 0.1], [0.1, 0.1, 1.9, 1.9]])
    for labels in ([0, 0, 1, 1], np.array([0.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1], dtype=np.int8)):
        joined = join_by_modularity(links, s, labels)
        assert joined.dtype == np.int64 and joined.tolist() == [0, 1]


def test_split_disagreeing_parts_a_pair_whose_one_cosine_is_zero_and_the_other_negative() -> None:
    from common.clustering.flic import split_disagreeing

    cos = np.array([[1.0, 0.0], [-0.5, 1.0]])
    np.testing.assert_array_equal(split_disagreeing(1.0 + cos, np.array([0, 0])), [0, 1])
