"""Planted CFLGT trajectories whose forces' sizes hide their label groups (numpy only)."""

from __future__ import annotations

import numpy as np

from common.clustering.trajectories import trajectories_from_forces


def fitted_groups(seed: int = 0, per_group: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Two label groups' forces on a model that fits them unevenly, shape (N, 4, 2), and the groups (N,).

    Group 0 holds classes 0 and 2, group 1 classes 1 and 2 (pull only on held classes, push mostly on
    them); each client's forces are scaled by how much of its data the model still gets wrong, drawn from
    0.1 to 4 (the spread within one group of Fashion-MNIST clients after 25 FedAvg rounds), which dwarfs
    the gap between the groups.
    """
    rng = np.random.default_rng(seed)
    held = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    truth = np.repeat([0, 1], per_group)
    pull = held[truth] * rng.uniform(0.5, 1.5, size=(len(truth), 4))
    push = (0.8 * held[truth] + 0.02) * rng.uniform(0.5, 1.5, size=(len(truth), 4))
    scale = rng.permutation(np.geomspace(0.1, 4.0, len(truth)))[:, None]
    return trajectories_from_forces(pull * scale, push * scale), truth
