"""Run-wide parameters read from Flower's run-config, validated once (no Flower here).

Strategy-specific parameters live with each strategy; the scenario's in
``common.scenarios.ScenarioConfig``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from . import keys, schema
from .metrics import final_stretch
from .params import run_config_keys
from .validation import check_bool, check_choice, check_float, check_int, check_str

OWNER = "the run config"

T = TypeVar("T")
AGGREGATIONS = ("mean", "median")


def run_config_value(rc: Mapping[str, Any], key: str, default: Any) -> Any:
    """``rc[key]`` or ``default``; run-config values arrive as TOML scalars."""
    return rc[key] if key in rc else default


def params_from_run_config(cls: type[T], rc: Mapping[str, Any]) -> T:
    """Build the dataclass ``cls`` from its run-config keys (``run_config_keys``).

    A missing key keeps the field's default, and the dataclass validates the values in
    ``__post_init__``.

    Raises
    ------
    ValueError
        When ``rc`` holds a key that was renamed (``common.schema.RENAMED``), naming the new key.
    """
    schema.check_renamed(rc)
    return cls(**{name: rc[key] for name, key in run_config_keys(cls).items() if key in rc})


@dataclass(frozen=True)
class TrainingParams:
    """The federated-training knobs every strategy shares.

    Attributes are the run-config keys with ``-`` turned into ``_``.
    """

    rounds: int = 100
    fraction: float = 0.2
    local_epochs: int = 5
    batch_size: int = 32
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    eval_every: int = 5
    round_timeout: float = 600.0
    node_wait_timeout: float = 300.0
    seed: int = 0
    late_clients: float = 0.0
    late_round: int = 0
    identity_timeout: float = 600.0
    aggregation: str = "mean"
    weight_cap: float = 10.0
    max_rejected_rounds: int = 3
    min_nodes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rounds", check_int(self.rounds, "rounds", OWNER, low=1))
        object.__setattr__(
            self,
            "fraction",
            check_float(self.fraction, "fraction", OWNER, low=0.0, high=1.0, closed=(False, True)),
        )
        object.__setattr__(self, "local_epochs", check_int(self.local_epochs, "local-epochs", OWNER, low=1))
        object.__setattr__(self, "batch_size", check_int(self.batch_size, "batch-size", OWNER, low=1))
        object.__setattr__(self, "lr", check_float(self.lr, "lr", OWNER, low=0.0, closed=(False, True)))
        object.__setattr__(
            self,
            "momentum",
            check_float(self.momentum, "momentum", OWNER, low=0.0, high=1.0, closed=(True, False)),
        )
        object.__setattr__(self, "weight_decay", check_float(self.weight_decay, "weight-decay", OWNER, low=0.0))
        object.__setattr__(self, "eval_every", check_int(self.eval_every, "eval-every", OWNER, low=1))
        for name in ("round_timeout", "node_wait_timeout", "identity_timeout"):
            value = check_float(getattr(self, name), name.replace("_", "-"), OWNER, low=0.0, closed=(False, True))
            object.__setattr__(self, name, value)
        object.__setattr__(self, "seed", check_int(self.seed, "seed", OWNER, low=0))
        object.__setattr__(
            self,
            "late_clients",
            check_float(self.late_clients, "late-clients", OWNER, low=0.0, high=1.0, closed=(True, False)),
        )
        object.__setattr__(self, "late_round", check_int(self.late_round, "late-round", OWNER, low=0, high=self.rounds))
        object.__setattr__(self, "aggregation", check_choice(self.aggregation, "aggregation", OWNER, AGGREGATIONS))
        object.__setattr__(self, "weight_cap", check_float(self.weight_cap, "weight-cap", OWNER, low=0.0))
        object.__setattr__(
            self, "max_rejected_rounds", check_int(self.max_rejected_rounds, "max-rejected-rounds", OWNER, low=0)
        )
        object.__setattr__(self, "min_nodes", check_int(self.min_nodes, "min-nodes", OWNER, low=0))

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> TrainingParams:
        """Build from run-config keys (``local-epochs`` -> ``local_epochs``)."""
        return params_from_run_config(cls, rc)

    def local_config(self) -> dict[str, Any]:
        """The local-training settings every train message carries (the server round aside)."""
        return {
            keys.LOCAL_EPOCHS: self.local_epochs,
            keys.BATCH_SIZE: self.batch_size,
            keys.LR: self.lr,
            keys.MOMENTUM: self.momentum,
            keys.WEIGHT_DECAY: self.weight_decay,
        }

    def num_sampled(self, num_clients: int) -> int:
        """Clients trained per round: ``ceil(fraction * num_clients)``, at least one."""
        return max(1, min(num_clients, math.ceil(self.fraction * num_clients - 1e-9)))

    @property
    def admission_round(self) -> int:
        """The round late clients join: ``late-round``, or ``rounds // 2 + 1`` when it is 0."""
        return self.late_round or self.rounds // 2 + 1

    def is_eval_round(self, server_round: int) -> bool:
        """Evaluate every ``eval-every`` rounds and every round of the ``final_stretch``."""
        return server_round % self.eval_every == 0 or server_round > self.rounds - final_stretch(self.rounds)


@dataclass(frozen=True)
class FaultParams:
    """Injected client faults, for tests and drills; all off by default.

    In each round a client fails (raises) with probability ``fail_fraction`` and, if it does
    not fail, answers ``slow_delay`` seconds late with probability ``slow_fraction``; the draw
    is seeded by the run's seed, the round and the partition id.
    """

    fail_fraction: float = 0.0
    slow_fraction: float = 0.0
    slow_delay: float = 0.0

    def __post_init__(self) -> None:
        for name in ("fail_fraction", "slow_fraction"):
            value = check_float(
                getattr(self, name), name.replace("_", "-"), OWNER, low=0.0, high=1.0, closed=(True, False)
            )
            object.__setattr__(self, name, value)
        object.__setattr__(self, "slow_delay", check_float(self.slow_delay, "slow-delay", OWNER, low=0.0))

    @property
    def active(self) -> bool:
        """Whether any fault is injected."""
        return self.fail_fraction > 0 or (self.slow_fraction > 0 and self.slow_delay > 0)

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> FaultParams:
        """Build from the ``fail-fraction``, ``slow-fraction`` and ``slow-delay`` run-config keys."""
        return params_from_run_config(cls, rc)


@dataclass(frozen=True)
class OutputParams:
    """Where a run writes its results, how often it checkpoints and what it resumes from.

    ``checkpoint_every`` = 0 turns checkpoints off; ``resume_from`` = "" starts afresh.
    """

    results_dir: str = "results"
    run_name: str = ""
    checkpoint_every: int = 0
    resume_from: str = ""
    tensorboard: bool = False
    save_models: bool = True

    def __post_init__(self) -> None:
        check_str(self.results_dir, "results-dir", OWNER)
        check_str(self.run_name, "run-name", OWNER)
        check_str(self.resume_from, "resume-from", OWNER)
        check_bool(self.tensorboard, "tensorboard", OWNER)
        check_bool(self.save_models, "save-models", OWNER)
        object.__setattr__(self, "checkpoint_every", check_int(self.checkpoint_every, "checkpoint-every", OWNER, low=0))
        if self.results_dir.strip() == "":
            raise ValueError(f"The 'results-dir' parameter of {OWNER} must be a non-empty path. Got '' instead.")
        if "/" in self.run_name or self.run_name in {".", ".."}:
            raise ValueError(
                f"The 'run-name' parameter of {OWNER} must be a plain folder name. Got {self.run_name!r} instead."
            )

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> OutputParams:
        """Build from the ``results-dir`` and ``run-name`` run-config keys."""
        return params_from_run_config(cls, rc)
