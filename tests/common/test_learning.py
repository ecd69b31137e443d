"""The not-learning warning: the first rounds' mean training loss against chance level (ln C)."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from client.app import app as client_app
from common.config import TrainingParams
from common.learning import CHANCE_ROUNDS, CHANCE_TOLERANCE, ChanceLossCheck, observe_train_loss
from server.experiment import Experiment
from server.results import RunRecorder
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


def _model(classes: int) -> ArrayRecord:
    return ArrayRecord({"head.weight": Array(np.zeros((classes, 4), np.float32))})


@pytest.mark.parametrize("classes", [2, 10])
def test_a_loss_at_chance_for_the_window_warns_once_naming_the_keys(classes, caplog):
    training = TrainingParams(rounds=30, lr=0.001, local_epochs=1, batch_size=32, fraction=0.2)
    check = None
    with caplog.at_level(logging.WARNING, logger="flwr"):
        for rnd in range(1, 11):
            check = observe_train_loss(check, training, _model(classes), "head.weight", rnd, math.log(classes) * 0.99)
    warned = [r.getMessage() for r in caplog.records if "not learning" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(f"round {CHANCE_ROUNDS}:")
    for key in ("lr 0.001", "local-epochs 1", "batch-size 32", "fraction 0.2", f"ln {classes} ="):
        assert key in warned[0]
    assert check is not None and check.to_summary()["warning"] == check.warning
    assert len(check.to_summary()["train-losses"]) == CHANCE_ROUNDS


def test_a_loss_that_leaves_chance_in_any_window_round_does_not_warn():
    check = ChanceLossCheck(10, 100)
    chance = math.log(10)
    losses = [chance, chance, chance * (1 - CHANCE_TOLERANCE) - 0.01, chance, chance]
    assert [check.observe(r, loss) for r, loss in enumerate(losses, 1)] == [None] * 5
    assert check.warning is None and check.judged
    assert check.observe(6, chance) is None  # judged once, at the window's end


def test_a_diverging_loss_also_warns_and_a_short_run_is_judged_on_its_rounds():
    check = ChanceLossCheck(10, rounds=2)
    assert check.observe(1, 5.0) is None
    assert check.observe(2, float("nan")) is not None  # above chance, then not finite


def test_rounds_without_a_loss_are_skipped_and_a_model_without_a_head_is_not_judged():
    check = ChanceLossCheck(10, 100)
    assert check.observe(1, None) is None and check.losses == []
    headless = observe_train_loss(None, TrainingParams(), ArrayRecord(), "head.weight", 1, 9.0)
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
    """`umbel run` defaults (CFLGT, Fashion-MNIST label groups, lr 0.001, momentum 0.9, 5 epochs of 32),
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
