"""Per-class principal vectors of a client's TRAIN data (PACFL, Vahidian et al. AAAI 2023; FLAG).

For each class ``c`` it holds, the client stacks its flattened train samples of that class as
the columns of ``D_c`` (d, n_c) and keeps the first ``p`` left singular vectors ``U_c`` (d, p_c),
``p_c = min(p, n_c, d)``. Optionally it also sends how many samples of each class it has
(FLAG's weights, Eq. 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common import keys

from . import SignalError, check_names, require_array

ORTHONORMAL_TOL = 1e-3


def basis_name(cls: int) -> str:
    """Array name of class ``cls``'s basis."""
    return f"basis-{cls}"


@dataclass(frozen=True, eq=False)
class ClassSubspaces:
    """One orthonormal basis per class present on the client.

    Attributes
    ----------
    classes : ndarray of shape (m,), int64
        The classes the client holds, strictly increasing.
    bases : tuple of m ndarrays of shape (d, p_c)
        Orthonormal columns, ``1 <= p_c <= p``.
    counts : ndarray of shape (m,), int64, or None
        Train samples of each class, when asked for.
    """

    action: ClassVar[str] = keys.SUBSPACES_ACTION
    handler: ClassVar[str] = "client.signals.subspaces:subspaces"
    classes: np.ndarray
    bases: tuple[np.ndarray, ...]
    counts: np.ndarray | None = None

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The reply's arrays: ``classes`` (int64), one float32 basis per class and, if known, ``counts`` (int64)."""
        out = {"classes": np.asarray(self.classes, dtype=np.int64)}
        out.update(
            {basis_name(int(c)): np.asarray(b, dtype=np.float32) for c, b in zip(self.classes, self.bases, strict=True)}
        )
        if self.counts is not None:
            out["counts"] = np.asarray(self.counts, dtype=np.int64)
        return out

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        *,
        dim: int | None,
        num_classes: int,
        max_vectors: int,
        with_counts: bool = False,
    ) -> ClassSubspaces:
        """Check a reply: classes in ``[0, num_classes)``, bases (dim, 1..max_vectors), orthonormal.

        ``dim=None`` accepts any row count shared by all the reply's bases.

        Raises
        ------
        SignalError
            On missing or extra arrays, bad shapes or dtypes, unsorted or out-of-range classes,
            non-orthonormal bases, or counts below 1.
        """
        what = "class subspaces"
        classes = require_array(arrays, "classes", (None,), what, integer=True)
        if classes.size == 0 or np.any(np.diff(classes) <= 0) or classes[0] < 0 or classes[-1] >= num_classes:
            raise SignalError(f"{what}: classes {classes.tolist()} are not strictly increasing in [0, {num_classes})")
        names = ["classes", *(basis_name(int(c)) for c in classes)] + (["counts"] if with_counts else [])
        check_names(arrays, names, what)
        bases = []
        for c in classes:
            basis = require_array(arrays, basis_name(int(c)), (dim, None), what)
            dim = basis.shape[0]
            p = basis.shape[1]
            gram = basis.astype(np.float64).T @ basis.astype(np.float64)
            if not 1 <= p <= max_vectors or not np.allclose(gram, np.eye(p), atol=ORTHONORMAL_TOL):
                raise SignalError(
                    f"{what}: basis of class {int(c)} has {p} columns (1..{max_vectors} allowed) or is not orthonormal"
                )
            bases.append(basis)
        counts = None
        if with_counts:
            counts = require_array(arrays, "counts", (len(classes),), what, integer=True)
            if np.any(counts < 1):
                raise SignalError(f"{what}: a class count is below 1")
        return cls(classes, tuple(bases), counts)

    @property
    def dim(self) -> int:
        """d, the row count of every basis."""
        return int(self.bases[0].shape[0])

    def basis(self, cls: int) -> np.ndarray | None:
        """The (d, p_c) basis of class ``cls``, or None if the client lacks it."""
        hits = np.flatnonzero(self.classes == cls)
        return self.bases[int(hits[0])] if hits.size else None

    def by_class(self) -> dict[int, np.ndarray]:
        """Each class's basis, as held (PACFL's ``per-class`` measure)."""
        return {int(c): b for c, b in zip(self.classes, self.bases, strict=True)}

    def stacked(self) -> np.ndarray:
        """All class bases side by side: shape (d, sum of p_c), float64 (PACFL's client basis)."""
        return np.concatenate([np.asarray(b, dtype=np.float64) for b in self.bases], axis=1)
