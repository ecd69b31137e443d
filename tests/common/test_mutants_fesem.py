"""FeSEM's helpers refuse bad input with the whole sentence (parameter, owner, range, value) and
take the values at each bound: written for the mutation run's survivors in ``common.clustering.fesem``
(a check's name, owner or bound changed, an error's wording)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.clustering import fesem


def _message(name: str, owner: str, allowed: str, got: object) -> str:
    return "^" + re.escape(f"The '{name}' parameter of {owner} must be {allowed}. Got {got!r} instead.") + "$"


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


POINTS = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0]])

REFUSED: list[tuple[Callable[[], Any], str]] = [
    (lambda: fesem.seed_centres(POINTS, 0, _rng()), _message("k", "seed_centres", "an int in the range [1, 3]", 0)),
    (lambda: fesem.seed_centres(POINTS, 4, _rng()), _message("k", "seed_centres", "an int in the range [1, 3]", 4)),
    (lambda: fesem.fesem_clusters(POINTS, 0, _rng()), _message("k", "FeSEM", "an int in the range [1, 3]", 0)),
    (lambda: fesem.fesem_clusters(POINTS, 4, _rng()), _message("k", "FeSEM", "an int in the range [1, 3]", 4)),
    (lambda: fesem.fesem_clusters(POINTS, 2, _rng(), max_iter=0), _message("max_iter", "FeSEM", "an int >= 1", 0)),
    (
        lambda: fesem.fesem_clusters(np.zeros((0, 2)), 1, _rng()),
        "^"
        + re.escape("The 'points' parameter of FeSEM must be a non-empty finite 2-D array. Got shape (0, 2) instead.")
        + "$",
    ),
    (
        lambda: fesem.fesem_clusters(POINTS, 2, _rng(), weights=[1.0, 0.0, 1.0]),
        "^"
        + re.escape("The 'weights' parameter of FeSEM must be 3 positive finite numbers. Got [1.0, 0.0, 1.0] instead.")
        + "$",
    ),
    (
        lambda: fesem.nearest_centres(np.zeros(3), np.zeros((1, 3))),
        "^"
        + re.escape(
            "The 'centres' parameter of nearest_centres must be a non-empty (K, 3) array for points of shape (3,). "
            "Got shape (1, 3) instead."
        )
        + "$",
    ),
    (
        lambda: fesem.nearest_centres(POINTS, np.zeros((2, 3))),
        "^"
        + re.escape(
            "The 'centres' parameter of nearest_centres must be a non-empty (K, 2) array for points of shape (3, 2). "
            "Got shape (2, 3) instead."
        )
        + "$",
    ),
]


@pytest.mark.parametrize(("call", "message"), REFUSED)
def test_fesem_refuses_the_neighbour_of_each_bound_naming_parameter_owner_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_fesem_takes_the_value_at_each_bound():
    """One centre, as many centres as points, one step: each bound itself is allowed."""
    assert len(fesem.seed_centres(POINTS, 1, _rng())) == 1
    assert sorted(fesem.seed_centres(POINTS, 3, _rng())) == [0, 1, 2]
    np.testing.assert_array_equal(fesem.fesem_clusters(POINTS, 1, _rng()).labels, [0, 0, 0])
    assert len(set(fesem.fesem_clusters(POINTS, 3, _rng()).labels.tolist())) == 3
    assert fesem.fesem_clusters(POINTS, 2, _rng(), max_iter=1).iterations == 1
