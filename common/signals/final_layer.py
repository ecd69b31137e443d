"""The final layer's weight and bias after local training (FedClust, Islam et al. 2024, Sec. 4.1).

FedClust's clients train the initial model for a few epochs and upload only ``head.weight``
and ``head.bias``; the server compares them by Euclidean distance (Eq. 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common import keys

from . import check_names, require_array


@dataclass(frozen=True, eq=False)
class FinalLayer:
    """A client's trained last linear layer.

    Attributes
    ----------
    weight : ndarray of shape (C, d)
    bias : ndarray of shape (C,)
    """

    action: ClassVar[str] = keys.FINAL_LAYER_ACTION
    handler: ClassVar[str] = "client.signals.final_layer:final_layer"
    weight: np.ndarray
    bias: np.ndarray

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The reply's arrays: ``weight`` (outputs, features) and ``bias`` (outputs,), float32."""
        return {"weight": np.asarray(self.weight, dtype=np.float32), "bias": np.asarray(self.bias, dtype=np.float32)}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], *, outputs: int, features: int) -> FinalLayer:
        """Check a reply holding a ``(outputs, features)`` weight and an ``(outputs,)`` bias."""
        check_names(arrays, ["weight", "bias"], "final layer")
        return cls(
            require_array(arrays, "weight", (outputs, features), "final layer"),
            require_array(arrays, "bias", (outputs,), "final layer"),
        )

    def vector(self) -> np.ndarray:
        """Weight then bias, flattened: shape (C * d + C,), float64."""
        return np.concatenate([np.ravel(self.weight), np.ravel(self.bias)]).astype(np.float64)
