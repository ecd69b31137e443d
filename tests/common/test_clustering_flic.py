"""FLIC's resolution choice by silhouette and the modularity-gain join of clients outside the graph."""

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering.flic import (
    clustering_round,
    flic_clusters,
    join_by_modularity,
    loss_plateau,
    louvain_by_silhouette,
    rounds_for_updates,
    split_disagreeing,
)
from common.clustering.louvain import louvain_labels


def _rotation_like(rng, per_group=15):
    """``1 + cos`` of four groups: cos 0.85 within, 0.2 between groups 0-2 and 1-3, -0.4 otherwise."""
    truth = np.repeat(np.arange(4), per_group)
    between = np.array(
        [[0.85, -0.4, 0.2, -0.4], [-0.4, 0.85, -0.4, 0.2], [0.2, -0.4, 0.85, -0.4], [-0.4, 0.2, -0.4, 0.85]]
    )
    c = between[np.ix_(truth, truth)] + rng.normal(0, 0.03, (len(truth),) * 2)
    c = np.clip((c + c.T) / 2, -1, 1)
    np.fill_diagonal(c, 1.0)
    perm = rng.permutation(len(truth))
    return 1.0 + c[np.ix_(perm, perm)], truth[perm]


def test_silhouette_resolution_finds_the_four_groups_that_resolution_one_merges():
    s, truth = _rotation_like(np.random.default_rng(0))
    assert len(set(louvain_labels(s, 1.0, 0))) == 2
    labels, resolution = louvain_by_silhouette(s, seed=0)
    assert adjusted_rand_score(truth, labels) == 1.0 and resolution != 1.0
    again, _ = louvain_by_silhouette(s, seed=0)
    np.testing.assert_array_equal(labels, again)


def test_silhouette_resolution_falls_back_when_no_partition_is_scorable():
    labels, resolution = louvain_by_silhouette(np.full((3, 3), 2.0), seed=0, resolutions=(1.0, 50.0))
    assert resolution == 1.0 and len(labels) == 3
    with pytest.raises(ValueError, match="'resolutions' parameter of louvain_by_silhouette"):
        louvain_by_silhouette(np.full((3, 3), 2.0), resolutions=(0.0,))


def test_join_by_modularity_places_newcomers_with_their_own_group():
    s, truth = _rotation_like(np.random.default_rng(1))
    labels = louvain_labels(s, 1.5, 0)
    assert adjusted_rand_score(truth, labels) == 1.0
    out = [0, 5, 17, 33, 48]
    keep = np.setdiff1d(np.arange(len(s)), out)
    joined = join_by_modularity(s[np.ix_(out, keep)], s[np.ix_(keep, keep)], labels[keep], 1.5)
    np.testing.assert_array_equal(joined, labels[out])


def test_join_by_modularity_weighs_community_size_by_resolution():
    # One newcomer tied to a big community (4 x 1.0) and a small one (1 x 1.5): the raw link
    # weight prefers the big one, the null model's penalty for its degree reverses that.
    s = np.full((5, 5), 1.0)
    labels = np.array([0, 0, 0, 0, 1])
    links = np.array([[1.0, 1.0, 1.0, 1.0, 1.5]])
    assert join_by_modularity(links, s, labels, resolution=0.1)[0] == 0
    assert join_by_modularity(links, s, labels, resolution=1.0)[0] == 1
    with pytest.raises(ValueError, match="'links' parameter of join_by_modularity"):
        join_by_modularity(links[:, :4], s, labels)
    with pytest.raises(ValueError, match="'resolution' parameter of join_by_modularity"):
        join_by_modularity(links, s, labels, resolution=0.0)


def _first_plateau(losses, window, tol):
    return next((t for t in range(1, len(losses) + 1) if loss_plateau(losses[:t], window, tol)), None)


@pytest.mark.parametrize(("tol", "expected"), [(0.1, 14), (0.2, 12), (0.5, 9)])
def test_loss_plateau_fires_where_the_recent_fall_drops_below_tol_of_the_early_one(tol, expected):
    # L_t = exp(-0.3 t) + 0.5: the fall between the windows ending at t - 3 and t is exp(-0.3 (t - 6))
    # times the fall between the windows 1-3 and 4-6
    losses = np.exp(-0.3 * np.arange(1, 30)) + 0.5
    assert _first_plateau(losses, 3, tol) == min(t for t in range(6, 30) if np.exp(-0.3 * (t - 6)) < tol)
    assert _first_plateau(losses, 3, tol) == expected


def test_loss_plateau_needs_two_windows_and_a_steady_fall_never_plateaus():
    assert not loss_plateau([2.0, 1.0, 0.9, 0.85, 0.84], 3, 100.0)  # 5 < 2 * 3 rounds
    assert loss_plateau([2.0, 1.0, 0.9, 0.85, 0.84, 0.84, 0.84, 0.84, 0.84], 3, 0.1)
    # one noisy round up while the loss still falls fast does not count as a plateau
    assert not loss_plateau([2.32, 2.20, 2.11, 2.07, 1.89, 1.83, 1.76, 1.89], 3, 0.1)
    steady = 2.0 - 0.01 * np.arange(40)  # a straight line: the recent fall equals the early one
    assert _first_plateau(steady, 3, 0.5) is None
    assert loss_plateau([1.0, 1.0, 1.0, 1.2, 1.1, 1.0, 1.0], 3, 0.1)  # no early fall: stable from the start
    with pytest.raises(ValueError, match="'tol'"):
        loss_plateau([1.0], 3, 0.0)


def test_join_by_modularity_ignores_the_diagonal():
    # Equal degrees off the diagonal: the newcomer's stronger links (1.0 against 0.9) decide. A
    # self-similarity of 10 on community 0's nodes must not inflate that community's degree.
    s = np.array(
        [
            [10.0, 0.5, 0.1, 0.1],
            [0.5, 10.0, 0.1, 0.1],
            [0.1, 0.1, 0.0, 0.5],
            [0.1, 0.1, 0.5, 0.0],
        ]
    )
    labels = np.array([0, 0, 1, 1])
    links = np.array([[1.0, 1.0, 0.9, 0.9]])
    assert join_by_modularity(links, s, labels)[0] == 0
    rng = np.random.default_rng(0)
    for _ in range(20):
        noisy = s.copy()
        np.fill_diagonal(noisy, rng.uniform(0, 100, 4))
        assert join_by_modularity(links, noisy, labels)[0] == 0


def test_loss_plateau_takes_a_one_round_window_and_refuses_bad_settings_by_name():
    # window 1 compares single rounds: a fall of 0.1 after one of 1.0 is a plateau at tol 0.5, a steady fall is not
    assert loss_plateau([3.0, 2.0, 1.9, 1.9], 1, 0.5)
    assert not loss_plateau([3.0, 2.0, 1.0, 0.0], 1, 0.5)
    with pytest.raises(
        ValueError, match=r"The 'window' parameter of loss_plateau must be an int >= 1\. Got 0 instead\."
    ):
        loss_plateau([1.0, 1.0], 0, 0.1)
    with pytest.raises(
        ValueError, match=r"The 'tol' parameter of loss_plateau must be a float > 0\.0\. Got 0\.0 instead\."
    ):
        loss_plateau([1.0, 1.0], 1, 0.0)


def test_loss_plateau_needs_the_recent_fall_strictly_below_tol_and_holds_when_the_early_one_is_zero():
    assert not loss_plateau([3.0, 2.0, 1.5, 1.0], 1, 0.5)  # recent fall 0.5 == 0.5 * early fall 1.0
    assert loss_plateau([3.0, 2.0, 1.5, 1.01], 1, 0.5)
    assert loss_plateau([1.0, 1.0, 1.0, 0.5], 1, 0.5)  # no early fall: true whatever comes after


def test_join_by_modularity_places_each_newcomer_as_if_alone_and_only_in_a_community():
    s = np.full((5, 5), 1.0)
    labels = np.array([0, 0, 0, 0, 1])
    newcomer = np.array([1.0, 1.0, 1.0, 1.0, 1.5])
    # at resolution 0.1 it joins the big community; a second newcomer with ten times its links changes nothing
    alone = join_by_modularity(newcomer[None], s, labels, resolution=0.1)
    together = join_by_modularity(np.array([newcomer, 10 * newcomer]), s, labels, resolution=0.1)
    assert alone.dtype == together.dtype == np.int64
    np.testing.assert_array_equal(together, [0, 0])
    np.testing.assert_array_equal(alone, [0])
    # modularity gain is scale-free: similarities a thousand times smaller place it alike
    for scale in (1.0, 1e-3):
        assert join_by_modularity(scale * newcomer[None], scale * s, labels, resolution=1.0)[0] == 1
    # every gain negative (a high resolution): still the best existing community, never an empty one
    assert join_by_modularity(newcomer[None], s, labels, resolution=10.0)[0] == 1
    # a single clustered node is enough
    np.testing.assert_array_equal(join_by_modularity(np.array([[0.5]]), np.zeros((1, 1)), np.array([0])), [0])
    with pytest.raises(ValueError, match=r"^The 'links' parameter of join_by_modularity must have shape \(m, n\)"):
        join_by_modularity(newcomer[None, :4], s, labels)


def test_loss_plateau_refuses_a_missing_a_non_finite_or_a_2d_loss_by_name():
    """A missing round (None) reads as nan and is refused like nan, not as a TypeError from an
    object array; a 2-D history is refused even when every value is finite."""
    message = r"The 'losses' parameter of loss_plateau must be a finite 1-D sequence\. Got shape \({}\) instead\."
    with pytest.raises(ValueError, match=message.format("4,")):
        loss_plateau([3.0, None, 1.9, 1.9], 1, 0.5)
    with pytest.raises(ValueError, match=message.format("4,")):
        loss_plateau([3.0, 2.0, np.inf, 1.9], 1, 0.5)
    with pytest.raises(ValueError, match=message.format("2, 2")):
        loss_plateau([[3.0, 2.0], [1.9, 1.9]], 1, 0.5)


def test_loss_plateau_decides_at_exactly_two_windows():
    # t = 2w: the early and the recent fall are one fall; no fall is a plateau, a fall is one only above tol 1
    assert loss_plateau([1.0, 1.0], 1, 0.1)
    assert loss_plateau([1.0, 1.0, 1.0, 1.0], 2, 0.1)
    assert loss_plateau([2.0, 1.0], 1, 1.5) and not loss_plateau([2.0, 1.0], 1, 0.5)


def test_louvain_by_silhouette_without_any_scored_cut_falls_back_to_the_resolution_nearest_one():
    """Two nodes never give a cut with a silhouette (2 <= k <= n - 1): the candidate closest to 1.0 is kept."""
    s = np.array([[2.0, 1.5], [1.5, 2.0]])
    labels, gamma = louvain_by_silhouette(s, seed=0, resolutions=(0.5, 0.9, 1.4))
    assert gamma == 0.9
    np.testing.assert_array_equal(labels, louvain_labels(s, 0.9, 0))


ONE_CLIENT_GROUP_COS = np.array(
    [
        [1.00, 0.79, -0.39, -0.34, -0.43, -0.35, -0.12, -0.20, -0.15, 0.29, 0.24, 0.39, 0.27],
        [0.79, 1.00, -0.18, -0.27, -0.08, -0.22, 0.11, -0.06, -0.04, -0.13, -0.18, -0.07, -0.19],
        [-0.39, -0.18, 1.00, 0.88, 0.88, 0.93, -0.11, -0.19, -0.04, -0.36, -0.58, -0.49, -0.56],
        [-0.34, -0.27, 0.88, 1.00, 0.72, 0.87, -0.28, -0.29, -0.14, -0.12, -0.34, -0.26, -0.33],
        [-0.43, -0.08, 0.88, 0.72, 1.00, 0.81, 0.12, -0.04, 0.01, -0.59, -0.77, -0.75, -0.78],
        [-0.35, -0.22, 0.93, 0.87, 0.81, 1.00, -0.25, -0.38, -0.25, -0.19, -0.46, -0.39, -0.43],
        [-0.12, 0.11, -0.11, -0.28, 0.12, -0.25, 1.00, 0.42, 0.33, -0.52, -0.39, -0.41, -0.37],
        [-0.20, -0.06, -0.19, -0.29, -0.04, -0.38, 0.42, 1.00, 0.90, -0.48, -0.17, -0.26, -0.16],
        [-0.15, -0.04, -0.04, -0.14, 0.01, -0.25, 0.33, 0.90, 1.00, -0.47, -0.20, -0.20, -0.16],
        [0.29, -0.13, -0.36, -0.12, -0.59, -0.19, -0.52, -0.48, -0.47, 1.00, 0.90, 0.89, 0.86],
        [0.24, -0.18, -0.58, -0.34, -0.77, -0.46, -0.39, -0.17, -0.20, 0.90, 1.00, 0.93, 0.96],
        [0.39, -0.07, -0.49, -0.26, -0.75, -0.39, -0.41, -0.26, -0.20, 0.89, 0.93, 1.00, 0.93],
        [0.27, -0.19, -0.56, -0.33, -0.78, -0.43, -0.37, -0.16, -0.16, 0.86, 0.96, 0.93, 1.00],
    ]
)
"""Cosines of the updates FLIC clustered in round 9 of a development federation (tabular label groups,
15 clients in 5 groups, seed 101, every default; the 13 clients sampled so far, sorted by group):
group 2 is one client, whose most alike updates are group 3's (0.42, 0.33)."""
ONE_CLIENT_GROUP_TRUTH = np.array([0, 0, 1, 1, 1, 1, 2, 3, 3, 4, 4, 4, 4])


def test_silhouette_tolerance_keeps_a_one_client_group_that_the_best_silhouette_merges():
    s = 1.0 + ONE_CLIENT_GROUP_COS
    best, _ = louvain_by_silhouette(s, seed=101)
    assert best.max() + 1 == 4 and best[6] == best[7] == best[8]  # the best silhouette: one client joins group 3
    kept, resolution = louvain_by_silhouette(s, seed=101, tolerance=0.02)
    assert adjusted_rand_score(ONE_CLIENT_GROUP_TRUTH, kept) == 1.0 and resolution > 1.2
    again, _ = flic_clusters(s, 0.0, 101, tolerance=0.02)
    np.testing.assert_array_equal(again, kept)
    np.testing.assert_array_equal(flic_clusters(s, 0.0, 101)[0], best)
    with pytest.raises(ValueError, match="'tolerance' parameter of louvain_by_silhouette"):
        louvain_by_silhouette(s, tolerance=1.0)


DISAGREEING_COS = np.array(
    [
        [1.00, 0.70, 0.80, 0.77, 0.82, -0.17, -0.26, -0.26],
        [0.70, 1.00, 0.91, 0.90, 0.96, -0.24, -0.58, -0.56],
        [0.80, 0.91, 1.00, 0.83, 0.93, -0.49, -0.37, -0.31],
        [0.77, 0.90, 0.83, 1.00, 0.96, -0.07, -0.66, -0.65],
        [0.82, 0.96, 0.93, 0.96, 1.00, -0.22, -0.57, -0.56],
        [-0.17, -0.24, -0.49, -0.07, -0.22, 1.00, -0.19, -0.38],
        [-0.26, -0.58, -0.37, -0.66, -0.57, -0.19, 1.00, 0.93],
        [-0.26, -0.56, -0.31, -0.65, -0.56, -0.38, 0.93, 1.00],
    ]
)
"""Round-9 update cosines of a development federation (tabular label groups, 10 clients in 3 groups, seed 103;
the 8 clients seen, sorted by group): group 1 is one client, whose update disagrees with everyone's."""
DISAGREEING_TRUTH = np.array([0, 0, 0, 0, 0, 1, 2, 2])


def test_split_disagreeing_gives_a_one_client_group_its_own_cluster():
    s = 1.0 + DISAGREEING_COS
    merged, _ = flic_clusters(s, 0.0, 103)
    assert merged.max() + 1 == 2 and merged[5] == merged[0]  # Louvain: the lone client joins group 0
    split, _ = flic_clusters(s, 0.0, 103, split=True)
    assert adjusted_rand_score(DISAGREEING_TRUTH, split) == 1.0
    np.testing.assert_array_equal(split_disagreeing(s, merged), split)
    # communities that agree are left alone: the planted partition, and the well-separated rotation-like groups
    np.testing.assert_array_equal(split_disagreeing(s, DISAGREEING_TRUTH), DISAGREEING_TRUTH)
    rot, truth = _rotation_like(np.random.default_rng(2))
    assert adjusted_rand_score(truth, split_disagreeing(rot, truth)) == 1.0
    weak = np.full((3, 3), 0.1)  # agreeing, barely: kept; disagreeing, barely: three clusters of one
    np.fill_diagonal(weak, 1.0)
    np.testing.assert_array_equal(split_disagreeing(1.0 + weak, np.zeros(3, dtype=int)), [0, 0, 0])
    weak[weak == 0.1] = -0.1
    np.testing.assert_array_equal(split_disagreeing(1.0 + weak, np.zeros(3, dtype=int)), [0, 1, 2])
    with pytest.raises(ValueError, match="'labels' parameter of split_disagreeing"):
        split_disagreeing(s, merged[:5])


def test_rounds_for_updates_counts_the_rounds_until_the_mean_client_has_sent_that_many():
    assert rounds_for_updates(3.0, 10, 2) == 15  # 2 of 10 a round: 0.2 updates a client a round
    assert rounds_for_updates(3.0, 12, 3) == 12
    assert rounds_for_updates(1.5, 10, 4) == 4  # 3.75 rounds: the next whole round
    assert rounds_for_updates(2.0, 5, 5) == 2  # everyone every round
    assert rounds_for_updates(0.0, 10, 2) == 0
    with pytest.raises(ValueError, match="'per_round' parameter of rounds_for_updates"):
        rounds_for_updates(3.0, 10, 11)
    with pytest.raises(ValueError, match="'updates' parameter of rounds_for_updates"):
        rounds_for_updates(-1.0, 10, 2)


def test_clustering_round_comes_after_the_plateau_and_the_wait_and_never_after_half_the_rounds():
    assert clustering_round(6, 0, 100) == 7  # the round after the plateau's
    assert clustering_round(6, 15, 100) == 16  # the wait is longer: after its 15 rounds
    assert clustering_round(20, 15, 100) == 21
    assert clustering_round(6, 60, 100) == 51  # the cap
    assert clustering_round(None, 0, 100) == 51  # no plateau yet: the cap
    assert clustering_round(6, 15, 16) == 9
