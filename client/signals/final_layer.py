"""``query.final-layer``: train the sent model for ``cluster-epochs`` and return only its last layer."""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from common import keys
from common.signals.final_layer import FinalLayer

from ..task import ClientTask, train_local
from . import models_in, register


@register(keys.FINAL_LAYER_ACTION)
def final_layer(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """FedClust's signal: ``head.weight`` and ``head.bias`` after local training on the TRAIN split."""
    cfg = content[keys.CONFIG]
    model, _ = train_local(task, models_in(content)[0], cfg, epochs=int(cfg[keys.CLUSTER_EPOCHS]))
    head = model.head
    return FinalLayer(head.weight.detach().cpu().numpy(), head.bias.detach().cpu().numpy()).to_arrays()
