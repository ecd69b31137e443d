"""FedClust, PACFL and FL+HC: assign steps on hand-made signals, then short runs on digits."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from sklearn.metrics import adjusted_rand_score

from client.app import app as client_app
from common import keys
from common.config import TrainingParams
from common.signals.final_layer import FinalLayer
from common.signals.subspaces import ClassSubspaces, basis_name
from common.signals.update import ModelUpdate
from server.experiment import Experiment
from strategies import FLHC, PACFL, FedClust
from strategies.fedclust import FedClustParams
from strategies.federation import ClientInfo
from strategies.flhc import FLHCParams
from strategies.pacfl import PACFLParams
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

TRUTH = np.repeat([0, 1], 4)


def _offline(strategy, signals):
    """A strategy with 8 known clients whose ``collect`` returns ``signals`` (no Flower)."""
    strategy.clients = {p: ClientInfo(p, 1000 + p, 10, 5, int(TRUTH[p % 8])) for p in signals}
    strategy.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((2, 3), np.float32)), "head.bias": Array(np.zeros(2, np.float32))}
    )
    strategy.init_clusters(strategy.initial)
    strategy.collect = lambda pids, rnd: {p: signals[p] for p in pids if p in signals}
    return strategy


def _layers(rng, pids):
    return {p: FinalLayer(rng.normal(scale=0.01, size=(2, 3)) + 3 * TRUTH[p % 8], np.zeros(2)) for p in pids}


def test_fedclust_assigns_blobs_and_newcomers_join_the_nearest_centroid():
    rng = np.random.default_rng(0)
    s = _offline(FedClust(TrainingParams(), FedClustParams(fedclust_lambda=1.0)), _layers(rng, range(8)))
    s.cluster(1)
    labels = [s.assignment[p] for p in range(8)]
    assert adjusted_rand_score(TRUTH, labels) == 1.0 and len(s.models) == 2
    assert all(
        m is not s.initial and m["head.weight"].numpy().tolist() == s.initial["head.weight"].numpy().tolist()
        for m in s.models
    )
    assert s.distance_matrix.shape == (8, 8) and s.distance_pids == list(range(8)) and s.centroids.shape == (2, 8)
    newcomers = _layers(rng, [9, 12])  # 9 % 8 = 1 -> group 0, 12 % 8 = 4 -> group 1
    s.collect = lambda pids, rnd: {p: newcomers[p] for p in pids}
    s.clients.update({p: ClientInfo(p, 2000 + p, 10, 5, int(TRUTH[p % 8])) for p in newcomers})
    s.admit(3, [9, 12])
    assert s.assignment[9] == s.assignment[1] and s.assignment[12] == s.assignment[4]
    one = _offline(FedClust(TrainingParams(), FedClustParams(fedclust_lambda=100.0)), _layers(rng, range(8)))
    one.cluster(1)
    assert one.num_clusters == 1
    by_count = _offline(
        FedClust(TrainingParams(), FedClustParams(fedclust_lambda=100.0, num_clusters=2)), _layers(rng, range(8))
    )
    by_count.cluster(1)
    assert adjusted_rand_score(TRUTH, [by_count.assignment[p] for p in range(8)]) == 1.0


def test_fedclust_client_without_signal_joins_the_largest_cluster():
    rng = np.random.default_rng(1)
    signals = _layers(rng, [0, 1, 2, 4, 5])
    s = _offline(FedClust(TrainingParams(), FedClustParams(fedclust_lambda=1.0)), signals)
    s.clients[3] = ClientInfo(3, 1003, 10, 5, 0)
    s.cluster(1)
    assert s.assignment[3] == s.assignment[0] and s.distance_pids == [0, 1, 2, 4, 5]
    assert s.pending == {3}


def test_fedclust_asks_a_client_without_signal_again_until_it_answers():
    rng = np.random.default_rng(1)
    signals = _layers(rng, [0, 1, 2, 4, 5, 6])
    s = _offline(FedClust(TrainingParams(), FedClustParams(fedclust_lambda=1.0)), signals)
    s.clients[7] = ClientInfo(7, 1007, 10, 5, 1)
    s.cluster(1)
    largest = s.assignment[0]
    assert s.assignment[7] == largest and s.pending == {7}
    s.before_round(2)  # still silent
    assert s.pending == {7}
    late = _layers(rng, [7])
    s.collect = lambda pids, rnd: {p: late[p] for p in pids if p in late}
    s.before_round(3)
    assert s.pending == set() and s.assignment[7] == s.assignment[4] != s.assignment[0]


def test_pacfl_clusters_by_class_subspaces_and_places_newcomers():
    eye = np.eye(10)

    def client(p):
        classes = (0, 1) if TRUTH[p % 8] == 0 else (2, 3)
        return ClassSubspaces(np.array(classes), tuple(eye[:, [c]] for c in classes))

    s = _offline(PACFL(TrainingParams(), PACFLParams(pacfl_threshold=45.0)), {p: client(p) for p in range(8)})
    s.cluster(1)
    assert adjusted_rand_score(TRUTH, [s.assignment[p] for p in range(8)]) == 1.0
    assert np.allclose(s.distance_matrix[:4, 4:], 90.0) and np.allclose(s.distance_matrix[:4, :4], 0.0, atol=1e-5)
    s.collect = lambda pids, rnd: {p: client(p) for p in pids}
    s.admit(2, [13])
    assert s.assignment[13] == s.assignment[5]


def test_flhc_clusters_updates_from_the_warm_global_model():
    rng = np.random.default_rng(2)
    updates = {p: ModelUpdate(rng.normal(scale=0.01, size=5) + TRUTH[p]) for p in range(8)}
    s = _offline(FLHC(TrainingParams(), FLHCParams(warmup_rounds=2, num_clusters=2, flhc_metric="euclidean")), updates)
    warm = ArrayRecord({"head.weight": Array(np.ones((2, 3), np.float32))})
    s.models = [warm]
    assert s.clustering_round() == 3 and s.phase(2) == "warmup" and s.phase(3) == "cluster"
    s.before_round(2)
    assert not s.clustered
    s.before_round(3)
    assert adjusted_rand_score(TRUTH, [s.assignment[p] for p in range(8)]) == 1.0
    assert all(m["head.weight"].numpy().tolist() == warm["head.weight"].numpy().tolist() for m in s.models)
    scaled = {p: ModelUpdate(np.eye(5)[TRUTH[p]] * (1 + 9 * (p % 2))) for p in range(8)}
    cos = _offline(FLHC(TrainingParams(), FLHCParams(warmup_rounds=1, num_clusters=2, flhc_metric="cosine")), scaled)
    cos.before_round(2)
    assert adjusted_rand_score(TRUTH, [cos.assignment[p] for p in range(8)]) == 1.0


@pytest.mark.parametrize(
    "cls, field, value, key",
    [
        (FedClustParams, "fedclust_lambda", -1.0, "fedclust-lambda"),
        (FedClustParams, "cluster_epochs", 0, "fedclust-cluster-epochs"),
        (FedClustParams, "num_clusters", -1, "num-clusters"),
        (FedClustParams, "linkage", "ward", "linkage"),
        (PACFLParams, "pacfl_vectors", 0, "pacfl-vectors"),
        (PACFLParams, "pacfl_measure", "largest", "pacfl-measure"),
        (FLHCParams, "warmup_rounds", -1, "flhc-warmup-rounds"),
        (FLHCParams, "flhc_metric", "hamming", "flhc-metric"),
        (FLHCParams, "cluster_steps", -1, "cluster-steps"),
    ],
)
def test_params_are_validated_with_the_run_config_name(cls, field, value, key):
    with pytest.raises(ValueError, match=f"The '{key}' parameter of"):
        cls(**{field: value})


def _run(**overrides):
    rc = small_run_config(**overrides)
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"])
    strategy = exp.build_strategy()
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid


def _ari(strategy):
    pids = sorted(strategy.assignment)
    return adjusted_rand_score([strategy.clients[p].true_group for p in pids], [strategy.assignment[p] for p in pids])


def test_fedclust_on_digits_sends_only_the_final_layer_and_places_late_clients():
    s, grid = _run(strategy="fedclust", rounds=3, **{"fedclust-lambda": 2.0, "late-clients": 0.34, "late-round": 2})
    queries = [m for m in grid.sent if m.metadata.message_type == keys.query_type(keys.FINAL_LAYER_ACTION)]
    assert len(queries) == 6 and queries[0].content[keys.CONFIG][keys.CLUSTER_STEPS] == 100
    assert _ari(s) == 1.0 and s.num_clusters == 2 and len(s.assignment) == 6
    first, second = s.history[0], s.history[1]
    head = sum(a.numpy().nbytes for n, a in s.initial.items() if n.startswith("head."))
    assert first.bytes_up_signal == 4 * head and second.bytes_up_signal == 2 * head
    assert first.phase == "cluster" and s.history[2].phase == "train"


def test_pacfl_and_flhc_on_digits_find_the_true_groups():
    pacfl, grid = _run(strategy="pacfl", rounds=1, **{"pacfl-measure": "mean", "pacfl-threshold": 35.0})
    assert _ari(pacfl) == 1.0
    query = next(m for m in grid.sent if m.metadata.message_type == keys.query_type(keys.SUBSPACES_ACTION))
    assert not query.content.array_records and query.content[keys.CONFIG][keys.SUBSPACE_VECTORS] == 3
    flhc, grid = _run(strategy="flhc", rounds=2, **{"flhc-warmup-rounds": 1, "num-clusters": 2})
    assert _ari(flhc) == 1.0 and [r.num_clusters for r in flhc.history] == [1, 2]
    updates = [m for m in grid.sent if m.metadata.message_type == keys.query_type(keys.UPDATE_ACTION)]
    assert len(updates) == 6 and all(m.content[keys.CONFIG][keys.CLUSTER_STEPS] == 100 for m in updates)


def test_threshold_and_num_clusters_zero_cut_automatically(caplog):
    rng = np.random.default_rng(0)
    s = _offline(FedClust(TrainingParams(), FedClustParams(fedclust_lambda=0.0)), _layers(rng, range(8)))
    with caplog.at_level("INFO"):
        s.cluster(1)
    assert adjusted_rand_score(TRUTH, [s.assignment[p] for p in range(8)]) == 1.0 and s.auto_silhouette > 0.9
    assert "automatic cut (threshold and num-clusters 0): 2 clusters" in caplog.text
    given = _offline(
        FedClust(TrainingParams(), FedClustParams(fedclust_lambda=0.0, num_clusters=3)), _layers(rng, range(8))
    )
    given.cluster(1)
    assert given.num_clusters == 3 and given.auto_silhouette is None


def test_flhc_passes_the_runs_seed_and_sample_above_to_its_step(monkeypatch):
    """The seed draws the sample and the sketch only above 2,000 clients or for updates too large
    to hold, so the step's arguments are checked here, its use of them in test_clustering_oneshot."""
    import strategies.flhc

    calls = []
    found = strategies.flhc.flhc_clusters
    monkeypatch.setattr(strategies.flhc, "flhc_clusters", lambda *a: calls.append(a) or found(*a))
    s = FLHC(TrainingParams(seed=7), FLHCParams(num_clusters=2, flhc_metric="cosine", sample_above=5))
    rng = np.random.default_rng(0)
    signals = [ModelUpdate(np.eye(5)[TRUTH[p]] + rng.normal(scale=0.01, size=5)) for p in range(8)]
    result = s.cluster_signals(signals)
    (deltas, cut, metric, seed, sample_above) = calls[0]
    assert (cut, metric, seed, sample_above) == (s.hc_cut, "cosine", 7, 5) and len(deltas) == 8
    assert result.distances is None  # the sampled form: no matrix of all clients
    assert adjusted_rand_score(TRUTH, result.labels) == 1.0


def test_pacfl_hands_its_step_the_signals_read_when_indexed(monkeypatch):
    """No list of every client's float64 bases (3.8 GB at 100,000 clients): a lazy sequence of the
    float32 class bases the clients sent."""
    import strategies.pacfl as pacfl_module
    from common.clustering.oneshot import OneShotClusters

    rng = np.random.default_rng(0)
    signals = [
        ClassSubspaces(
            np.array([0, 1]), tuple(np.linalg.qr(rng.standard_normal((8, 2)))[0].astype(np.float32) for _ in range(2))
        )
        for _ in range(5)
    ]
    got = []
    monkeypatch.setattr(
        pacfl_module,
        "pacfl_clusters",
        lambda b, *a: got.append(b) or OneShotClusters(np.zeros(5, dtype=np.int64), None),
    )
    PACFL(TrainingParams(), PACFLParams(num_clusters=2)).cluster_signals(signals)
    (bases,) = got
    assert isinstance(bases, pacfl_module.ClassBases) and len(bases) == 5 and not isinstance(bases, list)
    assert sorted(bases[3]) == [0, 1] and all(bases[3][c] is signals[3].bases[c] for c in (0, 1))
    assert bases[3][1].dtype == np.float32 and [sorted(b) for b in bases[1:3]] == [[0, 1], [0, 1]]


def _pacfl_with_faults(faults=None):
    rc = small_run_config(strategy="pacfl", rounds=3, **{"late-clients": 0.34, "late-round": 2})
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    grid = InProcessGrid(client_app, rc, rc["num-clients"], faults=faults or {})
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy


@pytest.mark.parametrize("lie", ["every class", "not orthonormal"])
def test_a_late_pacfl_client_lying_about_its_classes_moves_only_itself(lie, caplog):
    """A newcomer's subspaces reply claims all 10 classes with random orthonormal bases (a valid
    reply: it can only move its own distances), or sends bases that are not orthonormal (rejected
    for that client, which waits in the largest cluster): every other client's cluster is the
    honest run's, and every cluster model stays finite."""
    honest = _pacfl_with_faults()
    late = sorted(set(honest.assignment) - set(honest.distance_pids))
    assert late and _ari(honest) == 1.0
    liar = late[0]
    action = keys.query_type(keys.SUBSPACES_ACTION)

    lies = []

    def lying(reply, server_round):
        if reply.metadata.message_type == action and reply.has_content():
            lies.append(server_round)
            sent = reply.content[keys.SIGNAL]
            dim = next(a.numpy().shape[0] for name, a in sent.items() if name != "classes")
            rng = np.random.default_rng(server_round)
            arrays = {"classes": Array(np.arange(10, dtype=np.int64))}
            for c in range(10):
                basis = np.linalg.qr(rng.standard_normal((dim, 2)))[0]
                arrays[basis_name(c)] = Array((basis if lie == "every class" else 2.0 * basis).astype(np.float32))
            reply.content[keys.SIGNAL] = ArrayRecord(arrays)
        return reply

    with caplog.at_level("WARNING"):
        lied = _pacfl_with_faults({liar: lying})
    assert lies  # the newcomer's query came and was answered with the lie
    others = sorted(set(honest.assignment) - {liar})
    assert {p: lied.assignment[p] for p in others} == {p: honest.assignment[p] for p in others}
    assert liar in lied.assignment
    assert all(np.isfinite(a.numpy()).all() for m in lied.models for a in m.values())
    said = [r.getMessage() for r in caplog.records if f"client {liar}" in r.getMessage()]
    rejected = any("reply rejected" in m and "not orthonormal" in m for m in said)
    waits = any("trains with the largest cluster" in m for m in said)
    assert rejected == waits == (lie == "not orthonormal")
