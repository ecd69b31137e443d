"""``query.forces``: CFLGT's per-class pulling and pushing forces on this client's TRAIN split.

Paper: R. Liu, J. Wang, S. Yu and K. Kant, "A Remedy for Heterogeneous Data: Clustered Federated
Learning with Gradient Trajectory" (CFLGT),
Sec. III, Eq. 5-8. A forward pass only (no backward, no optimiser); ``v`` is the input of the model's
classifier head (``common.models.find_head``), caught with a forward pre-hook, so any model
ending in a linear head works.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import RecordDict
from torch import nn

from common import keys
from common.models import find_head
from common.signals.forces import ClassForces

from ..task import ClientTask
from .messages import models_in

FORWARD_BATCH = 1024  # samples per forward pass (memory only: the result does not depend on it)


@torch.no_grad()
def class_forces(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    num_classes: int,
    *,
    device: torch.device | None = None,
    batch_size: int = FORWARD_BATCH,
    head: nn.Linear | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Average pulling and pushing force of every class (CFLGT Eq. 6 and Eq. 8).

    ``pull_c = mean_d sum_{i: y_i = c} (1 - P_ic) v_i`` and
    ``push_c = mean_d sum_{i: y_i != c} P_ic v_i``. Averaging over the d features commutes
    with the sums, so each batch costs one ``(2C, B) @ (B,)`` product.

    Parameters
    ----------
    model : nn.Module
        Its head gives the logits (softmax -> ``P``); the head's input is ``v``.
        Evaluated in eval mode, mode and device restored afterwards.
    x : np.ndarray of shape (n, *input_shape)
    y : np.ndarray of shape (n,)
        Class ids in ``0 .. num_classes - 1``.
    num_classes : int
        C, the number of model outputs.
    device : torch.device, optional
        Where to compute (the CPU when omitted).
    batch_size : int, default=FORWARD_BATCH
    head : nn.Linear, optional
        The model's head; found with ``common.models.find_head`` when omitted.

    Returns
    -------
    pull, push : np.ndarray of shape (C,), float32

    Raises
    ------
    ValueError
        Naming ``'model'`` (no final Linear, or not C outputs), ``'y'`` or ``'num_classes'``.
    """
    if num_classes < 1:
        raise ValueError(
            f"The 'num_classes' parameter of class_forces must be an int >= 1 "
            f"(classification only). Got {num_classes!r} instead."
        )
    if head is None:
        head = find_head(model, x.shape[1:], needed_by="class_forces (CFLGT)").module
    if head.out_features != num_classes:
        raise ValueError(
            f"The 'model' parameter of class_forces must output {num_classes} classes. "
            f"Got a last layer with {head.out_features} outputs instead."
        )
    y = np.asarray(y)
    if y.shape != (len(x),) or (y.size and (y.min() < 0 or y.max() >= num_classes)):
        raise ValueError(
            f"The 'y' parameter of class_forces must hold {len(x)} class ids in "
            f"[0, {num_classes - 1}]. Got shape {y.shape} instead."
        )
    device = torch.device("cpu") if device is None else device
    original = next(model.parameters()).device
    was_training = model.training
    model.to(device).eval()
    seen: list[torch.Tensor] = []
    hook = head.register_forward_pre_hook(lambda _module, inputs: seen.append(inputs[0]))
    totals = torch.zeros(2 * num_classes, dtype=torch.float64, device=device)
    try:
        for begin in range(0, len(x), batch_size):
            xs = torch.as_tensor(np.ascontiguousarray(x[begin : begin + batch_size], dtype=np.float32), device=device)
            ys = torch.as_tensor(np.asarray(y[begin : begin + batch_size]), device=device, dtype=torch.int64)
            seen.clear()
            probs = torch.softmax(model(xs).float(), dim=1)
            v_mean = seen[-1].flatten(1).float().mean(dim=1)
            onehot = nn.functional.one_hot(ys, num_classes).float()
            weights = torch.cat([onehot * (1 - probs), (1 - onehot) * probs], dim=1)
            totals += (weights.T @ v_mean).double()
    finally:
        hook.remove()
        model.train(was_training)
        model.to(original)
    out = totals.cpu().numpy().astype(np.float32)
    if device.type == "cuda":
        del totals, seen
        torch.cuda.empty_cache()
    return out[:num_classes], out[num_classes:]


def forces(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """Forces of the one received model on the train split (never the test split)."""
    (arrays,) = models_in(content)
    model = task.model(arrays)
    pull, push = class_forces(
        model,
        task.data.x_train,
        task.data.y_train,
        task.info.num_classes,
        device=task.device,
        head=task.head(f"{keys.query_type(keys.FORCES_ACTION)} (class forces)").module,
    )
    return ClassForces(pull, push).to_arrays()
