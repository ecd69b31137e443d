"""A ClientApp written from docs/protocol.md alone (tests/helpers/minimal_client.py) serves umbel's
update-only strategies; a client that breaks the protocol stops the run with the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from server.experiment import Experiment
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid
from tests.helpers.minimal_client import app as minimal_app
from tests.helpers.minimal_client import build_app

UPDATE_ONLY = [
    ("fedavg", {}),
    ("flic", {"flic-cluster-round": 2}),
    ("cfl-sattler", {"cfl-sattler-split-after": 1, "cfl-sattler-eps1": 100.0, "cfl-sattler-eps2": 1e-6}),
    ("flhc", {"flhc-warmup-rounds": 1, "num-clusters": 2}),
]


def _start(app: ClientApp, strategy: str, rounds: int = 3, **overrides):
    rc = small_run_config(strategy=strategy, rounds=rounds, fraction=1.0, **overrides)
    exp = Experiment.from_run_config(rc)
    s = exp.build_strategy()
    s.start(InProcessGrid(app, rc, 6), exp.initial_model(), expected_clients=6)
    return s


def test_the_minimal_client_imports_nothing_of_umbel():
    code = (
        "import sys; import tests.helpers.minimal_client; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'common', 'client', 'strategies', 'server'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("strategy, overrides", UPDATE_ONLY, ids=[s for s, _ in UPDATE_ONLY])
def test_own_client_serves_update_only_strategies(strategy, overrides):
    s = _start(minimal_app, strategy, **overrides)
    assert [r.train_replies for r in s.history] == [6, 6, 6]
    assert all(r.rejected == 0 and r.failures == 0 for r in s.history)
    assert s.history[-1].accuracy > 0.3
    if strategy in ("flic", "flhc"):
        assert s.num_clusters >= 2  # clustered on the client's updates


def test_a_client_without_identity_handler_is_told_what_is_missing():
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:  # Flower's quickstart has train and evaluate only
        raise AssertionError("never reached")

    with pytest.raises(RuntimeError, match=r"@app.query\('identity'\) handler.*docs/protocol.md"):
        _start(app, "fedavg", rounds=1)


def test_a_run_whose_every_reply_is_rejected_stops_with_the_reason():
    with pytest.raises(
        RuntimeError,
        match=r"no train reply was usable in 3 consecutive rounds.*"
        r"metric 'train-loss' is missing \(the reply has \['num-examples', "
        r"'train_loss'\]\)",
    ):
        _start(build_app(train_loss_key="train_loss"), "fedavg", rounds=5)


def test_a_short_run_that_never_accepts_a_reply_stops_too():
    with pytest.raises(RuntimeError, match="no train reply was usable in 2 consecutive rounds"):
        _start(build_app(train_loss_key="train_loss"), "fedavg", rounds=2)


def test_stopping_can_be_turned_off():
    s = _start(build_app(train_loss_key="train_loss"), "fedavg", rounds=2, **{"max-rejected-rounds": 0})
    assert [r.train_replies for r in s.history] == [0, 0]
