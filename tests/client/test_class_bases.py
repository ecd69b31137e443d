"""Client-side clustering signals: per-class SVD bases."""

import numpy as np
import torch

from client.signals.subspaces import class_bases
from common.clustering.subspaces import principal_angles


def test_class_bases_recover_each_class_direction_and_counts():
    rng = np.random.default_rng(0)
    d = 12
    dirs = np.linalg.qr(rng.normal(size=(d, 2)))[0]
    x = np.vstack([np.outer(rng.normal(size=30), dirs[:, 0]), np.outer(rng.normal(size=5), dirs[:, 1])])
    y = np.r_[np.full(30, 3), np.full(5, 7)]
    sig = class_bases(x.reshape(-1, 3, 4), y, 2, torch.device("cpu"))
    assert sig.classes.tolist() == [3, 7] and sig.counts.tolist() == [30, 5]
    assert all(b.shape == (d, 2) for b in sig.bases)
    assert principal_angles(sig.basis(3)[:, :1], dirs[:, :1])[0] < 1e-3
    assert principal_angles(sig.basis(7)[:, :1], dirs[:, 1:])[0] < 1e-3
    np.testing.assert_allclose(sig.bases[0].T @ sig.bases[0], np.eye(2), atol=1e-5)
    small = class_bases(x[:2], y[:2], 5, torch.device("cpu"))
    assert small.bases[0].shape == (d, 2)
