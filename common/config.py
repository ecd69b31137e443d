"""Run-wide parameters read from Flower's run-config, validated once (no Flower here).

Each key read here is declared once, on its field (``common.params.param``); ``common.schema``
places it among the run-config keys. Strategy-specific parameters live with each strategy; the
scenario's in ``common.scenarios.ScenarioConfig``; the clustering keys several strategies share
in ``common.params.ClusteringParams``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from . import keys
from .local_data import FORMATS
from .metrics import final_stretch
from .params import check_params, check_renamed, param, run_config_keys
from .validation import check_int

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
        When ``rc`` holds a key that was renamed (``common.params.RENAMED``), naming the new key.
    """
    check_renamed(rc)
    return cls(**{name: rc[key] for name, key in run_config_keys(cls).items() if key in rc})


@dataclass(frozen=True)
class TrainingParams:
    """The federated-training knobs every strategy shares.

    Attributes are the run-config keys with ``-`` turned into ``_``; each is declared here once
    (``common.params.param``: default, help, range), and ``common.schema`` places its key.
    """

    rounds: int = param(100, "federated rounds; >= 1", low=1)
    fraction: float = param(
        0.2, "share of the clients trained each round, in (0, 1]", low=0.0, high=1.0, closed=(False, True)
    )
    local_epochs: int = param(5, "local SGD epochs per round; >= 1", low=1)
    batch_size: int = param(32, "local SGD batch size; >= 1", low=1)
    lr: float = param(
        0.01,
        "local SGD learning rate; > 0 (modified: CFLGT's paper trains at 0.001, the paper preset of "
        "benchmarks.compare; 0.01 also trains small own data, docs/results/selection.md)",
        low=0.0,
        closed=(False, True),
    )
    momentum: float = param(0.9, "local SGD momentum, in [0, 1)", low=0.0, high=1.0, closed=(True, False))
    weight_decay: float = param(0.0, "local SGD weight decay; >= 0", low=0.0)
    eval_every: int = param(5, "evaluate every client every N rounds (and in the last round); >= 1", low=1)
    round_timeout: float = param(
        600.0, "seconds to wait for a round's replies; missing replies are skipped", low=0.0, closed=(False, True)
    )
    node_wait_timeout: float = param(
        300.0, "seconds to wait for all clients to connect at start", low=0.0, closed=(False, True)
    )
    identity_timeout: float = param(
        600.0,
        "seconds the start-up identity query waits for the nodes' answers "
        "(cold simulated clients need tens of seconds); > 0",
        low=0.0,
        closed=(False, True),
    )
    aggregation: str = param(
        "mean",
        "cluster aggregation: mean (weighted by num-examples) or median "
        "(coordinate-wise, every reply counts once); FedMedian always takes the median",
        choices=AGGREGATIONS,
    )
    weight_cap: float = param(
        10.0,
        "cap on one reply's weight, as a multiple of the median train size the clients reported; 0 = no cap; >= 0",
        low=0.0,
    )
    max_rejected_rounds: int = param(
        3,
        "stop the run after this many consecutive rounds in which no train or evaluate reply was usable "
        "(rejected, failed or timed out); 0 = never; >= 0",
        low=0,
    )
    late_clients: float = param(
        0.0,
        "share of the clients (seeded) held out until late-round, in [0, 1)",
        low=0.0,
        high=1.0,
        closed=(True, False),
    )
    late_round: int = param(0, "the round late clients join; 0: rounds // 2 + 1", checked=False)
    min_nodes: int = param(
        0,
        "go on with at least this many client nodes when fewer than num-clients are in the federation "
        "(after node-wait-timeout in a deployment); 0 = all num-clients must be there, else the run stops; "
        "int in [0, num-clients]",
        low=0,
    )
    seed: int = param(
        0, "every random choice (partition, initial model, sampling, shuffling) flows from it; >= 0", low=0
    )

    def __post_init__(self) -> None:
        check_params(self, OWNER)
        object.__setattr__(self, "late_round", check_int(self.late_round, "late-round", OWNER, low=0, high=self.rounds))

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
class RunParams:
    """The strategy, the model and the device of a run: declared here (``common.params.param``),
    checked where they are used (``server.experiment``: the registry, the model factory, the
    device's name); ``strategy``'s default is the registry's ``DEFAULT_STRATEGY`` (``common.schema.build``).
    """

    strategy: str = param("", "the clustering algorithm (see the groups below and README, Strategies)", checked=False)
    model: str = param(
        "dnn",
        "the model every client trains: a built-in, or the user's "
        "'package.module:factory', factory(input_shape, num_classes) -> torch.nn.Module, importable on the "
        "server and every client",
        choices=("dnn", "lenet5", "linear", "resnet18"),
        checked=False,
    )
    device: str = param(
        "auto", "where clients train: auto (cuda if torch sees a GPU), cpu, cuda, cuda:N", checked=False
    )

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> RunParams:
        """Build from the ``strategy``, ``model`` and ``device`` run-config keys (unchecked)."""
        return params_from_run_config(cls, rc)


@dataclass(frozen=True)
class FaultParams:
    """Injected client faults, for tests and drills; all off by default.

    In each round a client fails (raises) with probability ``fail_fraction`` and, if it does
    not fail, answers ``slow_delay`` seconds late with probability ``slow_fraction``; the draw
    is seeded by the run's seed, the round and the partition id.
    """

    fail_fraction: float = param(
        0.0,
        "drills only: chance a client fails (raises) in a round, in [0, 1)",
        low=0.0,
        high=1.0,
        closed=(True, False),
    )
    slow_fraction: float = param(
        0.0,
        "drills only: chance a client answers slow-delay seconds late, in [0, 1)",
        low=0.0,
        high=1.0,
        closed=(True, False),
    )
    slow_delay: float = param(0.0, "drills only: the delay of a slow client in seconds; >= 0", low=0.0)

    def __post_init__(self) -> None:
        check_params(self, OWNER)

    @property
    def delays(self) -> bool:
        """Whether some clients answer late."""
        return self.slow_fraction > 0 and self.slow_delay > 0

    @property
    def active(self) -> bool:
        """Whether any fault is injected."""
        return self.fail_fraction > 0 or self.delays

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> FaultParams:
        """Build from the ``fail-fraction``, ``slow-fraction`` and ``slow-delay`` run-config keys."""
        return params_from_run_config(cls, rc)


@dataclass(frozen=True)
class OutputParams:
    """Where a run writes its results, how often it checkpoints and what it resumes from.

    ``checkpoint_every`` = 0 turns checkpoints off; ``resume_from`` = "" starts afresh.
    """

    results_dir: str = param("results", "folder of the results; each run writes results-dir/run-name")
    run_name: str = param(
        "",
        "the run's folder name; empty: <strategy>-<scenario>-<dataset>-s<seed>-<time>, "
        "or <strategy>-<folder>-<format>-s<seed>-<time> for own data (data-path)",
    )
    checkpoint_every: int = param(
        0, "save the strategy's declared state every N rounds to checkpoint.npz; 0 = never", low=0
    )
    resume_from: str = param("", "continue a run from this checkpoint.npz; empty: start afresh")
    tensorboard: bool = param(
        False, "also write each round's metrics for TensorBoard to <run>/tensorboard (needs umbel[tensorboard])"
    )
    save_models: bool = param(
        True,
        "write the cluster models to <run>/models/ and send each client its cluster's final model (docs/models.md)",
    )

    def __post_init__(self) -> None:
        check_params(self, OWNER)
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


@dataclass(frozen=True)
class DataParams:
    """Where a run's data comes from, what scores its clustering and who may join it: the dataset
    folder, the clients' own folders and how to read them (``common.sources``), the truth file and
    the roster (``server.experiment``). ``input_shape`` stays text here: ``common.sources.parse_shape``
    reads it.
    """

    data_dir: str = param(
        "", "folder with the dataset files; empty: Debian's /usr/share/datasets, then torchvision's download"
    )
    data_path: str = param(
        "",
        "own data (docs/own-data.md): a folder of partition_<i>/ client folders, each "
        "simulated client reads only its own; a SuperNode's node-config data-path names its own folder instead; "
        "empty: the scenario",
    )
    data_format: str = param("auto", "format of the clients' own folders", choices=FORMATS)
    x_column: str = param("", "own data: input column (hf) or array (npz); empty: image, img or x")
    y_column: str = param("", "own data: label column (hf) or array (npz); empty: label or y")
    num_classes: int = param(0, "classes of the clients' own data and the model's outputs; 0: those of dataset", low=0)
    input_shape: str = param(
        "", "one sample's shape, 'C,H,W' or 'F', of the clients' own data; empty: that of dataset", checked=False
    )
    val_fraction: float = param(
        0.0,
        "own data: share of a client's samples held out for validation, in [0, 1)",
        low=0.0,
        high=1.0,
        closed=(True, False),
    )
    truth_path: str = param(
        "",
        "a federation.json with each partition's true group (umbel export writes one): "
        "ARI and AMI are scored against it; empty: the clients' own claims (n/a for own data)",
    )
    roster_path: str = param(
        "",
        "deployments: a roster.json binding each partition id to a SuperNode key or node id (umbel deploy "
        "register writes one); a node whose key does not match is refused; empty: first claim wins",
    )

    def __post_init__(self) -> None:
        check_params(self, OWNER)

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> DataParams:
        """Build from the ``data-dir``, ``data-path``, ..., ``roster-path`` run-config keys."""
        return params_from_run_config(cls, rc)
