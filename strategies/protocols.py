"""What the round's collaborators see of a strategy: ``Core``, which ``ClusteredStrategy`` satisfies.

``strategies.phases``, ``strategies.admission`` and ``strategies.delivery`` take a ``Core`` instead of
the base class, so that no collaborator imports ``strategies.base`` (which imports them): the package's
import graph has no circle (``tests/test_import_cycles.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from common.config import TrainingParams
from common.learning import ChanceLossCheck

from .federation import ClientInfo, Membership
from .messenger import Messenger
from .replies import Range, S, TrainUpdate
from .state import Checkpoints


class Core(Protocol):
    """A strategy's state and hooks as the phases, the roster and the final delivery use them."""

    round_params: ClassVar[dict[str, int]]
    params_type: ClassVar[type]
    training: TrainingParams
    params: Any
    rng: np.random.Generator
    clients: dict[int, ClientInfo]
    waiting: dict[int, ClientInfo]
    initial: ArrayRecord | None
    models: list[ArrayRecord]
    assignment: dict[int, int]
    last_trained: dict[int, int]
    last_eval: dict[int, tuple[float, float]]
    head_key: str
    learning: ChanceLossCheck | None
    messenger: Messenger
    membership: Membership
    checkpoints: Checkpoints
    metric_ranges: dict[str, Range]
    identity_seconds: float
    _lost: set[int]
    _sent_cluster: dict[int, int]
    _told_untested: bool

    @property
    def initial_model(self) -> ArrayRecord:
        """The initial model (set by ``start``)."""

    def init_clusters(self, initial: ArrayRecord) -> None:
        """Start state once the clients are known."""

    def sample(self, server_round: int) -> list[int]:
        """The round's training clients."""

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        """Extra train config for one client."""

    def train_records(self, server_round: int, partition_id: int, cluster: int) -> dict[str, ArrayRecord]:
        """The model records of one client's train message."""

    def reply_cluster(self, server_round: int, partition_id: int, content: RecordDict, update: TrainUpdate) -> int:
        """The cluster a checked train reply belongs to."""

    def aggregate_cluster(self, cluster: int, updates: list[TrainUpdate]) -> ArrayRecord:
        """A cluster's new model from its members' updates."""

    def after_train(self, server_round: int, updates: dict[int, TrainUpdate]) -> None:
        """See the round's checked updates."""

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
        """Ask ``pids`` for a signal with ``query.<action>``."""
