"""Issue 31's sampled forms of FLAG and PACFL and CFL-GP's sampled K estimate against the exact ones."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import flag
from common.clustering.flag import data_similarity, data_similarity_between, flag_distances, flag_place, flag_sample
from common.clustering.hierarchical import cut_tree
from common.clustering.subspaces import angles_between, orthonormal_bases, orthonormal_basis, smallest_angles_between

DIM, CLASSES, GROUPS = 24, 6, 3


def planted_flag(
    n: int, seed: int = 0, noise: float = 0.05
) -> tuple[np.ndarray, list[dict[int, np.ndarray]], np.ndarray, np.ndarray]:
    """Group g holds classes 2g, 2g + 1 (their subspaces plus noise), counts 50..500, updates near a centre."""
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.arange(n) % GROUPS)
    true = [np.linalg.qr(rng.standard_normal((DIM, 2)))[0] for _ in range(CLASSES)]
    bases = [
        {
            c: np.linalg.qr(true[c] + noise * rng.standard_normal((DIM, 2)))[0].astype(np.float32)
            for c in (2 * g, 2 * g + 1)
        }
        for g in truth
    ]
    counts = np.zeros((n, CLASSES))
    for i, b in enumerate(bases):
        counts[i, sorted(b)] = rng.integers(50, 500, size=len(b))
    centres = rng.standard_normal((GROUPS, 40))
    updates = (centres[truth] + 1.0 * rng.standard_normal((n, 40))).astype(np.float32)
    return truth, bases, counts, updates


def test_smallest_angles_between_matches_the_one_sided_form():
    rng = np.random.default_rng(0)
    first = [rng.standard_normal((30, int(rng.integers(1, 6)))) for _ in range(25)]
    first[3] = np.zeros((30, 2))  # rank 0: 90 degrees to everything
    first[4] = np.c_[first[5][:, :1], 2 * first[5][:, :1]]  # rank 1 in a (30, 2) array
    second = [rng.standard_normal((30, int(rng.integers(1, 6)))) for _ in range(6)] + [first[7]]
    got = smallest_angles_between(first, second)
    np.testing.assert_allclose(got, angles_between(first, second, "smallest"), atol=1e-6)
    assert got[3].tolist() == [90.0] * 7 and got[7, 6] == pytest.approx(0.0, abs=1e-5)


def test_orthonormal_bases_span_the_same_space():
    rng = np.random.default_rng(1)
    bases = [rng.standard_normal((20, 3)) for _ in range(4)] + [np.c_[np.ones((20, 1)), np.ones((20, 1))]]
    for b, q in zip(bases, orthonormal_bases(bases), strict=True):
        assert q.shape == orthonormal_basis(b).shape
        np.testing.assert_allclose(q.T @ q, np.eye(q.shape[1]), atol=1e-10)
        np.testing.assert_allclose(q @ (q.T @ b), b, atol=1e-10)  # b lies in span(q)


@pytest.mark.parametrize("weighted", [True, False])
def test_data_similarity_between_is_the_exact_matrix_block(weighted):
    """Across two sets, the entries of V of both sets together (a mixed-up weight or class would differ)."""
    _, bases, counts, _ = planted_flag(40, seed=2)
    bases[5] = {1: bases[5][0 if 0 in bases[5] else min(bases[5])]}  # one class held, another missing
    counts[5] = 0
    counts[5, 1] = 7
    counts[9, 4] = 3  # a count without a basis (the odd case)
    cnt = counts if weighted else None
    whole = data_similarity(bases, cnt, CLASSES, 0.4)
    w_max = flag._largest_weight(*flag._class_logs(cnt, 40, CLASSES, "t"))
    got = data_similarity_between(
        bases[:30],
        None if cnt is None else cnt[:30],
        bases[30:],
        None if cnt is None else cnt[30:],
        CLASSES,
        0.4,
        w_max,
    )
    np.testing.assert_allclose(got, whole[:30, 30:], atol=1e-6)
    block = data_similarity(bases[:30], None if cnt is None else cnt[:30], CLASSES, 0.4, w_max=w_max)
    np.testing.assert_allclose(block, whole[:30, :30], atol=1e-6)


@pytest.mark.parametrize("beta", [0.5, 1.0, 0.0])
def test_flag_sampled_form_matches_the_exact_step(beta):
    n, size = 360, 120
    truth, bases, counts, updates = planted_flag(n, seed=3)
    a, _, _ = flag_distances(bases, counts, list(updates), CLASSES, beta=beta, delta=0.5, seed=0)
    exact = cut_tree(a, threshold=0.0, num_clusters=GROUPS)
    s = flag_sample(bases, counts, list(updates), CLASSES, beta=beta, delta=0.5, seed=4, size=size)
    assert s.proximity.shape == (size, size) and len(np.unique(s.positions)) == size
    np.testing.assert_allclose(
        s.data,
        data_similarity([bases[i] for i in s.positions], counts[s.positions], CLASSES, 0.5, w_max=s.w_max),
        atol=1e-9,
    )
    got = flag_place(
        s,
        cut_tree(s.proximity, threshold=0.0, num_clusters=GROUPS),
        bases,
        counts,
        list(updates),
        CLASSES,
        beta=beta,
        delta=0.5,
        seed=4,
    )
    ari_exact, ari_got = adjusted_rand_score(truth, exact), adjusted_rand_score(truth, got)
    assert ari_exact > 0.99 and abs(ari_got - ari_exact) <= 0.01


def test_flag_place_follows_the_clients_not_their_positions():
    """A client outside the sample joins its own group, by data alone and by gradient alone."""
    truth, bases, counts, updates = planted_flag(300, seed=5)
    for beta in (1.0, 0.0):
        s = flag_sample(bases, counts, list(updates), CLASSES, beta=beta, delta=0.5, seed=1, size=60)
        labels = flag_place(s, truth[s.positions], bases, counts, list(updates), CLASSES, beta=beta, delta=0.5, seed=1)
        np.testing.assert_array_equal(labels, truth)


def test_flag_sample_refuses_mismatched_updates_by_name():
    _, bases, counts, updates = planted_flag(30)
    with pytest.raises(ValueError, match="The 'updates' parameter of flag_sample must hold one update per client"):
        flag_sample(bases, counts, list(updates[:29]), CLASSES, beta=0.5, delta=0.5, seed=0)
