"""``query.head``: train the sent model on the TRAIN split and return only its last layer.

Config: ``cluster-epochs`` passes over the train split, or, when ``cluster-steps`` > 0, exactly
that many mini-batches drawn with replacement (seeded), so that clients of very different
sizes train equally long ("a few local iterations", FedClust Sec. 3.4).
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from common import keys
from common.signals.final_layer import FinalLayer

from ..task import ClientTask, train_as_configured
from .messages import models_in


def final_layer(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """FedClust's signal: the weight and bias of the model's head after local training."""
    cfg = content.config_records[keys.CONFIG]
    train_as_configured(task, models_in(content)[0], cfg, epochs_key=keys.CLUSTER_EPOCHS)
    # The task's one reused module was trained: its head is the one found once.
    head = task.head(f"{keys.query_type(keys.FINAL_LAYER_ACTION)} (final-layer weights)").module
    # Copies: the module is reused by the next message, and numpy views would follow it.
    weight = head.weight.detach().cpu().numpy().copy()
    bias = np.zeros(len(weight), weight.dtype) if head.bias is None else head.bias.detach().cpu().numpy().copy()
    return FinalLayer(weight, bias).to_arrays()
