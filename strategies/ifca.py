"""IFCA (Ghosh et al., "An Efficient Framework for Clustered Federated Learning", NeurIPS 2020).

K models with distinct random initialisations. Every sampled client receives all K models,
picks the one with the lowest loss on its TRAIN split, trains it (model averaging, option II)
and reports its choice as metric ``cluster-id``; each model is averaged over the clients that
chose it. A client's cluster is its latest choice; clients not sampled yet keep a seeded
random balanced assignment (IFCA estimates identities only for participating clients).
``num-clusters`` 0 (not given) means ``max-clusters`` models: IFCA cannot estimate K, and
surplus models simply stay unchosen (empty clusters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict

from common import keys
from common.clustering import kmodels
from common.params import check_params
from common.config import TrainingParams
from common.params import shared

from .base import ClusteredStrategy
from .replies import ReplyFault, TrainUpdate

OWNER = "IFCA"


@dataclass(frozen=True)
class IFCAParams:
    """``num-clusters`` K (0: ``max-clusters``); both keys shared, IFCA has none of its own."""

    key_prefix: ClassVar[str] = "ifca"
    num_clusters: int = shared(low=0)
    max_clusters: int = shared(low=2, help="K when num-clusters is 0")

    def __post_init__(self) -> None:
        check_params(self, OWNER)

    @property
    def k(self) -> int:
        """The number of models IFCA keeps."""
        return self.num_clusters or self.max_clusters


class IFCA(ClusteredStrategy):
    """All K models down to every sampled client; the client's choice by train loss comes back."""

    name = "ifca"
    state_fields: ClassVar[frozenset[str]] = frozenset({"choices"})
    placement_rule = "IFCA: the cluster model with the lowest loss on the client's train split (query.losses)"
    params_type = IFCAParams

    def __init__(self, training: TrainingParams | None = None, params: IFCAParams | None = None) -> None:
        super().__init__(training, params)
        self.choices: dict[int, int] = {}

    def init_clusters(self, initial: ArrayRecord) -> None:
        """Model 0 is the initial model, models 1..K-1 fresh draws at its scale; random clusters."""
        k = self.params.k
        arrays = {name: a.numpy() for name, a in initial.items()}
        models = [initial.copy()] + [
            ArrayRecord({n: Array(a) for n, a in kmodels.redraw_like(arrays, self.rng).items()}) for _ in range(k - 1)
        ]
        self.set_clusters(models, kmodels.random_partition(sorted(self.clients), k, self.rng))

    def train_records(self, server_round: int, partition_id: int, cluster: int) -> dict[str, ArrayRecord]:
        """Every cluster model, for the client to train the one with its lowest loss."""
        return {keys.model_record(j): model for j, model in enumerate(self.models)}

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        """``num-models``: how many models the message carries."""
        return {keys.NUM_MODELS: len(self.models)}

    def reply_cluster(self, server_round: int, partition_id: int, content: RecordDict, update: TrainUpdate) -> int:
        """The model the client chose (metric ``cluster-id``), which must be in ``[0, K)``."""
        metrics = content.metric_records.get(keys.METRICS)
        if not isinstance(metrics, MetricRecord) or keys.CLUSTER_ID not in metrics:
            raise ReplyFault(f"metric {keys.CLUSTER_ID!r} is missing")
        value = metrics[keys.CLUSTER_ID]
        if (
            isinstance(value, list)
            or not math.isfinite(float(value))
            or not float(value).is_integer()
            or not 0 <= int(value) < len(self.models)
        ):
            raise ReplyFault(f"{keys.CLUSTER_ID} {value!r} is not a model index in [0, {len(self.models)})")
        self.choices[partition_id] = int(value)
        return int(value)

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        """Each client that replied now belongs to the model it chose."""
        self.assignment.update({pid: self.choices[pid] for pid in updates})
