"""A client's model update after local training, flattened (FL+HC, Briggs et al. 2020; FLAG's Delta).

The update is ``trained - sent`` over every floating-point array of the model, in the model's
state-dict order (the order of ``ArrayRecord`` keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common import keys

from . import check_names, require_array


@dataclass(frozen=True, eq=False)
class ModelUpdate:
    """Attributes
    ----------
    delta : ndarray of shape (P,)
        Trained minus sent parameters, float32 on the wire.
    """

    action: ClassVar[str] = keys.UPDATE_ACTION
    handler: ClassVar[str] = "client.signals.update:model_update"
    delta: np.ndarray

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The reply's array: ``delta`` (the flattened update), float32."""
        return {"delta": np.asarray(self.delta, dtype=np.float32)}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], *, size: int) -> ModelUpdate:
        """Check a reply holding one finite update of ``size`` entries."""
        check_names(arrays, ["delta"], "model update")
        return cls(require_array(arrays, "delta", (size,), "model update"))
