"""Issue 31's sampled forms of FLAG and PACFL and CFL-GP's sampled K estimate against the exact ones."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.clustering import flag, sampled, spectral, subspaces
from common.clustering.flag import data_similarity, data_similarity_between, flag_distances, flag_place, flag_sample
from common.clustering.hierarchical import cut_tree
from common.clustering.subspaces import angles_between, orthonormal_basis, orthonormal_groups, subspace_angle

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


@pytest.mark.parametrize("measure", ["smallest", "sum", "mean"])
def test_angles_between_is_scipys_principal_angles_pair_by_pair(measure):
    """Both sides vectorised (ranks 0 to 5, a rank-deficient array, closed form and eigenvalues)."""
    rng = np.random.default_rng(0)
    first = [rng.standard_normal((30, int(rng.integers(1, 6)))) for _ in range(25)]
    first[3] = np.zeros((30, 2))  # rank 0: 90 degrees to everything
    first[4] = np.c_[first[5][:, :1], 2 * first[5][:, :1]]  # rank 1 in a (30, 2) array
    second = [rng.standard_normal((30, int(rng.integers(1, 6)))) for _ in range(6)] + [first[7]]
    got = angles_between(first, second, measure)
    want = [[90.0 if i == 3 else subspace_angle(a, b, measure) for b in second] for i, a in enumerate(first)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got[3].tolist() == [90.0] * 7 and got[7, 6] == pytest.approx(0.0, abs=1e-5)


def test_orthonormal_groups_span_the_same_spaces_by_rank():
    rng = np.random.default_rng(1)
    bases = [rng.standard_normal((20, 3)) for _ in range(4)] + [np.ones((20, 2)), np.zeros((20, 2))]
    bases[2][:, 2] = 2 * bases[2][:, 0]  # rank 2 in a (20, 3) array: SVD drops a direction
    groups = orthonormal_groups(bases)
    assert sorted(groups) == [1, 2, 3] and sorted(groups[3][0].tolist()) == [0, 1, 3]
    assert groups[2][0].tolist() == [2] and groups[1][0].tolist() == [4]  # the zero basis: rank 0, left out
    for r, (at, qs) in groups.items():
        for i, q in zip(at, qs, strict=True):
            assert q.shape == orthonormal_basis(bases[i]).shape == (20, r)
            np.testing.assert_allclose(q.T @ q, np.eye(r), atol=1e-10)
            ref = orthonormal_basis(bases[i])
            np.testing.assert_allclose(q @ (q.T @ ref), ref, atol=1e-8)  # the same space


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


def _profile_columns(n: int, groups: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A CFL-GP profile (rows, N): each client's column is its group's centre plus noise, around a shared one."""
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.arange(n) % groups)
    centres = rng.standard_normal((40, groups))
    g = 3.0 * rng.standard_normal((40, 1)) + centres[:, truth] + 0.2 * rng.standard_normal((40, n))
    return truth, g.astype(np.float32)


@pytest.mark.slow
def test_sampled_estimate_scores_the_sampled_steps_sample_and_finds_the_exact_k(monkeypatch):
    n, groups = subspaces.SAMPLE_SIZE + 500, 3
    truth, g = _profile_columns(n, groups)
    scored: list[np.ndarray] = []
    real = spectral.silhouette_score
    monkeypatch.setattr(spectral, "silhouette_score", lambda x, y: scored.append(x) or real(x, y))
    exact = sampled.sampled_estimate(g, 4, seed=3, sample_above=0)  # 0: exact at every size
    assert {len(x) for x in scored} == {n}
    scored.clear()
    fits: list[object] = []
    kmeans = spectral.kmeans_labels
    monkeypatch.setattr(spectral, "kmeans_labels", lambda f, k, s, rows: fits.append(rows) or kmeans(f, k, s, rows))
    got = sampled.sampled_estimate(g, 4, seed=3, sample_above=n - 1)
    assert {len(x) for x in scored} == {subspaces.SAMPLE_SIZE}
    assert len(fits) == 3 and all(np.array_equal(r, sampled.sample_rows(n, np.random.default_rng(3))) for r in fits)
    assert got.dims == 4  # max-clusters' leading directions, the default projection
    features = spectral.project(g - g.mean(axis=1, keepdims=True), got.dims, 3)
    sample = sampled.sample_rows(n, np.random.default_rng(3))  # sampled_cflgp's for this seed
    np.testing.assert_allclose(np.abs(scored[0]), np.abs(features[sample]), rtol=1e-4, atol=1e-4)
    assert got.num_clusters == exact.num_clusters == groups
    assert adjusted_rand_score(truth, got.labels) == adjusted_rand_score(truth, exact.labels) == 1.0
    calls = []
    monkeypatch.setattr(
        spectral, "estimate_num_clusters", lambda m, k, seed, at, projection: calls.append((at, projection))
    )
    sampled.sampled_estimate(g, 4, seed=3, sample_above=n)  # n clients, not above n: exact
    sampled.sampled_estimate(g, 4, seed=3, sample_above=n - 1, projection=spectral.LARGEST_GAP)
    assert calls[0] == (None, spectral.MAX_CLUSTERS)
    assert np.array_equal(calls[1][0], sample) and calls[1][1] == spectral.LARGEST_GAP


class _Lazy:
    """Float32 bases stacked (float64) when read, counting reads: a sequence no step may hold whole."""

    def __init__(self, bases: list) -> None:
        self.bases, self.reads = [_cast(b, np.float32) for b in bases], 0

    def __len__(self) -> int:
        return len(self.bases)

    def __getitem__(self, i: int):
        self.reads += 1
        return _cast(self.bases[i], np.float64)


def _noisy(direction, rng):
    """A unit column near ``direction`` (about 3 degrees of noise in 30 dimensions)."""
    v = direction + 0.01 * rng.standard_normal(direction.shape)
    return (v / np.linalg.norm(v))[:, None]


def _cast(basis, dtype):
    """A stacked basis, or a client's bases by class, in ``dtype``."""
    if isinstance(basis, dict):
        return {c: b.astype(dtype) for c, b in basis.items()}
    return basis.astype(dtype)


@pytest.mark.parametrize("measure", ["mean", "smallest", "reference", "per-class"])
def test_pacfl_sampled_placement_in_chunks_of_float32_bases_matches_the_exact_step(monkeypatch, measure):
    from common.clustering import oneshot
    from common.clustering.oneshot import Cut, pacfl_clusters

    rng = np.random.default_rng(4)
    truth = rng.permutation(np.arange(90) % 3)
    dirs = np.linalg.qr(rng.standard_normal((30, 6)))[0]
    bases = [np.linalg.qr(dirs[:, 2 * g : 2 * g + 2] + 0.05 * rng.standard_normal((30, 2)))[0] for g in truth]
    if measure == "per-class":  # group g holds class 0 and class g + 1; classes 1..3 look alike (0.3 degrees)
        like = [np.cos(np.radians(0.3 * c)) * dirs[:, 1] + np.sin(np.radians(0.3 * c)) * dirs[:, 2] for c in range(3)]
        bases = [
            {0: _noisy(dirs[:, 0], rng), int(g) + 1: _noisy(like[int(g)], rng)} for g in truth
        ]  # stacked, the groups mix (ARI < 0.5); class by class, 90 degrees for each class one lacks
    exact = pacfl_clusters(bases, Cut(0.0, 3), measure, np.random.default_rng(0))
    monkeypatch.setattr(subspaces, "SAMPLE_SIZE", 30)
    monkeypatch.setattr(oneshot, "SAMPLE_SIZE", 30)
    whole = pacfl_clusters(_Lazy(bases), Cut(0.0, 3), measure, np.random.default_rng(0))
    monkeypatch.setattr(subspaces, "PLACE_CHUNK", 7)
    lazy = _Lazy(bases)
    chunked = pacfl_clusters(lazy, Cut(0.0, 3), measure, np.random.default_rng(0))
    np.testing.assert_array_equal(chunked.labels, whole.labels)  # the chunks change nothing
    if measure == "per-class":  # the sampled placement measures per class too, not on stacked bases
        stacked = pacfl_clusters(bases, Cut(0.0, 3), "mean", np.random.default_rng(0))
        assert adjusted_rand_score(truth, stacked.labels) < 0.5
    assert chunked.distances is None and lazy.reads <= 90 + 3 * subspaces.REFERENCES_PER_CLUSTER * 13
    assert adjusted_rand_score(truth, exact.labels) == adjusted_rand_score(truth, chunked.labels) == 1.0
