"""Typed client signals: what a client sends the server to be clustered (no Flower here).

Each signal is a small frozen dataclass with ``to_arrays()`` (name -> numpy array, what
travels in the reply's ``signal`` ArrayRecord) and ``from_arrays(arrays, **expected)``,
which checks names, shapes, dtypes and finiteness and raises ``SignalError`` on anything
else. The server turns a ``SignalError`` into a rejected reply for that client only.

Conventions for a new signal: one module here per signal family; a signal that travels as
``query.<action>`` says its ``action`` (a ``common.keys`` constant) and its ``handler``, the
client function that computes it (``"client.signals.<module>:<function>"``, a name, so that
this package stays free of the client's code): it is then a ``Queried`` signal, which a strategy
lists in its ``queries`` and the ClientApp answers. Add a test of the round trip and of each
rejection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Protocol

import numpy as np


class Queried(Protocol):
    """A signal the server asks for with ``query.<action>``, and the client function that answers it."""

    action: ClassVar[str]
    handler: ClassVar[str]  # "client.signals.<module>:<function>"


FLOAT_LIMIT = float(np.finfo(np.float32).max)
"""The largest magnitude a float signal may hold: every signal travels as float32. A larger value (a
float64 reply) could overflow what the server computes from every client's signal (distances, norms)
to infinity, and with it the clustering of the whole round."""


class SignalError(ValueError):
    """A client signal with a missing, extra, misshapen or non-finite array."""


def check_names(arrays: Mapping[str, np.ndarray], expected: Sequence[str], what: str) -> None:
    """Raise ``SignalError`` unless ``arrays`` holds exactly the names ``expected``."""
    missing = sorted(set(expected) - set(arrays))
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        raise SignalError(f"{what}: arrays differ from {sorted(expected)} (missing {missing}, unexpected {extra})")


def require_array(
    arrays: Mapping[str, np.ndarray],
    name: str,
    shape: Sequence[int | None],
    what: str,
    *,
    integer: bool = False,
) -> np.ndarray:
    """``arrays[name]`` if it has ``shape`` (``None`` = any size) and a float (or integer) dtype.

    Float arrays must be finite and within float32's range (``FLOAT_LIMIT``). Returns the array itself
    (no copy).

    Raises
    ------
    SignalError
        If the array is missing, has another number of dimensions or sizes, the wrong kind
        of dtype, holds NaN or Inf, or a value beyond float32's range.
    """
    if name not in arrays:
        raise SignalError(f"{what}: array {name!r} is missing")
    arr = np.asarray(arrays[name])
    wanted = tuple("*" if s is None else s for s in shape)
    if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape, strict=True)):
        raise SignalError(f"{what}: array {name!r} has shape {list(arr.shape)}, expected {list(wanted)}")
    kind = np.integer if integer else np.floating
    if not np.issubdtype(arr.dtype, kind):
        raise SignalError(f"{what}: array {name!r} has dtype {arr.dtype}, expected {kind.__name__}")
    if not integer and not np.all(np.isfinite(arr)):
        raise SignalError(f"{what}: array {name!r} holds NaN or Inf")
    if not integer and arr.dtype.itemsize > 4 and arr.size and np.abs(arr).max() > FLOAT_LIMIT:
        raise SignalError(f"{what}: array {name!r} holds a value beyond float32's range, {FLOAT_LIMIT:.3g}")
    return arr
