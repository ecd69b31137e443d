"""Client replies, parsed once into numpy and checked on the way.

A reply that fails a check raises ``ReplyFault`` with a short description; the caller logs it
with the client's partition id and leaves that client out of the round, so a malformed reply
never touches server state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from common import keys
from common.signals import SignalError

S = TypeVar("S")


class ReplyFault(ValueError):
    """A client reply that must not touch server state."""


@dataclass(frozen=True, eq=False)
class TrainUpdate:
    """A checked train reply: the client's model as numpy arrays, its example count and loss.

    ``sent`` is the model the client started from, so ``delta()`` is its update.
    """

    arrays: dict[str, np.ndarray]
    num_examples: int
    loss: float
    sent: dict[str, np.ndarray] | None = None

    def delta(self) -> np.ndarray:
        """The update ``trained - sent`` over every float array, flattened: shape (d,), float32."""
        if self.sent is None:
            raise ValueError("This update has no reference model to subtract.")
        parts = [(arr.astype(np.float32) - self.sent[name].astype(np.float32)).ravel()
                 for name, arr in self.arrays.items() if np.issubdtype(arr.dtype, np.floating)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def decode_train_reply(content: RecordDict, reference: ArrayRecord, num_train: int,
                       sent: dict[str, np.ndarray] | None = None) -> TrainUpdate:
    """Parse a train reply, judged against the model that was sent.

    Parameters
    ----------
    content : RecordDict
        The reply: an ArrayRecord ``arrays`` and a MetricRecord ``metrics``.
    reference : ArrayRecord
        The cluster model the client received; the reply must match its keys, shapes and dtypes.
    num_train : int
        The client's train-set size from its identity; ``num-examples`` may not exceed it.
    sent : dict of str to ndarray, optional
        ``reference`` as numpy, when the caller already has it (one copy per cluster, not per reply).

    Raises
    ------
    ReplyFault
        On a missing record or key, a shape or dtype other than the model's, NaN or Inf, or a
        ``num-examples`` that is not a whole number in ``[1, num_train]``.
    """
    metrics = _metrics(content, keys.TRAIN_METRIC_KEYS, num_train)
    if keys.ARRAYS not in content.array_records:
        raise ReplyFault(f"no ArrayRecord {keys.ARRAYS!r}")
    arrays = decode_arrays(content.array_records[keys.ARRAYS], reference)
    if sent is None:
        sent = {name: arr.numpy() for name, arr in reference.items()}
    return TrainUpdate(arrays, int(metrics[keys.NUM_EXAMPLES]), float(metrics[keys.TRAIN_LOSS]), sent)


def decode_signal(content: RecordDict, from_arrays: Callable[..., S], **expected: Any) -> S:
    """Parse a reply's ``signal`` record with a signal's ``from_arrays`` (and its expectations).

    Parameters
    ----------
    content : RecordDict
        The reply; its ArrayRecord ``signal`` holds the signal's arrays.
    from_arrays : callable
        A ``common.signals`` dataclass's ``from_arrays``.
    **expected
        Passed on to ``from_arrays`` (sizes the server knows, e.g. ``num_models``).

    Raises
    ------
    ReplyFault
        If the record is missing or ``from_arrays`` raises ``SignalError``.
    """
    record = content.array_records.get(keys.SIGNAL)
    if not isinstance(record, ArrayRecord):
        raise ReplyFault(f"no ArrayRecord {keys.SIGNAL!r}")
    try:
        return from_arrays({name: arr.numpy() for name, arr in record.items()}, **expected)
    except SignalError as err:
        raise ReplyFault(str(err)) from err


def decode_evaluate_reply(content: RecordDict, num_test: int) -> tuple[float, float]:
    """``(accuracy, loss)`` of an evaluate reply (metrics ``num-examples``, ``loss``, ``accuracy``)."""
    metrics = _metrics(content, keys.EVAL_METRIC_KEYS, max(num_test, 1))
    accuracy = float(metrics[keys.ACCURACY])
    if accuracy > 1.0:
        raise ReplyFault(f"accuracy {accuracy} is above 1")
    return accuracy, float(metrics[keys.LOSS])


def decode_arrays(arrays: ArrayRecord, reference: ArrayRecord) -> dict[str, np.ndarray]:
    """``arrays`` as numpy, if they match ``reference`` in keys, shapes and dtypes and are finite."""
    if list(arrays.keys()) != list(reference.keys()):
        missing = sorted(set(reference.keys()) - set(arrays.keys()))
        extra = sorted(set(arrays.keys()) - set(reference.keys()))
        raise ReplyFault(f"array keys differ from the model's (missing {missing}, unexpected {extra})")
    out = {}
    for name, ref in reference.items():
        arr = arrays[name]
        if tuple(arr.shape) != tuple(ref.shape) or arr.dtype != ref.dtype:
            raise ReplyFault(f"array {name!r} is {arr.dtype}{list(arr.shape)}, "
                             f"expected {ref.dtype}{list(ref.shape)}")
        values = arr.numpy()
        if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
            raise ReplyFault(f"array {name!r} holds NaN or Inf")
        out[name] = values
    return out


def _metrics(content: RecordDict, required: tuple[str, ...], max_examples: int) -> MetricRecord:
    record = content.metric_records.get(keys.METRICS)
    if not isinstance(record, MetricRecord):
        raise ReplyFault(f"no MetricRecord {keys.METRICS!r}")
    for key in required:
        if key not in record:
            raise ReplyFault(f"metric {key!r} is missing")
        value = record[key]
        if isinstance(value, list) or not math.isfinite(float(value)):
            raise ReplyFault(f"metric {key!r} is {value!r}, not a finite number")
    examples = float(record[keys.NUM_EXAMPLES])
    if not examples.is_integer() or not 1 <= examples <= max_examples:
        raise ReplyFault(f"num-examples {record[keys.NUM_EXAMPLES]!r} is not a whole number in [1, {max_examples}]")
    return record
