"""``ClusteredStrategy``: K cluster models, a client -> cluster assignment, the round loop and its hooks.

Its collaborators (docs/architecture.md): the messenger, the reply guard, the roster (``admission``), the
round's phases, the recorder and the run state (``state``). A cluster without members or replies keeps
its model and shows as size 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from common import keys
from common.config import TrainingParams, params_from_run_config
from common.learning import ChanceLossCheck
from common.params import NoParams
from common.signals import Queried, losses

from . import admission, phases
from .delivery import Delivery, deliver_models
from .federation import ClientInfo, Membership, packed
from .messenger import Messenger, timeouts
from .outcome import stop_if_all_rejected
from .record import RoundRecord
from .recorder import AssignmentDiff, RoundStats, Scored, assignment_history, clustering_time, log_start, record_round
from .replies import S, TrainUpdate, metric_ranges
from .state import Checkpoints


T = TypeVar("T")


class ClusteredStrategy(Strategy):
    """Base of every umbel strategy (FedAvg is K = 1, Local is K = N); its state is declared in ``__init__``."""

    name: ClassVar[str] = "clustered"
    params_type: ClassVar[type] = NoParams
    round_params: ClassVar[dict[str, int]] = {}  # parameters naming a round, with how many rounds must follow it
    distance_matrix: np.ndarray | None = None  # the last clustering's client distances (``distances.png``)
    distance_pids: Sequence[int] = ()  # the partition ids of its rows
    # Per-run wiring and settings, never saved; ``state_fields``: what a checkpoint saves (``strategies.state``).
    transient: ClassVar[frozenset[str]] = frozenset(
        "messenger on_round training params checkpoints metric_ranges membership "
        "_lost identity_seconds deliver delivery".split()
    )
    state_fields: ClassVar[frozenset[str]] = frozenset(
        "rng clients waiting initial models assignment history _assignment_diffs _logged_assignment head_key truth "
        "last_eval _told_untested _sent_cluster _rejected_rounds _accepted_phases _scored distance_matrix "
        "distance_pids last_trained learning".split()
    )
    queries: ClassVar[tuple[type[Queried], ...]] = (losses.ModelLosses,)  # signals it asks for: strategies.queries
    placement_rule: ClassVar[str | None] = None  # how ``admit`` places a newcomer; None: lowest train loss

    def __init__(self, training: TrainingParams | None = None, params: Any = None) -> None:
        self.training = training if training is not None else TrainingParams()
        self.params = params if params is not None else self.params_type()
        self.rng = np.random.default_rng(self.training.seed)
        self.clients: dict[int, ClientInfo] = {}
        self.waiting: dict[int, ClientInfo] = {}
        self.initial: ArrayRecord | None = None
        self.models: list[ArrayRecord] = []
        self.assignment: dict[int, int] = {}
        self.last_trained: dict[int, int] = {}  # cluster -> the last round its model was aggregated
        self.history: list[RoundRecord] = []
        self._assignment_diffs: list[AssignmentDiff] = []
        self._logged_assignment: dict[int, int] = {}
        self._scored: Scored | None = None
        self.head_key = "head.weight"  # the classifier head's weight (``common.models.find_head``)
        self.truth: dict[int, int] | None = None  # true groups from a truth file; None: the clients' claims
        self.last_eval: dict[int, tuple[float, float]] = {}
        self._told_untested = False
        self._sent_cluster: dict[int, int] = {}
        self._rejected_rounds: dict[str, int] = {}
        self._accepted_phases: set[str] = set()
        self.learning: ChanceLossCheck | None = None  # the not-learning warning (common/learning.py)
        self.messenger = Messenger(timeouts(self.training))
        self.membership = Membership()
        self._lost: set[int] = set()
        self.metric_ranges = metric_ranges()  # each reply metric's allowed range (regression: R^2 <= 1)
        self.on_round: Callable[[ClusteredStrategy, RoundRecord], None] | None = None
        self.checkpoints = Checkpoints()
        self.identity_seconds = 0.0  # waiting for the nodes and their identities at start-up
        self.deliver = True  # send every client its cluster's final model after the last round
        self.delivery: Delivery | None = None

    @classmethod
    def from_run_config(cls, training: TrainingParams, rc: Mapping[str, Any]) -> ClusteredStrategy:
        """Build with this strategy's parameters read (and validated) from run-config."""
        return cls(training, params_from_run_config(cls.params_type, rc))

    def check_federation(self, num_clients: int) -> None:
        """Raise ``ValueError`` if the parameters contradict ``rounds`` or ``num_clients`` clients."""
        admission.check_round_params(self, num_clients)

    def init_clusters(self, initial: ArrayRecord) -> None:
        """Start state once the clients are known; default: everyone in one cluster."""
        self.set_clusters([initial], dict.fromkeys(self.clients, 0))

    def before_round(self, server_round: int) -> None:
        """Collect signals or re-cluster (inside ``clustering_timer``) before the round's training."""

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        """Extra train config for one client (default: none)."""
        return {}

    def train_records(self, server_round: int, partition_id: int, cluster: int) -> dict[str, ArrayRecord]:
        """The model records of one client's train message (default: its cluster's model)."""
        return {keys.ARRAYS: self.models[cluster]}

    def reply_cluster(self, server_round: int, partition_id: int, content: RecordDict, update: TrainUpdate) -> int:
        """The cluster a checked train reply belongs to (default: the one sent); ``ReplyFault`` if impossible."""
        return self._sent_cluster[partition_id]

    def aggregate_cluster(self, cluster: int, updates: list[TrainUpdate]) -> ArrayRecord:
        """A cluster's new model: FedAvg's mean weighted by (capped) ``num-examples``, or the median."""
        return phases.merge(updates, self.training.aggregation)

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        """See the round's checked updates by partition id, after aggregation (``update.delta()``)."""

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Give late clients (already in ``clients``) a cluster: default, lowest train loss."""
        self.assignment.update(self.assign_by_loss(newcomers, server_round))

    def phase(self, server_round: int) -> str:
        """Name of what this round does, for the records."""
        return "train"

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures, in words (the title of ``distances.png``)."""
        return "client distance"

    def run_details(self) -> dict[str, Any]:
        """Strategy-specific facts for ``summary.json`` (key -> JSON value); none by default."""
        return {}

    def set_clusters(self, models: list[ArrayRecord], assignment: Mapping[int, int]) -> None:
        """Replace the cluster models and the assignment together; ``ValueError`` on one outside ``models``."""
        bad = {pid: k for pid, k in assignment.items() if not 0 <= k < len(models)}
        if bad:
            raise ValueError(f"Assignments {bad} point outside the {len(models)} cluster models.")
        self.models, self.assignment, self.last_trained = list(models), dict(assignment), {}

    @property
    def assignment_changes(self) -> list[dict[str, Any]]:
        """``{"round", "assignment"}`` each time the assignment changed (``assignments.json``)."""
        return assignment_history(self._assignment_diffs)

    @property
    def num_clusters(self) -> int:
        """Number of non-empty clusters."""
        return len(set(self.assignment.values()))

    @property
    def grid(self) -> Grid | None:
        """The grid the run talks to (the messenger's)."""
        return self.messenger.grid

    @grid.setter
    def grid(self, grid: Grid | None) -> None:
        self.messenger.grid = grid

    def sample(self, server_round: int) -> list[int]:
        """The round's training clients, drawn with the strategy's own seeded generator."""
        pool = sorted(pid for pid in self.clients if pid in self.assignment)
        return sorted(int(p) for p in self.rng.choice(pool, size=self.training.num_sampled(len(pool)), replace=False))

    def assign_by_loss(self, pids: Sequence[int], server_round: int) -> dict[int, int]:
        """Each client's cluster by the lowest train loss of the cluster models (``admission.assign_by_loss``)."""
        return admission.assign_by_loss(self, pids, server_round)

    def query_signal(
        self,
        action: str,
        pids: Iterable[int],
        server_round: int,
        from_arrays: Callable[..., S],
        *,
        models: Sequence[ArrayRecord] = (),
        config: Mapping[str, Any] | None = None,
        **expected: Any,
    ) -> dict[int, S]:
        """Ask ``pids`` for a signal with ``query.<action>``; the checked signals (``phases.query_signal``)."""
        return phases.query_signal(self, action, pids, server_round, from_arrays, models, config, **expected)

    def clustering_timer(self) -> AbstractContextManager[None]:
        """Count the enclosed server-side clustering work in ``clustering-seconds``."""
        return clustering_time(self.messenger.stats)

    def require(self, value: T | None, name: str, hook: str) -> T:
        """``value``; ``RuntimeError`` naming the attribute ``name`` and the ``hook`` that sets it if None."""
        if value is None:
            raise RuntimeError(f"{type(self).__name__}.{name} is not initialised yet: {hook} must run first.")
        return value

    @property
    def initial_model(self) -> ArrayRecord:
        """The initial model; ``RuntimeError`` before ``start`` has set it (before ``init_clusters``)."""
        return self.require(self.initial, "initial", "start() (it sets the initial model before init_clusters)")

    def head_shape(self) -> tuple[int, int]:
        """``(outputs, features)`` of the initial model's classifier head."""
        outputs, features = self.initial_model[self.head_key].shape
        return int(outputs), int(features)

    def true_group(self, pid: int) -> int:
        """Client ``pid``'s true group, for scoring only (-1: unknown)."""
        return self.truth.get(pid, -1) if self.truth is not None else self.clients[pid].true_group

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One train message per sampled client, each with its own cluster's model."""
        return phases.train_messages(self, server_round, config)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check each reply, then aggregate inside each cluster (``aggregate_cluster``)."""
        metrics = phases.apply_train(self, server_round, replies)
        return packed(self.models), metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One evaluate message per assigned client holding test data, with its own cluster's model."""
        return phases.evaluate_messages(self, server_round, config)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Mean and std of the clients' local test accuracy (each with its cluster's model)."""
        return phases.apply_evaluate(self, server_round, replies)

    def summary(self) -> None:
        """Log the strategy, its parameters and the cluster state (Flower's ``Strategy.summary``)."""
        log_start(self)

    def checkpoint_to(self, path: Path, every: int) -> None:
        """Save the whole state to ``path`` every ``every`` rounds and after the last one."""
        self.checkpoints.path, self.checkpoints.every = Path(path), every

    def resume(self, checkpoint: dict[str, Any]) -> None:
        """Continue from a ``load_checkpoint`` payload when ``start`` runs (after re-identifying clients)."""
        self.checkpoints.pending = checkpoint

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int | None = None,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
        *,
        expected_clients: int = 1,
    ) -> Result:
        """Run the whole experiment (Flower's ``Strategy.start``; ``expected_clients``: nodes to wait for)."""
        rounds = num_rounds if num_rounds is not None else self.training.rounds
        wait = timeout if timeout is not None else self.training.round_timeout
        self.training = replace(self.training, rounds=rounds, round_timeout=wait)
        self.messenger.grid, self.messenger.wait = grid, timeouts(self.training)
        first_round, result = admission.join(self, grid, initial_arrays, expected_clients), Result()
        wait_train = self.messenger.timeout(MessageType.TRAIN)
        self.summary()
        for rnd in range(first_round, self.training.rounds + 1):
            stats = self.messenger.stats = RoundStats(start=time.perf_counter())
            self.messenger.offline = admission.refresh_membership(self, grid, stats, rnd, wait_train)
            if self.waiting and rnd >= self.training.admission_round:
                admission.admit_waiting(self, rnd)
            self.before_round(rnd)
            messages = self.configure_train(rnd, initial_arrays, train_config or ConfigRecord(), grid)
            arrays, metrics = self.aggregate_train(rnd, grid.send_and_receive(messages, timeout=wait))
            result.arrays = arrays if arrays is not None else result.arrays
            if metrics is not None:
                result.train_metrics_clientapp[rnd] = metrics
            eval_metrics, usable = None, {MessageType.TRAIN: stats.train_replies}
            if self.training.is_eval_round(rnd):
                messages = self.configure_evaluate(rnd, initial_arrays, evaluate_config or ConfigRecord(), grid)
                eval_metrics = self.aggregate_evaluate(rnd, grid.send_and_receive(messages, timeout=wait))
                if eval_metrics is not None:
                    result.evaluate_metrics_clientapp[rnd] = eval_metrics
                usable[MessageType.EVALUATE] = len(self.last_eval)
            if evaluate_fn is not None and (server_metrics := evaluate_fn(rnd, packed(self.models))) is not None:
                result.evaluate_metrics_serverapp[rnd] = server_metrics
            record_round(self, rnd, eval_metrics, stats)
            stop_if_all_rejected(usable, stats.asked, self._rejected_rounds, self._accepted_phases, rnd, self.training)
            self.checkpoints.save_if_due(self, rnd, self.training.rounds)
        self.delivery = deliver_models(self, self.training.rounds) if self.deliver else None
        return result
