"""The subspace helpers refuse bad input with the whole sentence (parameter, function, range, value)
and take the values at each bound: written for the mutation run's survivors in
``common.clustering.subspaces`` (a check's name, owner or bound changed, an error's wording)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.clustering import subspaces as sub


def _whole(text: str) -> str:
    return "^" + re.escape(text) + "$"


MEASURES = "one of {'mean', 'reference', 'reference-signed', 'smallest', 'sum'}"
E = np.eye(3)


def _measure(owner: str) -> str:
    return _whole(f"The 'measure' parameter of {owner} must be {MEASURES}. Got 'largest' instead.")


REFUSED: list[tuple[Callable[[], Any], str]] = [
    (
        lambda: sub.principal_angles(np.zeros(3), E[:, :1]),
        _whole("The 'a' parameter of principal_angles must be a non-empty 2-D basis (d, p). Got shape (3,) instead."),
    ),
    (
        lambda: sub.principal_angles(E[:, :1], np.eye(2)[:, :1]),
        _whole("The 'b' parameter of principal_angles must be a non-empty 2-D basis (3, p). Got shape (2, 1) instead."),
    ),
    (
        lambda: sub.principal_angles(E[:, :1], np.full((3, 1), np.nan)),
        _whole("The 'b' parameter of principal_angles must hold finite values. Got NaN or Inf instead."),
    ),
    (lambda: sub.subspace_angle(E[:, :1], E[:, 1:2], "largest"), _measure("subspace_angle")),
    (
        lambda: sub.subspace_angle(np.zeros((3, 0)), E[:, :1], "reference"),
        _whole("The 'a' parameter of subspace_angle must be a non-empty 2-D basis (d, p). Got shape (3, 0) instead."),
    ),
    (
        lambda: sub.subspace_angle(E[:, :1], np.eye(2)[:, :1], "reference"),
        _whole("The 'b' parameter of subspace_angle must be a non-empty 2-D basis (3, p). Got shape (2, 1) instead."),
    ),
    (lambda: sub.pairwise_subspace_angles([E[:, :1]], "largest"), _measure("pairwise_subspace_angles")),
    (
        lambda: sub.pairwise_subspace_angles([E[:, :1]], one_missing=-1.0),
        _whole("The 'one_missing' parameter of pairwise_subspace_angles must be a float >= 0.0. Got -1.0 instead."),
    ),
    (
        lambda: sub.pairwise_subspace_angles([E[:, :1]], both_missing=-1.0),
        _whole("The 'both_missing' parameter of pairwise_subspace_angles must be a float >= 0.0. Got -1.0 instead."),
    ),
    (
        lambda: sub.pairwise_subspace_angles([]),
        _whole(
            "The 'bases' parameter of pairwise_subspace_angles must hold at least one basis or None. "
            "Got an empty sequence instead."
        ),
    ),
    (
        lambda: sub.pairwise_subspace_angles([E[:, :1], np.eye(2)[:, :1]]),
        _whole(
            "The 'bases' parameter of pairwise_subspace_angles must hold bases with one row count d. "
            "Got row counts [2, 3] instead."
        ),
    ),
    (
        lambda: sub.pairwise_subspace_angles([np.zeros(3)]),
        _whole(
            "The 'bases' parameter of pairwise_subspace_angles must be a non-empty 2-D basis (d, p). "
            "Got shape (3,) instead."
        ),
    ),
    (
        lambda: sub.stack_bases([]),
        _whole("The 'per_class' parameter of stack_bases must hold at least one basis. Got an empty sequence instead."),
    ),
    (
        lambda: sub.stack_bases([E[:, :1], np.eye(2)[:, :1]]),
        _whole(
            "The 'per_class' parameter of stack_bases must hold bases with one row count d. "
            "Got row counts [2, 3] instead."
        ),
    ),
    (
        lambda: sub.stack_bases([np.zeros((0, 1))]),
        _whole(
            "The 'per_class' parameter of stack_bases must be a non-empty 2-D basis (d, p). Got shape (0, 1) instead."
        ),
    ),
    (lambda: sub.angles_between([E[:, :1]], [E[:, 1:2]], "largest"), _measure("angles_between")),
]


@pytest.mark.parametrize(("call", "message"), REFUSED)
def test_subspace_helpers_refuse_bad_input_naming_parameter_function_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_pairwise_subspace_angles_take_zero_for_a_missing_basis():
    """0 is allowed for both fill values: a client without a basis is then at 0 from everyone."""
    out = sub.pairwise_subspace_angles([E[:, :1], None], one_missing=0.0, both_missing=0.0)
    np.testing.assert_array_equal(out, np.zeros((2, 2)))


def test_stack_bases_keeps_every_column_in_order():
    np.testing.assert_array_equal(sub.stack_bases([E[:, :1], E[:, 1:3]]), E)


def test_principal_angles_of_float32_bases_are_computed_in_float64():
    """The bases are read as float64: float32 input gives the float64 angles, not float32 rounding's."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(
        sub.principal_angles(a32, b32), sub.principal_angles(a32.astype(np.float64), b32.astype(np.float64))
    )


def test_the_reference_measure_between_every_pair_is_each_pairs_own_with_a_zero_diagonal() -> None:
    from common.clustering.subspaces import pairwise_subspace_angles, subspace_angle

    rng = np.random.default_rng(5)
    bases = [rng.standard_normal((12, 2)) for _ in range(4)]
    bases.append(bases[1].copy())  # the same subspace: its largest column cosine is 1 up to rounding
    got = pairwise_subspace_angles(bases, "reference")
    want = np.array([[subspace_angle(a, b, "reference") if a is not b else 0.0 for b in bases] for a in bases])
    assert np.all(np.isfinite(got)) and np.all(np.diag(got) == 0.0)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert got[1, 4] == pytest.approx(0.0, abs=1e-6)


def _rotation(d: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))[0]


def test_the_signed_reference_angle_of_antiparallel_columns_is_180_degrees_by_every_route():
    """A column and its negation: the signed cosine rounds to just below -1 for some vectors, which is
    clipped (arccos would give NaN)."""
    for seed in range(12):
        v = np.random.default_rng(seed).standard_normal((5, 1))
        assert sub.subspace_angle(v, -v, "reference-signed") == pytest.approx(180.0, abs=1e-5)
        np.testing.assert_allclose(
            sub.pairwise_subspace_angles([v, -v], "reference-signed"), [[0.0, 180.0], [180.0, 0.0]], atol=1e-5
        )
        np.testing.assert_allclose(sub.angles_between([v], [-v], "reference-signed"), [[180.0]], atol=1e-5)


def _sharing_one_of_two(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two planes of R^6 sharing one direction, the other directions orthogonal (principal angles 0 and 90),
    given by non-orthonormal columns."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((6, 2))
    w = rng.standard_normal(6)
    w -= a @ np.linalg.lstsq(a, w, rcond=None)[0]
    return a, np.stack([a[:, 0] + a[:, 1], w], axis=1)


def test_the_sum_of_principal_angles_with_a_zero_cosine_is_finite_by_both_routes():
    """A squared cosine of 0 can come out of the eigensolver a little below 0; it is clipped, not a NaN."""
    for seed in range(20):
        a, b = _sharing_one_of_two(seed)
        assert sub.pairwise_subspace_angles([a, b], "sum")[0, 1] == pytest.approx(90.0, abs=1e-5)
        assert sub.angles_between([a], [b], "sum")[0, 0] == pytest.approx(90.0, abs=1e-5)
        assert sub.angles_between([a], [b], "mean")[0, 0] == pytest.approx(45.0, abs=1e-5)


def test_the_smallest_angle_of_rank_three_bases_sharing_two_directions_is_zero_by_both_routes():
    """Two equal largest eigenvalues put the closed form's cosine argument at -1, which rounding can pass."""
    for seed in range(20):
        q = _rotation(6, seed)
        a, b = q[:, [0, 1, 2]], q[:, [0, 1, 3]]
        assert sub.pairwise_subspace_angles([a, b])[0, 1] == pytest.approx(0.0, abs=1e-5)
        assert sub.angles_between([a], [b])[0, 0] == pytest.approx(0.0, abs=1e-5)


def test_angles_between_measures_the_smallest_angle_by_default():
    q = _rotation(4, 0)
    first, second = [q[:, :2], q[:, 1:3]], [q[:, 2:], q[:, [0, 3]]]
    np.testing.assert_array_equal(sub.angles_between(first, second), sub.angles_between(first, second, "smallest"))
    np.testing.assert_allclose(sub.angles_between(first, second), [[90.0, 0.0], [0.0, 90.0]], atol=1e-6)


def test_orthonormal_basis_keeps_the_directions_above_rcond_and_none_of_a_zero_or_empty_matrix():
    assert sub.orthonormal_basis(np.diag([1.0, 1e-3]), rcond=1e-2).shape == (2, 1)
    assert sub.orthonormal_basis(np.diag([1.0, 1e-3])).shape == (2, 2)
    assert sub.orthonormal_basis(np.zeros((3, 2))).shape == (3, 0)
    assert sub.orthonormal_basis(np.zeros((3, 0))).shape == (3, 0)


def test_a_zero_basis_is_at_90_degrees_from_every_other_basis():
    out = sub.pairwise_subspace_angles([E[:, :1], np.zeros((3, 2)), E[:, 1:]])
    np.testing.assert_allclose(out, [[0.0, 90.0, 90.0], [90.0, 0.0, 90.0], [90.0, 90.0, 0.0]], atol=1e-6)
    np.testing.assert_array_equal(sub.angles_between([np.zeros((3, 2))], [E[:, :1]]), [[90.0]])


def test_pairwise_subspace_angles_fill_a_missing_basis_with_90_and_two_missing_with_0_by_default():
    out = sub.pairwise_subspace_angles([E[:, :1], None, None])
    np.testing.assert_array_equal(out, [[0.0, 90.0, 90.0], [90.0, 0.0, 0.0], [90.0, 0.0, 0.0]])


def test_orthonormal_groups_give_orthonormal_bases_of_a_large_nearly_dependent_basis():
    """Columns of norm 1e6 at 1e-7 radians: the Gram route would lose orthonormality (cond 1e14); SVD keeps it."""
    u = _rotation(5, 1)
    b = 1e6 * np.stack([u[:, 0], u[:, 0] + 1e-7 * u[:, 1]], axis=1)
    ((at, q),) = sub.orthonormal_groups([b]).values()
    assert at.tolist() == [0] and q.shape == (1, 5, 2)
    np.testing.assert_allclose(q[0].T @ q[0], np.eye(2), atol=1e-10)


def test_orthonormal_groups_keep_a_rank_deficient_basis_once_at_its_rank():
    groups = sub.orthonormal_groups([E[:, [0, 0]], E[:, :2], E[:, [1, 2]]])
    assert sorted(groups) == [1, 2]
    assert groups[1][0].tolist() == [0] and groups[2][0].tolist() == [1, 2]
    assert groups[1][1].shape == (1, 3, 1) and groups[2][1].shape == (2, 3, 2)
    np.testing.assert_allclose(sub.angles_between([E[:, [0, 0]]], [E[:, :1], E[:, 1:2]]), [[0.0, 90.0]], atol=1e-6)


def test_angles_between_float32_bases_are_computed_in_float64():
    rng = np.random.default_rng(3)
    first = [rng.standard_normal((20, 3)).astype(np.float32) for _ in range(3)]
    second = [rng.standard_normal((20, 2)).astype(np.float32) for _ in range(2)]
    for measure in ("smallest", "sum"):
        np.testing.assert_array_equal(
            sub.angles_between(first, second, measure),
            sub.angles_between([b.astype(np.float64) for b in first], [b.astype(np.float64) for b in second], measure),
        )


def _distance_by(table: np.ndarray) -> Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    return lambda refs: lambda at: table[np.ix_(at, refs)]


def test_place_by_references_keeps_the_sample_labels_and_places_the_others_by_the_mean_over_references():
    """Client 3: mean distance 2 to cluster 0's references {0, 1}, 1 to cluster 1's {2}. Client 0 is nearer
    cluster 1's reference than its own cluster's, yet keeps its cut label."""
    table = np.array([[0.0, 5.0, 1.0], [5.0, 0.0, 5.0], [1.0, 5.0, 0.0], [4.0, 0.0, 1.0]])
    labels = sub.place_by_references(
        4, np.array([0, 1, 2]), np.array([0, 0, 1]), _distance_by(table), np.random.default_rng(0)
    )
    np.testing.assert_array_equal(labels, [0, 0, 1, 1])
    assert labels.dtype == np.int64


def test_place_by_references_draws_distinct_references():
    drawn = []

    def against(refs):
        drawn.append(refs)
        return lambda at: np.zeros((len(at), len(refs)))

    sub.place_by_references(21, np.arange(20), np.zeros(20, dtype=np.int64), against, np.random.default_rng(0), 20)
    np.testing.assert_array_equal(drawn[0], np.arange(20))


def _by_first_row(matrix: np.ndarray) -> np.ndarray:
    return (matrix[:, 0] > 1e-3).astype(np.int64)


def test_sampled_clusters_at_the_sample_size_cut_every_client_and_draw_nothing(monkeypatch):
    monkeypatch.setattr(sub, "SAMPLE_SIZE", 3)
    rng = np.random.default_rng(0)
    labels, sample, matrix = sub.sampled_clusters([E[:, :1], E[:, :1], E[:, 1:2]], "smallest", _by_first_row, rng)
    np.testing.assert_array_equal(labels, [0, 0, 1])
    np.testing.assert_array_equal(sample, [0, 1, 2])
    assert matrix.shape == (3, 3)
    assert rng.integers(1 << 30) == np.random.default_rng(0).integers(1 << 30)


def test_sampled_clusters_cut_a_distinct_sample_and_place_the_rest_by_the_measure_given(monkeypatch):
    """Client 6 (span(e0, e2), outside the sample) is nearer A = span(e0, e1) by the smallest angle (0 against
    5 degrees) but nearer B by the sum (35 against 90): with "sum" it joins B."""
    c30, s30, c5, s5 = np.cos(np.radians(30)), np.sin(np.radians(30)), np.cos(np.radians(5)), np.sin(np.radians(5))
    e = np.eye(5)
    a, b, newcomer = e[:, [0, 1]], np.stack([c30 * e[0] + s30 * e[3], c5 * e[2] + s5 * e[4]], axis=1), e[:, [0, 2]]
    bases = [a, a, a, b, b, b, newcomer]
    monkeypatch.setattr(sub, "SAMPLE_SIZE", 6)
    labels, sample, matrix = sub.sampled_clusters(bases, "sum", _by_first_row, np.random.default_rng(0))
    np.testing.assert_array_equal(sample, np.arange(6))
    np.testing.assert_array_equal(labels, [0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_allclose(matrix, sub.pairwise_subspace_angles(bases[:6], "sum"))
    assert matrix[0, 3] == pytest.approx(120.0)
    monkeypatch.setattr(sub, "SAMPLE_SIZE", 8)
    _, sample, _ = sub.sampled_clusters(bases * 2, "sum", _by_first_row, np.random.default_rng(0))
    assert len(np.unique(sample)) == 8


def test_angles_between_on_threads_in_blocks_equal_the_single_block(monkeypatch):
    """Five bases in blocks of two on up to four threads: 2.5 blocks make three threads."""
    rng = np.random.default_rng(4)
    first = [rng.standard_normal((6, 1)) for _ in range(5)]
    second = [rng.standard_normal((6, 1))]
    whole = sub.angles_between(first, second)
    monkeypatch.setattr(sub, "BLOCK_ENTRIES", 2)
    monkeypatch.setattr(sub, "row_threads", lambda: 4)
    np.testing.assert_allclose(sub.angles_between(first, second), whole, atol=1e-9)
