"""``query.profile``: CFL-GP's profile of this client on one broadcast model (Kim et al., ICML
2024): the model gap after local training (Alg. 4-5, default) or one mini-batch gradient
(Alg. 1), flattened, keeping only the coordinates the server's seed picks (App. E.1).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from flwr.app import ArrayRecord, RecordDict
from torch import nn

from common import keys
from common.clustering.compression import coordinate_subset
from common.records import read_int, read_str
from common.signals.profile import GradientProfile

from ..task import SERVER_CONFIG, ClientTask, train_local
from . import models_in, register


def float_vector(state: dict[str, np.ndarray]) -> np.ndarray:
    """The floating arrays of ``state``, flattened in order and concatenated: ``(d,)`` float32."""
    parts = [
        np.asarray(a, dtype=np.float32).ravel()
        for a in state.values()
        if np.issubdtype(np.asarray(a).dtype, np.floating)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def model_gap(task: ClientTask, sent: ArrayRecord, cfg: Mapping[str, object]) -> np.ndarray:
    """``trained - sent`` over the model's floating arrays after the configured local epochs."""
    model, _ = train_local(task, sent, cfg)
    trained = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
    before = {name: arr.numpy() for name, arr in sent.items()}
    return float_vector(trained) - float_vector(before)


def minibatch_gradient(task: ClientTask, sent: ArrayRecord, cfg: Mapping[str, object]) -> np.ndarray:
    """Gradient of the mean loss on one seeded mini-batch of the TRAIN split (buffers: zeros)."""
    model = task.model(sent).to(task.device)
    model.train()
    n = len(task.data.y_train)
    rng = np.random.default_rng(task.round_seed(read_int(cfg, keys.SERVER_ROUND, SERVER_CONFIG)))
    idx = rng.choice(n, size=min(n, read_int(cfg, keys.BATCH_SIZE, SERVER_CONFIG)), replace=False)
    x = torch.as_tensor(np.ascontiguousarray(task.data.x_train[idx], dtype=np.float32), device=task.device)
    y = torch.as_tensor(task.data.y_train[idx], device=task.device)
    out = model(x)
    if task.info.task == "regression":
        loss = nn.functional.mse_loss(out.squeeze(1), y.float())
    else:
        loss = nn.functional.cross_entropy(out, y.long())
    model.zero_grad(set_to_none=True)
    loss.backward()
    params = dict(model.named_parameters())
    grads = {}
    for name, value in model.state_dict().items():
        grad = params[name].grad if name in params else None
        grads[name] = (grad if grad is not None else torch.zeros_like(value)).detach().cpu().numpy()
    model.zero_grad(set_to_none=True)
    model.to("cpu")
    return float_vector(grads)


@register(keys.PROFILE_ACTION)
def gradient_profile(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """The chosen coordinates of this client's model gap or gradient on the one model sent."""
    cfg = content.config_records[keys.CONFIG]
    (sent,) = models_in(content)
    protocol = read_str(cfg, keys.PROFILE_PROTOCOL, SERVER_CONFIG)
    if protocol == "model-gap":
        vector = model_gap(task, sent, cfg)
    elif protocol == "gradient":
        vector = minibatch_gradient(task, sent, cfg)
    else:
        raise ValueError(
            f"The '{keys.PROFILE_PROTOCOL}' parameter of query.profile must be one of "
            f"('model-gap', 'gradient'). Got {protocol!r} instead."
        )
    chosen = coordinate_subset(
        vector.size, read_int(cfg, keys.PROFILE_SIZE, SERVER_CONFIG), read_int(cfg, keys.PROFILE_SEED, SERVER_CONFIG)
    )
    return GradientProfile(vector[chosen]).to_arrays()
