"""Injected faults: reproducible, off by default, never on identity, logged once per round."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from client import faults
from client.app import app as client_app
from common.config import FaultParams
from server.experiment import Experiment
from strategies import FedAvg
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


def _run(rounds=4, **overrides):
    rc = small_run_config(rounds=rounds, fraction=1.0, **overrides)
    exp = Experiment.from_run_config(rc)
    strategy = FedAvg(exp.training)
    strategy.start(InProcessGrid(client_app, rc, 6), exp.initial_model(), expected_clients=6)
    return strategy


def test_draws_are_reproducible_and_differ_by_round_and_client():
    assert faults.fault_draws(1, 3, 2) == faults.fault_draws(1, 3, 2)
    assert faults.fault_draws(1, 3, 2) != faults.fault_draws(1, 4, 2) != faults.fault_draws(2, 3, 2)
    fails = np.mean([faults.fault_draws(0, r, p)[0] < 0.2 for r in range(50) for p in range(40)])
    assert 0.16 < fails < 0.24


def test_no_fault_by_default():
    assert not FaultParams().active
    strategy = _run(rounds=2)
    assert all(r.failures == 0 for r in strategy.history)


def test_failing_clients_are_logged_once_per_round_excluded_and_retried(caplog):
    with caplog.at_level(logging.WARNING):
        strategy = _run(rounds=4, **{"fail-fraction": 0.3})
    expected = {r: {p for p in range(6) if faults.fault_draws(1, r, p)[0] < 0.3} for r in range(1, 5)}
    assert any(expected.values()) and len(set().union(*expected.values())) < 6
    logged = {}
    for rnd, pid in re.findall(r"round (\d+) \w+: client (\d+) failed: error code 2: InjectedFault", caplog.text):
        logged.setdefault(int(rnd), []).append(int(pid))
    assert {r: sorted(p) for r, p in logged.items()} == {r: sorted(p) for r, p in expected.items() if p}
    for record in strategy.history:
        assert record.train_replies == 6 - len(expected[record.round])
    assert all(np.all(np.isfinite(a.numpy())) for a in strategy.models[0].values())
    # identity is never failed, so every client stays in the federation and is retried later
    assert sorted(strategy.clients) == list(range(6))


def test_slow_clients_sleep_the_configured_delay(monkeypatch):
    slept = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    _run(rounds=1, **{"slow-fraction": 0.99, "slow-delay": 0.25})
    assert slept and set(slept) == {0.25}


@pytest.mark.parametrize("key, value", [("fail-fraction", 1.0), ("slow-fraction", -0.1), ("slow-delay", -1.0)])
def test_bad_fault_parameters_are_refused_before_training(key, value):
    with pytest.raises(ValueError, match=f"The '{key}' parameter of the run config"):
        Experiment.from_run_config(small_run_config(**{key: value}))
