"""FLAG (anonymous, "FLAG: Clustered Federated Learning Combining Data and Gradient Information
in Heterogeneous Settings", under review; Alg. 1-3, Sec. 4, appendix 8-10).

Round 1, before training: every client sends, per class it holds, ``flag-vectors`` principal
vectors of its TRAIN data (0: the paper's rule, about 1% of the class's samples; the default 3
is modified) with its class counts (``query.subspaces``; no counts with
``flag-uniform-weights``), and its update after ``flag-gradient-epochs`` of local SGD from the
initial model (``query.update``). The server builds A = beta V + (1 - beta) G
(common.clustering.flag) and cuts the average-linkage HC tree of A at ``flag-alpha``.
``flag-alpha = 0`` means not given: sweep alpha from 1 down by ``flag-sweep-step``; for each
distinct clustering, ``flag-sweep-clients`` sampled clients run ``flag-sweep-rounds`` rounds of
clustered FL (``local-epochs`` each) on 90% of their train split and report accuracy on the
held-out 10% (``query.holdout``); alpha is chosen at the elbow of accuracy against the number
of clusters (Kneedle, ``elbow``). ``num-clusters`` > 0
cuts into that many clusters instead. Every cluster model then starts from the initial model.
The sweep's clients train the run's model (``flag-sweep-model`` "", modified) or the named
built-in (the paper: an unnamed "lightweight model with fewer layers"; ``linear`` is umbel's).
Above ``flag-sample-above`` clients (modified; 0: the paper's exact step at every size), A, its
tree, the sweep and its elbow are those of a seeded sample of 2,000 clients, and every other
client joins the sample cluster of smallest mean A to 20 of its members (``flag_place``: the
same affinity, V and G scaled by the sample's): no N x N matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord
from flwr.common import log

from common import keys
from common.clustering.flag import (
    FlagSample,
    choose_threshold,
    flag_labels,
    flag_proximity,
    sweep_cuts,
    threshold_grid,
)
from common.clustering.hierarchical import linkage_tree, relabel_by_appearance
from common.clustering.oneshot import OneShotClusters, cut_distances
from common.clustering.sampled import SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, SAMPLE_ABOVE_PAPER
from common.clustering.similarity import row_sketch
from common.data import DatasetInfo
from common.models import MODELS, build_model, check_model
from common.signals.flag import SWEEP_MODEL, HoldoutResult
from common.signals.subspaces import ClassSubspaces
from common.signals.update import ModelUpdate
from common.params import check_params, param
from common.params import shared

from .batches import QUERY_BATCH, in_batches, sketched
from .flat import add_flat, float_size
from .oneshot import OneShotStrategy, check_cut

HOLDOUT = 0.1  # the paper's validation share of a sampled client's train data


@dataclass(frozen=True)
class FLAGParams:
    """``beta``, ``delta`` in [0, 1]; ``alpha`` in [0, 1] (0 = sweep); ``sweep_step`` in (0, 1];
    ``sweep_clients``, ``sweep_rounds``, ``gradient_epochs`` >= 1; ``flag_vectors`` >= 0 (0: the
    paper's about 1% of each class's samples; default 3, modified);
    ``uniform_weights``; ``flag_sweep_model``: "" (the run's model, modified) or a built-in
    model the sweep trains instead; the shared ``num_clusters`` (0 = not given) and ``linkage``; keys
    ``flag-*`` but the shared ``num-clusters`` and ``linkage``.
    """

    key_prefix: ClassVar[str] = "flag"
    beta: float = param(0.5, "weight of the data angles against the gradient angles, in [0, 1]", low=0.0, high=1.0)
    delta: float = param(0.5, "weight of the class counts in the data angles, in [0, 1]", low=0.0, high=1.0)
    alpha: float = param(
        0.0, "HC cut threshold; 0 = sweep it and take the elbow of validation accuracy", low=0.0, high=1.0
    )
    sweep_step: float = param(0.1, "step of the flag-alpha sweep", low=0.0, high=1.0, closed=(False, True))
    sweep_clients: int = param(30, "clients that score each swept clustering", low=1)
    sweep_rounds: int = param(5, "rounds of clustered FL that score each swept clustering", low=1)
    gradient_epochs: int = param(20, "local epochs of the gradient signal", low=1)
    uniform_weights: bool = param(False, "true: no class counts, uniform weights")
    flag_vectors: int = param(
        3,
        "principal vectors per class each client sends; 0 = the paper's about 1% "
        "of the class's samples (3 is modified)",
        low=0,
        paper="about 1% of the class's samples",
    )
    flag_sweep_model: str = param(
        "",
        "the model the alpha sweep's clients train: empty = the run's model (modified), or a built-in "
        "such as linear (the paper trains an unnamed lightweight model with fewer layers)",
        choices=("", *MODELS),
        paper="an unnamed lightweight model with fewer layers",
    )
    sample_above: int = param(SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, low=0, paper=SAMPLE_ABOVE_PAPER)
    num_clusters: int = shared()
    linkage: str = shared()

    def __post_init__(self) -> None:
        check_params(self, "FLAG")
        check_cut(self, "FLAG")


class FLAG(OneShotStrategy):
    """One-shot HC on FLAG's data + gradient proximity, threshold chosen by a validation sweep.

    Attributes
    ----------
    data_matrix, gradient_matrix : ndarray of shape (N, N) or None
        V (Eq. 6) and G (Eq. 2) of the clustered clients (``distance_matrix`` is A).
    sweep : list of dict
        One record per alpha tried: ``alpha``, ``num-clusters``, ``accuracy`` (None if no reply).
    chosen_alpha : float or None
        The threshold the sweep chose.
    sweep_initial : ArrayRecord or None
        Initial weights of ``flag-sweep-model`` (set by :meth:`prepare_sweep`); None: the run's model.
    """

    name = "flag"
    queries = (ClassSubspaces, ModelUpdate, HoldoutResult)
    state_fields: ClassVar[frozenset[str]] = frozenset(
        {"_pending", "chosen_alpha", "data_matrix", "gradient_matrix", "sweep", "sweep_initial"}
    )
    keeps_signals = False  # newcomers join by train loss: the stored updates would be unused
    query_batch: ClassVar[int] = QUERY_BATCH
    params_type = FLAGParams
    transient = OneShotStrategy.transient | {"_cache"}

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        return "A = beta V + (1 - beta) G (data and gradient angles)"

    def __init__(self, training: Any = None, params: Any = None) -> None:
        super().__init__(training, params)
        self.data_matrix: np.ndarray | None = None
        self.gradient_matrix: np.ndarray | None = None
        self.sweep: list[dict[str, Any]] = []
        self.chosen_alpha: float | None = None
        self.sweep_initial: ArrayRecord | None = None
        self._pending: dict[int, tuple[ClassSubspaces, ModelUpdate]] | None = None
        self._cache: tuple[tuple[int, ...], np.ndarray, np.ndarray | None, FlagSample | None] | None = None

    def prepare_sweep(self, info: DatasetInfo, seed: int) -> None:
        """Build the initial weights of ``flag-sweep-model`` for the run's data (before training).

        Raises
        ------
        ValueError
            Naming ``'flag-sweep-model'`` when that model cannot take the run's inputs or task.
        """
        name = self.params.flag_sweep_model
        if not name:
            return
        try:
            check_model(name, info.input_shape, info.task)
        except ValueError as err:
            raise ValueError(
                f"The 'flag-sweep-model' parameter of FLAG must be a model for inputs of shape "
                f"{info.input_shape} ({info.task}). Got {name!r} instead ({err})."
            ) from None
        self.sweep_initial = ArrayRecord(build_model(name, info.input_shape, info.num_classes, seed).state_dict())

    @property
    def threshold(self) -> float:
        """The HC cut: ``alpha`` when given, else the sweep's choice (1 before it ran)."""
        return self.params.alpha if self.params.alpha > 0 else float(self.chosen_alpha or 1.0)

    @property
    def _num_classes(self) -> int:
        return self.head_shape()[0]

    def collect(self, pids: Sequence[int], server_round: int) -> dict[int, tuple[ClassSubspaces, ModelUpdate]]:
        """Each client's class bases (with counts unless ``flag-uniform-weights``) and update direction.

        The updates are asked ``query_batch`` clients at a time and, where ``flag_distances`` would
        sketch them (``sketch_rows``: all clients' full updates above 2 GiB), sketched as each
        batch arrives, so the server never holds every client's full update.
        """
        if self._pending is not None:
            got, self._pending = self._pending, None
            return got
        p, counts = self.params, not self.params.uniform_weights
        most = p.flag_vectors or max(1, round(0.01 * max(self.clients[q].num_train for q in pids)))
        subs = self.query_signal(
            keys.SUBSPACES_ACTION,
            pids,
            server_round,
            ClassSubspaces.from_arrays,
            config={keys.SUBSPACE_VECTORS: p.flag_vectors, keys.WITH_COUNTS: counts},
            dim=None,
            num_classes=self._num_classes,
            max_vectors=most,
            with_counts=counts,
        )
        dims = [s.dim for s in subs.values()]
        for pid in sorted(q for q, s in subs.items() if s.dim != max(set(dims), key=dims.count)):
            log(WARNING, "round %d: client %d sent bases of another row count; ignored", server_round, pid)
            del subs[pid]
        initial = self.initial_model
        asked, dim = sorted(subs), float_size(initial)
        sketch = row_sketch(len(asked), dim, self.training.seed)
        ups: dict[int, ModelUpdate] = {}
        for batch in in_batches(asked, self.query_batch):
            replies = self.query_signal(
                keys.UPDATE_ACTION,
                batch,
                server_round,
                ModelUpdate.from_arrays,
                models=[initial],
                config={keys.LOCAL_EPOCHS: p.gradient_epochs},
                size=dim,
            )
            ups.update(sketched(replies, sketch))
        return {pid: (subs[pid], ups[pid]) for pid in sorted(ups)}

    def cluster_signals(self, signals: Sequence[tuple[ClassSubspaces, ModelUpdate]]) -> OneShotClusters:
        """A (``distances``) cut at ``alpha`` (or the sweep's choice), or into ``num-clusters``."""
        a, tree = self._proximity(signals)
        labels, silhouette = cut_distances(a, self.hc_cut, tree)
        sample = self._sample(signals)
        if sample is None:
            return OneShotClusters(labels, a, silhouette)
        bases, counts, updates = self._signal_arrays(signals)
        p = self.params
        labels = flag_labels(
            sample,
            labels,
            bases,
            counts,
            updates,
            self._num_classes,
            beta=p.beta,
            delta=p.delta,
            seed=self.training.seed,
        )
        return OneShotClusters(labels, None, silhouette)

    def distances(self, signals: Sequence[tuple[ClassSubspaces, ModelUpdate]]) -> np.ndarray:
        """A = beta minmax(V) + (1 - beta) minmax(G); V and G are kept on the strategy."""
        return self._proximity(signals)[0]

    def _signal_arrays(
        self, signals: Sequence[tuple[ClassSubspaces, ModelUpdate]]
    ) -> tuple[list[dict[int, np.ndarray]], np.ndarray | None, list[np.ndarray]]:
        """The clients' class bases by class, class counts (None with ``flag-uniform-weights``) and updates."""
        c = self._num_classes
        bases = [dict(zip((int(k) for k in s.classes), s.bases, strict=True)) for s, _ in signals]
        counts = (
            None
            if self.params.uniform_weights
            else np.stack([np.bincount(s.classes, weights=s.counts, minlength=c) for s, _ in signals])
        )
        return bases, counts, [u.delta for _, u in signals]

    def _proximity(self, signals: Sequence[tuple[ClassSubspaces, ModelUpdate]]) -> tuple[np.ndarray, np.ndarray | None]:
        """A and its HC tree (None for one client), made once per set of signals: the sweep's cuts
        and the final one share them. Above ``flag-sample-above`` clients, A of a seeded sample
        (``flag_sample``; umbel's sampled form)."""
        key = tuple(id(s) for s in signals)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1], self._cache[2]
        bases, counts, updates = self._signal_arrays(signals)
        p, c, seed = self.params, self._num_classes, self.training.seed
        a, self.data_matrix, self.gradient_matrix, sample = flag_proximity(
            bases, counts, updates, c, beta=p.beta, delta=p.delta, seed=seed, sample_above=p.sample_above
        )
        if sample is not None:
            log(
                INFO,
                "FLAG: A of a seeded sample of %d of %d clients; the others join the sample cluster of smallest "
                "mean A to its members",
                len(sample.positions),
                len(signals),
            )
        tree = linkage_tree(a, p.linkage) if a.shape[0] > 1 else None
        self._cache = (key, a, tree, sample)
        return a, tree

    def _sample(self, signals: Sequence[tuple[ClassSubspaces, ModelUpdate]]) -> FlagSample | None:
        """The sampled form's sample of ``signals`` (None: the exact step), after ``_proximity``."""
        self._proximity(signals)
        return self.require(self._cache, "_cache", "_proximity")[3]

    def cluster(self, server_round: int) -> None:
        """Run the threshold sweep first when neither ``flag-alpha`` nor ``num-clusters`` is given."""
        if self.params.alpha == 0 and self.params.num_clusters == 0 and self.chosen_alpha is None:
            signals = self.collect(sorted(self.clients), server_round)
            if not signals:
                log(WARNING, "round %d: no client sent FLAG's signals; clustering again next round", server_round)
                return
            pids = sorted(signals)
            with self.clustering_timer():
                a, tree = self._proximity([signals[q] for q in pids])
            sample = self._sample([signals[q] for q in pids])
            swept = pids if sample is None else [pids[int(i)] for i in sample.positions]
            self.chosen_alpha = self.choose_alpha(server_round, swept, a, tree)
            self._pending = signals
        super().cluster(server_round)

    def choose_alpha(self, server_round: int, pids: list[int], a: np.ndarray, tree: np.ndarray | None = None) -> float:
        """Alg. 3: validation accuracy of each distinct cut of A (of ``tree``, its HC tree, when given);
        the alpha at the elbow."""
        p = self.params
        alphas = threshold_grid(p.sweep_step)
        with self.clustering_timer():
            cuts = sweep_cuts(a, alphas, p.linkage, tree=tree)
        sample = sorted(int(q) for q in self.rng.choice(pids, size=min(p.sweep_clients, len(pids)), replace=False))
        rows = [pids.index(q) for q in sample]
        scores: dict[tuple[int, ...], float | None] = {}
        self.sweep = []
        for alpha, labels in zip(alphas, cuts, strict=True):
            induced = tuple(int(k) for k in relabel_by_appearance(labels[rows]))
            if induced not in scores:
                scores[induced] = self.validate(server_round, sample, induced)
            self.sweep.append(
                {"alpha": float(alpha), "num-clusters": int(labels.max()) + 1, "accuracy": scores[induced]}
            )
            log(
                INFO,
                "FLAG sweep: alpha %.3f, %d clusters, validation accuracy %s",
                alpha,
                self.sweep[-1]["num-clusters"],
                scores[induced],
            )
        chosen = choose_threshold([r["num-clusters"] for r in self.sweep], [r["accuracy"] for r in self.sweep])
        if chosen is None:
            log(WARNING, "FLAG sweep: no validation replies; cutting at alpha 1")
            return 1.0
        log(INFO, "FLAG sweep: elbow at alpha %.3f (%d clusters)", alphas[chosen], self.sweep[chosen]["num-clusters"])
        return float(alphas[chosen])

    def validate(self, server_round: int, sample: list[int], labels: tuple[int, ...]) -> float | None:
        """Mean held-out accuracy of ``sample`` after ``flag-sweep-rounds`` of clustered FL from the
        initial model (of ``flag-sweep-model`` when given).
        """
        name = self.params.flag_sweep_model
        if name and self.sweep_initial is None:
            raise RuntimeError(f"FLAG's sweep model {name!r} was not built: call prepare_sweep before the run.")
        start = self.sweep_initial if name and self.sweep_initial is not None else self.initial_model
        size = float_size(start)
        config: dict[str, Any] = {keys.HOLDOUT_FRACTION: HOLDOUT}
        if name:
            config[SWEEP_MODEL] = name
        members = {k: [q for q, lab in zip(sample, labels, strict=True) if lab == k] for k in set(labels)}
        models = dict.fromkeys(members, start)
        accuracy: dict[int, float] = {}
        for r in range(self.params.sweep_rounds + 1):
            epochs = self.training.local_epochs if r < self.params.sweep_rounds else 0
            for k, pids in members.items():
                got = self.query_signal(
                    keys.HOLDOUT_ACTION,
                    pids,
                    server_round,
                    HoldoutResult.from_arrays,
                    models=[models[k]],
                    config={**config, keys.LOCAL_EPOCHS: epochs},
                    size=size if epochs else 0,
                    max_fit=max(self.clients[q].num_train for q in pids),
                )
                if epochs and got:
                    models[k] = _average(models[k], [g.delta for g in got.values()], [g.num_fit for g in got.values()])
                elif not epochs:
                    accuracy.update({q: g.accuracy for q, g in got.items()})
        return float(np.mean(list(accuracy.values()))) if accuracy else None


def _average(sent: ArrayRecord, deltas: list[np.ndarray], weights: list[int]) -> ArrayRecord:
    """``sent`` plus the ``weights``-weighted mean delta (float arrays, record order): FedAvg's model."""
    return add_flat(sent, np.average(np.stack(deltas), axis=0, weights=weights))
