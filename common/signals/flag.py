"""FLAG's validation signal (Alg. 3): one short round of clustered FL on held-out train data.

A client sampled for the threshold sweep keeps ``holdout-fraction`` (paper: 10%) of its TRAIN
split aside, trains the sent cluster model on the rest for ``local-epochs`` (0 = no training)
and replies with its update and the accuracy of the trained (or, with 0 epochs, the sent)
model on the held-out part. The test split is never touched. With ``flag-sweep-model`` in the
config the client builds that built-in model for the sent weights instead of the run's model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common import keys

from . import SignalError, check_names, require_array

SWEEP_MODEL = "flag-sweep-model"  # config of query.holdout: the built-in model the sent weights are for


@dataclass(frozen=True, eq=False)
class HoldoutResult:
    """Attributes
    ----------
    delta : ndarray of shape (P,) or (0,)
        Trained minus sent float parameters (record order), float32; empty when not trained.
    accuracy : float
        Accuracy on the held-out part, in [0, 1].
    num_fit : int
        Samples trained on (the aggregation weight), >= 1.
    """

    action: ClassVar[str] = keys.HOLDOUT_ACTION
    handler: ClassVar[str] = "client.signals.flag:holdout"
    delta: np.ndarray
    accuracy: float
    num_fit: int

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The reply's arrays: ``delta`` (float32), ``accuracy`` (1,) float32 and ``num-fit`` (1,) int64."""
        return {
            "delta": np.asarray(self.delta, dtype=np.float32),
            "accuracy": np.asarray([self.accuracy], dtype=np.float32),
            "num-fit": np.asarray([self.num_fit], dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], *, size: int, max_fit: int) -> HoldoutResult:
        """Check a reply with a delta of ``size`` entries (0 when no training was asked).

        Raises
        ------
        SignalError
            On other arrays or shapes, an accuracy outside [0, 1] or ``num-fit`` outside
            ``[1, max_fit]``.
        """
        what = "holdout result"
        check_names(arrays, ["delta", "accuracy", "num-fit"], what)
        delta = require_array(arrays, "delta", (size,), what)
        accuracy = float(require_array(arrays, "accuracy", (1,), what)[0])
        num_fit = int(require_array(arrays, "num-fit", (1,), what, integer=True)[0])
        if not 0.0 <= accuracy <= 1.0:
            raise SignalError(f"{what}: accuracy {accuracy} is outside [0, 1]")
        if not 1 <= num_fit <= max_fit:
            raise SignalError(f"{what}: num-fit {num_fit} is outside [1, {max_fit}]")
        return cls(delta, accuracy, num_fit)
