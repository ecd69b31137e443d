"""The not-learning warning: the mean training loss against chance level (ln C) once the clients have trained."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from client.app import app as client_app
from common.config import TrainingParams
from common.learning import (
    CHANCE_EPOCHS,
    CHANCE_LAST_ROUNDS,
    CHANCE_TOLERANCE,
    CHANCE_TREND,
    ChanceLossCheck,
    observe_train_loss,
)
from server.experiment import Experiment
from server.results import RunRecorder
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


def _model(classes: int) -> ArrayRecord:
    return ArrayRecord({"head.weight": Array(np.zeros((classes, 4), np.float32))})


@pytest.mark.parametrize("classes", [2, 10])
def test_a_loss_at_chance_once_clients_trained_enough_warns_once_naming_the_keys(classes, caplog):
    """15 clients, 3 a round, 1 local epoch: 0.2 epochs per client a round, judged at round 15."""
    training = TrainingParams(rounds=30, lr=0.001, local_epochs=1, batch_size=32, fraction=0.2)
    check = None
    with caplog.at_level(logging.WARNING, logger="flwr"):
        for rnd in range(1, 31):
            loss = math.log(classes) * 0.99
            check = observe_train_loss(check, training, _model(classes), "head.weight", rnd, loss, 3, 15)
    warned = [r.getMessage() for r in caplog.records if "not learning" in r.getMessage()]
    rounds = round(CHANCE_EPOCHS * 15 / 3)
    assert len(warned) == 1 and warned[0].startswith(f"round {rounds}:")
    for key in ("lr 0.001", "local-epochs 1", "batch-size 32", "fraction 0.2", f"ln {classes} =", "3.0 local epochs"):
        assert key in warned[0]
    assert check is not None and check.to_summary()["warning"] == check.warning
    assert len(check.to_summary()["train-losses"]) == rounds and check.to_summary()["judged"]


def test_the_window_counts_local_epochs_and_replies():
    """The main job: 20 of 100 clients x 5 local epochs = 1 epoch per client a round, judged at round 3."""
    check = ChanceLossCheck(10, rounds=100, num_clients=100, local_epochs=5)
    assert [check.observe(r, math.log(10), replies=20) is not None for r in (1, 2, 3)] == [False, False, True]
    fewer = ChanceLossCheck(10, rounds=100, num_clients=100, local_epochs=5)
    said = [fewer.observe(r, math.log(10), replies=10) is not None for r in range(1, 9)]
    assert said == [False] * 5 + [True, False, False]  # 10 replies a round: half the training, twice the rounds
    assert len(fewer.losses) == 6


def test_a_loss_at_chance_in_the_first_rounds_that_then_learns_does_not_warn():
    """Issue 29's lr 0.01 run: at chance while each client had trained about once, learning later."""
    check = ChanceLossCheck(10, rounds=30, num_clients=15, local_epochs=1)
    chance = math.log(10)
    losses = [chance] * 10 + [chance * (1 - CHANCE_TOLERANCE) - 0.05] * 5
    assert all(check.observe(r, loss, replies=3) is None for r, loss in enumerate(losses, 1))
    assert check.judged and check.warning is None
    assert check.observe(16, chance, replies=3) is None  # judged once, at the window's end


def test_a_loss_near_chance_that_falls_over_the_window_does_not_warn_and_a_flat_one_does():
    """Issue 29's tabular clients at lr 0.01 and 1 local epoch: 2.33 to 2.22 by round 15, learning later."""
    chance = math.log(10)
    for fall, warns in ((CHANCE_TREND + 0.01, False), (CHANCE_TREND - 0.01, True)):
        check = ChanceLossCheck(10, rounds=30, num_clients=15, local_epochs=1)
        losses = [chance * (1.01 - fall * r / 14) for r in range(15)]  # all within CHANCE_TOLERANCE of chance
        said = [check.observe(r, loss, replies=3) for r, loss in enumerate(losses, 1)]
        assert said[:-1] == [None] * 14 and (said[-1] is not None) == warns, (fall, check.ends())


def test_a_loss_that_left_chance_but_is_back_there_at_the_window_end_warns():
    check = ChanceLossCheck(10, rounds=30, num_clients=15, local_epochs=1)
    chance = math.log(10)
    losses = [chance * 0.5] * 12 + [chance] * CHANCE_LAST_ROUNDS
    said = [check.observe(r, loss, replies=3) for r, loss in enumerate(losses, 1)]
    assert said[:-1] == [None] * 14 and said[-1] is not None


def test_a_diverging_loss_also_warns_and_a_short_run_is_judged_at_its_last_round():
    check = ChanceLossCheck(10, rounds=2, num_clients=15, local_epochs=1)
    assert check.observe(1, 5.0, replies=3) is None
    assert check.observe(2, float("nan"), replies=3) is not None  # above chance, then not finite
    assert check.client_epochs < CHANCE_EPOCHS


def test_rounds_without_a_loss_are_skipped_and_a_model_without_a_head_is_not_judged():
    check = ChanceLossCheck(10, 100, num_clients=15)
    assert check.observe(1, None) is None and check.observe(2, 2.3, replies=0) is None
    assert check.losses == [] and check.client_epochs == 0.0
    headless = observe_train_loss(None, TrainingParams(), ArrayRecord(), "head.weight", 1, 9.0, 20, 100)
    assert headless.num_classes == 0 and headless.warning is None and headless.losses == []


def _run(tmp_path, **overrides):
    rc = small_run_config(**{"results-dir": str(tmp_path), "run-name": "r", **overrides})
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    strategy.start(
        InProcessGrid(client_app, rc, rc["num-clients"]), exp.initial_model(), expected_clients=rc["num-clients"]
    )
    RunRecorder(tmp_path / "r", rc).finish(strategy)
    return strategy, json.loads((tmp_path / "r" / "summary.json").read_text())


@pytest.mark.slow
def test_a_run_with_lr_0_warns_and_says_so_in_the_summary(tmp_path, caplog):
    """lr 0 itself is refused before training ('lr' must be > 0): 1e-12 is the same run."""
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy, summary = _run(tmp_path, lr=1e-12, momentum=0.0, rounds=3)
    assert strategy.learning is not None and strategy.learning.warning is not None
    assert any("not learning" in r.getMessage() and "lr 1e-12" in r.getMessage() for r in caplog.records)
    assert summary["not-learning"]["warning"] == strategy.learning.warning
    assert len(summary["not-learning"]["train-losses"]) == 3


@pytest.mark.slow
def test_the_main_jobs_training_settings_do_not_warn(tmp_path, caplog):
    """`umbel run` defaults (CFLGT, Fashion-MNIST label groups, 5 epochs of 32, 20% of the clients a round),
    on 10 of its 100 clients for its first 5 rounds (all FedAvg pre-training, as in the main job)."""
    pytest.importorskip("torchvision")
    from strategies.schema import defaults

    main = defaults()
    rc = {
        **main,
        "num-clients": 10,
        "rounds": 5,
        "cflgt-pretrain-rounds": 4,
        "eval-every": 5,
        "results-dir": str(tmp_path),
        "run-name": "r",
    }
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.start(InProcessGrid(client_app, rc, 10), exp.initial_model(), expected_clients=10)
    assert strategy.learning is not None and strategy.learning.judged
    assert strategy.learning.warning is None, strategy.learning.losses
    assert not any("not learning" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_the_default_training_learns_on_a_small_tabular_own_data_federation(tmp_path, caplog):
    """Issue 29's case: FLIC on a user's npz (64 features, the dnn MLP), 15 clients of about 100 samples in
    5 label groups, 1 local epoch, 20% of the clients a round: judged at round 15 with the default lr."""
    from sklearn.datasets import load_digits

    from server.cli import PROJECT_ROOT, load_defaults

    digits = load_digits()
    path = tmp_path / "tabular.npz"
    np.savez(path, x=(digits.data / 16.0).astype(np.float32), y=digits.target.astype(np.int64))
    rc = load_defaults(PROJECT_ROOT)
    rc.update({"strategy": "flic", "dataset": f"npz:{path}", "model": "dnn", "num-clients": 15, "groups": 5})
    rc.update({"seed": 3, "rounds": 15, "local-epochs": 1, "eval-every": 15})
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.start(InProcessGrid(client_app, rc, 15), exp.initial_model(), expected_clients=15)
    check = strategy.learning
    assert check is not None and check.judged and check.losses[-1][0] == 15
    assert check.warning is None, check.losses
    assert not any("not learning" in r.getMessage() for r in caplog.records)
