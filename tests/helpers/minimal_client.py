"""A user's own ClientApp that serves umbel's update-only strategies without importing umbel.

It follows docs/protocol.md and nothing else: Flower, torch and scikit-learn's digits only.
Partition ``i`` of ``n`` holds the digits rows ``i, i + n, i + 2n, ...`` (its last fifth is the
test split); the model mirrors the server's ``--model dnn`` on digits (same state-dict keys).
``build_app(train_loss_key=...)`` makes the broken variant that names its loss ``train_loss``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
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
from sklearn.datasets import load_digits
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(64, 200), nn.ReLU())
        self.head = nn.Linear(200, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@lru_cache(maxsize=64)
def _split(partition: int, partitions: int) -> tuple[torch.Tensor, ...]:
    x, y = load_digits(return_X_y=True)
    rows = np.arange(partition, len(y), partitions)
    cut = int(0.8 * len(rows))
    xs = torch.tensor(x[rows] / 16.0, dtype=torch.float32)
    ys = torch.tensor(y[rows], dtype=torch.int64)
    return xs[:cut], ys[:cut], xs[cut:], ys[cut:]


def _data(context: Context) -> tuple[torch.Tensor, ...]:
    return _split(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))


def _model(record: ArrayRecord) -> Net:
    net = Net()
    net.load_state_dict(record.to_torch_state_dict(), strict=True)
    return net


def _train(net: Net, x: torch.Tensor, y: torch.Tensor, config: ConfigRecord) -> float:
    opt = torch.optim.SGD(net.parameters(), lr=float(config["lr"]), momentum=float(config["momentum"]))
    batch, losses = int(config["batch-size"]), []
    net.train()
    for _ in range(int(config["local-epochs"])):
        for start in range(0, len(y), batch):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[start : start + batch]), y[start : start + batch])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return float(np.mean(losses))


def build_app(train_loss_key: str = "train-loss") -> ClientApp:
    app = ClientApp()

    @app.query("identity")
    def identity(msg: Message, context: Context) -> Message:
        x_train, _, x_test, _ = _data(context)
        record = ConfigRecord(
            {
                "partition-id": int(context.node_config["partition-id"]),
                "num-train": len(x_train),
                "num-test": len(x_test),
                "true-group": -1,
            }
        )
        return Message(RecordDict({"identity": record}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        x_train, y_train, _, _ = _data(context)
        net = _model(msg.content["arrays"])
        loss = _train(net, x_train, y_train, msg.content["config"])
        metrics = MetricRecord({"num-examples": len(y_train), train_loss_key: loss})
        return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        _, _, x_test, y_test = _data(context)
        net = _model(msg.content["arrays"]).eval()
        with torch.no_grad():
            logits = net(x_test)
        metrics = MetricRecord(
            {
                "num-examples": len(y_test),
                "loss": float(nn.functional.cross_entropy(logits, y_test)),
                "accuracy": float((logits.argmax(1) == y_test).float().mean()),
            }
        )
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    @app.query("update")
    def update(msg: Message, context: Context) -> Message:
        x_train, y_train, _, _ = _data(context)
        sent = msg.content["arrays"]
        net = _model(sent)
        _train(net, x_train, y_train, msg.content["config"])
        trained = net.state_dict()
        delta = np.concatenate(
            [
                (trained[name].numpy() - arr.numpy()).ravel().astype(np.float32)
                for name, arr in sent.items()
                if np.issubdtype(arr.numpy().dtype, np.floating)
            ]
        )
        return Message(RecordDict({"signal": ArrayRecord({"delta": Array(delta)})}), reply_to=msg)

    return app


app = build_app()
