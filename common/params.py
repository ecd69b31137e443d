"""A run-config parameter declared once, on its dataclass field (no Flower here).

In the manner of scikit-learn's ``_parameter_constraints``, each field of a strategy's frozen
parameters dataclass carries its help line, its allowed range or values and its paper
reference as field metadata (``param``). From that one declaration come the field's
validation (``check_params``, scikit-learn's wording, naming the run-config key), the
run-config key's entry in ``common.schema``, the ``umbel run`` flag and its help, the
``[tool.flwr.app.config]`` lines of ``pyproject.toml`` and the parameter tables in ``docs/``.

The run-wide dataclasses of ``common.config`` (training, output, faults) declare their keys
the same way. A field declared with ``shared`` (below) reads a key several strategies share; that
key is declared once on ``ClusteringParams`` and ``shared`` may add the strategy's own range.
``RENAMED`` lists the keys' former names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from .validation import _range_text, check_bool, check_choice, check_float, check_int, check_str

T = TypeVar("T")
SPEC = "umbel-param"


@dataclass(frozen=True)
class NoParams:
    """Parameters of a strategy that has none of its own."""


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
    for f in fields(params):
        spec = spec_of(f)
        if spec is not None and spec.checked:
            check_field(params, f.name, owner)


def check_field(params: Any, name: str, owner: str) -> Any:
    """Check the field ``name`` of the frozen dataclass ``params`` against its declaration, store
    and return the checked value (for a dataclass whose checks run in an order of their own).

    Raises
    ------
    ValueError
        If the value is out of its declaration, naming its run-config key and ``owner``.
    """
    f = next(f for f in fields(params) if f.name == name)
    spec = spec_of(f)
    assert spec is not None, name
    value = check_value(getattr(params, name), spec, f.default, run_config_key(type(params), name), owner)
    object.__setattr__(params, name, value)
    return value


SHARED_KEY = "umbel-shared-key"


def shared(*, low: float | None = None, high: float | None = None, help: str = "") -> Any:
    """A strategy parameter whose run-config key several strategies read: the key has no prefix.

    Use as a field's default: ``num_clusters: int = shared(low=0)`` reads key ``num-clusters``,
    whose help and default are declared once, on the field of ``ClusteringParams`` of the same
    name; the field gets that default when its class is made. ``help`` is what the key means to
    this strategy, added to that help under the strategy's name (``common.schema.build``). With
    ``low`` or ``high`` the strategy's own range is checked by ``common.params.check_params``;
    without, the dataclass checks the value itself.

    Raises
    ------
    ValueError
        When the class is made, if ``ClusteringParams`` has no field of the field's name
        (Python 3.11 wraps it in a ``RuntimeError``).
    """
    spec = Spec(help, low=low, high=high, checked=low is not None or high is not None)
    placeholder = _DeclaredDefault()
    made: Any = field(default=placeholder, metadata={SHARED_KEY: True, SPEC: spec})
    placeholder.field = made
    return made


class _DeclaredDefault:
    """A ``shared`` field's default until its class is made: ``dataclasses.Field`` passes its
    name on to its default's ``__set_name__``, which puts the declared default in its place."""

    field: Field[Any]

    def __set_name__(self, owner: type, name: str) -> None:
        declared = {f.name: f.default for f in fields(ClusteringParams)}
        if name not in declared:
            raise ValueError(
                f"The shared parameter '{name}' of {owner.__qualname__} must be one of the keys "
                f"ClusteringParams declares, {sorted(declared)}. Got {name!r} instead."
            )
        self.field.default = declared[name]


@dataclass(frozen=True)
class ClusteringParams:
    """The clustering keys several strategies share, each declared once here (``common.schema``
    places them); each strategy reads one with a ``shared`` field of the same name, which takes its
    default from here, and checks it in its own range.
    """

    num_clusters: int = param(
        0, "cut into / keep this many clusters; 0 = not given (each strategy's own rule)", checked=False
    )
    linkage: str = param(
        "average",
        "hierarchical clustering's linkage (ward needs raw features)",
        choices=("average", "complete", "single", "weighted"),
        checked=False,
    )
    cluster_steps: int = param(
        100, "mini-batches of local training for the clustering signal; 0: epochs", checked=False
    )
    max_clusters: int = param(8, "the most clusters a strategy keeps or searches", checked=False)
    sketch_dim: int = param(0, "keep a seeded k-dim projection of each update; 0 = full updates", checked=False)


def declared_in(cls: type[Any], name: str) -> Any:
    """A field that reads the run-config key which field ``name`` of ``cls`` declares: the same
    default and declaration (range, help), marked ``shared`` so that the key is declared once.

    Use as a field's default: ``seed: int = declared_in(TrainingParams, "seed")``.
    """
    f = next(f for f in fields(cls) if f.name == name)
    return field(default=f.default, metadata={**f.metadata, SHARED_KEY: True})


def run_config_keys(cls: type[Any]) -> dict[str, str]:
    """Each field of the parameter dataclass ``cls`` and its run-config key, in field order.

    The key is the field's name with ``-`` for ``_``, after ``cls.key_prefix`` (a strategy's
    name) when the class has one, unless the field is ``shared`` or its name already starts with
    the prefix: ``local_epochs`` -> ``local-epochs``; in ``CFLGTParams``, ``damping`` ->
    ``cflgt-damping``; in ``FedClustParams``, ``fedclust_lambda`` -> ``fedclust-lambda`` and the
    shared ``num_clusters`` -> ``num-clusters``.
    """
    prefix = getattr(cls, "key_prefix", "")
    keys = {}
    for f in fields(cls):
        if not f.init:
            continue
        key = f.name.replace("_", "-")
        if prefix and not f.metadata.get(SHARED_KEY) and not key.startswith(f"{prefix}-"):
            key = f"{prefix}-{key}"
        keys[f.name] = key
    return keys


def run_config_key(cls: type[Any], name: str) -> str:
    """The run-config key of the field ``name`` of ``cls`` (``run_config_keys``), for messages."""
    return run_config_keys(cls)[name]


RENAMED: dict[str, str] = {
    "pretrain-rounds": "cflgt-pretrain-rounds",
    "damping": "cflgt-damping",
    "preference": "cflgt-preference",
    "cluster-epochs": "fedclust-cluster-epochs",
    "warmup-rounds": "flhc-warmup-rounds",
    "beta": "flag-beta",
    "delta": "flag-delta",
    "alpha": "flag-alpha",
    "sweep-step": "flag-sweep-step",
    "sweep-clients": "flag-sweep-clients",
    "sweep-rounds": "flag-sweep-rounds",
    "gradient-epochs": "flag-gradient-epochs",
    "uniform-weights": "flag-uniform-weights",
    "cluster-round": "flic-cluster-round",
    "resolution": "flic-resolution",
    "stable-tol": "flic-stable-tol",
    "eps1": "cfl-sattler-eps1",
    "eps2": "cfl-sattler-eps2",
    "eps-absolute": "cfl-sattler-eps-absolute",
    "split-after": "cfl-sattler-split-after",
    "cluster-period": "cfl-gp-cluster-period",
    "cluster-until": "cfl-gp-cluster-until",
    "stable-updates": "cfl-gp-stable-updates",
    "profile-protocol": "cfl-gp-profile-protocol",
    "profile-fraction": "cfl-gp-profile-fraction",
    "compression-ratio": "cfl-gp-compression-ratio",
    "estimate-after": "cfl-gp-estimate-after",
    "proximal-mu": "fedprox-mu",
}
"""A former key name and its name now (no alias: a run-config that uses a former name fails)."""


def renamed_message(old: str) -> str:
    """The error that a run-config using the former key name ``old`` gets."""
    return f"The '{old}' key was renamed '{RENAMED[old]}'."


def check_renamed(config: Iterable[str]) -> None:
    """Raise ``ValueError`` naming the new key when ``config`` holds a former key name.

    Raises
    ------
    ValueError
        For the first key of ``config`` in ``RENAMED``.
    """
    for key in config:
        if key in RENAMED:
            raise ValueError(renamed_message(key))
