"""Client replies, parsed once into numpy and checked on the way.

A reply that fails a check raises ``ReplyFault`` with a short description; the caller logs it
with the client's partition id and leaves that client out of the round, so a malformed reply
never touches server state.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict

from common import keys
from common.records import read_float
from common.signals import SignalError

S = TypeVar("S")

Range = tuple[float, float]
# Each metric's allowed closed range, checked on every reply; for regression ``accuracy`` is R^2
# (``common.training.evaluate``), which has no lower bound (``metric_ranges``).
METRIC_RANGES: dict[str, Range] = {
    keys.ACCURACY: (0.0, 1.0),
    keys.LOSS: (0.0, math.inf),
    keys.TRAIN_LOSS: (0.0, math.inf),
}


def metric_ranges(task: str = "classification") -> dict[str, Range]:
    """The allowed range of each reply metric for a run of ``task`` (classification or regression)."""
    if task == "regression":
        return {**METRIC_RANGES, keys.ACCURACY: (-math.inf, 1.0)}
    return dict(METRIC_RANGES)


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
        parts = [
            (arr.astype(np.float32) - self.sent[name].astype(np.float32)).ravel()
            for name, arr in self.arrays.items()
            if np.issubdtype(arr.dtype, np.floating)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def decode_train_reply(
    content: RecordDict, reference: ArrayRecord, num_train: int, sent: dict[str, np.ndarray] | None = None
) -> TrainUpdate:
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
    return TrainUpdate(arrays, int(metrics[keys.NUM_EXAMPLES]), metrics[keys.TRAIN_LOSS], sent)


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
        If the record is missing, an array's bytes do not decode to what its labels say, or
        ``from_arrays`` raises ``SignalError``.
    """
    record = content.array_records.get(keys.SIGNAL)
    if not isinstance(record, ArrayRecord):
        raise ReplyFault(f"no ArrayRecord {keys.SIGNAL!r}")
    arrays = {name: decode_array(arr, name) for name, arr in record.items()}
    try:
        return from_arrays(arrays, **expected)
    except SignalError as err:
        raise ReplyFault(str(err)) from err


def decode_evaluate_reply(
    content: RecordDict, num_test: int, ranges: Mapping[str, Range] | None = None
) -> tuple[float, float]:
    """``(accuracy, loss)`` of an evaluate reply (metrics ``num-examples``, ``loss``, ``accuracy``).

    Each metric must lie in its range (``ranges``, default ``METRIC_RANGES``); ``ReplyFault`` otherwise.
    """
    metrics = _metrics(content, keys.EVAL_METRIC_KEYS, max(num_test, 1), ranges)
    return metrics[keys.ACCURACY], metrics[keys.LOSS]


def decode_arrays(arrays: ArrayRecord, reference: ArrayRecord) -> dict[str, np.ndarray]:
    """``arrays`` as numpy, if they match ``reference`` in keys, shapes and dtypes and are finite.

    The bytes are decoded as the reference's dtype and shape, never as the client labelled them,
    so a reply can neither crash decoding nor change a cluster model's dtype.
    """
    if list(arrays.keys()) != list(reference.keys()):
        missing = sorted(set(reference.keys()) - set(arrays.keys()))
        extra = sorted(set(arrays.keys()) - set(reference.keys()))
        raise ReplyFault(f"array keys differ from the model's (missing {missing}, unexpected {extra})")
    out = {}
    for name, ref in reference.items():
        values = decode_array(arrays[name], name, np.dtype(ref.dtype), tuple(ref.shape))
        if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
            raise ReplyFault(f"array {name!r} holds NaN or Inf")
        out[name] = values
    return out


def decode_array(
    arr: Array, name: str, dtype: np.dtype | None = None, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """One received ``Array`` as a numpy array of ``dtype`` and ``shape``, trusting none of its labels.

    The ``.npy`` header inside the bytes must agree with the labels and with ``dtype`` and
    ``shape`` (when given; otherwise with the labels alone, and be a plain numeric dtype), and
    the payload must be exactly ``prod(shape) * itemsize`` bytes. Nothing is allocated before
    these checks pass.

    Raises
    ------
    ReplyFault
        On any disagreement or bytes that are not a ``.npy`` array.
    """
    try:
        label = (np.dtype(arr.dtype), tuple(int(s) for s in arr.shape))
        if arr.stype != "numpy.ndarray":
            raise ValueError(f"serialisation {arr.stype!r} is not 'numpy.ndarray'")
        data = arr.data
        buffer = io.BytesIO(data)
        version = np.lib.format.read_magic(buffer)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        header_shape, fortran, header_dtype = read_header(buffer)
    except Exception as err:  # any malformed label or header is the client's fault
        raise ReplyFault(f"array {name!r} cannot be decoded: {err}") from err
    want = (label[0] if dtype is None else np.dtype(dtype), label[1] if shape is None else tuple(shape))
    if (header_dtype, tuple(header_shape)) != want or label != want:
        raise ReplyFault(
            f"array {name!r} is {label[0]}{list(label[1])} holding {header_dtype}"
            f"{list(header_shape)} data, expected {want[0]}{list(want[1])}"
        )
    if header_dtype.kind not in "biuf" or header_dtype.hasobject:
        raise ReplyFault(f"array {name!r} has dtype {header_dtype}, not a number type")
    count = math.prod(want[1])
    if len(data) - buffer.tell() != count * header_dtype.itemsize:
        raise ReplyFault(
            f"array {name!r} holds {len(data) - buffer.tell()} bytes of data, "
            f"expected {count * header_dtype.itemsize} ({want[0]}{list(want[1])})"
        )
    flat = np.frombuffer(data, dtype=header_dtype, count=count, offset=buffer.tell())
    return flat.reshape(want[1], order="F" if fortran else "C").astype(header_dtype.newbyteorder("="))


def _metrics(
    content: RecordDict, required: tuple[str, ...], max_examples: int, ranges: Mapping[str, Range] | None = None
) -> dict[str, float]:
    """The ``required`` metrics of a reply as finite floats in their ``ranges``, ``num-examples`` a
    whole number in ``[1, max_examples]``.
    """
    record = content.metric_records.get(keys.METRICS)
    if not isinstance(record, MetricRecord):
        raise ReplyFault(f"no MetricRecord {keys.METRICS!r}")
    values: dict[str, float] = {}
    for key in required:
        if key not in record:
            raise ReplyFault(f"metric {key!r} is missing (the reply has {sorted(record)})")
        try:
            values[key] = read_float(record, key, f"the MetricRecord {keys.METRICS!r}")
        except ValueError as err:
            raise ReplyFault(str(err)) from err
    examples = values[keys.NUM_EXAMPLES]
    if not examples.is_integer() or not 1 <= examples <= max_examples:
        raise ReplyFault(f"num-examples {record[keys.NUM_EXAMPLES]!r} is not a whole number in [1, {max_examples}]")
    for key, (low, high) in (METRIC_RANGES if ranges is None else ranges).items():
        if key in values and not low <= values[key] <= high:
            raise ReplyFault(f"metric {key!r} is {values[key]!r}, outside its range [{low:g}, {high:g}]")
    return values
