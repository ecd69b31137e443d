"""Checkpoint/resume: 6 rounds straight equal 3 rounds + resume for 3 more."""

from __future__ import annotations

import numpy as np
import pytest

from client.app import app as client_app
from server.experiment import Experiment
from strategies import REGISTRY
from strategies.state import load_checkpoint, save_state
from tests.helpers import small_run_config
from tests.helpers.doubles import ByTrueGroup
from server.inprocess import InProcessGrid

TIMING = ("round-seconds", "clustering-seconds")


def _run(strategy_cls, rounds, tmp_path=None, resume=None, every=0, **overrides):
    rc = small_run_config(rounds=rounds, **overrides)
    exp = Experiment.from_run_config(rc)
    strategy = strategy_cls(exp.training, exp.strategy_params if strategy_cls.name == exp.strategy else None)
    if every:
        strategy.checkpoint_to(tmp_path / "checkpoint.npz", every)
    if resume is not None:
        strategy.resume(load_checkpoint(resume, strategy_cls.name))
    strategy.start(
        InProcessGrid(client_app, rc, rc["num-clients"]), exp.initial_model(), expected_clients=rc["num-clients"]
    )
    return strategy


def _same_run(a, b):
    assert a.assignment == b.assignment
    assert len(a.models) == len(b.models)
    for ma, mb in zip(a.models, b.models, strict=True):
        for name in ma.keys():
            np.testing.assert_allclose(ma[name].numpy(), mb[name].numpy(), rtol=1e-5, atol=1e-6)
    strip = [{k: v for k, v in r.to_dict().items() if k not in TIMING} for r in a.history]
    assert strip == [{k: v for k, v in r.to_dict().items() if k not in TIMING} for r in b.history]


# One strategy of each family, with settings that make it cluster before or around round 3.
FAMILIES = {
    "fedavg": {},
    "local": {},
    "fedclust": {"num-clusters": 2},  # one-shot
    "cflgt": {"cflgt-pretrain-rounds": 2},  # trajectories
    "flic": {"flic-cluster-round": 3},  # update similarity
    "cfl-gp": {"num-clusters": 2},  # K models with profiles
    "ifca": {"num-clusters": 2},  # K models by loss
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_three_rounds_plus_resume_equal_six_straight(name, tmp_path):
    strategy_cls, settings = REGISTRY[name], {"strategy": name, **FAMILIES[name]}
    straight = _run(strategy_cls, 6, **settings)
    first = _run(strategy_cls, 3, tmp_path, every=3, **settings)
    assert load_checkpoint(tmp_path / "checkpoint.npz", strategy_cls.name)["round"] == 3
    resumed = _run(strategy_cls, 6, resume=tmp_path / "checkpoint.npz", **settings)
    assert [r.round for r in resumed.history] == list(range(1, 7))
    _same_run(straight, resumed)
    assert len(first.history) == 3


class Crash(Exception):
    pass


def test_a_crashed_run_resumes_from_its_last_checkpoint_with_late_clients_still_waiting(tmp_path):
    late = {"late-clients": 0.34, "late-round": 5}
    straight = _run(ByTrueGroup, 6, **late)
    rc = small_run_config(rounds=6, **late)
    exp = Experiment.from_run_config(rc)
    crashing = ByTrueGroup(exp.training)
    crashing.checkpoint_to(tmp_path / "checkpoint.npz", 1)

    def crash_in_round_3(strategy, record):
        if record.round == 3:
            raise Crash

    crashing.on_round = crash_in_round_3
    with pytest.raises(Crash):
        crashing.start(InProcessGrid(client_app, rc, 6), exp.initial_model(), expected_clients=6)
    saved = load_checkpoint(tmp_path / "checkpoint.npz", ByTrueGroup.name)
    assert saved["round"] == 2 and len(saved["state"]["waiting"]) == 2
    resumed = _run(ByTrueGroup, 6, resume=tmp_path / "checkpoint.npz", **late)
    _same_run(straight, resumed)


def test_checkpoint_is_written_atomically_and_checked_on_load(tmp_path):
    strategy = _run(REGISTRY["fedavg"], 1)
    path = save_state(strategy, 1, tmp_path / "ck.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.npz"]
    assert "grid" not in load_checkpoint(path, "fedavg")["state"]
    with pytest.raises(ValueError, match="must be written by strategy 'local'. Got one written by 'fedavg' instead"):
        load_checkpoint(path, "local")
    with pytest.raises(ValueError, match=r"'resume-from' parameter .* \(no such file\)"):
        load_checkpoint(tmp_path / "missing.npz", "fedavg")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="must be a .npz bundle. Got an unreadable file instead"):
        load_checkpoint(tmp_path / "junk.npz", "fedavg")


def test_resume_refuses_a_federation_missing_a_checkpointed_partition(tmp_path):
    _run(REGISTRY["fedavg"], 2, tmp_path, every=2)
    with pytest.raises(RuntimeError, match=r"partitions \[5\] of the checkpoint have no node"):
        rc = small_run_config(rounds=4)
        exp = Experiment.from_run_config(rc)
        strategy = REGISTRY["fedavg"](exp.training)
        strategy.resume(load_checkpoint(tmp_path / "checkpoint.npz", "fedavg"))
        strategy.start(InProcessGrid(client_app, rc, 5), exp.initial_model(), expected_clients=5)


def test_flics_summed_store_resumes_with_each_clients_sum(tmp_path):
    """FLIC's default graph sums each client's updates (unit rows and their lengths): after 3 rounds,
    a checkpoint and 2 more, the store holds the same sums as 5 straight rounds (before any clustering,
    so a lost length would show here, not only in a later partition)."""
    from strategies.flic import SUMMED

    settings = {"strategy": "flic", "flic-cluster-round": 6, "fraction": 0.5}
    straight = _run(REGISTRY["flic"], 5, **settings)
    _run(REGISTRY["flic"], 3, tmp_path, every=3, **settings)
    resumed = _run(REGISTRY["flic"], 5, resume=tmp_path / "checkpoint.npz", **settings)
    assert straight.params.graph == SUMMED and straight.num_clusters == 1
    a, b = straight.similarity, resumed.similarity
    assert a is not None and b is not None and a.pids == b.pids and len(a.pids) > 1
    np.testing.assert_allclose(a.matrix(), b.matrix(), atol=1e-6)
    np.testing.assert_allclose(a._norms, b._norms, rtol=1e-5)
