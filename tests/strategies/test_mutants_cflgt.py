"""CFLGT's bookkeeping without Flower: the automatic pre-training's log line, where clients without a trajectory
wait (the largest cluster, cluster 0 when nobody else is placed) and that waiting clients stay waiting.

Written for the mutation run's survivors in strategies/cflgt.py (docs/mutation-verdicts/strategies.cflgt.tsv).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from sklearn.metrics import adjusted_rand_score

from common import keys
from common.clustering.trajectories import share_points, trajectory_distances
from common.config import TrainingParams
from common.signals.forces import ClassForces
from strategies.cflgt import CFLGT, CFLGTParams
from strategies.federation import ClientInfo
from strategies.state import load_checkpoint, restore, save_state
from tests.helpers.forces import fitted_groups

# Two planted groups of trajectories (C = 2 classes): clients 0, 1 (and 7) pull and push on class 0, clients 2 to 6
# on class 1, each point moved by noise of 0.01 (AP splits identical points on their tied similarities); the
# groups are about 1.4 apart in forces and in their shares' square roots alike, so a preference of -1 keeps
# them whole.
GROUP = [0, 0, 1, 1, 1, 1, 1, 0]
NOISE = np.random.default_rng(0).normal(scale=0.01, size=(len(GROUP), 2, 2))


def _trajectory(pid: int) -> np.ndarray:
    return np.array([[1.0, 1.0], [0.0, 0.0]])[:: 1 - 2 * GROUP[pid]] + NOISE[pid]


def _cflgt(
    pids: range,
    silent: set[int] | tuple[int, ...] = (),
    trajectory: Callable[[int], np.ndarray] = _trajectory,
    **params,
) -> CFLGT:
    s = CFLGT(TrainingParams(rounds=5, seed=3), CFLGTParams(**{"pretrain_rounds": 1, "preference": -1.0, **params}))
    s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, 0) for p in pids}
    s.init_clusters(ArrayRecord({"head.bias": Array(np.zeros(2, np.float32))}))
    s._forces = lambda asked, rnd: {p: trajectory(p) for p in asked if p not in silent}  # type: ignore[method-assign]
    return s


NEWCOMER = 9


def _admitted(s: CFLGT, pid: int = NEWCOMER) -> int:
    """The cluster ``pid`` joins as a newcomer in round 3."""
    s.clients[pid] = ClientInfo(pid, 1000 + pid, 10, 5, 0)
    s.admit(3, [pid])
    return s.assignment[pid]


@pytest.mark.parametrize("points, joins", [("shares", 1), ("raw", 0)])
def test_a_newcomer_joins_the_exemplar_nearest_in_the_points_ap_compared(points: str, joins: int) -> None:
    """Group 1's forces are three times group 0's; a newcomer with group 1's classes and a tenth of its forces
    is group 1 by its shares, and nearer group 0's exemplar in raw forces (the paper's rule)."""

    def trajectory(pid: int) -> np.ndarray:
        if pid == NEWCOMER:
            return np.array([[0.0, 0.0], [0.1, 0.1]])
        return _trajectory(pid) * (3.0 if GROUP[pid] else 1.0)

    s = _cflgt(range(8), trajectory=trajectory, points=points)
    s._cluster(2)
    assert [s.assignment[p] for p in range(8)] == GROUP
    assert _admitted(s) == joins


def _one_class_or_two(pid: int) -> np.ndarray:
    """Group 0 pulls and pushes on class 0 alone; group 1 on both classes evenly, with three times the force;
    the newcomer on both classes evenly, with a hundredth of group 0's force."""
    if pid == NEWCOMER:
        return np.full((2, 2), 0.01)
    held = np.array([[1.0, 1.0], [0.0, 0.0]]) if GROUP[pid] == 0 else 3.0 * np.ones((2, 2))
    return held + NOISE[pid]


@pytest.mark.parametrize("points, joins", [("shares", 1), ("raw", 0)])
def test_a_weak_newcomer_is_compared_in_the_same_points_as_the_exemplars(points: str, joins: int) -> None:
    """A newcomer with group 1's even classes and a hundredth of group 0's forces: group 1 by its shares, group 0
    in raw forces; its raw forces against the exemplars' shares (or its shares against their raw forces) lie
    nearer group 0's one-class exemplar. The exemplars are kept as the clients sent them."""
    s = _cflgt(range(8), trajectory=_one_class_or_two, points=points, preference=-0.3)
    s._cluster(2)
    assert [s.assignment[p] for p in range(8)] == GROUP
    for k, exemplar in enumerate(s.exemplars):
        assert any(np.array_equal(exemplar, _one_class_or_two(p)) for p in range(8) if GROUP[p] == k)
    assert _admitted(s) == joins


@pytest.mark.parametrize("saved, resumed, joins", [("shares", "raw", 1), ("raw", "shares", 0), (None, "shares", 0)])
def test_a_resumed_run_compares_newcomers_in_the_points_its_clusters_were_found_on(
    saved: str | None, resumed: str, joins: int, tmp_path: Path
) -> None:
    """The weak newcomer above joins by the checkpoint's points, not the resumed run's cflgt-points; a checkpoint
    written before cflgt-points (no ``compared``) was clustered on the raw forces."""
    first = _cflgt(range(8), trajectory=_one_class_or_two, points=saved or "raw", preference=-0.3)
    first._cluster(2)
    path = save_state(first, 2, tmp_path / "checkpoint.npz")
    checkpoint = load_checkpoint(path, CFLGT.name)
    if saved is None:
        del checkpoint["state"]["compared"]
    s = _cflgt(range(8), trajectory=_one_class_or_two, points=resumed, preference=-0.3)
    restore(s, checkpoint)
    assert s.describe_distances().endswith("shares)" if saved == "shares" else "forces)")
    assert _admitted(s) == joins


@pytest.mark.parametrize("points", [None, "raw"])
def test_ap_runs_on_the_points_the_params_name_shares_by_default(points: str | None) -> None:
    """Two label groups whose forces' sizes spread more than the groups lie apart: CFLGT's defaults (shares,
    midrange) find them; AP runs on the distances of the points named, the raw forces only when asked."""
    forces, truth = fitted_groups()
    s = CFLGT(TrainingParams(rounds=5), CFLGTParams(pretrain_rounds=1, **({"points": points} if points else {})))
    s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, 0) for p in range(len(truth))}
    s.init_clusters(ArrayRecord({"head.bias": Array(np.zeros(4, np.float32))}))
    s._forces = lambda asked, rnd: {p: forces[p] for p in asked}  # type: ignore[method-assign]
    s._cluster(2)
    compared = forces if points == "raw" else share_points(forces)
    np.testing.assert_allclose(s.distance_matrix, trajectory_distances(compared))
    found = [s.assignment[p] for p in range(len(truth))]
    assert (adjusted_rand_score(truth, found) == 1.0) is (points is None)


def test_cflgt_logs_the_automatic_pretraining_it_chose(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO"):
        CFLGT(TrainingParams(rounds=8), CFLGTParams(pretrain_rounds=0))
    assert "CFLGT: cflgt-pretrain-rounds 0 (automatic): 2 of 8 rounds" in [r.getMessage() for r in caplog.records]


def test_a_client_without_a_trajectory_waits_in_the_largest_cluster() -> None:
    s = _cflgt(range(8), silent=(7,))
    s._cluster(2)
    assert [s.assignment[p] for p in range(7)] == GROUP[:7]
    assert s.assignment[7] == 1 and s.pending == {7}


def test_clients_without_a_trajectory_wait_in_cluster_zero_when_nobody_else_is_placed() -> None:
    s = _cflgt(range(2))
    s.assignment = {}
    s._fallback([0, 1], 2)
    assert s.assignment == {0: 0, 1: 0} and s.pending == {0, 1}


def test_a_silent_newcomer_joins_the_clients_still_waiting_for_their_trajectory() -> None:
    s = _cflgt(range(8), silent=(7, NEWCOMER))
    s._cluster(2)
    assert _admitted(s) == 1 and s.pending == {7, NEWCOMER}


def test_cflgt_clusters_at_its_clustering_round_then_asks_the_waiting_clients_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    silent = {7}
    s = _cflgt(range(8), silent=silent)
    s.before_round(1)
    assert s.distance_matrix is None and set(s.assignment.values()) == {0}
    with caplog.at_level("INFO"):
        s.before_round(2)
    assert [s.assignment[p] for p in range(8)] == [*GROUP[:7], 1] and s.pending == {7}
    assert any(r.getMessage().startswith("round 2: CFLGT found 2 clusters of sizes [2, 6]") for r in caplog.records)
    silent.clear()
    s.before_round(3)
    assert s.assignment[7] == 0 and s.pending == set()


def test_cflgt_asks_for_forces_on_the_reference_and_stacks_each_reply_into_points() -> None:
    s = CFLGT(TrainingParams(rounds=5), CFLGTParams(pretrain_rounds=1))
    s.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((3, 4), np.float32)), "head.bias": Array(np.zeros(3, np.float32))}
    )
    s.reference = s.initial.copy()
    asked = []

    def reply(*args: object, **kwargs: object) -> dict[int, ClassForces]:
        asked.append((args, kwargs))
        return {5: ClassForces(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]))}

    s.query_signal = reply  # type: ignore[method-assign]
    got = s._forces([5, 6], 2)
    assert list(got) == [5] and got[5].tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert asked == [
        ((keys.FORCES_ACTION, [5, 6], 2, ClassForces.from_arrays), {"models": [s.reference], "num_classes": 3})
    ]
