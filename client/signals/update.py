"""``query.update``: train the sent model for ``local-epochs`` (or exactly ``cluster-steps``
mini-batches when the config holds it > 0) and return the flattened update.

Attackers (scenario ``attack``) send minus their true update, as in their train replies.
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from common import keys
from common.signals.update import ModelUpdate

from ..task import ClientTask, train_as_configured
from .messages import models_in


def model_update(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """``trained - sent`` over the model's float arrays, in its record order, as float32."""
    sent, cfg = models_in(content)[0], content.config_records[keys.CONFIG]
    model = train_as_configured(task, sent, cfg)[0]
    trained = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
    parts = []
    for name, arr in sent.items():
        w0 = arr.numpy()
        if np.issubdtype(w0.dtype, np.floating):
            parts.append((trained[name].astype(np.float32) - w0.astype(np.float32)).ravel())
    delta = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return ModelUpdate(-delta if task.data.attacker else delta).to_arrays()
