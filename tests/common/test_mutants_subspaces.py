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
