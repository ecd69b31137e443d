"""CFLGT's gradient trajectory: per-class softmax pulling and pushing forces (Eq. 6, Eq. 8).

Paper: R. Liu, J. Wang, S. Yu and K. Kant, "A Remedy for Heterogeneous Data: Clustered Federated
Learning with Gradient Trajectory" (CFLGT),
Sec. III. Only these 2C numbers travel, never the d-dimensional forces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common import keys

from . import SignalError, check_names, require_array


@dataclass(frozen=True, eq=False)
class ClassForces:
    """A client's ``Z1'`` (pull) and ``Z2'`` (push): its trajectory's C points.

    Attributes
    ----------
    pull : ndarray of shape (C,)
        ``avg(sum_{i: y_i = c} (1 - P_ic) v_i)`` for each class c; float32 on the wire.
    push : ndarray of shape (C,)
        ``avg(sum_{i: y_i != c} P_ic v_i)`` for each class c; float32 on the wire.
    """

    action: ClassVar[str] = keys.FORCES_ACTION
    handler: ClassVar[str] = "client.signals.forces:forces"
    pull: np.ndarray
    push: np.ndarray

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The reply's arrays: ``pull`` and ``push``, float32."""
        return {"pull": np.asarray(self.pull, dtype=np.float32), "push": np.asarray(self.push, dtype=np.float32)}

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], *, num_classes: int, non_negative: bool = False
    ) -> ClassForces:
        """Check and wrap a reply holding two finite ``(num_classes,)`` arrays.

        ``non_negative`` also refuses negative forces: ask for it when the features ``v``
        come out of a ReLU or sigmoid (CFLGT Sec. III-B), where they are impossible; a model
        whose last layer sees raw, normalised inputs (``linear``) has negative ones.
        """
        what = "class forces"
        check_names(arrays, ["pull", "push"], what)
        pull = require_array(arrays, "pull", (num_classes,), what)
        push = require_array(arrays, "push", (num_classes,), what)
        if non_negative and (np.any(pull < 0) or np.any(push < 0)):
            raise SignalError(f"{what}: a force is negative")
        return cls(pull, push)
