"""CFL-GP (Kim et al., "Clustered Federated Learning via Gradient-based Partitioning", ICML 2024).

K cluster models from random initial clusters. Every ``cfl-gp-cluster-period`` rounds (while
the round is below ``cfl-gp-cluster-until``), the next model in round-robin order is broadcast to every
client (or ``cfl-gp-profile-fraction`` of them) as ``query.profile``; each returns its model gap after
local training (Alg. 4, default) or one mini-batch gradient (Alg. 1), restricted to a seeded
coordinate subset (App. E.1; ``cfl-gp-compression-ratio`` 0, the default, keeps every coordinate unless
all clients' profiles would pass ``compression.PROFILE_BUDGET_BYTES``, 512 MiB, and then logs the ratio it
picks: 128 at 10,000 clients of the 159,010-parameter DNN, within the paper's 1000). The server averages it
into that model's block of the client's profile and re-clusters: top-K left singular vectors,
k-means, relabelling by linear assignment (Alg. 3). Re-clustering stops once the assignment has not changed for
``cfl-gp-stable-updates`` updates. With ``num-clusters`` 0, App. G: ``max-clusters`` models run
CFL-GP until ``cfl-gp-estimate-after`` updates, then K (up to ``cfl-gp-auto-max-clusters``, by default
half the clients) comes from the spectrum of the centred profile, and the K clusters continue from
the model most of their members trained. The K
models start as copies of the initial model: random clusters and the profiles make them
differ. With ``cfl-gp-profile-fraction`` < 1, the blocks a client has not answered are imputed
(its cluster's mean, refined by a rank-K completion of ``G``), never left at zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from logging import INFO, WARNING
from typing import ClassVar

import numpy as np
from flwr.app import ArrayRecord
from flwr.common import log
from scipy.spatial.distance import cdist

from common import keys
from common.clustering import compression, kmodels, spectral
from common.clustering.hierarchical import AUTO_LIMIT_HELP, automatic_max_clusters, check_auto_max_clusters
from common.clustering.sampled import (
    SAMPLE_ABOVE,
    SAMPLE_ABOVE_HELP,
    SAMPLE_ABOVE_PAPER,
    sampled_cflgp,
    sampled_estimate,
)
from common.params import check_params, param
from common.config import TrainingParams
from common.params import run_config_key, shared
from common.signals.profile import PROTOCOLS, GradientProfile
from common.validation import check_float

from .base import ClusteredStrategy
from .flat import float_size

OWNER = "CFLGP"


@dataclass(frozen=True)
class CFLGPParams:
    """CFL-GP's run-config keys, ``cfl-gp-*`` (``num-clusters`` 0: estimate K up to ``cfl-gp-auto-max-clusters``)."""

    key_prefix: ClassVar[str] = "cfl-gp"
    num_clusters: int = shared(low=0)
    max_clusters: int = shared(low=2, help="with num-clusters 0: the models run before App. G's estimate")
    cluster_period: int = param(2, "a profile update every P rounds", low=1, paper="2")
    cluster_until: int = param(0, "no profile update from this round on; 0 = no limit", low=0)
    stable_updates: int = param(5, "stop re-clustering after this many unchanged updates; 0 = never", low=0)
    profile_protocol: str = param("model-gap", "model-gap (Alg. 4) or gradient (Alg. 1)", choices=PROTOCOLS)
    profile_fraction: float = param(
        1.0, "share of the clients asked for their profile per update", low=0.0, high=1.0, closed=(False, True)
    )
    compression_ratio: float = param(
        0.0,
        "clients return ceil(d / ratio) seeded coordinates; 0 = automatic "
        f"(1 unless all clients' profiles would pass {compression.PROFILE_BUDGET_BYTES / 2**20:g} MiB, "
        "then the smallest power of 2 that fits)",
        checked=False,
        paper="App. E",
    )
    estimate_after: int = param(2, "profile updates before K is estimated (num-clusters 0)", low=1)
    auto_max_clusters: int = param(
        0,
        "with num-clusters 0: the most clusters App. G's estimate scores (k = 2 .. this); "
        f"{AUTO_LIMIT_HELP} (modified; former: max-clusters, the models run before the estimate); with "
        "automatic compression, at most as many blocks as the profile budget holds",
        low=0,
        paper="not given (App. G: an elbow or gap statistic on the reduced features)",
    )
    estimate_projection: str = param(
        spectral.MAX_CLUSTERS,
        "the directions k-means and the silhouette score each k on when K is estimated: max-clusters = as "
        "many leading ones of the centred profile as the most clusters scored (cfl-gp-auto-max-clusters; "
        "modified); largest-gap = those before its largest gap (App. G's s)",
        choices=spectral.PROJECTIONS,
        paper="largest-gap (max-clusters is modified)",
    )
    sample_above: int = param(SAMPLE_ABOVE, SAMPLE_ABOVE_HELP, low=0, paper=SAMPLE_ABOVE_PAPER)

    def __post_init__(self) -> None:
        key = partial(run_config_key, CFLGPParams)
        check_params(self, OWNER)
        check_auto_max_clusters(self.auto_max_clusters, key("auto_max_clusters"), OWNER)
        if self.compression_ratio != 0:  # 0: automatic (compression.automatic_ratio)
            object.__setattr__(
                self, "compression_ratio", check_float(self.compression_ratio, key("compression_ratio"), OWNER, low=1.0)
            )

    def estimate_limit(self, num_clients: int, size: int | None = None, profiled: int | None = None) -> int:
        """The most clusters App. G's estimate scores among ``num_clients`` (``automatic_max_clusters``); with
        automatic compression and blocks of ``size`` coordinates, no more than the profile budget holds for
        ``profiled`` clients (default ``num_clients``; ``compression.blocks_within``), and never fewer than
        the models run before it."""
        limit = automatic_max_clusters(num_clients, self.auto_max_clusters)
        if size is None or self.compression_ratio != 0:
            return limit
        profiled = num_clients if profiled is None else profiled
        models = min(self.max_clusters, profiled)
        return min(limit, max(models, compression.blocks_within(profiled, size)))


class CFLGP(ClusteredStrategy):
    """Round-robin gradient profiles and spectral clustering into K clusters.

    Attributes
    ----------
    blocks : dict of int to ndarray of shape (K, d_hat)
        Each client's profile, one block per model (the columns of the paper's ``G``).
    broadcasts : list of (int, int)
        ``(round, model)`` of every profile update, in order.
    spectra : list of (int, ndarray)
        ``(round, singular values of G)`` after every profile update.
    estimate : NumClustersEstimate or None
        App. G's estimate when ``num-clusters`` was 0.
    features : ndarray of shape (N, K) or None
        The last clustering's spectral features of ``distance_pids`` (``distance_matrix``: their distances);
        above ``cfl-gp-sample-above`` clients, those of the sampled form's sample only.
    """

    name = "cfl-gp"
    queries = (GradientProfile,)
    state_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "blocks",
            "broadcasts",
            "counts",
            "estimate",
            "features",
            "k",
            "last_block",
            "ratio",
            "size",
            "spectra",
            "stopped",
            "unchanged",
        }
    )
    params_type = CFLGPParams

    def describe_distances(self) -> str:
        """What ``distance_matrix`` measures."""
        return "Euclidean distance of the profiles' spectral features"

    @property
    def distance_matrix(self) -> np.ndarray | None:  # type: ignore[override]  # computed from features, not kept
        """Euclidean distances of ``features`` (rows: ``distance_pids``), made when read: N x K kept, not N x N."""
        return None if self.features is None else cdist(self.features, self.features)

    def __init__(self, training: TrainingParams | None = None, params: CFLGPParams | None = None) -> None:
        super().__init__(training, params)
        self.k = 0  # the model count, set by init_clusters
        self.ratio = 1.0
        self.size = 0
        self.last_block = -1
        self.blocks: dict[int, np.ndarray] = {}
        self.counts: dict[int, np.ndarray] = {}
        self.broadcasts: list[tuple[int, int]] = []
        self.spectra: list[tuple[int, np.ndarray]] = []
        self.estimate: spectral.NumClustersEstimate | None = None
        self.unchanged = 0
        self.stopped = False
        self.features: np.ndarray | None = None
        self.distance_pids: list[int] = []

    def init_clusters(self, initial: ArrayRecord) -> None:
        """K copies of the initial model, clients in random clusters; the profile size from the compression ratio."""
        p = self.params
        if p.num_clusters > len(self.clients):
            raise ValueError(
                f"The 'num-clusters' parameter of {OWNER} must be at most the "
                f"{len(self.clients)} clients. Got {p.num_clusters} instead."
            )
        self.k = p.num_clusters or min(p.max_clusters, len(self.clients))
        if p.num_clusters == 0 and len(self.clients) < 3:
            log(
                WARNING,
                "CFL-GP cannot estimate K from %d clients (the silhouette needs 3): all stay in one cluster",
                len(self.clients),
            )
            self.k = 1
        dim = float_size(initial)
        self.ratio = p.compression_ratio or compression.automatic_ratio(len(self.clients), self.k, dim)
        if p.compression_ratio == 0 and self.ratio > 1:
            log(
                INFO,
                "CFL-GP compresses profiles %gx (%d of %d coordinates): %d clients x %d blocks would pass %g MiB",
                self.ratio,
                compression.compressed_size(dim, self.ratio),
                dim,
                len(self.clients),
                self.k,
                compression.PROFILE_BUDGET_BYTES / 2**20,
            )
        self.size = compression.compressed_size(dim, self.ratio)
        self.last_block = self.k - 1
        self.set_clusters(
            [initial.copy() for _ in range(self.k)], kmodels.random_partition(sorted(self.clients), self.k, self.rng)
        )

    def is_cluster_round(self, server_round: int) -> bool:
        """Rounds ``1, 1 + P, 1 + 2P, ...`` below ``cfl-gp-cluster-until`` (0: no limit), until stable."""
        until = self.params.cluster_until
        return (
            not self.stopped
            and (server_round - 1) % self.params.cluster_period == 0
            and (until == 0 or server_round < until)
        )

    def phase(self, server_round: int) -> str:
        """``cluster`` in a round that updated a profile block, else ``train``."""
        return "cluster" if self.broadcasts and self.broadcasts[-1][0] == server_round else "train"

    def before_round(self, server_round: int) -> None:
        """In a clustering round: update one model's profile block (round-robin), then re-cluster."""
        if not self.is_cluster_round(server_round):
            return
        k = spectral.round_robin(self.last_block, self.k)
        self.last_block = k
        self.broadcasts.append((server_round, k))
        pool = sorted(self.clients)
        count = max(1, int(np.ceil(self.params.profile_fraction * len(pool) - 1e-9)))
        pids = pool if count == len(pool) else sorted(int(p) for p in self.rng.choice(pool, count, replace=False))
        config = {
            keys.PROFILE_PROTOCOL: self.params.profile_protocol,
            keys.PROFILE_SIZE: self.size,
            keys.PROFILE_SEED: compression.block_seed(self.training.seed, k),
        }
        profiles = self.query_signal(
            keys.PROFILE_ACTION,
            pids,
            server_round,
            GradientProfile.from_arrays,
            models=[self.models[k]],
            config=config,
            size=self.size,
        )
        with self.clustering_timer():
            for pid, signal in profiles.items():
                blocks = self.blocks.setdefault(pid, np.zeros((self.k, self.size), dtype=np.float32))
                counts = self.counts.setdefault(pid, np.zeros(self.k, dtype=np.int64))
                blocks[k] = spectral.update_block(blocks[k], signal.vector, int(counts[k]))
                counts[k] += 1
            if (
                self.params.num_clusters == 0
                and self.estimate is None
                and len(self.broadcasts) >= self.params.estimate_after
            ):
                self._estimate_k(server_round)
            if self.k > 1:
                self._recluster(server_round)

    def _seed(self, server_round: int) -> int:
        return int(np.random.SeedSequence([self.training.seed, server_round]).generate_state(1)[0])

    def _profiles(self) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
        """The clients with a profile, their blocks (N, K, d), answer counts (N, K) and clusters."""
        pids = sorted(self.blocks)
        blocks, counts = np.stack([self.blocks[p] for p in pids]), np.stack([self.counts[p] for p in pids])
        return pids, blocks, counts, np.array([self.assignment[p] for p in pids])

    def _estimate_k(self, server_round: int) -> None:
        """App. G on the K_max-model profile; each of the K clusters keeps the model most of it trained."""
        if len(self.blocks) < 3:
            return
        pids, blocks, counts, clusters = self._profiles()
        matrix = spectral.completed_profile(blocks, counts, clusters, self.training.seed, overwrite_blocks=True)
        self.estimate = sampled_estimate(
            matrix,
            self.params.estimate_limit(len(pids), self.size, len(self.clients)),
            self._seed(server_round),
            self.params.sample_above,
            self.params.estimate_projection,
        )
        labels, old = self.estimate.labels, np.array([self.assignment[p] for p in pids])
        source = [int(np.bincount(old[labels == k], minlength=self.k).argmax()) for k in range(labels.max() + 1)]
        log(
            INFO,
            "round %d: CFL-GP estimates K = %d (largest gap of the centred spectrum after %d; silhouettes on "
            "%d directions %s)",
            server_round,
            len(source),
            self.estimate.gap_dims,
            self.estimate.dims,
            {k: round(v, 3) for k, v in self.estimate.silhouettes.items()},
        )
        self.k = len(source)
        self.set_clusters(
            [self.models[m].copy() for m in source],
            {**dict.fromkeys(self.assignment, 0), **dict(zip(pids, labels.tolist(), strict=True))},
        )
        self.blocks = {p: b[source] for p, b in self.blocks.items()}
        self.counts = {p: c[source] for p, c in self.counts.items()}
        self.last_block = self.k - 1

    def _recluster(self, server_round: int) -> None:
        if len(self.blocks) < self.k:
            return
        pids, blocks, counts, previous = self._profiles()
        labels, features, values, sample = sampled_cflgp(
            blocks,
            counts,
            previous,
            impute_seed=self.training.seed,
            seed=self._seed(server_round),
            sample_above=self.params.sample_above,
            overwrite_blocks=True,  # _profiles() stacked a fresh copy
        )
        self.spectra.append((server_round, values))
        self.unchanged = 0 if np.any(labels != previous) else self.unchanged + 1
        self.assignment.update({p: int(c) for p, c in zip(pids, labels, strict=True)})
        # the sampled form's picture is its sample's: N x K features of every client would give N x N distances
        self.features, self.distance_pids = features[sample], [pids[i] for i in sample]
        if self.params.stable_updates and self.unchanged >= self.params.stable_updates:
            self.stopped = True
            log(
                INFO,
                "round %d: CFL-GP clusters unchanged for %d updates; clustering stops",
                server_round,
                self.unchanged,
            )
