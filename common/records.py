"""Typed reads of the values in a message's records.

Flower types a ``ConfigRecord`` value as a union of ten types (``int``, ``float``, ``str``,
``bytes``, ``bool`` and lists of each) and a ``MetricRecord`` value as four, so every read of
one needs a check before it can be used as the one type it should be. These functions make that
check once: each returns the value as its type, or raises ``ValueError`` naming the key, where the
record came from and what it held. They take any mapping (both records are mappings of ``str``),
so this module stays free of Flower.

``where`` names the record's origin in the messages, e.g. ``"the identity reply of node 7"``;
``default``, where given, stands in for an absent key (never for a value of the wrong type).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def read_int(record: Mapping[str, object], key: str, where: str, default: int | None = None) -> int:
    """``record[key]``, which must be an int (Flower keeps ints and floats apart; bools are refused).

    Raises
    ------
    ValueError
        If the key is absent and ``default`` is None, or the value is not an int.
    """
    value = _value(record, key, where, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(key, where, "an int", value)
    return value


def read_float(record: Mapping[str, object], key: str, where: str, default: float | None = None) -> float:
    """``record[key]`` as a float (an int is converted; bools, NaN and infinities are refused).

    Raises
    ------
    ValueError
        If the key is absent and ``default`` is None, or the value is not a finite number.
    """
    value = _value(record, key, where, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _wrong(key, where, "a finite number", value)
    return float(value)


def read_str(record: Mapping[str, object], key: str, where: str, default: str | None = None) -> str:
    """``record[key]``, which must be a str.

    Raises
    ------
    ValueError
        If the key is absent and ``default`` is None, or the value is not a str.
    """
    value = _value(record, key, where, default)
    if not isinstance(value, str):
        raise _wrong(key, where, "a str", value)
    return value


def read_bytes(record: Mapping[str, object], key: str, where: str, default: bytes | None = None) -> bytes:
    """``record[key]``, which must be ``bytes``.

    Raises
    ------
    ValueError
        If the key is absent and ``default`` is None, or the value is not bytes.
    """
    value = _value(record, key, where, default)
    if not isinstance(value, bytes):
        raise _wrong(key, where, "bytes", value)
    return value


def read_bool(record: Mapping[str, object], key: str, where: str, default: bool | None = None) -> bool:
    """``record[key]``, which must be a bool (``0`` and ``1`` are not).

    Raises
    ------
    ValueError
        If the key is absent and ``default`` is None, or the value is not a bool.
    """
    value = _value(record, key, where, default)
    if not isinstance(value, bool):
        raise _wrong(key, where, "a bool", value)
    return value


def read_ints(record: Mapping[str, object], key: str, where: str, default: list[int] | None = None) -> list[int]:
    """``record[key]`` as a list of ints (bools refused; an empty list is allowed).

    Raises
    ------
    ValueError
        If the key is absent and ``default`` is None, or the value is not a list of ints.
    """
    value = _value(record, key, where, default)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _wrong(key, where, "a list of ints", value)
    return list(value)


def _value(record: Mapping[str, object], key: str, where: str, default: T | None) -> object:
    if key in record:
        return record[key]
    if default is not None:
        return default
    raise ValueError(f"The '{key}' value of {where} is missing (it holds {sorted(record)}).")


def _wrong(key: str, where: str, allowed: str, value: object) -> ValueError:
    return ValueError(f"The '{key}' value of {where} must be {allowed}. Got {value!r} instead.")
