"""CFLGT on the in-process grid: pre-training, one trajectory query, AP clusters, newcomers, faults."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message

from client.app import app as client_app
from common import keys
from server.experiment import Experiment
from server.figures.cflgt import trajectory_figures
from strategies import CFLGT, get_strategy
from strategies.cflgt import CFLGTParams
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

FORCES = keys.query_type(keys.FORCES_ACTION)


def _run(grid_kwargs=None, **overrides):
    rc = small_run_config(
        **{
            "strategy": "cflgt",
            "cflgt-pretrain-rounds": 1,
            "rounds": 2,
            "local-epochs": 1,
            "eval-every": 100,
            **overrides,
        }
    )
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"], **(grid_kwargs or {}))
    strategy = exp.build_strategy()
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid


def _forces_queries(grid):
    return [
        (m.content[keys.CONFIG][keys.SERVER_ROUND], grid.pid_of[m.metadata.dst_node_id])
        for m in grid.sent
        if m.metadata.message_type == FORCES
    ]


def test_params_validation_and_run_config():
    assert get_strategy("cflgt") is CFLGT
    assert CFLGTParams(preference="-3.5").preference == -3.5
    assert CFLGTParams(preference=-2).preference == -2.0
    assert CFLGTParams().preference == "silhouette" and CFLGTParams(preference="median").preference == "median"
    assert CFLGTParams(preference="midrange").preference == "midrange"
    with pytest.raises(
        ValueError,
        match=r"The 'cflgt-preference' parameter of CFLGT must be one of \('median', 'midrange', 'silhouette'\) or "
        r"a float. "
        r"Got 'mean'",
    ):
        CFLGTParams(preference="mean")
    with pytest.raises(ValueError, match="The 'cflgt-damping' parameter of CFLGT"):
        CFLGTParams(damping=1.0)
    with pytest.raises(ValueError, match="The 'cflgt-pretrain-rounds' parameter of CFLGT"):
        CFLGTParams(pretrain_rounds=-1)
    with pytest.raises(
        ValueError, match="The 'cflgt-ap-sample' parameter of CFLGT must be an int >= 0. Got -1 instead."
    ):
        CFLGTParams(ap_sample=-1)
    with pytest.raises(
        ValueError, match=r"'cflgt-pretrain-rounds' parameter of CFLGT must be an int in the range \[0, 2\]"
    ):
        Experiment.from_run_config(
            small_run_config(**{"strategy": "cflgt", "cflgt-pretrain-rounds": 3})
        ).build_strategy()


def test_pretraining_then_one_query_to_all_clients_then_true_clusters():
    strategy, grid = _run(**{"cflgt-pretrain-rounds": 2, "rounds": 4})
    assert _forces_queries(grid) == [(3, pid) for pid in range(6)]
    assert [r.phase for r in strategy.history] == ["pretrain", "pretrain", "cluster", "train"]
    assert [r.num_clusters for r in strategy.history] == [1, 1, 2, 2]
    assert strategy.history[-1].ari == 1.0
    first = strategy.history[2]
    assert first.bytes_up_signal == 6 * 2 * 10 * 4
    assert first.bytes_down_signal == 0 and strategy.history[3].bytes_up_signal == 0
    assert strategy.distance_matrix.shape == (6, 6) and strategy.distance_pids == list(range(6))
    assert strategy.exemplars.shape == (2, 10, 2)
    assert set(strategy.diagnostics) == {"hopkins", "cv-pull", "cv-push", "preference", "converged", "damping"}
    assert 0 <= strategy.diagnostics["hopkins"] <= 1
    details = strategy.run_details()
    assert details["ap-converged"] is True and details["ap-damping"] == 0.5


def test_ap_runs_on_a_sample_of_cflgt_ap_sample_clients_and_the_others_join_their_exemplar():
    strategy, _ = _run(**{"cflgt-pretrain-rounds": 2, "rounds": 4, "cflgt-ap-sample": 4})
    assert strategy.distance_matrix.shape == (4, 4) and len(strategy.distance_pids) == 4
    assert strategy.history[-1].ari == 1.0 and sorted(strategy.assignment) == list(range(6))


def test_clusters_start_from_the_pretrained_model():
    strategy, _ = _run()
    ref = strategy.reference
    for model in strategy.models:
        assert not all(np.array_equal(model[n].numpy(), ref[n].numpy()) for n in ref)
    first = _run()[0]
    assert all(np.array_equal(first.reference[n].numpy(), ref[n].numpy()) for n in ref)


def _drop_first_forces(reply: Message, server_round: int) -> Message | None:
    return None if reply.metadata.message_type == FORCES and server_round == 2 else reply


def test_a_client_without_a_trajectory_waits_in_the_largest_cluster_and_is_asked_again(caplog):
    with caplog.at_level(logging.WARNING):
        strategy, grid = _run(grid_kwargs={"faults": {4: _drop_first_forces}}, rounds=3)
    assert "no trajectory from clients [4]" in caplog.text
    assert (3, 4) in _forces_queries(grid) and not strategy.pending
    assert strategy.distance_pids == [0, 1, 2, 3, 5]
    assert strategy.history[-1].ari == 1.0


def test_newcomers_join_the_nearest_exemplar_computed_on_the_pretrained_model(tmp_path):
    strategy, grid = _run(
        rounds=3, **{"num-clients": 8, "samples-per-label": 15, "late-clients": 0.25, "late-round": 3}
    )
    late = sorted(set(range(8)) - set(strategy.distance_pids))
    assert len(late) == 2 and [q for q in _forces_queries(grid) if q[0] == 3] == [(3, p) for p in late]
    newcomer_msgs = [
        m for m in grid.sent if m.metadata.message_type == FORCES and m.content[keys.CONFIG][keys.SERVER_ROUND] == 3
    ]
    ref = strategy.reference
    assert all(np.array_equal(m.content[keys.ARRAYS][n].numpy(), ref[n].numpy()) for m in newcomer_msgs for n in ref)
    assert len(strategy.assignment) == 8 and strategy.history[-1].ari == 1.0
    paths = trajectory_figures(strategy, tmp_path)
    assert sorted(p.name for p in paths) == ["trajectories.json", "trajectories.png", "trajectory-clusters.png"]
    assert all(p.stat().st_size > 0 for p in paths)


@pytest.mark.parametrize("points", ["raw", "shares"])
def test_a_client_sending_forces_beyond_float32_is_rejected_alone(points, caplog):
    """Client 0 answers the trajectory query with float64 forces of 1e200: with raw forces its distances to
    every client would overflow to infinity and affinity propagation would refuse the whole round. Its reply
    is rejected for it alone, as a reply missing an array is: the others are clustered exactly as then, and
    the diagnostics stay finite."""

    def replace_forces(make):
        def fault(reply, server_round):
            if reply.metadata.message_type == FORCES and reply.has_content():
                sent = reply.content[keys.SIGNAL]
                reply.content[keys.SIGNAL] = ArrayRecord(make({name: a.numpy() for name, a in sent.items()}))
            return reply

        return fault

    huge = replace_forces(lambda sent: {name: Array(np.full(a.shape, 1e200)) for name, a in sent.items()})
    missing = replace_forces(lambda sent: {"pull": Array(sent["pull"])})
    malformed, _ = _run(grid_kwargs={"faults": {0: missing}}, **{"cflgt-points": points})
    with caplog.at_level("WARNING"):
        lied, _ = _run(grid_kwargs={"faults": {0: huge}}, **{"cflgt-points": points})
    assert any("client 0" in r.getMessage() and "beyond float32's range" in r.getMessage() for r in caplog.records)
    assert 0 in lied.pending and 0 not in lied.trajectories
    assert lied.assignment == malformed.assignment and len(set(lied.assignment.values())) > 1
    assert all(np.isfinite(v) for v in lied.diagnostics.values() if isinstance(v, float))
