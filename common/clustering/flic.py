"""FLIC's clustering choices around Louvain (Espinoza Castellon et al., IJCNN 2022, Sec. III-IV).

The paper clusters the graph of ``S = 1 + cos`` (Eq. 7) with the Louvain method so that the
number of clusters is not a parameter. On such a dense graph, modularity at resolution
``gamma`` puts two clients together when ``S_ij`` exceeds ``gamma * k_i k_j / 2m``, about
``gamma (1 + mean cos)``: the threshold follows the mean cosine of the whole federation, so a
pair of groups whose updates are mildly aligned (rotation's 0 and 180 degrees, cos ~0.2)
merges at ``gamma = 1`` as soon as other pairs are anti-aligned. :func:`louvain_by_silhouette`
removes the fixed resolution: it runs the seeded Louvain method over a grid of resolutions and
keeps, of the partitions whose silhouette on the cosine distance ``2 - S = 1 - cos`` is within
``tolerance`` of the best, the one with the most communities (the one-shot automatic cut's rule,
``hierarchical.auto_cut``; ``tolerance`` 0 keeps the best silhouette). A client alone in its
group scores silhouette 0 as a community of one but about ``1 - a / b`` inside the community it
is least far from, so the best silhouette alone merges such a client into another group.

:func:`join_by_modularity` places clients that were not in the graph (newcomers) as Louvain's
local-moving phase would: into the community with the largest modularity gain, the other
nodes held fixed. :func:`loss_plateau` is the automatic clustering round's test: FedAvg has
stabilised when the training loss has stopped falling, relative to how fast it fell at first.
Numpy, scikit-learn and :mod:`common.clustering.louvain` only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import silhouette_score

from common.validation import check_float, check_int

from .hierarchical import most_within_tolerance, relabel_by_appearance
from .louvain import louvain_labels

RESOLUTIONS = tuple(np.round(np.arange(0.5, 2.01, 0.1), 2).tolist())


def louvain_by_silhouette(
    similarity: np.ndarray, seed: int = 0, resolutions: Sequence[float] = RESOLUTIONS, tolerance: float = 0.0
) -> tuple[np.ndarray, float]:
    """Louvain communities at the resolution whose partition has the best silhouette, or the most
    communities within ``tolerance`` of it.

    Parameters
    ----------
    similarity : ndarray of shape (n, n)
        Symmetric, in ``[0, 2]`` (FLIC: ``1 + cos``).
    seed : int, default=0
        Louvain's ``random_state``.
    resolutions : sequence of float, default=0.5, 0.6, ..., 2.0
        Candidate resolutions (> 0), tried in increasing order until one gives singletons;
        ties keep the first.
    tolerance : float, default=0.0
        In ``[0, 1)``: of the partitions scoring at least the best silhouette minus ``tolerance``,
        the one with the most communities (``hierarchical.most_within_tolerance``; ties: the lowest
        resolution); 0 = the best silhouette.

    Returns
    -------
    labels : ndarray of shape (n,), int64
        Labels numbered by first appearance.
    resolution : float
        The chosen resolution. When no candidate gives between 2 and n - 1 communities (the
        silhouette is undefined), the partition of the candidate closest to 1.0.

    Raises
    ------
    ValueError
        On a bad matrix, an empty or non-positive ``resolutions``, or ``tolerance`` outside ``[0, 1)``.
    """
    tolerance = check_float(tolerance, "tolerance", "louvain_by_silhouette", low=0.0, high=1.0, closed=(True, False))
    s = np.asarray(similarity, dtype=np.float64)
    if not len(resolutions) or min(resolutions) <= 0:
        raise ValueError(
            "The 'resolutions' parameter of louvain_by_silhouette must be a non-empty sequence "
            f"of floats > 0. Got {list(resolutions)!r} instead."
        )
    distance = np.clip(2.0 - s, 0.0, 2.0)
    np.fill_diagonal(distance, 0.0)
    scored: list[tuple[float, np.ndarray, float]] = []  # (silhouette, labels, resolution), new partitions only
    seen: set[bytes] = set()
    for gamma in sorted(resolutions):
        labels = louvain_labels(s, float(gamma), seed)
        key = labels.tobytes()
        if key not in seen:
            seen.add(key)
            k = int(labels.max()) + 1
            score = silhouette_score(distance, labels, metric="precomputed") if 2 <= k <= len(s) - 1 else -np.inf
            scored.append((float(score), labels, float(gamma)))
        if labels.max() + 1 == len(s):
            break
    best = max(score for score, _, _ in scored)
    if best == -np.inf:
        gamma = float(min(resolutions, key=lambda g: abs(g - 1.0)))
        return louvain_labels(s, gamma, seed), gamma
    _, labels, gamma = scored[most_within_tolerance([(int(c[1].max()) + 1, c[0]) for c in scored], tolerance)]
    return labels, gamma


def join_by_modularity(
    links: np.ndarray, similarity: np.ndarray, labels: np.ndarray, resolution: float = 1.0
) -> np.ndarray:
    """The community of each newcomer by Louvain's modularity gain, the clustered nodes fixed.

    Moving an isolated node ``i`` into community ``c`` changes the modularity by a positive
    multiple of ``k_ic - resolution * Sigma_c * k_i / (2 m)``: ``k_ic`` the weight of its
    links into ``c``, ``Sigma_c`` the total degree of ``c``, ``k_i`` its degree and ``m`` the
    total edge weight of the clustered graph. Each newcomer is placed alone (newcomers do
    not see each other).

    Parameters
    ----------
    links : ndarray of shape (m, n)
        Similarity of each newcomer to each clustered node (FLIC: ``1 + cos``, >= 0).
    similarity : ndarray of shape (n, n)
        Symmetric similarity among the clustered nodes; the diagonal is ignored.
    labels : ndarray of shape (n,)
        Their communities ``0..K-1``.
    resolution : float, default=1.0
        The resolution the communities were found with (> 0).

    Returns
    -------
    ndarray of shape (m,), int64
        The community with the largest gain (lowest index on ties).

    Raises
    ------
    ValueError
        If the shapes disagree or ``resolution`` is not positive.
    """
    links = np.asarray(links, dtype=np.float64)
    s = np.asarray(similarity, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    if links.ndim != 2 or links.shape[1] != n or s.shape != (n, n) or n == 0:
        raise ValueError(
            "The 'links' parameter of join_by_modularity must have shape (m, n) with n = "
            f"len(labels) = {n} and 'similarity' shape (n, n). Got {links.shape} and {s.shape} instead."
        )
    if not resolution > 0:
        raise ValueError(
            f"The 'resolution' parameter of join_by_modularity must be a float > 0. Got {resolution!r} instead."
        )
    degrees = s.sum(axis=1) - np.diag(s)
    two_m = max(float(degrees.sum()), 1e-12)
    onehot = np.eye(int(labels.max()) + 1)[labels]
    k_in = links @ onehot
    sigma = degrees @ onehot
    gain = k_in - resolution * np.outer(links.sum(axis=1), sigma) / two_m
    return np.argmax(gain, axis=1).astype(np.int64)


def loss_plateau(losses: Sequence[float], window: int, tol: float) -> bool:
    """Whether a training loss has levelled off relative to its early fall.

    With the mean training loss ``L_1 .. L_t`` of rounds ``1 .. t`` and ``m(a, b)`` the mean of
    ``L_a .. L_b``: true when ``t >= 2 window`` and the fall between the last two windows,
    ``m(t - 2w + 1, t - w) - m(t - w + 1, t)``, is below ``tol`` times the fall between the
    first two, ``m(1, w) - m(w + 1, 2w)``. Window means, not single rounds: with a sampled
    fraction of clients one round's mean loss is noisy, and a single noisy rise must not end
    FedAvg. A relative change of the model itself is no test: at a fixed learning rate it stays
    near its first value for tens of rounds.

    Parameters
    ----------
    losses : sequence of float
        One finite value per round, in round order.
    window : int
        >= 1.
    tol : float
        > 0.

    Returns
    -------
    bool
        Also true when the loss did not fall between the first two windows.

    Raises
    ------
    ValueError
        Naming ``'window'``, ``'tol'`` or ``'losses'`` (not finite).
    """
    window = check_int(window, "window", "loss_plateau", low=1)
    tol = check_float(tol, "tol", "loss_plateau", low=0.0, closed=(False, True))
    loss = np.asarray(losses, dtype=np.float64)
    if loss.ndim != 1 or not np.all(np.isfinite(loss)):
        raise ValueError(
            f"The 'losses' parameter of loss_plateau must be a finite 1-D sequence. Got shape {loss.shape} instead."
        )
    if loss.size < 2 * window:
        return False
    early = loss[:window].mean() - loss[window : 2 * window].mean()
    recent = loss[-2 * window : -window].mean() - loss[-window:].mean()
    return bool(recent < tol * early) if early > 0 else True


def rounds_for_updates(updates: float, num_clients: int, per_round: int) -> int:
    """Training rounds after which ``num_clients`` clients, ``per_round`` of them sampled each round,
    have sent ``updates`` updates each on average: ``ceil(updates * num_clients / per_round)``.

    Parameters
    ----------
    updates : float
        >= 0.
    num_clients : int
        >= 1.
    per_round : int
        In ``[1, num_clients]``.

    Returns
    -------
    int
        >= 0.

    Raises
    ------
    ValueError
        Naming ``'updates'``, ``'num_clients'`` or ``'per_round'``.
    """
    owner = "rounds_for_updates"
    updates = check_float(updates, "updates", owner, low=0.0)
    num_clients = check_int(num_clients, "num_clients", owner, low=1)
    per_round = check_int(per_round, "per_round", owner, low=1, high=num_clients)
    return math.ceil(updates * num_clients / per_round - 1e-9)


def clustering_round(plateau: int | None, wait: int, rounds: int) -> int:
    """FLIC's automatic clustering round: after the plateau and the wait, at the latest ``rounds // 2 + 1``.

    Parameters
    ----------
    plateau : int or None
        The round after whose training ``loss_plateau`` first held; None: not (yet) held.
    wait : int
        Training rounds the clustering waits for (``rounds_for_updates``), >= 0.
    rounds : int
        The run's rounds, >= 1.

    Returns
    -------
    int
        ``min(rounds // 2 + 1, max(plateau, wait) + 1)``; ``rounds // 2 + 1`` while ``plateau`` is None.
        The clustering runs before this round's training, on the updates of the rounds before it.
    """
    latest = rounds // 2 + 1
    return latest if plateau is None else min(latest, max(plateau, wait) + 1)


def split_disagreeing(similarity: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each client whose update disagrees on average with the rest of its community becomes a community alone.

    Parameters
    ----------
    similarity : ndarray of shape (n, n)
        FLIC's ``S = 1 + cos``.
    labels : ndarray of shape (n,)
        Communities ``0..K-1``.

    Returns
    -------
    ndarray of shape (n,), int64
        Repeatedly, the member with the lowest mean cosine to the other members of its community,
        when that mean is below 0, leaves it; labels renumbered by first appearance. A client
        alone in its group has no community to agree with, yet Louvain must put it in one.
    """
    cos = np.asarray(similarity, dtype=np.float64) - 1.0
    out = np.asarray(labels, dtype=np.int64).copy()
    if cos.shape != (len(out), len(out)):
        raise ValueError(
            "The 'labels' parameter of split_disagreeing must have one label per row of 'similarity'. "
            f"Got {len(out)} labels for shape {cos.shape} instead."
        )
    while True:
        worst: tuple[float, int] | None = None
        for community in np.unique(out):
            members = np.flatnonzero(out == community)
            if len(members) < 2:
                continue
            block = cos[np.ix_(members, members)]
            mean = (block.sum(axis=1) - np.diag(block)) / (len(members) - 1)
            i = int(np.argmin(mean))
            if mean[i] < 0.0 and (worst is None or mean[i] < worst[0]):
                worst = (float(mean[i]), int(members[i]))
        if worst is None:
            break
        out[worst[1]] = out.max() + 1
    return relabel_by_appearance(out)


def flic_clusters(
    similarity: np.ndarray, resolution: float | None, seed: int, tolerance: float = 0.0, split: bool = False
) -> tuple[np.ndarray, float]:
    """FLIC's server step: Louvain communities of the update-similarity graph, and the resolution used.

    ``resolution`` > 0 is used as given; None or 0 picks it by silhouette within ``tolerance``
    (``louvain_by_silhouette``). ``split``: then ``split_disagreeing``.
    """
    if resolution:
        labels, used = louvain_labels(similarity, resolution, seed), resolution
    else:
        labels, used = louvain_by_silhouette(similarity, seed, tolerance=tolerance)
    return (split_disagreeing(similarity, labels) if split else labels), used
