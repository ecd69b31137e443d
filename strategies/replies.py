"""Checks on client replies before anything touches server state.

Each check returns ``None`` for a good reply, or a short description of the fault; the
caller logs it with the client's partition id and leaves that client out of the round.
"""

from __future__ import annotations

import math

import numpy as np
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from common import keys


def train_reply_fault(content: RecordDict, reference: ArrayRecord, num_train: int) -> str | None:
    """Fault in a train reply, judged against the model that was sent.

    Parameters
    ----------
    content : RecordDict
        The reply: an ArrayRecord ``arrays`` and a MetricRecord ``metrics``.
    reference : ArrayRecord
        The cluster model the client received; the reply must match its keys, shapes
        and dtypes.
    num_train : int
        The client's train-set size from its identity; ``num-examples`` may not exceed it.
    """
    fault = metrics_fault(content, keys.TRAIN_METRIC_KEYS, num_train)
    if fault:
        return fault
    if keys.ARRAYS not in content.array_records:
        return f"no ArrayRecord {keys.ARRAYS!r}"
    return arrays_fault(content.array_records[keys.ARRAYS], reference)


def evaluate_reply_fault(content: RecordDict, num_test: int) -> str | None:
    """Fault in an evaluate reply (metrics ``num-examples``, ``loss``, ``accuracy``)."""
    fault = metrics_fault(content, keys.EVAL_METRIC_KEYS, max(num_test, 1))
    if fault:
        return fault
    accuracy = float(content.metric_records[keys.METRICS][keys.ACCURACY])
    if accuracy > 1.0:
        return f"accuracy {accuracy} is above 1"
    return None


def arrays_fault(arrays: ArrayRecord, reference: ArrayRecord) -> str | None:
    """Fault if ``arrays`` differs from ``reference`` in keys, shapes or dtypes, or is not finite."""
    if list(arrays.keys()) != list(reference.keys()):
        missing = sorted(set(reference.keys()) - set(arrays.keys()))
        extra = sorted(set(arrays.keys()) - set(reference.keys()))
        return f"array keys differ from the model's (missing {missing}, unexpected {extra})"
    for name, ref in reference.items():
        arr = arrays[name]
        if tuple(arr.shape) != tuple(ref.shape) or arr.dtype != ref.dtype:
            return (f"array {name!r} is {arr.dtype}{list(arr.shape)}, "
                    f"expected {ref.dtype}{list(ref.shape)}")
        values = arr.numpy()
        if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
            return f"array {name!r} holds NaN or Inf"
    return None


def metrics_fault(content: RecordDict, required: tuple[str, ...], max_examples: int) -> str | None:
    """Fault if the MetricRecord lacks a key, holds a non-finite value or an absurd count."""
    record = content.metric_records.get(keys.METRICS)
    if not isinstance(record, MetricRecord):
        return f"no MetricRecord {keys.METRICS!r}"
    for key in required:
        if key not in record:
            return f"metric {key!r} is missing"
        value = record[key]
        if isinstance(value, list) or not math.isfinite(float(value)):
            return f"metric {key!r} is {value!r}, not a finite number"
    examples = float(record[keys.NUM_EXAMPLES])
    if not examples.is_integer() or not 1 <= examples <= max_examples:
        return f"num-examples {record[keys.NUM_EXAMPLES]!r} is not a whole number in [1, {max_examples}]"
    return None
