"""CFLGT (Liu et al., "CFLGT: Clustered Federated Learning with Gradient Trajectory", Alg. 1).

``cflgt-pretrain-rounds`` rounds of FedAvg; then every client computes, with the pre-trained model
and a forward pass only, its per-class pulling and pushing forces (2C floats, its "gradient
trajectory"); Affinity Propagation on the mean point-wise L2 distance between trajectories
picks the clusters and their number; every cluster model starts from the pre-trained model
and is trained by FedAvg inside its cluster. Clients never move afterwards (Sec. V-A).

Beyond the paper (its future work): newcomers, and clients whose trajectory did not arrive
(they are asked again every round), join the cluster of the nearest exemplar trajectory,
computed on the same pre-trained model the others used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from logging import INFO, WARNING
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord
from flwr.common import log

from common import keys
from common.clustering.trajectories import (
    PREFERENCES,
    SILHOUETTE,
    SILHOUETTE_GRID,
    AP_MAX_POINTS,
    POINTS,
    RAW,
    SHARES,
    cluster_trajectories,
    coefficient_of_variation,
    hopkins_statistic,
    nearest_exemplar,
    trajectories_from_forces,
    trajectory_points,
)
from common.params import check_params, param
from common.config import TrainingParams
from common.params import run_config_key
from common.metrics import cluster_sizes
from common.signals.forces import ClassForces
from common.validation import check_float

from .base import ClusteredStrategy


@dataclass(frozen=True)
class CFLGTParams:
    """``pretrain_rounds`` >= 0 FedAvg rounds (0: automatic, :func:`automatic_pretrain_rounds`;
    paper: 25 of 100); AP ``damping`` in [0.5, 1); ``ap_sample`` >= 0 trajectories AP runs on
    (a seeded sample when more clients answer, the others joining their nearest exemplar; 0: every
    client, the paper's rule; default 200, modified); ``points`` what AP and the nearest-exemplar rule
    compare (``"shares"``: :func:`~common.clustering.trajectories.share_points`, modified; ``"raw"``: the
    forces as sent, the paper's); keys ``cflgt-*``.

    ``preference`` is AP's self-similarity: a float, or a rule of ``PREFERENCES``: ``"silhouette"`` (the
    default, modified: of AP's runs at preferences evenly spaced between the least and the most similar
    pair, the one whose clusters score the best silhouette), ``"midrange"`` (halfway between the least
    and the most similar pair) or ``"median"`` (the median of the similarities, scikit-learn's default;
    the paper names none). A string holding a number (what the command line passes) is read as that float.
    """

    key_prefix: ClassVar[str] = "cflgt"
    pretrain_rounds: int = param(
        0,
        "FedAvg rounds before clustering, counted in rounds; 0 = automatic: a quarter of rounds "
        "(the paper's 25 of 100), at least 1",
        low=0,
        paper="25 of 100 rounds",
    )
    damping: float = param(0.5, "affinity propagation's damping, in [0.5, 1)", low=0.5, high=1.0, closed=(True, False))
    preference: float | str = param(
        SILHOUETTE,
        f"affinity propagation's preference: silhouette = of {SILHOUETTE_GRID} runs at preferences evenly spaced "
        "from the least to the most similar pair, the one whose clusters score the best silhouette (modified); "
        "midrange = halfway between the least and the most similar pair; median = the median of the "
        "similarities (scikit-learn's default); or a number (larger: more clusters)",
        checked=False,
        paper="none named; scikit-learn's median (silhouette is modified)",
    )
    ap_sample: int = param(
        AP_MAX_POINTS,
        "affinity propagation runs on a seeded sample of this many trajectories, the other clients join their "
        "nearest exemplar; 0 = every client (the paper's rule; more clusters as clients grow)",
        low=0,
        paper="every client (200 is modified)",
    )
    points: str = param(
        SHARES,
        "what affinity propagation compares: 'shares' = square roots of each client's pull and push shares over "
        "the classes (modified: the forces' size, how well the pre-trained model fits the client, no longer "
        "drowns which classes carry them); 'raw' = the forces as sent (the paper's)",
        choices=POINTS,
        paper="raw (shares is modified)",
    )

    def __post_init__(self) -> None:
        owner, key = "CFLGT", partial(run_config_key, CFLGTParams)
        check_params(self, owner)
        pref = self.preference
        if isinstance(pref, str) and pref not in PREFERENCES:
            try:
                pref = float(pref)
            except ValueError:
                raise ValueError(
                    f"The '{key('preference')}' parameter of {owner} must be one of {PREFERENCES} or a float. "
                    f"Got {pref!r} instead."
                ) from None
        if pref not in PREFERENCES:
            pref = check_float(pref, key("preference"), owner)
        object.__setattr__(self, "preference", pref)


def automatic_pretrain_rounds(rounds: int) -> int:
    """A quarter of ``rounds`` (the paper's 25 of 100), at least 1 and below ``rounds`` (0 for 1 round)."""
    return min(max(rounds // 4, 1), rounds - 1)


class CFLGT(ClusteredStrategy):
    """FedAvg pre-training, one trajectory query to every client, AP, then fixed clusters.

    Attributes
    ----------
    reference : ArrayRecord or None
        The pre-trained model every trajectory is computed on (kept for later clients).
    trajectories : dict of int to np.ndarray of shape (C, 2)
        Each client's points ``(Z1'_c, Z2'_c)``.
    exemplars : np.ndarray of shape (K, C, 2)
        Cluster ``k``'s exemplar trajectory.
    pending : set of int
        Clients whose trajectory has not arrived (kept in the largest cluster meanwhile).
    compared : str
        The ``cflgt-points`` the clusters were found on, in which later clients are compared to the
        exemplars whatever a resumed run's ``cflgt-points`` says (``"raw"`` from a checkpoint written
        before ``cflgt-points`` existed).
    distance_matrix : np.ndarray of shape (N, N)
        Trajectory distances of the clients AP ran on (``distance_pids``: all of them up to
        ``cflgt-ap-sample``, a seeded sample above, the others joining their nearest exemplar).
    diagnostics : dict
        Hopkins statistic, coefficients of variation of Z1' and Z2', AP preference, whether AP
        converged and the damping it converged at (``AP_RETRIES`` after a failure).
    """

    name = "cflgt"
    queries = (ClassForces,)
    state_fields: ClassVar[frozenset[str]] = frozenset(
        {"compared", "diagnostics", "exemplars", "pending", "reference", "trajectories"}
    )
    placement_rule = (
        "CFLGT: the client's class-force trajectory on the pre-training model (query.forces), "
        "the nearest exemplar's cluster"
    )
    params_type = CFLGTParams

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        what = "square roots of the force shares" if self.compared == SHARES else "forces"
        return f"trajectory distance (mean point-wise L2 of the {what})"

    def __init__(self, training: TrainingParams | None = None, params: CFLGTParams | None = None) -> None:
        super().__init__(training, params)
        if self.params.pretrain_rounds == 0:
            auto = automatic_pretrain_rounds(self.training.rounds)
            log(INFO, "CFLGT: cflgt-pretrain-rounds 0 (automatic): %d of %d rounds", auto, self.training.rounds)
            self.params = replace(self.params, pretrain_rounds=auto)
        if self.params.pretrain_rounds >= self.training.rounds:
            raise ValueError(
                f"The '{run_config_key(CFLGTParams, 'pretrain_rounds')}' parameter of CFLGT must be an int in the "
                f"range "
                f"[0, {self.training.rounds - 1}] (below 'rounds'). "
                f"Got {self.params.pretrain_rounds!r} instead."
            )
        self.reference: ArrayRecord | None = None
        self.trajectories: dict[int, np.ndarray] = {}
        self.exemplars = np.zeros((0, 0, 2))
        self.pending: set[int] = set()
        self.compared = RAW  # a checkpoint without it was clustered on the raw forces; _cluster sets it
        self.distance_matrix: np.ndarray | None = None
        self.distance_pids: list[int] = []
        self.diagnostics: dict[str, float | bool] = {}

    @property
    def clustering_round(self) -> int:
        """The round whose start collects trajectories and runs AP."""
        return self.params.pretrain_rounds + 1

    def phase(self, server_round: int) -> str:
        """``pretrain``, then ``cluster`` in the clustering round, then ``train``."""
        if server_round < self.clustering_round:
            return "pretrain"
        return "cluster" if server_round == self.clustering_round else "train"

    def before_round(self, server_round: int) -> None:
        """Collect trajectories and run AP in the clustering round; afterwards place waiting clients."""
        if server_round < self.clustering_round:
            return
        if self.distance_matrix is None:
            self._cluster(server_round)
        elif self.pending:
            self._place(sorted(self.pending), server_round)

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Before clustering: the one pre-training cluster; after: the nearest exemplar's cluster."""
        if self.distance_matrix is None:
            self.assignment.update(dict.fromkeys(newcomers, 0))
        else:
            self._place(newcomers, server_round)

    def _forces(self, pids: list[int], server_round: int) -> dict[int, np.ndarray]:
        reference = self.require(self.reference, "reference", "the clustering round (before_round)")
        num_classes = self.head_shape()[0]
        replies = self.query_signal(
            keys.FORCES_ACTION,
            pids,
            server_round,
            ClassForces.from_arrays,
            models=[reference],
            num_classes=num_classes,
        )
        return {pid: trajectories_from_forces(f.pull[None], f.push[None])[0] for pid, f in replies.items()}

    def _cluster(self, server_round: int) -> None:
        self.reference = self.models[0].copy()
        self.trajectories = self._forces(sorted(self.clients), server_round)
        pids = sorted(self.trajectories)
        if not pids:
            log(WARNING, "round %d: no client sent a trajectory; one more FedAvg round, then again", server_round)
            return
        with self.clustering_timer():
            points = np.stack([self.trajectories[p] for p in pids])
            found = cluster_trajectories(
                trajectory_points(points, self.params.points),
                damping=self.params.damping,
                preference=self.params.preference,
                seed=self.training.seed,
                max_points=self.params.ap_sample or None,
            )
            result, self.distance_matrix = found.result, found.distances
            self.compared = self.params.points
            self.distance_pids = [pids[i] for i in found.sample]
            self.exemplars = points[result.exemplars]
            assignment = {pid: int(k) for pid, k in zip(pids, result.labels, strict=True)}
        if not result.converged:
            log(
                WARNING,
                "round %d: affinity propagation did not converge up to damping %.2f; one cluster",
                server_round,
                result.damping,
            )
        elif result.damping != self.params.damping:
            log(WARNING, "round %d: affinity propagation converged only at damping %.2f", server_round, result.damping)
        self.diagnostics = {
            "hopkins": hopkins_statistic(points.reshape(len(pids), -1), seed=self.training.seed)
            if len(pids) > 1
            else float("nan"),
            "cv-pull": coefficient_of_variation(points[..., 0]),
            "cv-push": coefficient_of_variation(points[..., 1]),
            "preference": result.preference,
            "converged": result.converged,
            "damping": result.damping,
        }
        self.set_clusters([self.reference.copy() for _ in range(len(self.exemplars))], assignment)
        self.pending = set()
        self._fallback(sorted(set(self.clients) - set(pids)), server_round)
        log(
            INFO,
            "round %d: CFLGT found %d clusters of sizes %s in %d trajectories; Hopkins %.3f, "
            "CV of Z1' %.3f and Z2' %.3f, AP preference %.4g",
            server_round,
            len(self.exemplars),
            cluster_sizes(self.assignment, len(self.models)),
            len(pids),
            self.diagnostics["hopkins"],
            self.diagnostics["cv-pull"],
            self.diagnostics["cv-push"],
            result.preference,
        )

    def run_details(self) -> dict[str, Any]:
        """The AP diagnostics (``ap-hopkins``, ``ap-converged``, ...) for ``summary.json``."""
        return {"ap-" + k: None if isinstance(v, float) and np.isnan(v) else v for k, v in self.diagnostics.items()}

    def _place(self, pids: list[int], server_round: int) -> None:
        """Nearest-exemplar clusters for ``pids``; those without a trajectory wait in the largest."""
        got = self._forces(pids, server_round)
        self.trajectories.update(got)
        if got:
            found = sorted(got)
            labels = nearest_exemplar(
                trajectory_points(np.stack([got[p] for p in found]), self.compared),
                trajectory_points(self.exemplars, self.compared),
            )
            self.assignment.update({pid: int(k) for pid, k in zip(found, labels, strict=True)})
            self.pending -= set(found)
            log(
                INFO,
                "round %d: clients %s joined the clusters %s of their nearest exemplars",
                server_round,
                found,
                labels.tolist(),
            )
        self._fallback(sorted(set(pids) - set(got)), server_round)

    def _fallback(self, pids: list[int], server_round: int) -> None:
        if not pids:
            return
        sizes = cluster_sizes({p: k for p, k in self.assignment.items() if p not in pids}, len(self.models))
        largest = int(np.argmax(sizes)) if any(sizes) else 0
        self.assignment.update(dict.fromkeys(pids, largest))
        self.pending |= set(pids)
        log(
            WARNING,
            "round %d: no trajectory from clients %s; they wait in cluster %d and are asked again",
            server_round,
            pids,
            largest,
        )
