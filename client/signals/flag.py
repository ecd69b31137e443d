"""``query.holdout``: FLAG's sweep round (Alg. 3) on a fixed 90/10 split of the TRAIN data.

Config: ``holdout-fraction`` (the validation share), ``local-epochs`` (0 = only score the sent
model) and the usual optimiser keys. The split depends only on the run's seed and the
partition id, so every sweep round and clustering sees the same validation samples.
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from common import keys
from common.records import read_float, read_int
from common.signals.flag import HoldoutResult
from common.training import evaluate, train

from ..task import SERVER_CONFIG, ClientTask
from . import models_in, register


def holdout_split(n: int, fraction: float, seed: int, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (fit, validation) of ``n`` train samples; the validation part has
    ``max(1, round(fraction * n))`` samples and the fit part at least one.

    Raises
    ------
    ValueError
        Naming ``'holdout-fraction'`` unless it is in (0, 1), or if ``n < 2``.
    """
    if not 0.0 < fraction < 1.0 or n < 2:
        raise ValueError(
            "The 'holdout-fraction' parameter of query.holdout must be in (0, 1) with at least 2 "
            f"train samples. Got {fraction} with {n} samples instead."
        )
    order = np.random.default_rng([seed, partition_id, 10]).permutation(n)
    n_val = min(n - 1, max(1, round(fraction * n)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


@register(keys.HOLDOUT_ACTION)
def holdout(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """Train the sent model on the fit part, score it on the held-out part (never the test split)."""
    if task.info.num_classes == 0:
        raise ValueError("query.holdout needs a classification task; this client's task is regression.")
    cfg = content.config_records[keys.CONFIG]
    x, y = task.data.x_train, task.data.y_train
    fit, val = holdout_split(
        len(y), read_float(cfg, keys.HOLDOUT_FRACTION, SERVER_CONFIG), task.seed, task.partition_id
    )
    sent = models_in(content)[0]
    model = task.model(sent)
    epochs = read_int(cfg, keys.LOCAL_EPOCHS, SERVER_CONFIG)
    delta = np.zeros(0, dtype=np.float32)
    if epochs > 0:
        train(
            model,
            x[fit],
            y[fit],
            epochs=epochs,
            batch_size=read_int(cfg, keys.BATCH_SIZE, SERVER_CONFIG),
            lr=read_float(cfg, keys.LR, SERVER_CONFIG),
            momentum=read_float(cfg, keys.MOMENTUM, SERVER_CONFIG),
            weight_decay=read_float(cfg, keys.WEIGHT_DECAY, SERVER_CONFIG),
            task=task.info.task,
            seed=task.round_seed(read_int(cfg, keys.SERVER_ROUND, SERVER_CONFIG)),
            device=task.device,
        )
        trained = model.state_dict()
        delta = np.concatenate(
            [
                (trained[name].detach().cpu().numpy().astype(np.float32) - arr.numpy().astype(np.float32)).ravel()
                for name, arr in sent.items()
                if np.issubdtype(arr.numpy().dtype, np.floating)
            ]
        )
    _, accuracy = evaluate(model, x[val], y[val], task=task.info.task, device=task.device)
    return HoldoutResult(delta, float(accuracy), len(fit)).to_arrays()
