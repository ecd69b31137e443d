"""``ClusteredStrategy``: one model per cluster and a client -> cluster assignment.

The base owns the mechanics every clustered algorithm shares: identity discovery, seeded
client sampling, one message per client carrying its own cluster's model, reply checks,
per-cluster aggregation weighted by ``num-examples``, evaluation of every client with its
cluster's model, traffic and timing records, and the round loop (Flower's ``Strategy.start``
carries a single model, so it is overridden). Late clients are held out and admitted by
``strategies.admission``, checkpoints written and read back by ``strategies.state``. An algorithm
only says how it collects its signal and assigns clusters, through the hooks
``init_clusters``, ``before_round``, ``client_config``, ``train_records``, ``reply_cluster``,
``aggregate_cluster``, ``after_train``, ``admit`` and ``phase``; ``query_signal`` asks clients for
a typed signal.

Empty clusters are kept on purpose: a cluster without members (or without replies this
round) keeps its model and shows as size 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from logging import INFO, WARNING
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from common import keys
from common.aggregation import coordinate_median, weighted_average
from common.config import TrainingParams, params_from_run_config, run_config_key
from common.learning import ChanceLossCheck, observe_train_loss
from common.metrics import cluster_sizes, clustering_scores, mean_std
from common.signals.losses import ModelLosses

from .admission import admit_waiting, hold_out_late
from .delivery import Delivery, deliver_models
from .federation import (
    REJECTED,
    ClientInfo,
    Exchange,
    Membership,
    Outbox,
    Traffic,
    discover_clients,
    identify,
    live_nodes,
    packed,
    send,
)
from .record import RoundRecord
from .outcome import identity_failures, sent, stop_reason
from .state import restore, save_state
from .replies import (
    ReplyFault,
    S,
    TrainUpdate,
    decode_evaluate_reply,
    decode_signal,
    decode_train_reply,
    metric_ranges,
)


@dataclass(frozen=True)
class NoParams:
    """Parameters of a strategy that has none of its own."""


RoundCallback = Callable[["ClusteredStrategy", RoundRecord], None]
T = TypeVar("T")


class ClusteredStrategy(Strategy):
    """Base of every umbel strategy (FedAvg is K = 1, Local is K = N).

    Parameters
    ----------
    training : TrainingParams
        Rounds, fraction per round, local epochs, optimiser, evaluation cadence, seed.
    params : dataclass, optional
        The strategy's own parameters (``params_type``); defaults when omitted.

    Attributes
    ----------
    models : list of ArrayRecord
        The K cluster models.
    assignment : dict of int to int
        Partition id -> cluster index into ``models``.
    clients : dict of int to ClientInfo
        The clients taking part so far, by partition id.
    waiting : dict of int to ClientInfo
        Late clients (``late-clients``) not admitted yet; they join in ``admit``.
    initial : ArrayRecord or None
        The initial model every cluster model descends from.
    history : list of RoundRecord
        One record per round (``to_dict`` is the line ``metrics.jsonl`` holds).
    assignment_changes : list of dict
        ``{"round", "assignment"}`` each time the assignment changed (``assignments.json``).
    head_key : str
        ``state_dict`` key of the model's classifier-head weight (``common.models.find_head``).
    truth : dict of int to int or None
        True groups by partition id from a truth file; ``None``: the clients' own claims.
    distance_matrix : ndarray of shape (n, n) or None
        The client distances the last clustering used (drawn as ``distances.png``); None here,
        set by the algorithms that have one.
    distance_pids : sequence of int
        Partition ids of ``distance_matrix``'s rows (empty: every assigned client).
    """

    name: ClassVar[str] = "clustered"
    params_type: ClassVar[type] = NoParams
    # Parameters naming a round, each with how many rounds must still follow it.
    round_params: ClassVar[dict[str, int]] = {}
    distance_matrix: np.ndarray | None = None
    distance_pids: Sequence[int] = ()
    # Per-run wiring and settings: attributes a checkpoint leaves out (``strategies.state``).
    transient: ClassVar[frozenset[str]] = frozenset(
        {
            "grid",
            "on_round",
            "training",
            "params",
            "checkpoint_path",
            "checkpoint_every",
            "_outbox",
            "_stats",
            "_resume",
            "metric_ranges",
            "membership",
            "_lost",
            "identity_seconds",
            "deliver",
            "delivery",
        }
    )
    # What a checkpoint saves; each algorithm adds its own (``strategies.state.declared``).
    state_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "rng",
            "clients",
            "waiting",
            "initial",
            "models",
            "assignment",
            "history",
            "_assignment_diffs",
            "_logged_assignment",
            "head_key",
            "truth",
            "last_eval",
            "_told_untested",
            "_sent_cluster",
            "_rejected_rounds",
            "_accepted_phases",
            "_scored",
            "distance_matrix",
            "distance_pids",
            "last_trained",
            "learning",
        }
    )
    # How a client that never took part is placed (``admit``); None: lowest train loss, no rule of its own.
    placement_rule: ClassVar[str | None] = None

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
        self._assignment_diffs: list[tuple[int, dict[int, int | None]]] = []  # (round, what changed; None: left)
        self._logged_assignment: dict[int, int] = {}
        self.head_key = "head.weight"
        self.truth: dict[int, int] | None = None
        self.last_eval: dict[int, tuple[float, float]] = {}
        self._told_untested = False
        self.grid: Grid | None = None
        self.on_round: RoundCallback | None = None
        self.checkpoint_path: Path | None = None
        self.checkpoint_every = 0
        self._resume: dict[str, Any] | None = None
        self.learning: ChanceLossCheck | None = None  # the not-learning warning (common/learning.py)
        self._outbox: Outbox | None = None
        self._sent_cluster: dict[int, int] = {}
        self._stats = _RoundStats()
        self.membership = Membership()
        self._lost: set[int] = set()
        self._rejected_rounds: dict[str, int] = {}
        self._accepted_phases: set[str] = set()
        self.identity_seconds = 0.0  # waiting for the nodes and their identities at start-up
        self.deliver = True  # send every client its cluster's final model after the last round
        self.delivery: Delivery | None = None
        self._scored: tuple[tuple[list[int], list[int], list[int]], tuple[float, float] | None] | None = None
        self.metric_ranges = metric_ranges()  # each reply metric's allowed range (regression: R^2 <= 1)

    @classmethod
    def from_run_config(cls, training: TrainingParams, rc: Mapping[str, Any]) -> ClusteredStrategy:
        """Build with this strategy's parameters read (and validated) from run-config."""
        return cls(training, params_from_run_config(cls.params_type, rc))

    def check_federation(self, num_clients: int) -> None:
        """Raise ``ValueError`` if the parameters contradict ``rounds`` or ``num_clients`` clients."""
        for field_name, after in self.round_params.items():
            value, high = getattr(self.params, field_name), self.training.rounds - after
            if value > high:
                raise ValueError(
                    f"The '{run_config_key(self.params_type, field_name)}' parameter of {type(self).__name__} must be "
                    f"an int in the range [0, {high}] ('rounds' is {self.training.rounds}). "
                    f"Got {value!r} instead."
                )
        k = getattr(self.params, "num_clusters", 0)
        if k > num_clients:
            raise ValueError(
                f"The 'num-clusters' parameter of {type(self).__name__} must be at most the number "
                f"of clients ({num_clients}). Got {k!r} instead."
            )

    # ----------------------------------------------------------------- algorithm hooks
    def init_clusters(self, initial: ArrayRecord) -> None:
        """Start state once the clients are known; default: everyone in one cluster."""
        self.set_clusters([initial], dict.fromkeys(self.clients, 0))

    def before_round(self, server_round: int) -> None:
        """Collect signals or re-cluster before the round's training (default: nothing)."""

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        """Extra train config for one client (default: none)."""
        return {}

    def train_records(self, server_round: int, partition_id: int, cluster: int) -> dict[str, ArrayRecord]:
        """The model records of one client's train message (default: its cluster's model)."""
        return {keys.ARRAYS: self.models[cluster]}

    def reply_cluster(self, server_round: int, partition_id: int, content: RecordDict) -> int:
        """The cluster a train reply belongs to (default: the one sent); ``ReplyFault`` if impossible."""
        return self._sent_cluster[partition_id]

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        """See the round's checked train replies, by partition id, after aggregation.

        ``update.delta()`` is each client's update from the model it was sent.
        """

    def admit(self, server_round: int, newcomers: list[int]) -> None:
        """Give late clients (already in ``clients``) a cluster: default, lowest train loss."""
        self.assignment.update(self.assign_by_loss(newcomers, server_round))

    def phase(self, server_round: int) -> str:
        """Name of what this round does, for the records."""
        return "train"

    # ----------------------------------------------------------------- cluster state
    def set_clusters(self, models: list[ArrayRecord], assignment: Mapping[int, int]) -> None:
        """Replace the cluster models and the assignment together.

        Raises
        ------
        ValueError
            If an assignment points outside ``models``.
        """
        bad = {pid: k for pid, k in assignment.items() if not 0 <= k < len(models)}
        if bad:
            raise ValueError(f"Assignments {bad} point outside the {len(models)} cluster models.")
        self.models = list(models)
        self.assignment = dict(assignment)
        self.last_trained = {}

    @property
    def assignment_changes(self) -> list[dict[str, Any]]:
        """``{"round", "assignment"}`` each time the assignment changed, rebuilt from the stored changes.

        Only what changed is kept during the run, so memory grows with the clients that change
        cluster, not with the federation times the rounds.
        """
        out: list[dict[str, Any]] = []
        state: dict[int, int] = {}
        for server_round, diff in self._assignment_diffs:
            for pid, k in diff.items():
                if k is None:
                    state.pop(pid, None)
                else:
                    state[pid] = k
            out.append({"round": server_round, "assignment": {str(p): state[p] for p in sorted(state)}})
        return out

    @property
    def num_clusters(self) -> int:
        """Number of non-empty clusters."""
        return len(set(self.assignment.values()))

    def sample(self, server_round: int) -> list[int]:
        """The round's training clients, drawn with the strategy's own seeded generator."""
        pool = sorted(pid for pid in self.clients if pid in self.assignment)
        m = self.training.num_sampled(len(pool))
        return sorted(int(p) for p in self.rng.choice(pool, size=m, replace=False))

    def assign_by_loss(self, pids: Sequence[int], server_round: int) -> dict[int, int]:
        """Each client's cluster by the lowest loss of the cluster models on its TRAIN split.

        One cluster needs no query. Clients that fail or send a malformed reply go to the
        largest cluster, with a warning.
        """
        if not pids:
            return {}
        if len(self.models) == 1:
            return dict.fromkeys(pids, 0)
        losses = self.query_signal(
            keys.LOSSES_ACTION,
            pids,
            server_round,
            ModelLosses.from_arrays,
            models=self.models,
            num_models=len(self.models),
        )
        sizes = cluster_sizes(self.assignment, len(self.models))
        fallback = int(np.argmax(sizes)) if sizes else 0
        for pid in sorted(set(pids) - set(losses)):
            log(
                WARNING,
                "round %d: client %d has no train losses; it joins the largest cluster %d",
                server_round,
                pid,
                fallback,
            )
        return {pid: losses[pid].best() if pid in losses else fallback for pid in pids}

    @contextmanager
    def clustering_timer(self) -> Iterator[None]:
        """Count the enclosed server-side clustering work in ``clustering-seconds``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._stats.clustering_seconds += time.perf_counter() - start

    # ----------------------------------------------------------------- messaging
    def query(self, message_type: str, contents: Mapping[int, RecordDict], server_round: int) -> Exchange:
        """Send one query per client (``query.<action>``) and collect the replies."""
        outbox = Outbox(self._nodes(), message_type, f"{message_type}-{server_round}", self.training.round_timeout)
        for pid, content in contents.items():
            outbox.add(pid, content)
        exchange = send(self._require_grid(), outbox, self.training.round_timeout)
        self._account(exchange, server_round)
        return exchange

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
        """Ask ``pids`` for a signal with ``query.<action>``; the checked signals by partition id.

        Parameters
        ----------
        action : str
            The query action (a key in ``client.signals.QUERIES``).
        pids : iterable of int
            The clients to ask.
        server_round : int
            For the records and the clients' seeds.
        from_arrays : callable
            The signal dataclass's ``from_arrays``; a ``SignalError`` rejects that client only.
        models : sequence of ArrayRecord
            Sent as ``arrays`` (one) or ``arrays-0..K-1`` with ``num-models`` (several).
        config : mapping, optional
            Added to the config record, which already holds the round and training parameters.
        **expected
            Passed to ``from_arrays``.
        """
        records: dict[str, ArrayRecord] = {}
        if len(models) == 1:
            records[keys.ARRAYS] = models[0]
        else:
            records = {keys.model_record(k): m for k, m in enumerate(models)}
        cfg = {**self._base_config(server_round), **(dict(config or {}))}
        if len(models) > 1:
            cfg[keys.NUM_MODELS] = len(models)
        contents = {pid: RecordDict({**records, keys.CONFIG: ConfigRecord(cfg)}) for pid in pids}
        exchange = self.query(keys.query_type(action), contents, server_round)
        signals: dict[int, S] = {}
        for pid in sorted(exchange.replies):
            try:
                signals[pid] = decode_signal(exchange.replies[pid], from_arrays, **expected)
            except ReplyFault as fault:
                self._reject(exchange, pid, str(fault), server_round)
        return signals

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One train message per sampled client, each with its own cluster's model."""
        outbox = Outbox(self._nodes(), MessageType.TRAIN, f"train-{server_round}", self.training.round_timeout)
        self._sent_cluster = {}
        for pid in self.sample(server_round):
            k = self.assignment[pid]
            cfg = {**dict(config), **self._train_config(server_round, pid, k)}
            outbox.add(pid, RecordDict({**self.train_records(server_round, pid, k), keys.CONFIG: ConfigRecord(cfg)}))
            self._sent_cluster[pid] = k
        self._outbox = outbox
        return outbox.messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check each reply, then average inside each cluster weighted by ``num-examples``."""
        exchange = self._collect(replies, server_round)
        updates: dict[int, TrainUpdate] = {}
        sent: dict[int, dict[str, np.ndarray]] = {}
        for pid in sorted(exchange.replies):
            try:
                k = self.reply_cluster(server_round, pid, exchange.replies[pid])
                if k not in sent:
                    sent[k] = {name: arr.numpy() for name, arr in self.models[k].items()}
                updates[pid] = decode_train_reply(
                    exchange.replies[pid], self.models[k], self.clients[pid].num_train, sent[k]
                )
            except ReplyFault as fault:
                self._reject(exchange, pid, str(fault), server_round)
                continue
            self._sent_cluster[pid] = k
        updates = self._capped(updates, server_round)
        members: dict[int, list[TrainUpdate]] = {}
        for pid, update in updates.items():
            members.setdefault(self._sent_cluster[pid], []).append(update)
        for k, cluster_updates in sorted(members.items()):
            self.models[k] = self.aggregate_cluster(k, cluster_updates)
            self.last_trained[k] = server_round
        self._stats.train_replies = len(updates)
        self.after_train(server_round, updates)
        metrics: dict[str, int | float | list[int] | list[float]] = {
            "replies": len(updates),
            "failures": len(exchange.failures),
        }
        if updates:
            loss = metrics[keys.TRAIN_LOSS] = float(np.mean([u.loss for u in updates.values()]))
            self.learning = observe_train_loss(
                self.learning, self.training, self.initial_model, self.head_key, server_round, loss
            )
        return packed(self.models), MetricRecord(metrics)

    def aggregate_cluster(self, cluster: int, updates: list[TrainUpdate]) -> ArrayRecord:
        """New model of one cluster from its members' updates, in the cluster model's dtypes.

        FedAvg's mean weighted by (capped) ``num-examples``, or with ``aggregation`` "median"
        the coordinate-wise median.
        """
        reference = updates[0].sent
        if self.training.aggregation == "median":
            merged = coordinate_median([u.arrays for u in updates], reference)
        else:
            merged = weighted_average([u.arrays for u in updates], [u.num_examples for u in updates], reference)
        return ArrayRecord({name: Array(arr) for name, arr in merged.items()})

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One evaluate message per assigned client that holds test data, with its own cluster's model.

        A client whose identity reported no test samples is not asked (in a large federation the
        test split leaves some clients none); the final accuracy's coverage counts the others.
        """
        outbox = Outbox(self._nodes(), MessageType.EVALUATE, f"evaluate-{server_round}", self.training.round_timeout)
        untested = [pid for pid in self.assignment if self.clients[pid].num_test == 0]
        if untested and not self._told_untested:
            self._told_untested = True
            log(
                WARNING,
                "%d of %d clients hold no test samples and are never evaluated (e.g. clients %s)",
                len(untested),
                len(self.assignment),
                sorted(untested)[:5],
            )
        for pid in sorted(set(self.assignment) - set(untested)):
            cfg = {**dict(config), keys.SERVER_ROUND: server_round, keys.CLUSTER_ID: self.assignment[pid]}
            outbox.add(
                pid, RecordDict({keys.ARRAYS: self.models[self.assignment[pid]], keys.CONFIG: ConfigRecord(cfg)})
            )
        self._outbox = outbox
        return outbox.messages

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Mean and std of the clients' local test accuracy (each with its cluster's model)."""
        exchange = self._collect(replies, server_round)
        self.last_eval = {}
        for pid, content in sorted(exchange.replies.items()):
            try:
                self.last_eval[pid] = decode_evaluate_reply(content, self.clients[pid].num_test, self.metric_ranges)
            except ReplyFault as fault:
                self._reject(exchange, pid, str(fault), server_round)
        if not self.last_eval:
            return None
        acc_mean, acc_std = mean_std([a for a, _ in self.last_eval.values()])
        loss_mean, _ = mean_std([loss for _, loss in self.last_eval.values()])
        return MetricRecord({keys.ACCURACY: acc_mean, "accuracy-std": acc_std, keys.LOSS: loss_mean})

    def summary(self) -> None:
        """Log the strategy, its parameters and the cluster state."""
        sizes = cluster_sizes(self.assignment, len(self.models)) if self.models else []
        log(
            INFO,
            "%s: %s, %d clients, %d cluster models, sizes %s",
            type(self).__name__,
            self.params,
            len(self.clients),
            len(self.models),
            sizes,
        )

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures, in words (the title of ``distances.png``)."""
        return "client distance"

    def run_details(self) -> dict[str, Any]:
        """Strategy-specific facts for ``summary.json`` (key -> JSON value); none by default."""
        return {}

    # ----------------------------------------------------------------- the run
    def checkpoint_to(self, path: Path, every: int) -> None:
        """Save the whole state to ``path`` every ``every`` rounds and after the last one."""
        self.checkpoint_path, self.checkpoint_every = Path(path), every

    def resume(self, checkpoint: dict[str, Any]) -> None:
        """Continue from a ``load_checkpoint`` payload when ``start`` runs (after re-identifying clients)."""
        self._resume = checkpoint

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
        """Run the whole experiment: identities, clustering hooks, training, evaluation.

        Same signature as Flower's ``Strategy.start``; ``num_rounds`` and ``timeout``
        default to the training parameters, ``evaluate_fn`` is called with the packed
        cluster models, and ``expected_clients`` is how many nodes to wait for.
        """
        if num_rounds is not None:
            self.training = replace(self.training, rounds=num_rounds)
        if timeout is not None:
            self.training = replace(self.training, round_timeout=timeout)
        self.grid = grid
        first_round = 1
        if self._resume is not None or not self.clients:
            started = time.perf_counter()
            clients, asked = discover_clients(
                grid,
                expected_clients,
                wait_timeout=self.training.node_wait_timeout,
                reply_timeout=self.training.identity_timeout,
                membership=self.membership,
            )
            self.identity_seconds = time.perf_counter() - started
            if not clients:
                raise RuntimeError(
                    f"No client answered the identity query ('{keys.MSG_IDENTITY}'): {identity_failures(asked)} "
                    f"after {asked.seconds:.0f} s (identity-timeout {self.training.identity_timeout:g} s); "
                    "nothing to train. Every umbel strategy first asks each "
                    "node who it is: run umbel's ClientApp (client.app:app) or add a "
                    f"@app.query('{keys.IDENTITY_ACTION}') handler to yours (docs/protocol.md)."
                )
            if self._resume is not None:
                first_round = self._restore(self._resume, clients)
            else:
                self.clients, self.waiting = hold_out_late(
                    clients, self.training.late_clients, self.rng, self.training.admission_round
                )
                self.initial = initial_arrays
                self.init_clusters(initial_arrays)
        self.summary()
        result = Result()
        for rnd in range(first_round, self.training.rounds + 1):
            self._stats = _RoundStats(start=time.perf_counter())
            self._refresh_membership(rnd)
            if self.waiting and rnd >= self.training.admission_round:
                admit_waiting(self, rnd)
            self.before_round(rnd)
            replies = grid.send_and_receive(
                self.configure_train(rnd, initial_arrays, train_config or ConfigRecord(), grid),
                timeout=self.training.round_timeout,
            )
            arrays, train_metrics = self.aggregate_train(rnd, replies)
            result.arrays = arrays if arrays is not None else result.arrays
            if train_metrics is not None:
                result.train_metrics_clientapp[rnd] = train_metrics
            eval_metrics = None
            if self.training.is_eval_round(rnd):
                replies = grid.send_and_receive(
                    self.configure_evaluate(rnd, initial_arrays, evaluate_config or ConfigRecord(), grid),
                    timeout=self.training.round_timeout,
                )
                eval_metrics = self.aggregate_evaluate(rnd, replies)
                if eval_metrics is not None:
                    result.evaluate_metrics_clientapp[rnd] = eval_metrics
            if evaluate_fn is not None:
                server_metrics = evaluate_fn(rnd, packed(self.models))
                if server_metrics is not None:
                    result.evaluate_metrics_serverapp[rnd] = server_metrics
            self._record(rnd, eval_metrics)
            self._stop_if_all_rejected(rnd)
            every = self.checkpoint_every
            if self.checkpoint_path is not None and every and (rnd % every == 0 or rnd == self.training.rounds):
                save_state(self, rnd, self.checkpoint_path)
        self.delivery = deliver_models(self, self.training.rounds) if self.deliver else None
        return result

    # ----------------------------------------------------------------- internals
    def _base_config(self, server_round: int) -> dict[str, Any]:
        return {keys.SERVER_ROUND: server_round, **self.training.local_config()}

    def _train_config(self, server_round: int, pid: int, cluster: int) -> dict[str, Any]:
        return {**self._base_config(server_round), keys.CLUSTER_ID: cluster, **self.client_config(server_round, pid)}

    def _restore(self, checkpoint: dict[str, Any], found: dict[int, ClientInfo]) -> int:
        """Load a checkpoint's state onto this strategy; the first round still to run."""
        restore(self, checkpoint, found)
        self._lost, self._resume = set(), None
        log(INFO, "Resuming %s after round %d with %d clients", type(self).name, checkpoint["round"], len(self.clients))
        return int(checkpoint["round"]) + 1

    def _refresh_membership(self, server_round: int) -> None:
        """Identify nodes never seen (restarted, late); note the clients lost and rejoined."""
        grid = self._require_grid()
        live = live_nodes(grid)
        found: dict[int, ClientInfo] = {}
        unknown = self.membership.unknown(live)
        if unknown:
            found, exchange = identify(grid, unknown, self.membership, live, reply_timeout=self.training.round_timeout)
            self._stats.down += exchange.down
            self._stats.up += exchange.up
        newcomers = []
        for pid, info in sorted(found.items()):
            if pid in self.clients:
                self.clients[pid] = info
            elif pid in self.waiting:
                self.waiting[pid] = info
            else:
                self.waiting[pid] = info
                newcomers.append(pid)
        lost = {pid for pid, info in {**self.waiting, **self.clients}.items() if info.node_id not in live}
        s = self._stats
        s.lost = sorted(lost - self._lost)
        s.rejoined = sorted(((self._lost - lost) | set(found) | set(self.membership.restarted(live))) - set(newcomers))
        self._lost = lost
        if s.lost:
            log(WARNING, "round %d: clients lost (their nodes are offline): %s", server_round, s.lost)
        if s.rejoined:
            log(
                INFO,
                "round %d: clients rejoined, with their cluster state: %s (nodes %s)",
                server_round,
                s.rejoined,
                [(self.clients.get(p) or self.waiting[p]).node_id for p in s.rejoined],
            )
        if newcomers:
            log(INFO, "round %d: clients never seen before arrived: %s", server_round, newcomers)

    def _nodes(self) -> dict[int, int]:
        return {pid: info.node_id for pid, info in self.clients.items()}

    def _require_grid(self) -> Grid:
        if self.grid is None:
            raise RuntimeError("The strategy has no grid yet: call start() first.")
        return self.grid

    def _collect(self, replies: Iterable[Message], server_round: int) -> Exchange:
        if self._outbox is None:
            raise RuntimeError("Replies arrived for no configured round.")
        exchange = self._outbox.collect(replies, self.training.round_timeout)
        self._outbox = None
        self._stats.asked[exchange.phase] = exchange
        self._account(exchange, server_round)
        return exchange

    def _account(self, exchange: Exchange, server_round: int) -> None:
        self._stats.rejected += len(exchange.refused)
        for pid, cause in sorted(exchange.failures.items()):
            if pid not in self._stats.logged:
                log(WARNING, "round %d %s: client %d failed: %s", server_round, exchange.phase, pid, cause)
            self._stats.logged.add(pid)
        self._stats.add(exchange)

    def _reject(self, exchange: Exchange, pid: int, fault: str, server_round: int) -> None:
        log(WARNING, "round %d %s: client %d reply rejected: %s", server_round, exchange.phase, pid, fault)
        if exchange.phase in (MessageType.TRAIN, MessageType.EVALUATE):
            self._stats.faults.setdefault(exchange.phase, f"client {pid}: {fault}")
        self._stats.logged.add(pid)
        del exchange.replies[pid]
        exchange.failures[pid] = f"{REJECTED}{fault}"
        self._stats.rejected += 1

    def _stop_if_all_rejected(self, server_round: int) -> None:
        """Raise once no reply of a phase was usable in ``max-rejected-rounds`` rounds in a row.

        Per phase (train, evaluate), over the rounds that sent that phase's messages: a round
        counts whether its replies were rejected, failed or timed out (``stop_reason``), and the
        last round stops a run that never accepted a reply of that phase.
        """
        limit = self.training.max_rejected_rounds
        phases = {MessageType.TRAIN: self._stats.train_replies}
        if self.training.is_eval_round(server_round):
            phases[MessageType.EVALUATE] = len(self.last_eval)
        for phase, accepted in phases.items():
            if accepted:
                self._rejected_rounds[phase] = 0
                self._accepted_phases.add(phase)
            elif sent(self._stats.asked.get(phase)):
                streak = self._rejected_rounds[phase] = self._rejected_rounds.get(phase, 0) + 1
                never = phase not in self._accepted_phases and server_round == self.training.rounds
                if limit and (streak >= limit or never):
                    raise RuntimeError(stop_reason(phase, server_round, streak, limit, self._stats.asked[phase]))

    def _capped(self, updates: dict[int, TrainUpdate], server_round: int) -> dict[int, TrainUpdate]:
        """Updates whose ``num-examples`` is at most ``weight-cap`` x the federation's median train size."""
        if not self.training.weight_cap or not updates:
            return updates
        median = float(np.median([c.num_train for c in self.clients.values()]))
        cap = max(1, int(self.training.weight_cap * median))
        for pid, update in sorted(updates.items()):
            if update.num_examples > cap:
                log(
                    WARNING,
                    "round %d train: client %d claims num-examples %d; its weight is capped at %d "
                    "(weight-cap %g x median train size %g)",
                    server_round,
                    pid,
                    update.num_examples,
                    cap,
                    self.training.weight_cap,
                    median,
                )
                updates[pid] = replace(update, num_examples=cap)
                self._stats.capped += 1
        return updates

    def require(self, value: T | None, name: str, hook: str) -> T:
        """``value`` when it is set.

        Raises
        ------
        RuntimeError
            If ``value`` is None: the attribute ``name`` is not initialised until ``hook`` has run.
        """
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
        if self.truth is not None:
            return self.truth.get(pid, -1)
        return self.clients[pid].true_group

    def _record(self, server_round: int, eval_metrics: MetricRecord | None) -> None:
        pids = sorted(self.assignment)
        labels = [self.assignment[p] for p in pids]
        truth = [self.true_group(p) for p in pids]
        changed = self._scored is None or self._scored[0] != (pids, labels, truth)
        if self._scored is None or changed:  # ARI and AMI cost milliseconds; most rounds keep the assignment
            self._scored = (
                (pids, labels, truth),
                clustering_scores(np.array(truth), np.array(labels)) if pids else None,
            )
        scores = self._scored[1]
        s = self._stats
        record = RoundRecord(
            round=server_round,
            phase=self.phase(server_round),
            accuracy=None if eval_metrics is None else _scalar(eval_metrics, keys.ACCURACY),
            accuracy_std=None if eval_metrics is None else _scalar(eval_metrics, "accuracy-std"),
            loss=None if eval_metrics is None else _scalar(eval_metrics, keys.LOSS),
            ari=None if scores is None else scores[0],
            ami=None if scores is None else scores[1],
            num_clusters=self.num_clusters,
            num_clients=len(pids),
            eval_clients=None if eval_metrics is None else len(self.last_eval),
            clients_lost=s.lost,
            clients_rejoined=s.rejoined,
            cluster_sizes=cluster_sizes(self.assignment, len(self.models)),
            train_replies=s.train_replies,
            failures=s.failures,
            rejected=s.rejected,
            capped=s.capped,
            bytes_down_model=s.down.model,
            bytes_up_model=s.up.model,
            bytes_down_signal=s.down.signal,
            bytes_up_signal=s.up.signal,
            clustering_seconds=round(s.clustering_seconds, 6),
            round_seconds=round(time.perf_counter() - s.start, 4),
        )
        self.history.append(record)
        if changed or not self._assignment_diffs:
            last, current = self._logged_assignment, dict(zip(pids, labels, strict=True))
            diff: dict[int, int | None] = {p: k for p, k in current.items() if last.get(p) != k}
            diff.update(dict.fromkeys(set(last) - set(current)))
            if diff or not self._assignment_diffs:
                self._assignment_diffs.append((server_round, diff))
                self._logged_assignment = current
        if self.on_round is not None:
            self.on_round(self, record)


def _scalar(metrics: MetricRecord, key: str) -> float:
    value = metrics[key]
    if isinstance(value, list):
        raise TypeError(f"Metric {key!r} is a list, not a number.")
    return float(value)


@dataclass
class _RoundStats:
    start: float = 0.0
    train_replies: int = 0
    failures: int = 0
    rejected: int = 0
    capped: int = 0
    clustering_seconds: float = 0.0
    lost: list[int] = field(default_factory=list)
    rejoined: list[int] = field(default_factory=list)
    down: Traffic = field(default_factory=Traffic)
    up: Traffic = field(default_factory=Traffic)
    logged: set[int] = field(default_factory=set)  # clients whose failure this round is logged
    faults: dict[str, str] = field(default_factory=dict)  # the first rejection per phase
    asked: dict[str, Exchange] = field(default_factory=dict)  # train and evaluate exchanges of the round

    def add(self, exchange: Exchange) -> None:
        self.failures += len(exchange.failures)
        self.down += exchange.down
        self.up += exchange.up
