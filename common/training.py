"""Local training and evaluation loops on numpy data, and the choice of device.

The loops work on whole tensors (no ``DataLoader``): the client data of a federation is small
enough to sit on the device at once. Inputs ``x`` are float32 ``(n, *input_shape)`` and already
normalised; targets ``y`` are int64 class ids ``(n,)``, or float32 values ``(n,)`` for regression.
Models go to ``device`` for the work and come back to the CPU afterwards, so callers can read
their ``state_dict`` directly.
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import torch
from torch import nn

from common.data import TASKS
from common.validation import check_choice, check_float, check_int

DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")


class DeadlineExceeded(TimeoutError):
    """Training stopped at its deadline: whoever asked for it has stopped waiting."""


def check_device_name(value: object, owner: str) -> str:
    """Return ``value`` if it names a device umbel knows; availability is not checked.

    Raises
    ------
    ValueError
        Naming ``'device'`` unless ``value`` is ``'auto'``, ``'cpu'``, ``'cuda'`` or ``'cuda:N'``.
    """
    if not isinstance(value, str) or not DEVICE_NAME.fullmatch(value):
        raise ValueError(
            f"The 'device' parameter of {owner} must be 'auto', 'cpu', 'cuda' or 'cuda:N'. Got {value!r} instead."
        )
    return value


def get_device(preference: str = "auto") -> torch.device:
    """Return the torch device to compute on.

    Parameters
    ----------
    preference : str, default="auto"
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Raises
    ------
    ValueError
        Naming ``'device'`` for an unknown preference or a CUDA device that is not available.
    """
    check_device_name(preference, "get_device")
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if preference == "cpu":
        return torch.device("cpu")
    index = int(preference.split(":")[1]) if ":" in preference else 0
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index < count:
        return torch.device(preference)
    allowed = f"'auto' or 'cpu' (this machine has {count} CUDA devices)"
    if count:
        allowed = f"'auto', 'cpu', 'cuda' or 'cuda:N' with N < {count}"
    raise ValueError(f"The 'device' parameter of get_device must be {allowed}. Got {preference!r} instead.")


def train(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    proximal_mu: float = 0.0,
    task: str = "classification",
    seed: int = 0,
    device: torch.device | None = None,
    deadline: float | None = None,
) -> float:
    """Train ``model`` in place with mini-batch SGD and return the last epoch's mean loss.

    Parameters
    ----------
    model : nn.Module
        Maps ``(batch, *input_shape)`` to ``(batch, C)`` logits, or ``(batch, 1)`` for regression.
    x : np.ndarray of shape (n, *input_shape)
        Float inputs, ``n >= 1``.
    y : np.ndarray of shape (n,)
        Class ids (classification) or target values (regression).
    epochs : int
        Passes over the data, ``>= 1``.
    batch_size : int
        Samples per step, ``>= 1``; the last batch of an epoch may be smaller.
    lr : float
        SGD learning rate, ``> 0``.
    momentum : float, default=0.0
        SGD momentum in ``[0, 1)``.
    weight_decay : float, default=0.0
        SGD L2 weight decay, ``>= 0``.
    proximal_mu : float, default=0.0
        FedProx: adds ``(mu / 2) * ||w - w_start||^2`` to each step's loss, where ``w_start``
        are the weights ``model`` had when ``train`` was called. ``0`` is plain SGD.
    task : {"classification", "regression"}, default="classification"
        Cross-entropy loss, or mean squared error on the squeezed ``(batch,)`` output.
    seed : int, default=0
        Seeds the shuffling: equal seeds and start weights give equal trained weights.
    device : torch.device, optional
        Where to compute; the CPU when omitted. ``model`` is back on the CPU afterwards.
    deadline : float, optional
        A ``time.time()`` after which no step starts: whoever asked for the training has
        stopped waiting for it. None: no limit.

    Returns
    -------
    float
        Mean per-sample loss over the last epoch, measured during training and without the
        proximal term.

    Raises
    ------
    ValueError
        Naming the parameter for out-of-range hyperparameters, ``'x'`` for empty or mismatched
        data and ``'task'`` for an unknown task.
    DeadlineExceeded
        When ``deadline`` passes before the last step; ``model`` holds the steps made so far.
    """
    owner = "train"
    epochs = check_int(epochs, "epochs", owner, low=1)
    batch_size = check_int(batch_size, "batch_size", owner, low=1)
    lr = check_float(lr, "lr", owner, low=0.0, closed=(False, True))
    momentum = check_float(momentum, "momentum", owner, low=0.0, high=1.0, closed=(True, False))
    weight_decay = check_float(weight_decay, "weight_decay", owner, low=0.0)
    proximal_mu = check_float(proximal_mu, "proximal_mu", owner, low=0.0)
    task = check_choice(task, "task", owner, TASKS)
    seed = check_int(seed, "seed", owner, low=0)
    device = torch.device("cpu") if device is None else device

    was_training = model.training
    model.to(device)
    xs, ys = _to_tensors(x, y, task, device, owner)
    n = xs.shape[0]
    loss_fn = _loss_fn(task)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params] if proximal_mu > 0 else []
    generator = torch.Generator().manual_seed(seed)

    model.train()
    epoch_loss = 0.0
    steps = 0
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator).to(device)
        total = torch.zeros((), device=device)
        for begin in range(0, n, batch_size):
            if deadline is not None and time.time() > deadline:
                model.train(was_training)
                model.to("cpu")
                raise DeadlineExceeded(
                    f"training stopped after {steps} of {epochs * math.ceil(n / batch_size)} steps: "
                    f"its deadline passed {time.time() - deadline:.1f} s ago"
                )
            steps += 1
            idx = order[begin : begin + batch_size]
            loss = loss_fn(_outputs(model, xs[idx], task), ys[idx])
            objective = loss
            if start:
                gap = sum(((p - p0) ** 2).sum() for p, p0 in zip(params, start, strict=True))
                objective = loss + 0.5 * proximal_mu * gap
            optimizer.zero_grad(set_to_none=True)
            objective.backward()
            optimizer.step()
            total += loss.detach() * idx.numel()
        epoch_loss = float(total.item()) / n

    model.train(was_training)
    model.to("cpu")
    if device.type == "cuda":
        del xs, ys, start, optimizer, total, order
        torch.cuda.empty_cache()
    return epoch_loss


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    task: str = "classification",
    batch_size: int = 512,
    device: torch.device | None = None,
) -> tuple[float, float]:
    """Return ``model``'s mean loss and score on ``(x, y)``.

    Parameters
    ----------
    model : nn.Module
        As in :func:`train`; evaluated in eval mode, its mode restored afterwards.
    x : np.ndarray of shape (n, *input_shape)
        Float inputs, ``n >= 1``.
    y : np.ndarray of shape (n,)
        Class ids (classification) or target values (regression).
    task : {"classification", "regression"}, default="classification"
    batch_size : int, default=512
        Samples per forward pass, ``>= 1`` (memory only; the result does not depend on it).
    device : torch.device, optional
        Where to compute; the CPU when omitted. ``model`` is back on the CPU afterwards.

    Returns
    -------
    loss : float
        Mean cross-entropy, or mean squared error for regression.
    score : float
        Accuracy in ``[0, 1]``, or the coefficient of determination R^2 for regression (as
        scikit-learn's ``r2_score``: 1.0 for a perfect fit of constant targets, else 0.0 then).

    Raises
    ------
    ValueError
        Naming ``'x'`` for empty or mismatched data, ``'batch_size'`` or ``'task'``.
    """
    owner = "evaluate"
    batch_size = check_int(batch_size, "batch_size", owner, low=1)
    task = check_choice(task, "task", owner, TASKS)
    device = torch.device("cpu") if device is None else device

    was_training = model.training
    model.to(device)
    model.eval()
    xs, ys = _to_tensors(x, y, task, device, owner)
    n = xs.shape[0]
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    hits = torch.zeros((), dtype=torch.float64, device=device)
    preds = []
    for begin in range(0, n, batch_size):
        out = _outputs(model, xs[begin : begin + batch_size], task)
        target = ys[begin : begin + batch_size]
        loss_sum += _loss_fn(task, reduction="sum")(out, target).double()
        if task == "classification":
            hits += (out.argmax(dim=1) == target).sum()
        else:
            preds.append(out.double())
    loss = float(loss_sum.item()) / n
    if task == "classification":
        score = float(hits.item()) / n
    else:
        score = _r2(ys.double(), torch.cat(preds))

    model.train(was_training)
    model.to("cpu")
    if device.type == "cuda":
        del xs, ys, preds, loss_sum, hits
        torch.cuda.empty_cache()
    return loss, score


def _to_tensors(
    x: np.ndarray, y: np.ndarray, task: str, device: torch.device, owner: str
) -> tuple[torch.Tensor, torch.Tensor]:
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(
            f"The 'x' parameter of {owner} must be a non-empty array of shape "
            f"(n, *input_shape). Got shape {x.shape} instead."
        )
    if y.shape != (x.shape[0],):
        raise ValueError(
            f"The 'y' parameter of {owner} must have shape ({x.shape[0]},) to match x. Got shape {y.shape} instead."
        )
    y_dtype = torch.int64 if task == "classification" else torch.float32
    xs = torch.as_tensor(np.ascontiguousarray(x, dtype=np.float32)).to(device)
    ys = torch.as_tensor(np.ascontiguousarray(y)).to(device=device, dtype=y_dtype)
    return xs, ys


def _outputs(model: nn.Module, x: torch.Tensor, task: str) -> torch.Tensor:
    out = model(x)
    return out.squeeze(1) if task == "regression" else out


def _loss_fn(task: str, reduction: str = "mean") -> nn.Module:
    if task == "classification":
        return nn.CrossEntropyLoss(reduction=reduction)
    return nn.MSELoss(reduction=reduction)


def _r2(target: torch.Tensor, pred: torch.Tensor) -> float:
    ss_res = float(((target - pred) ** 2).sum().item())
    ss_tot = float(((target - target.mean()) ** 2).sum().item())
    if ss_tot == 0.0:
        return 1.0 if ss_res == 0.0 else 0.0
    return 1.0 - ss_res / ss_tot
