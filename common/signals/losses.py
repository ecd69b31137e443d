"""The loss of each of K models on a client's TRAIN split (IFCA's choice, FLIC's newcomers).

Cluster choice by loss must use train data, never the test split: choosing by test loss leaks the
evaluation data into the clustering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common import keys

from . import SignalError, check_names, require_array


@dataclass(frozen=True, eq=False)
class ModelLosses:
    """Loss of model ``k`` on the client's train split, for each of the K models sent.

    Attributes
    ----------
    losses : ndarray of shape (K,)
        Finite losses, float32 on the wire.
    """

    action: ClassVar[str] = keys.LOSSES_ACTION
    handler: ClassVar[str] = "client.signals.losses:model_losses"
    losses: np.ndarray

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The reply's array: ``losses`` (one per model), float32."""
        return {"losses": np.asarray(self.losses, dtype=np.float32)}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], *, num_models: int) -> ModelLosses:
        """Check and wrap a reply that must hold ``num_models`` losses."""
        check_names(arrays, ["losses"], "model losses")
        losses = require_array(arrays, "losses", (num_models,), "model losses")
        if np.any(losses < 0):
            raise SignalError("model losses: a loss is negative")
        return cls(losses)

    def best(self) -> int:
        """Index of the lowest loss (the first one on ties)."""
        return int(np.argmin(self.losses))
