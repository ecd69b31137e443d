"""umbel's ClientApp: ``query.identity``, ``train``, ``evaluate`` and the signal queries.

Every handler works on the node's own partition (node config ``partition-id``), trains
and evaluates on its device (CUDA when present), and replies with a fixed key set. Each
clustering signal is a ``query.<action>`` whose handler lives in ``client.signals``; its
reply carries only the signal's arrays, in the ``signal`` record.
"""

from __future__ import annotations

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from common import keys
from common.sources import class_counts
from common.training import evaluate as evaluate_model

from .faults import inject_faults, skip_expired
from .model_out import write_model_out
from .signals import QUERIES, Handler, models_in
from .task import ClientTask, task_from_context, train_as_configured

app = ClientApp(mods=[skip_expired, inject_faults])


@app.query(keys.IDENTITY_ACTION)
def identity(msg: Message, context: Context) -> Message:
    """Partition id, split sizes, train class counts, true group (scenarios only, for scoring) and device."""
    task = task_from_context(context.run_config, context.node_config)
    record = ConfigRecord(
        {
            keys.PARTITION_ID: task.partition_id,
            keys.NUM_TRAIN: len(task.data.y_train),
            keys.NUM_TEST: len(task.data.y_test),
            keys.NUM_VAL: 0 if task.data.y_val is None else len(task.data.y_val),
            keys.CLASS_COUNTS: class_counts(task.data.y_train, task.info.num_classes),
            keys.TRUE_GROUP: int(task.data.group),
            keys.DEVICE: str(task.device),
        }
    )
    return Message(RecordDict({keys.IDENTITY: record}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received cluster model locally; attackers send minus their update.

    A message that says ``num-models`` (IFCA) carries that many models: the client trains
    the one with the lowest loss on its TRAIN split and reports its index as ``cluster-id``.
    One whose config holds ``cluster-steps`` > 0 (FeSEM's seeding round) trains that many
    mini-batches instead of ``local-epochs`` epochs.
    """
    task = task_from_context(context.run_config, context.node_config)
    models = models_in(msg.content)
    cfg = msg.content.config_records[keys.CONFIG]
    choice = _lowest_train_loss(task, models) if keys.NUM_MODELS in cfg else None
    sent = models[choice or 0]
    model, loss = train_as_configured(task, sent, cfg)
    arrays = ArrayRecord(model.state_dict())
    if task.data.attacker:
        arrays = _minus_update(sent, arrays)
    metrics = MetricRecord({keys.NUM_EXAMPLES: len(task.data.y_train), keys.TRAIN_LOSS: float(loss)})
    if choice is not None:
        metrics[keys.CLUSTER_ID] = choice
    return Message(RecordDict({keys.ARRAYS: arrays, keys.METRICS: metrics}), reply_to=msg)


def _lowest_train_loss(task: ClientTask, models: list[ArrayRecord]) -> int:
    """Index of the model with the lowest loss on the client's TRAIN split (first on ties)."""
    if len(models) == 1:
        return 0
    losses = [
        evaluate_model(task.model(m), task.data.x_train, task.data.y_train, task=task.info.task, device=task.device)[0]
        for m in models
    ]
    return int(np.argmin(losses))


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received cluster model on the local test split."""
    task = task_from_context(context.run_config, context.node_config)
    model = task.model(msg.content.array_records[keys.ARRAYS])
    loss, accuracy = evaluate_model(model, task.data.x_test, task.data.y_test, task=task.info.task, device=task.device)
    metrics = MetricRecord(
        {
            keys.NUM_EXAMPLES: len(task.data.y_test),
            keys.LOSS: float(loss),
            keys.ACCURACY: float(accuracy),
        }
    )
    return Message(RecordDict({keys.METRICS: metrics}), reply_to=msg)


@app.query(keys.MODEL_ACTION)
def final_model(msg: Message, context: Context) -> Message:
    """The run's end: write this client's cluster model to node config ``model-out`` (if set)."""
    written = write_model_out(msg.content, context.node_config)
    return Message(RecordDict({keys.METRICS: MetricRecord({keys.MODEL_WRITTEN: int(written)})}), reply_to=msg)


def _signal_handler(action: str, handler: Handler) -> None:
    def answer(msg: Message, context: Context) -> Message:
        task = task_from_context(context.run_config, context.node_config)
        arrays = handler(task, msg.content)
        return Message(RecordDict({keys.SIGNAL: ArrayRecord({k: Array(v) for k, v in arrays.items()})}), reply_to=msg)

    answer.__name__ = answer.__qualname__ = f"query_{action.replace('-', '_')}"
    answer.__doc__ = handler.__doc__
    app.query(action)(answer)


for _action, _handler in QUERIES.items():
    _signal_handler(_action, _handler)


def _minus_update(sent: ArrayRecord, trained: ArrayRecord) -> ArrayRecord:
    """``w0 - (w1 - w0)``: the FLIC attack's model, whose update is minus the true one."""
    out = {}
    for name, arr in trained.items():
        w1, w0 = arr.numpy(), sent[name].numpy()
        out[name] = Array((2 * w0 - w1).astype(w1.dtype) if np.issubdtype(w1.dtype, np.floating) else w1)
    return ArrayRecord(out)
