"""A client whose own training outlasts the round timeout stops at its deadline (issue 33 item 3):
its worker is free for the next round, so it costs only its own reply."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from client.app import app
from client.deadline import current_deadline
from common import keys
from common.models import build_model
from common.training import DeadlineExceeded, train
from server.experiment import Experiment
from tests.helpers import small_run_config


def _data(n=64):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, size=n)


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_training_past_its_deadline_stops_before_the_next_step_and_keeps_the_steps_made():
    x, y = _data()
    model = build_model("dnn", (1, 8, 8), 10, seed=0)
    before = _weights(model)
    with pytest.raises(DeadlineExceeded, match=r"training stopped after 0 of 16 steps: its deadline passed"):
        train(model, x, y, epochs=2, batch_size=8, lr=0.1, deadline=time.time() - 1.0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_deadline_that_is_not_reached_changes_nothing():
    x, y = _data()
    runs = []
    for deadline in (None, time.time() + 3600.0):
        model = build_model("dnn", (1, 8, 8), 10, seed=0)
        loss = train(model, x, y, epochs=2, batch_size=8, lr=0.1, seed=3, deadline=deadline)
        runs.append((loss, _weights(model)))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(runs[0][1][k], runs[1][1][k]) for k in runs[0][1])


def _train_message(rc, ttl):
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    exp = Experiment.from_run_config(rc)
    cfg = ConfigRecord({keys.SERVER_ROUND: 1, keys.CLUSTER_ID: 0, **exp.training.local_config()})
    msg = Message(
        RecordDict({keys.ARRAYS: exp.initial_model(), keys.CONFIG: cfg}), dst_node_id=7, message_type="train", ttl=ttl
    )
    msg.metadata.__dict__["_message_id"] = "m1"
    ctx = Context(
        run_id=1, node_id=7, node_config={"partition-id": 0, "num-partitions": 6}, state=RecordDict(), run_config=rc
    )
    return msg, ctx


def test_the_clientapp_gives_up_a_training_that_outlasts_the_messages_time_to_live():
    rc = small_run_config(**{"local-epochs": 500, "batch-size": 1})  # 20,000 steps: several seconds at least
    msg, ctx = _train_message(rc, ttl=1.0)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"training stopped after \d+ of 20000 steps"):
        app(msg, ctx)
    assert time.monotonic() - started < 30  # the deadline plus one step
    assert current_deadline() is None  # the deadline is the handler's only


def test_a_training_within_its_time_to_live_answers():
    rc = small_run_config(**{"local-epochs": 1})
    msg, ctx = _train_message(rc, ttl=600.0)
    reply = app(msg, ctx)
    assert not reply.has_error() and keys.ARRAYS in reply.content.array_records
