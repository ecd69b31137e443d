"""Whether training learns at all: the mean training loss against chance level.

A model that predicts every class alike has a cross-entropy of ``ln C`` for ``C`` classes. When
the clients' mean training loss stays within ``CHANCE_TOLERANCE`` of ``ln C`` (or above it) in
every one of the first ``CHANCE_ROUNDS`` rounds that trained, the models are not learning: the
learning rate is too small for the model and data, the clients train too little each round, or
too few of them train. :class:`ChanceLossCheck` says so once, naming the run-config keys that
matter. Flower-free; the strategy feeds it each round's mean training loss.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from common.config import TrainingParams
from common.params import run_config_key

CHANCE_ROUNDS = 5
"""Rounds with training whose losses are compared with chance level (fewer when the run is shorter)."""
CHANCE_TOLERANCE = 0.05
"""Relative distance to ``ln C`` that still counts as chance level."""
TRAINING_FIELDS = ("lr", "local_epochs", "batch_size", "fraction")
"""The ``TrainingParams`` fields the warning names (by their run-config keys), with their values."""
_LOG = logging.getLogger("flwr")  # Flower's console logger, by its name: common stays free of Flower


@dataclass
class ChanceLossCheck:
    """Warn once when the first rounds' mean training loss stays at chance level.

    Parameters
    ----------
    num_classes : int
        ``C``: the model's outputs (>= 2; with fewer the check is off).
    rounds : int
        The run's rounds: a shorter run is judged on all its rounds.
    settings : dict of str to value
        Run-config key -> value of each of ``TRAINING_FIELDS``, quoted in the warning.

    Attributes
    ----------
    losses : list of (int, float)
        The rounds seen and their mean training loss, up to the judged window.
    warning : str or None
        The warning, once given.
    """

    num_classes: int
    rounds: int
    settings: dict[str, Any] = field(default_factory=dict)
    losses: list[tuple[int, float]] = field(default_factory=list)
    warning: str | None = None

    @property
    def chance(self) -> float:
        """``ln C``: the cross-entropy of a uniform prediction."""
        return math.log(self.num_classes)

    @property
    def judged(self) -> bool:
        """Whether the window is complete (then nothing changes any more)."""
        return len(self.losses) >= self.window

    @property
    def window(self) -> int:
        """How many training rounds are judged: ``CHANCE_ROUNDS``, or all of a shorter run."""
        return max(1, min(CHANCE_ROUNDS, self.rounds))

    def observe(self, server_round: int, train_loss: float | None) -> str | None:
        """Note one round's mean training loss; the warning (once) when the window ends at chance level.

        Rounds without a training loss (no replies) are skipped; after the window nothing changes.
        """
        if self.judged or train_loss is None or self.num_classes < 2 or not math.isfinite(self.chance):
            return None
        self.losses.append((server_round, float(train_loss)))
        if not self.judged:
            return None
        floor = (1.0 - CHANCE_TOLERANCE) * self.chance
        if all(not math.isfinite(loss) or loss >= floor for _, loss in self.losses):
            self.warning = self._message()
            return self.warning
        return None

    def _message(self) -> str:
        first, last = self.losses[0][0], self.losses[-1][0]
        shown = ", ".join(f"{key} {value}" for key, value in self.settings.items())
        return (
            f"the mean training loss stayed at chance level in rounds {first}-{last} "
            f"({', '.join(f'{loss:.3f}' for _, loss in self.losses)}; ln {self.num_classes} = {self.chance:.3f}): "
            f"the models are not learning. Try a larger lr, more local-epochs, a smaller batch-size or a larger "
            f"fraction (now {shown})"
        )

    def to_summary(self) -> dict[str, Any]:
        """``summary.json``'s ``not-learning`` entry: the warning (None if not given) and the losses judged."""
        return {
            "warning": self.warning,
            "chance-loss": round(self.chance, 6) if self.num_classes >= 2 else None,
            "train-losses": [round(loss, 6) for _, loss in self.losses],
        }


def observe_train_loss(
    check: ChanceLossCheck | None,
    training: TrainingParams,
    model: Mapping[str, Any],
    head_key: str,
    server_round: int,
    train_loss: float,
) -> ChanceLossCheck:
    """Feed one round's mean training loss to ``check`` (made at the first call), logging its warning once.

    ``C`` is the number of rows of ``model[head_key]`` (the classifier head); without one the check is off.
    """
    if check is None:
        head = model.get(head_key)
        num_classes = int(head.shape[0]) if head is not None and len(head.shape) == 2 else 0
        settings = {run_config_key(TrainingParams, name): getattr(training, name) for name in TRAINING_FIELDS}
        check = ChanceLossCheck(num_classes, training.rounds, settings)
    warning = check.observe(server_round, train_loss)
    if warning is not None:
        _LOG.warning("round %d: %s", server_round, warning)
    return check
