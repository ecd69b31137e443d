"""umbel's ClientApp: ``query.identity``, ``train`` and ``evaluate`` on the Message API.

Every handler works on the node's own partition (node config ``partition-id``), trains
and evaluates on its device (CUDA when present), and replies with a fixed key set.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from common import keys
from common.training import evaluate as evaluate_model
from common.training import train as train_model

from .task import task_from_context

app = ClientApp()


@app.query(keys.IDENTITY_ACTION)
def identity(msg: Message, context: Context) -> Message:
    """Partition id, split sizes, true group (scenarios only, for scoring) and device."""
    task = task_from_context(context.run_config, context.node_config)
    record = ConfigRecord({
        keys.PARTITION_ID: task.partition_id,
        keys.NUM_TRAIN: len(task.data.y_train),
        keys.NUM_TEST: len(task.data.y_test),
        keys.TRUE_GROUP: int(task.data.group),
        keys.DEVICE: str(task.device),
    })
    return Message(RecordDict({keys.IDENTITY: record}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received cluster model locally; attackers send minus their update."""
    task = task_from_context(context.run_config, context.node_config)
    cfg = msg.content[keys.CONFIG]
    sent = msg.content[keys.ARRAYS]
    model = task.model(sent)
    loss = train_model(
        model, task.data.x_train, task.data.y_train,
        epochs=int(cfg[keys.LOCAL_EPOCHS]), batch_size=int(cfg[keys.BATCH_SIZE]), lr=float(cfg[keys.LR]),
        momentum=float(cfg[keys.MOMENTUM]), weight_decay=float(cfg[keys.WEIGHT_DECAY]),
        proximal_mu=float(cfg.get(keys.PROXIMAL_MU, 0.0)), task=task.info.task,
        seed=task.round_seed(int(cfg[keys.SERVER_ROUND])), device=task.device,
    )
    arrays = ArrayRecord(model.state_dict())
    if task.data.attacker:
        arrays = _minus_update(sent, arrays)
    metrics = MetricRecord({keys.NUM_EXAMPLES: len(task.data.y_train), keys.TRAIN_LOSS: float(loss)})
    return Message(RecordDict({keys.ARRAYS: arrays, keys.METRICS: metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received cluster model on the local test split."""
    task = task_from_context(context.run_config, context.node_config)
    model = task.model(msg.content[keys.ARRAYS])
    loss, accuracy = evaluate_model(model, task.data.x_test, task.data.y_test,
                                    task=task.info.task, device=task.device)
    metrics = MetricRecord({
        keys.NUM_EXAMPLES: len(task.data.y_test), keys.LOSS: float(loss), keys.ACCURACY: float(accuracy),
    })
    return Message(RecordDict({keys.METRICS: metrics}), reply_to=msg)


def _minus_update(sent: ArrayRecord, trained: ArrayRecord) -> ArrayRecord:
    """``w0 - (w1 - w0)``: the FLIC attack's model, whose update is minus the true one."""
    out = {}
    for name, arr in trained.items():
        w1, w0 = arr.numpy(), sent[name].numpy()
        out[name] = Array((2 * w0 - w1).astype(w1.dtype) if np.issubdtype(w1.dtype, np.floating) else w1)
    return ArrayRecord(out)
