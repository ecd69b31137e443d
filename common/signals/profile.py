"""CFL-GP's profile signal: a client's gradient or model gap on one broadcast model, restricted
to the server's coordinate subset (Kim et al., ICML 2024, Alg. 1 line 7, Alg. 4-5, App. E.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common import keys

from . import check_names, require_array

PROTOCOLS: tuple[str, ...] = ("model-gap", "gradient")
"""``model-gap``: trained minus sent after local epochs (Alg. 4); ``gradient``: one mini-batch gradient (Alg. 1)."""


@dataclass(frozen=True, eq=False)
class GradientProfile:
    """The ``d_hat`` chosen coordinates of a client's gradient or model gap.

    Attributes
    ----------
    vector : ndarray of shape (d_hat,)
        Finite, float32 on the wire.
    """

    action: ClassVar[str] = keys.PROFILE_ACTION
    handler: ClassVar[str] = "client.signals.profile:gradient_profile"
    vector: np.ndarray

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The reply's array: ``vector`` (the kept coordinates), float32."""
        return {"vector": np.asarray(self.vector, dtype=np.float32)}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], *, size: int) -> GradientProfile:
        """Check and wrap a reply that must hold ``size`` finite coordinates."""
        check_names(arrays, ["vector"], "gradient profile")
        return cls(require_array(arrays, "vector", (size,), "gradient profile"))
