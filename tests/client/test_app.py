"""The ClientApp's handlers, called as Flower calls them."""

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from client.app import app
from common import keys
from server.experiment import Experiment
from tests.helpers import small_run_config


def _call(message_type, content, rc, pid=0):
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    msg = Message(content, dst_node_id=7, message_type=message_type)
    msg.metadata.__dict__["_message_id"] = "m1"
    ctx = Context(
        run_id=1, node_id=7, node_config={"partition-id": pid, "num-partitions": 6}, state=RecordDict(), run_config=rc
    )
    reply = app(msg, ctx)
    assert reply.metadata.reply_to_message_id == "m1"
    return reply.content


def _train_content(rc):
    exp = Experiment.from_run_config(rc)
    cfg = ConfigRecord(
        {
            keys.SERVER_ROUND: 1,
            keys.CLUSTER_ID: 0,
            keys.LOCAL_EPOCHS: 1,
            keys.BATCH_SIZE: 8,
            keys.LR: 0.05,
            keys.MOMENTUM: 0.0,
            keys.WEIGHT_DECAY: 0.0,
        }
    )
    return exp.initial_model(), RecordDict({keys.ARRAYS: exp.initial_model(), keys.CONFIG: cfg})


def test_identity_reports_partition_sizes_and_group():
    rc = small_run_config()
    ident = _call(keys.MSG_IDENTITY, RecordDict({keys.CONFIG: ConfigRecord({})}), rc, pid=3)[keys.IDENTITY]
    assert ident[keys.PARTITION_ID] == 3
    assert ident[keys.NUM_TRAIN] == rc["labels-per-group"] * rc["samples-per-label"]
    assert ident[keys.TRUE_GROUP] in (0, 1) and ident[keys.DEVICE] == "cpu"


def test_train_reply_has_the_models_keys_and_fixed_metrics():
    rc = small_run_config()
    initial, content = _train_content(rc)
    reply = _call("train", content, rc)
    assert list(reply[keys.ARRAYS].keys()) == list(initial.keys())
    assert set(reply[keys.METRICS].keys()) == set(keys.TRAIN_METRIC_KEYS)
    assert reply[keys.METRICS][keys.NUM_EXAMPLES] == rc["labels-per-group"] * rc["samples-per-label"]
    changed = not np.array_equal(reply[keys.ARRAYS]["head.weight"].numpy(), initial["head.weight"].numpy())
    assert changed


def test_attacker_sends_minus_its_update():
    rc = small_run_config(scenario="attack", attackers=6, **{"samples-per-client": 30})
    initial, content = _train_content(rc)
    honest_rc = small_run_config(scenario="attack", attackers=0, **{"samples-per-client": 30})
    honest = _call("train", _train_content(honest_rc)[1], honest_rc)[keys.ARRAYS]
    attack = _call("train", content, rc)[keys.ARRAYS]
    for name in initial.keys():
        w0 = initial[name].numpy()
        np.testing.assert_allclose(attack[name].numpy() - w0, -(honest[name].numpy() - w0), atol=1e-5)


def test_evaluate_reply_has_fixed_metrics():
    rc = small_run_config()
    initial, _ = _train_content(rc)
    reply = _call("evaluate", RecordDict({keys.ARRAYS: initial, keys.CONFIG: ConfigRecord({})}), rc)
    metrics = reply[keys.METRICS]
    assert set(metrics.keys()) == set(keys.EVAL_METRIC_KEYS)
    assert 0.0 <= metrics[keys.ACCURACY] <= 1.0 and metrics[keys.LOSS] > 0


def test_a_train_message_with_cluster_steps_trains_that_many_mini_batches_not_the_epochs():
    """FeSEM's seeding round: ``cluster-steps`` > 0 in a train config trains exactly that many
    seeded mini-batches (``train_steps``, as the signal queries do), 0 or absent the local epochs."""
    from client.task import task_from_context, train_local, train_steps

    rc = small_run_config()
    initial, content = _train_content(rc)
    task = task_from_context(rc, {"partition-id": 0, "num-partitions": 6})
    cfg = content[keys.CONFIG]
    head = "head.weight"
    model, epochs_loss = train_local(task, initial, cfg)
    by_epochs = model.state_dict()[head].numpy().copy()
    model, steps_loss = train_steps(task, initial, cfg, 3)
    by_steps = model.state_dict()[head].numpy().copy()
    assert not np.allclose(by_epochs, by_steps) and steps_loss != epochs_loss
    cfg[keys.CLUSTER_STEPS] = 3
    reply = _call("train", content, rc)
    np.testing.assert_array_equal(reply[keys.ARRAYS][head].numpy(), by_steps)
    assert reply[keys.METRICS][keys.TRAIN_LOSS] == steps_loss  # the mean loss of the 3 mini-batches
    cfg[keys.CLUSTER_STEPS] = 0
    reply = _call("train", content, rc)
    np.testing.assert_array_equal(reply[keys.ARRAYS][head].numpy(), by_epochs)
    assert reply[keys.METRICS][keys.TRAIN_LOSS] == epochs_loss
