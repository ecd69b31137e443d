"""Parameter checks with scikit-learn's wording.

Every check raises ``ValueError`` whose message names the parameter, its owner, what is
allowed and what was given, e.g. ``The 'fraction' parameter of FedAvg must be a float in
the range (0.0, 1.0]. Got 1.5 instead.`` Never ``assert`` for input checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def _fail(name: str, owner: str, allowed: str, value: Any) -> ValueError:
    return ValueError(f"The '{name}' parameter of {owner} must be {allowed}. Got {value!r} instead.")


def check_int(value: Any, name: str, owner: str, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer in ``[low, high]``.

    Raises
    ------
    ValueError
        If ``value`` is not an integer (bools are refused) or lies outside the range.
    """
    allowed = "an int" + _range_text(low, high, closed=(True, True))
    if isinstance(value, bool):
        raise _fail(name, owner, allowed, value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise _fail(name, owner, allowed, value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise _fail(name, owner, allowed, value)
    return value


def check_float(
    value: Any,
    name: str,
    owner: str,
    *,
    low: float | None = None,
    high: float | None = None,
    closed: tuple[bool, bool] = (True, True),
) -> float:
    """Return ``value`` as a finite float inside the interval given by ``low``/``high``.

    ``closed`` says whether each end is included: ``(False, True)`` is ``(low, high]``.
    """
    allowed = "a float" + _range_text(low, high, closed)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, owner, allowed, value)
    value = float(value)
    if not math.isfinite(value):
        raise _fail(name, owner, allowed, value)
    lo_ok = low is None or (value >= low if closed[0] else value > low)
    hi_ok = high is None or (value <= high if closed[1] else value < high)
    if not (lo_ok and hi_ok):
        raise _fail(name, owner, allowed, value)
    return value


def check_choice(value: Any, name: str, owner: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``; the message lists them all."""
    options = sorted(choices)
    if value not in options:
        listed = ", ".join(repr(c) for c in options)
        raise _fail(name, owner, f"one of {{{listed}}}", value)
    return value


def check_str(value: Any, name: str, owner: str) -> str:
    """Return ``value`` if it is a string."""
    if not isinstance(value, str):
        raise _fail(name, owner, "a str", value)
    return value


def check_bool(value: Any, name: str, owner: str) -> bool:
    """Return ``value`` if it is a bool."""
    if not isinstance(value, bool):
        raise _fail(name, owner, "a bool", value)
    return value


def parse_float_list(value: Any, name: str, owner: str, *, min_len: int = 1) -> tuple[float, ...]:
    """Parse a comma-separated string (run-config has no lists) into floats."""
    allowed = f"a comma-separated list of at least {min_len} numbers, such as '0,90,180'"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        items = [float(value)]
    elif isinstance(value, str):
        try:
            items = [float(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise _fail(name, owner, allowed, value) from None
    else:
        raise _fail(name, owner, allowed, value)
    if len(items) < min_len or not all(math.isfinite(v) for v in items):
        raise _fail(name, owner, allowed, value)
    return tuple(items)


def _range_text(low: float | None, high: float | None, closed: tuple[bool, bool]) -> str:
    if low is None and high is None:
        return ""
    if high is None:
        return f" {'>=' if closed[0] else '>'} {low}"
    if low is None:
        return f" {'<=' if closed[1] else '<'} {high}"
    left = "[" if closed[0] else "("
    right = "]" if closed[1] else ")"
    return f" in the range {left}{low}, {high}{right}"
