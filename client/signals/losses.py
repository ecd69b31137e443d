"""``query.losses``: the loss of each model sent on this client's TRAIN split."""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from common.signals.losses import ModelLosses
from common.training import evaluate

from ..task import ClientTask
from .messages import models_in


def model_losses(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """Loss of every received model on the train split (never the test split)."""
    losses = [
        evaluate(task.model(arrays), task.data.x_train, task.data.y_train, task=task.info.task, device=task.device)[0]
        for arrays in models_in(content)
    ]
    return ModelLosses(np.asarray(losses, dtype=np.float32)).to_arrays()
