"""A strategy parameter declared once, on its dataclass field (no Flower here).

In the manner of scikit-learn's ``_parameter_constraints``, each field of a strategy's frozen
parameters dataclass carries its help line, its allowed range or values and its paper
reference as field metadata (``param``). From that one declaration come the field's
validation (``check_params``, scikit-learn's wording, naming the run-config key), the
run-config key's entry in ``common.schema``, the ``umbel run`` flag and its help, the
``[tool.flwr.app.config]`` lines of ``pyproject.toml`` and the parameter tables in ``docs/``.

A field declared with ``common.config.shared`` reads a key several strategies share; that key
is declared once in ``common.schema`` and ``shared`` may add the strategy's own range.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from .validation import _range_text, check_bool, check_choice, check_float, check_int, check_str

T = TypeVar("T")
SPEC = "umbel-param"


@dataclass(frozen=True)
class Spec:
    """What one parameter allows, and why.

    Attributes
    ----------
    help : str
        Meaning and allowed values, one line (the flag's help, the docs table's text).
    low, high : float or None
        The allowed range of a number; None: unbounded on that side.
    closed : tuple of bool
        Whether ``low`` and ``high`` are included.
    choices : tuple of str
        The allowed values of a string parameter (empty: any string).
    paper : str
        The paper's section or default the parameter follows, or how umbel departs from it.
    checked : bool
        False when the dataclass checks the value itself (a rule ``check_params`` cannot say).
    """

    help: str = ""
    low: float | None = None
    high: float | None = None
    closed: tuple[bool, bool] = (True, True)
    choices: tuple[str, ...] = ()
    paper: str = ""
    checked: bool = True

    def allowed(self, default: Any) -> str:
        """What the value may be, in the words of the error message (``an int >= 0``, ``one of {...}``)."""
        if self.choices:
            return "one of {" + ", ".join(repr(c) for c in sorted(self.choices)) + "}"
        kind = {bool: "a bool", int: "an int", float: "a float", str: "a str"}.get(type(default), "a value")
        return kind + _range_text(self.low, self.high, self.closed)


def param(
    default: T,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    closed: tuple[bool, bool] = (True, True),
    choices: Iterable[str] = (),
    paper: str = "",
    checked: bool = True,
) -> T:
    """A parameter field: ``damping: float = param(0.5, "...", low=0.5, high=1.0, closed=(True, False))``.

    The field's default is ``default``; its type is ``default``'s.
    """
    spec = Spec(help, low, high, closed, tuple(choices), paper, checked)
    return field(default=default, metadata={SPEC: spec})


def spec_of(f: Field[Any]) -> Spec | None:
    """The declaration of field ``f``, or None for a field declared without one."""
    return f.metadata.get(SPEC)


def check_value(value: Any, spec: Spec, default: Any, name: str, owner: str) -> Any:
    """``value`` checked against ``spec`` in the type of ``default``; ``ValueError`` naming ``name``."""
    if spec.choices:
        return check_choice(value, name, owner, spec.choices)
    if isinstance(default, bool):
        return check_bool(value, name, owner)
    if isinstance(default, int):
        low = None if spec.low is None else int(spec.low)
        high = None if spec.high is None else int(spec.high)
        return check_int(value, name, owner, low=low, high=high)
    if isinstance(default, float):
        return check_float(value, name, owner, low=spec.low, high=spec.high, closed=spec.closed)
    return check_str(value, name, owner)


def check_params(params: Any, owner: str) -> None:
    """Check every declared field of the frozen dataclass ``params`` and store the checked value.

    Called from ``__post_init__``; fields declared ``checked=False`` or without a ``Spec`` are
    left to the dataclass.

    Raises
    ------
    ValueError
        For the first field out of its declaration, naming its run-config key and ``owner``.
    """
    from .config import run_config_keys  # common.config imports this module

    keys = run_config_keys(type(params))
    for f in fields(params):
        spec = spec_of(f)
        if spec is None or not spec.checked:
            continue
        value = check_value(getattr(params, f.name), spec, f.default, keys[f.name], owner)
        object.__setattr__(params, f.name, value)
