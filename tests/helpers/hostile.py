"""A hostile ClientApp: umbel's client, except that chosen partitions corrupt their replies.

``hostile_app({partition_id: fault})`` answers every message with umbel's ClientApp and then
breaks the reply of the named partitions. Faults (each a real Flower message on the wire):

- ``"garbage"``: seven garbage bytes under the right dtype and shape labels (train and signals);
- ``"other-shape"``: the ``.npy`` bytes of an array of another shape under the right labels;
- ``"float64"``: float64 data labelled float32 (the label says what the model holds);
- ``"inflated"``: claims a train set of 10^9 examples and sends a constant model;
- ``"duplicate-id"``: claims partition 0 in its identity.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, Context, Message
from flwr.clientapp import ClientApp

from client.app import app as umbel_app
from client.faults import corrupt_record
from client.signals import QUERIES
from common import keys

INFLATED = 10**9
FAULTS = ("garbage", "other-shape", "float64", "inflated", "duplicate-id")


def _corrupt(reply: Message, fault: str) -> Message:
    if reply.has_error():
        return reply
    content = reply.content
    kind = reply.metadata.message_type
    if kind == keys.MSG_IDENTITY:
        ident = content[keys.IDENTITY]
        if fault == "duplicate-id":
            ident[keys.PARTITION_ID] = 0
        if fault == "inflated":  # a consistent liar: its class counts add up to the claim
            ident[keys.NUM_TRAIN] = INFLATED
            counts = list(ident[keys.CLASS_COUNTS])
            counts[int(np.argmax(counts))] += INFLATED - sum(counts)
            ident[keys.CLASS_COUNTS] = counts
        return reply
    if kind == "train" and fault == "inflated":
        arrays = content[keys.ARRAYS]
        for name, arr in arrays.items():
            values = arr.numpy()
            if np.issubdtype(values.dtype, np.floating):
                arrays[name] = Array(np.full_like(values, 5.0))
        content[keys.METRICS][keys.NUM_EXAMPLES] = INFLATED
    elif kind == "train":
        corrupt_record(content[keys.ARRAYS], fault)
    elif keys.SIGNAL in content.array_records:
        corrupt_record(content[keys.SIGNAL], fault)
    return reply


def hostile_app(faults: Mapping[int, str]) -> ClientApp:
    """A ClientApp that is umbel's, but corrupts the replies of the partitions in ``faults``."""
    unknown = sorted(set(faults.values()) - set(FAULTS))
    if unknown:
        raise ValueError(f"Unknown faults {unknown}; known: {FAULTS}.")
    app = ClientApp()

    def answer(msg: Message, context: Context) -> Message:
        reply = umbel_app(msg, context)
        fault = faults.get(int(context.node_config[keys.PARTITION_ID]))
        return reply if fault is None else _corrupt(reply, fault)

    app.train()(answer)
    app.evaluate()(answer)
    for action in (keys.IDENTITY_ACTION, *QUERIES):
        app.query(action)(answer)
    return app
