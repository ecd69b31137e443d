"""``query.subspaces``: per-class truncated SVD of the client's TRAIN data (PACFL, FLAG).

Config: ``subspace-vectors`` (p) and optionally ``with-counts``. No model is needed.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import RecordDict

from common import keys
from common.records import read_bool, read_int
from common.signals.subspaces import ClassSubspaces

from ..task import SERVER_CONFIG, ClientTask
from . import register


def class_bases(x: np.ndarray, y: np.ndarray, p: int, device: torch.device) -> ClassSubspaces:
    """The first ``min(p, n_c, d)`` left singular vectors of each class's data matrix.

    Parameters
    ----------
    x : ndarray of shape (n, *input_shape)
        Train inputs; each sample is flattened to a column of ``D_c`` (d, n_c).
    y : ndarray of shape (n,)
        Integer class labels.
    p : int
        Vectors per class, >= 1; 0 = FLAG's rule, about 1% of the class's samples
        (``max(1, round(0.01 n_c))``).
    device : torch.device
        Where the SVD runs.

    Returns
    -------
    ClassSubspaces
        With class counts.
    """
    if p < 0:
        raise ValueError(f"The 'subspace-vectors' parameter of query.subspaces must be an int >= 0. Got {p} instead.")
    flat = x.reshape(len(x), -1)
    classes = np.unique(y).astype(np.int64)
    bases, counts = [], []
    for c in classes:
        rows = torch.as_tensor(flat[y == c], dtype=torch.float32, device=device)
        # Right singular vectors of the (n_c, d) sample matrix = left ones of D_c = rows^T.
        _, _, vh = torch.linalg.svd(rows, full_matrices=False)
        keep = p or max(1, round(0.01 * rows.shape[0]))
        bases.append(vh[: min(keep, vh.shape[0])].T.cpu().numpy())
        counts.append(int(rows.shape[0]))
    return ClassSubspaces(classes, tuple(bases), np.asarray(counts, dtype=np.int64))


@register(keys.SUBSPACES_ACTION)
def subspaces(task: ClientTask, content: RecordDict) -> dict[str, np.ndarray]:
    """Per-class bases of the train split (never the test split); counts only if asked."""
    if task.info.num_classes == 0:
        raise ValueError("query.subspaces needs a classification task; this client's task is regression.")
    cfg = content.config_records[keys.CONFIG]
    vectors = read_int(cfg, keys.SUBSPACE_VECTORS, SERVER_CONFIG)
    signal = class_bases(task.data.x_train, task.data.y_train, vectors, task.device)
    if not read_bool(cfg, keys.WITH_COUNTS, SERVER_CONFIG, default=False):
        signal = ClassSubspaces(signal.classes, signal.bases)
    return signal.to_arrays()
