"""Run metrics: clustering agreement with the true groups and summaries of per-round series.

The headline accuracy is :func:`final_mean` (the mean of the last rounds), never the best round.
"""

from __future__ import annotations

import math
import resource
import sys
import time
import types
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from common.validation import check_float, check_int


def clustering_scores(true_groups: np.ndarray, assignment: np.ndarray) -> tuple[float, float] | None:
    """Return the (ARI, AMI) agreement between the assignment and the true groups.

    Both scores compare partitions up to relabelling: 1.0 for the same partition, about 0.0
    for an unrelated one.

    Parameters
    ----------
    true_groups : np.ndarray of shape (N,)
        Each client's true group; clients with a group ``< 0`` (unknown) are left out.
    assignment : np.ndarray of shape (N,)
        Each client's cluster.

    Returns
    -------
    tuple of float or None
        ``(ARI, AMI)`` over the clients with a known group; ``None`` when no client has one.

    Raises
    ------
    ValueError
        Naming ``'assignment'`` when the two arrays are not 1-D of the same length.
    """
    groups = np.asarray(true_groups)
    labels = np.asarray(assignment)
    if groups.ndim != 1 or labels.shape != groups.shape:
        raise ValueError(
            f"The 'assignment' parameter of clustering_scores must be a 1-D array of the same "
            f"shape as true_groups {groups.shape}. Got shape {labels.shape} instead."
        )
    known = groups >= 0
    if not known.any():
        return None
    from sklearn.metrics import adjusted_mutual_info_score, adjusted_rand_score  # server side only: ~1 s to import

    ari = adjusted_rand_score(groups[known], labels[known])
    ami = adjusted_mutual_info_score(groups[known], labels[known])
    return float(ari), float(ami)


def mean_std(values: Sequence[float | None]) -> tuple[float, float]:
    """Return the mean and population standard deviation of the finite ``values``.

    ``None`` and NaN entries are skipped; ``(nan, nan)`` when none is left.
    """
    kept = _finite(values)
    if kept.size == 0:
        return math.nan, math.nan
    return float(kept.mean()), float(kept.std())


def final_mean(values: Sequence[float | None], fraction: float = 0.1) -> float:
    """Return the mean of the last ``ceil(fraction * len)`` finite values (at least one).

    This is the headline "final accuracy" of a run. ``None`` and NaN entries (rounds without
    an evaluation) are dropped first; NaN when nothing is left.

    Raises
    ------
    ValueError
        Naming ``'fraction'`` unless it lies in ``(0, 1]``.
    """
    fraction = check_float(fraction, "fraction", "final_mean", low=0.0, high=1.0, closed=(False, True))
    kept = _finite(values)
    if kept.size == 0:
        return math.nan
    count = max(1, math.ceil(fraction * kept.size))
    return float(kept[-count:].mean())


def final_stretch(rounds: int) -> int:
    """Rounds at the end of a run that are all evaluated and averaged into its final accuracy.

    The last 10% of the rounds, and at least ``min(20, rounds // 5)`` (the CFLGT paper averages
    its last 20 rounds): 6 of 30, 20 of 100, 20 of 200, 1 of 1.
    """
    rounds = check_int(rounds, "rounds", "final_stretch", low=1)
    return max(1, math.ceil(0.1 * rounds), min(20, rounds // 5))


def first_round_reaching(
    rounds: Sequence[int],
    values: Sequence[float | None],
    target: float = 1.0,
    tol: float = 1e-9,
) -> int | None:
    """Return the first round whose value is at least ``target - tol``, or ``None``.

    Parameters
    ----------
    rounds : sequence of int of length R
        Round numbers, in the order of ``values``.
    values : sequence of float or None of length R
        E.g. the ARI per round; ``None`` and NaN never reach the target.
    target : float, default=1.0
    tol : float, default=1e-9
        Non-negative slack for floating-point noise.

    Raises
    ------
    ValueError
        Naming ``'values'`` when its length differs from ``rounds``, or ``'tol'`` if negative.
    """
    tol = check_float(tol, "tol", "first_round_reaching", low=0.0)
    if len(values) != len(rounds):
        raise ValueError(
            f"The 'values' parameter of first_round_reaching must have the length of rounds "
            f"({len(rounds)}). Got length {len(values)} instead."
        )
    for rnd, value in zip(rounds, values, strict=True):
        if value is not None and not math.isnan(value) and value >= target - tol:
            return int(rnd)
    return None


def cluster_sizes(assignment: Mapping[int, int] | np.ndarray, num_clusters: int) -> list[int]:
    """Return the number of clients in each cluster ``0 .. num_clusters - 1``, empty ones as 0.

    Parameters
    ----------
    assignment : mapping client -> cluster, or np.ndarray of shape (N,)
        Cluster ``-1`` means not assigned (yet) and is not counted.
    num_clusters : int
        Number of clusters ``K >= 0``.

    Returns
    -------
    list of int of length K

    Raises
    ------
    ValueError
        Naming ``'assignment'`` for a cluster id outside ``[-1, K)``.
    """
    num_clusters = check_int(num_clusters, "num_clusters", "cluster_sizes", low=0)
    ids = list(assignment.values()) if isinstance(assignment, Mapping) else assignment
    labels = np.asarray(ids, dtype=np.int64).reshape(-1)
    bad = labels[(labels < -1) | (labels >= num_clusters)]
    if bad.size:
        raise ValueError(
            f"The 'assignment' parameter of cluster_sizes must hold cluster ids in "
            f"[0, {num_clusters}) or -1 (not assigned). Got {int(bad[0])} instead."
        )
    counts = np.bincount(labels[labels >= 0], minlength=num_clusters)
    return [int(c) for c in counts]


def deep_bytes(obj: Any, skip: frozenset[str] = frozenset()) -> int:
    """Return the memory an object holds: ``sys.getsizeof`` summed over everything it reaches.

    Follows mappings, lists, tuples, sets, ``__dict__`` and ``__slots__``; a numpy array counts
    its header and the data it owns. Every object counts once; modules, classes and functions
    are not followed.

    Parameters
    ----------
    obj : object
        What to measure.
    skip : frozenset of str
        Attribute names not followed (e.g. a connection the object holds).

    Returns
    -------
    int
        Bytes.
    """
    opaque = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, opaque):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, (np.ndarray, str, bytes, bytearray, int, float, complex)) or item is None:
            continue
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        stack.extend(v for k, v in getattr(item, "__dict__", {}).items() if k not in skip)
        for name in getattr(type(item), "__slots__", ()):
            if name not in skip and hasattr(item, name):
                stack.append(getattr(item, name))
    return total


def process_resources() -> dict[str, float]:
    """Peak resident memory (MB, ``ru_maxrss``) and CPU seconds so far of the calling process."""
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak-rss-mb": round(peak_kb / 1024, 1), "cpu-seconds": round(time.process_time(), 3)}


def _finite(values: Sequence[float | None]) -> np.ndarray:
    kept = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return kept[np.isfinite(kept)]
