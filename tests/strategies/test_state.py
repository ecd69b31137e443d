"""The run state: declared fields only, safe files (no pickle), clear errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from client.app import app as client_app
from common.modelstore import StoreError, read_bundle, write_bundle
from server.experiment import Experiment
from strategies import REGISTRY
from strategies.state import load_checkpoint, save_state, undeclared
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

# Settings that make every registered strategy reach its clustering within 4 rounds.
REACH = {
    "cflgt": {"cflgt-pretrain-rounds": 2},
    "flic": {"flic-cluster-round": 2},
    "flhc": {"flhc-warmup-rounds": 1},
    "cfl-sattler": {"cfl-sattler-eps1": 10.0, "cfl-sattler-eps2": 0.0},
}


def _run(name, rounds=4, **overrides):
    rc = small_run_config(strategy=name, rounds=rounds, fraction=1.0, **{**REACH.get(name, {}), **overrides})
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    strategy.start(InProcessGrid(client_app, rc, rc["num-clients"]), exp.initial_model(), expected_clients=6)
    return strategy


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_attribute_of_every_strategy_is_declared_state_or_transient(name, tmp_path):
    strategy = _run(name)
    assert undeclared(strategy) == []
    path = save_state(strategy, 4, tmp_path / "checkpoint.npz")
    back = load_checkpoint(path, name)["state"]
    assert back["assignment"] == strategy.assignment
    for ma, mb in zip(strategy.models, back["models"], strict=True):
        assert list(ma.keys()) == list(mb.keys())
        for key in ma.keys():
            np.testing.assert_array_equal(ma[key].numpy(), mb[key].numpy())


def test_an_undeclared_attribute_is_reported():
    strategy = REGISTRY["fedavg"]()
    strategy.something_new = 1
    assert undeclared(strategy) == ["something_new"]


def test_flower_arrays_are_saved_as_plain_arrays_and_memoryviews_refused(tmp_path):
    strategy = REGISTRY["fedavg"]()
    strategy.models = [ArrayRecord({"w": Array(np.arange(6, dtype=np.float32).reshape(2, 3))})]
    path = save_state(strategy, 1, tmp_path / "s.npz")
    arrays, meta = read_bundle(path)
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    np.testing.assert_array_equal(
        load_checkpoint(path, "fedavg")["state"]["models"][0]["w"].numpy(), np.arange(6).reshape(2, 3)
    )
    strategy.truth = {0: memoryview(b"ab")}
    with pytest.raises(TypeError, match=r"State field fedavg.truth\[0\] holds a memoryview"):
        save_state(strategy, 1, tmp_path / "t.npz")


def test_an_old_pickle_checkpoint_another_strategy_and_a_tampered_file_are_clear_errors(tmp_path):
    old = tmp_path / "checkpoint.pkl"
    old.write_bytes(pickle.dumps({"format": 1, "state": {}}))
    with pytest.raises(ValueError, match=r"checkpoint '.*checkpoint.pkl' must be a .npz bundle. Got a Python pickle"):
        load_checkpoint(old, "fedavg")
    path = save_state(REGISTRY["fedavg"](), 2, tmp_path / "checkpoint.npz")
    with pytest.raises(ValueError, match=r"must be written by strategy 'ifca'. Got one written by 'fedavg' instead"):
        load_checkpoint(path, "ifca")
    digest = write_bundle(tmp_path / "m.npz", {"w": np.ones(3)}, {"k": 1})
    data = bytearray((tmp_path / "m.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "m.npz").write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"must have the SHA-256 its manifest records .* changed after it was written"):
        read_bundle(tmp_path / "m.npz", sha256=digest)
    with pytest.raises(StoreError, match=r"'.*nothing.npz' must be a file. Got no such file"):
        read_bundle(tmp_path / "nothing.npz")
