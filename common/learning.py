"""Whether training learns at all: the mean training loss against chance level.

A model that predicts every class alike has a cross-entropy of ``ln C`` for ``C`` classes. The
check judges the run once its clients have trained ``CHANCE_EPOCHS`` local epochs each on average
(the round's replies times ``local-epochs``, summed over rounds, against the number of clients),
or at the run's last round if that comes first: at 20% of the clients a round and one local epoch
that is round 15, not round 1, when each client has trained once at most. When the mean training
loss of the last ``CHANCE_LAST_ROUNDS`` rounds judged is within ``CHANCE_TOLERANCE`` of ``ln C``
(or above it) and has not fallen by ``CHANCE_TREND`` of ``ln C`` from the first rounds judged,
the models are not learning: the learning rate is too small for the model and data, the clients
train too little each round, or too few of them train. A loss near chance that is falling is a
run learning slowly, not one that does not learn.
:class:`ChanceLossCheck` says so once, naming the run-config keys that matter. Flower-free; the
strategy feeds it each round's mean training loss and number of replies.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from common.config import TrainingParams
from common.params import run_config_key

CHANCE_EPOCHS = 3.0
"""Local epochs each client has trained on average when the run is judged."""
CHANCE_LAST_ROUNDS = 3
"""The judged rounds at the end of the window whose mean loss is compared with chance level."""
CHANCE_TOLERANCE = 0.05
"""Relative distance to ``ln C`` that still counts as chance level."""
CHANCE_TREND = 0.025
"""Fall of the loss over the judged rounds, relative to ``ln C``, that counts as learning."""
TRAINING_FIELDS = ("lr", "local_epochs", "batch_size", "fraction")
"""The ``TrainingParams`` fields the warning names (by their run-config keys), with their values."""
_LOG = logging.getLogger("flwr")  # Flower's console logger, by its name: common stays free of Flower


@dataclass
class ChanceLossCheck:
    """Warn once when the mean training loss is still at chance level after enough training.

    Parameters
    ----------
    num_classes : int
        ``C``: the model's outputs (>= 2; with fewer the check is off).
    rounds : int
        The run's rounds: a run that ends before the window does is judged at its last round.
    num_clients : int
        The clients of the federation (>= 1): the window ends when they have trained
        ``CHANCE_EPOCHS`` local epochs each on average.
    local_epochs : int
        Local epochs per training reply.
    settings : dict of str to value
        Run-config key -> value of each of ``TRAINING_FIELDS``, quoted in the warning.

    Attributes
    ----------
    losses : list of (int, float)
        The rounds seen and their mean training loss, up to the end of the window.
    client_epochs : float
        Local epochs trained so far per client, on average.
    judged : bool
        Whether the window has ended (then nothing changes any more).
    warning : str or None
        The warning, once given.
    """

    num_classes: int
    rounds: int
    num_clients: int = 1
    local_epochs: int = 1
    settings: dict[str, Any] = field(default_factory=dict)
    losses: list[tuple[int, float]] = field(default_factory=list)
    client_epochs: float = 0.0
    judged: bool = False
    warning: str | None = None

    @property
    def chance(self) -> float:
        """``ln C``: the cross-entropy of a uniform prediction."""
        return math.log(self.num_classes)

    def observe(self, server_round: int, train_loss: float | None, replies: int = 1) -> str | None:
        """Note one round's mean training loss over ``replies`` clients; the warning (once) when judged at chance.

        Rounds without a training loss (no replies) are skipped; after the window nothing changes.
        """
        if self.judged or train_loss is None or replies < 1 or self.num_classes < 2:
            return None
        self.losses.append((server_round, float(train_loss)))
        self.client_epochs += replies * self.local_epochs / max(1, self.num_clients)
        self.judged = self.client_epochs >= CHANCE_EPOCHS - 1e-9 or server_round >= self.rounds
        if not self.judged:
            return None
        start, end = self.ends()
        at_chance = not math.isfinite(end) or end >= (1.0 - CHANCE_TOLERANCE) * self.chance
        if at_chance and not start - end > CHANCE_TREND * self.chance:
            self.warning = self._message(start, end)
            return self.warning
        return None

    def ends(self) -> tuple[float, float]:
        """Mean loss of the first and of the last rounds judged (up to ``CHANCE_LAST_ROUNDS`` each, apart)."""
        k = min(CHANCE_LAST_ROUNDS, max(1, len(self.losses) // 2))
        first = [loss for _, loss in self.losses[:k]]
        last = [loss for _, loss in self.losses[-k:]]
        return math.fsum(first) / k, math.fsum(last) / k

    def _message(self, start: float, end: float) -> str:
        first, last = self.losses[0][0], self.losses[-1][0]
        shown = ", ".join(f"{key} {value}" for key, value in self.settings.items())
        return (
            f"the mean training loss is still at chance level after rounds {first}-{last}, "
            f"{self.client_epochs:.1f} local epochs per client on average ({start:.3f} at the start, {end:.3f} "
            f"at the end; ln {self.num_classes} = {self.chance:.3f}): the models are not learning. Try a larger "
            f"lr, more local-epochs, a smaller batch-size or a larger fraction (now {shown})"
        )

    def to_summary(self) -> dict[str, Any]:
        """``summary.json``'s ``not-learning`` entry: the warning (None if not given) and the losses judged."""
        return {
            "warning": self.warning,
            "chance-loss": round(self.chance, 6) if self.num_classes >= 2 else None,
            "judged": self.judged,
            "client-epochs": round(self.client_epochs, 3),
            "train-losses": [round(loss, 6) for _, loss in self.losses],
        }


def observe_train_loss(
    check: ChanceLossCheck | None,
    training: TrainingParams,
    model: Mapping[str, Any],
    head_key: str,
    server_round: int,
    train_loss: float,
    replies: int,
    num_clients: int,
) -> ChanceLossCheck:
    """Feed one round's mean training loss over ``replies`` of ``num_clients`` clients to ``check``.

    ``check`` is made at the first call; its warning is logged once. ``C`` is the number of rows of
    ``model[head_key]`` (the classifier head); without one the check is off.
    """
    if check is None:
        head = model.get(head_key)
        num_classes = int(head.shape[0]) if head is not None and len(head.shape) == 2 else 0
        settings = {run_config_key(TrainingParams, name): getattr(training, name) for name in TRAINING_FIELDS}
        check = ChanceLossCheck(num_classes, training.rounds, max(1, num_clients), training.local_epochs, settings)
    warning = check.observe(server_round, train_loss, replies)
    if warning is not None:
        _LOG.warning("round %d: %s", server_round, warning)
    return check
