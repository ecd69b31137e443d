"""Every run-config key once: its default, its help line, its group and its type.

The one source of ``umbel run``'s flags, help and defaults (no file is read at run time, so an
installed wheel has them too). No key is declared here: each is declared on the field of the
dataclass that reads it, and placed here in its group and order (``_fields``): ``common.config``'s
dataclasses (strategy, model and device; data; training, output, faults),
``common.scenarios.ScenarioConfig``, ``common.params.ClusteringParams`` (the clustering keys several
strategies share); a strategy's own keys are declared on its parameters dataclass
(``common.params.param``). Each key is declared once. ``build`` makes the
whole ``KEYS`` from a registry (``strategies.schema`` does, from ``strategies.REGISTRY``), the
group of each named after its strategy. ``pyproject.toml``'s ``[tool.flwr.app.config]`` and
docs/parameters.md are written from ``KEYS`` by ``python -m server.derived``;
``tests/test_run_config_schema.py`` fails when they differ. A key read by one strategy only is
named ``<strategy>-<parameter>``; ``RENAMED`` (``common.params``)
maps the keys' former names to their names now, so that an old name fails naming the new one.
Values are checked here for their type only; ranges and cross-key rules are checked where the
values are used (``common.config``, ``common.scenarios``, each strategy's parameters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from .config import OWNER, DataParams, FaultParams, OutputParams, RunParams, TrainingParams
from .params import RENAMED as RENAMED
from .params import SHARED_KEY, ClusteringParams, run_config_keys, spec_of
from .params import check_renamed as check_renamed
from .params import renamed_message as renamed_message
from .scenarios import ScenarioConfig

Scalar = bool | int | float | str

DATA = "data and scenario"
TRAINING = "training"
OUTPUT = "output"
FAULTS = "faults"
SHARED = "clustering (shared by several strategies)"
RUN_GROUPS: tuple[str, ...] = (DATA, TRAINING, OUTPUT, FAULTS, SHARED)
"""The groups of the keys declared here; each strategy with keys of its own adds its group after them."""
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True)
class Key:
    """One run-config key.

    Attributes
    ----------
    name : str
        The key as written in run-config and as ``--name`` on the command line.
    default : bool, int, float or str
        The default; its type is the key's type.
    group : str
        One of ``GROUPS``.
    help : str
        Meaning and allowed values, one line.
    choices : tuple of str
        The allowed values of a string key that has a fixed set (empty: any string).
    read_by : tuple of str
        The strategies that read the key; empty: the run itself (every strategy).
    """

    name: str
    default: Scalar
    group: str
    help: str
    choices: tuple[str, ...] = ()
    read_by: tuple[str, ...] = ()

    def parse(self, text: str) -> Scalar:
        """The value of command-line ``text`` in this key's type; ``ValueError`` naming the key."""
        kind = type(self.default)
        if kind is bool:
            lowered = text.strip().lower()
            if lowered in _TRUE or lowered in _FALSE:
                return lowered in _TRUE
            raise _error(self.name, "a bool (true or false)", text)
        if kind is str:
            return text
        try:
            return kind(text)
        except ValueError:
            raise _error(self.name, "an int" if kind is int else "a float", text) from None


def _error(name: str, allowed: str, text: str) -> ValueError:
    return ValueError(f"The '{name}' parameter of {OWNER} must be {allowed}. Got {text!r} instead.")


def _fields(cls: type, group: str, first: str = "", last: str = "") -> tuple[Key, ...]:
    """The keys of ``cls``'s fields ``first`` through ``last`` (default: all), in ``group``.

    The run-wide dataclasses (``common.config``'s, ``common.scenarios.ScenarioConfig``) declare
    their keys on their fields (``common.params.param``); this places them among the keys declared
    here. A field that reads a key declared elsewhere (``shared``, ``declared_in``) is skipped; a
    tuple default becomes the comma-separated text the run config holds.
    """
    keys = run_config_keys(cls)
    names = list(keys)
    chosen = names[names.index(first) if first else 0 : names.index(last) + 1 if last else len(names)]
    out = []
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        if f.name in chosen and spec is not None and not f.metadata.get(SHARED_KEY):
            out.append(Key(keys[f.name], key_default(f.default), group, spec.help, spec.choices))
    return tuple(out)


def key_default(default: object) -> Scalar:
    """A field's default as a run-config value: a tuple of numbers as ``"0,90,180,270"``."""
    if isinstance(default, tuple):
        return ",".join(f"{v:g}" for v in default)
    return cast(Scalar, default)


RUN_KEYS: tuple[Key, ...] = (
    # data and scenario
    *_fields(RunParams, DATA, "strategy", "strategy"),
    *_fields(ScenarioConfig, DATA, "dataset", "dataset"),
    *_fields(DataParams, DATA, "data_dir", "data_dir"),
    *_fields(RunParams, DATA, "model", "model"),
    *_fields(TrainingParams, DATA, "seed", "seed"),
    *_fields(ScenarioConfig, DATA, "scenario", "scenario"),
    *_fields(ScenarioConfig, DATA, "num_clients", "test_fraction"),
    *_fields(DataParams, DATA, "data_path", "truth_path"),
    *_fields(ScenarioConfig, DATA, "group_draw", "sample_draw"),
    # training
    *_fields(TrainingParams, TRAINING, "rounds", "max_rejected_rounds"),
    *_fields(RunParams, TRAINING, "device", "device"),
    *_fields(TrainingParams, TRAINING, "late_clients", "min_nodes"),
    *_fields(DataParams, TRAINING, "roster_path", "roster_path"),
    # output
    *_fields(OutputParams, OUTPUT),
    # faults
    *_fields(FaultParams, FAULTS),
    # shared by several clustering strategies
    *_fields(ClusteringParams, SHARED),
)


class _Registered(Protocol):
    name: str
    params_type: type


def strategy_keys(registry: Mapping[str, _Registered]) -> tuple[Key, ...]:
    """The keys each strategy of ``registry`` declares on its parameters (``common.params.param``).

    Group and reader of each is the strategy's name; fields declared ``shared`` are left to the
    shared keys declared here.
    """
    out = []
    for name, cls in registry.items():
        keys = run_config_keys(cls.params_type)
        for f in dataclasses.fields(cls.params_type):
            spec = spec_of(f)
            if f.init and not f.metadata.get(SHARED_KEY) and spec is not None:
                out.append(Key(keys[f.name], cast(Scalar, f.default), name, spec.help, spec.choices, (name,)))
    return tuple(out)


def readers(registry: Mapping[str, _Registered]) -> dict[str, tuple[str, ...]]:
    """Each key the strategies of ``registry`` read, and the strategies that read it, in registry order."""
    found: dict[str, list[str]] = {}
    for name, cls in registry.items():
        for key in run_config_keys(cls.params_type).values():
            found.setdefault(key, []).append(name)
    return {key: tuple(names) for key, names in found.items()}


def shared_meanings(registry: Mapping[str, _Registered]) -> dict[str, str]:
    """For each shared key, what it means to the strategies that say (``shared(..., help=...)``).

    ``"; cfl-gp: upper end of the K search; ifca, fesem: K when num-clusters is 0"``: strategies
    that give one meaning are named together, in registry order.
    """
    said: dict[str, dict[str, list[str]]] = {}
    for name, cls in registry.items():
        keys = run_config_keys(cls.params_type)
        for f in dataclasses.fields(cls.params_type):
            spec = spec_of(f)
            if f.metadata.get(SHARED_KEY) and spec is not None and spec.help:
                said.setdefault(keys[f.name], {}).setdefault(spec.help, []).append(name)
    return {
        key: "".join(f"; {', '.join(names)}: {text}" for text, names in texts.items()) for key, texts in said.items()
    }


def build(registry: Mapping[str, _Registered], default_strategy: str) -> tuple[tuple[Key, ...], tuple[str, ...]]:
    """Every key and every group: the keys declared here, then each strategy's own.

    The ``strategy`` key gets ``default_strategy`` as its default and the registry's names as
    its choices; a shared key gets the strategies that read it as its ``read_by``.

    Raises
    ------
    ValueError
        If a strategy field has no declaration (``param``) or a key is declared twice.
    """
    for name, cls in registry.items():
        bare = [f.name for f in dataclasses.fields(cls.params_type) if f.init and spec_of(f) is None]
        if bare:
            raise ValueError(
                f"The parameters of strategy {name!r} must each be declared with common.params.param. "
                f"Got {bare} without a declaration instead."
            )
    read_by = readers(registry)
    meanings = shared_meanings(registry)
    run = tuple(
        dataclasses.replace(key, default=default_strategy, choices=tuple(sorted(registry)))
        if key.name == "strategy"
        else dataclasses.replace(key, read_by=read_by.get(key.name, ()), help=key.help + meanings.get(key.name, ""))
        for key in RUN_KEYS
    )
    own = strategy_keys(registry)
    names = [key.name for key in run + own]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"Each run-config key must be declared once. Got {twice} more than once instead.")
    groups = RUN_GROUPS + tuple(dict.fromkeys(key.group for key in own))
    return run + own, groups
