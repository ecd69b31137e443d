"""The strategies' round bookkeeping without Flower: automatic warm-up and pre-training lengths, phases
(written to metrics.jsonl), the pre-training bound, CFL-GP's clustering rounds and a fresh CFLGT's state.

Written for the mutation run's survivors in strategies/ (docs/mutation-strategies.md).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from sklearn.metrics import adjusted_rand_score

from common.config import TrainingParams
from strategies.cfl_gp import CFLGP, CFLGPParams
from strategies.cflgt import CFLGT, CFLGTParams, automatic_pretrain_rounds
from strategies.fedclust import FedClust, FedClustParams
from strategies.federation import ClientInfo
from strategies.flhc import FLHC, FLHCParams
from strategies.oneshot import OneShotStrategy
from tests.strategies.test_oneshot import TRUTH, _layers, _offline


@pytest.mark.parametrize("rounds", [1, 2, 3, 50])
def test_flhc_s_default_warmup_is_none_whatever_the_run_s_rounds(rounds: int) -> None:
    s = FLHC(TrainingParams(rounds=rounds), FLHCParams())
    assert s.params.warmup_rounds == 0 and s.clustering_round() == 1 and s.phase(1) == "cluster"


def test_flhc_keeps_its_warmup_as_given() -> None:
    none = FLHC(TrainingParams(rounds=5), FLHCParams(warmup_rounds=0))
    assert none.params.warmup_rounds == 0 and none.clustering_round() == 1 and none.phase(1) == "cluster"
    assert [none.phase(r) for r in range(1, 6)] == ["cluster", "train", "train", "train", "train"]
    three = FLHC(TrainingParams(rounds=5), FLHCParams(warmup_rounds=3))
    assert three.params.warmup_rounds == 3 and three.clustering_round() == 4
    assert [three.phase(r) for r in range(1, 6)] == ["warmup", "warmup", "warmup", "cluster", "train"]


def test_flhc_s_phases_are_warmup_cluster_then_train() -> None:
    s = FLHC(TrainingParams(rounds=5), FLHCParams(warmup_rounds=2))
    assert [s.phase(r) for r in range(1, 6)] == ["warmup", "warmup", "cluster", "train", "train"]


@pytest.mark.parametrize(("rounds", "pretrain"), [(1, 0), (2, 1), (7, 1), (8, 2), (100, 25)])
def test_cflgt_s_automatic_pretraining_is_a_quarter_of_the_rounds_at_least_one_below_them(
    rounds: int, pretrain: int
) -> None:
    assert automatic_pretrain_rounds(rounds) == pretrain


def test_cflgt_replaces_only_a_zero_pretraining_and_refuses_one_as_long_as_the_run() -> None:
    assert CFLGT(TrainingParams(rounds=8), CFLGTParams(pretrain_rounds=0)).params.pretrain_rounds == 2
    assert CFLGT(TrainingParams(rounds=8), CFLGTParams(pretrain_rounds=1)).params.pretrain_rounds == 1
    assert CFLGT(TrainingParams(rounds=8), CFLGTParams(pretrain_rounds=7)).clustering_round == 8
    sentence = (
        "The 'cflgt-pretrain-rounds' parameter of CFLGT must be an int in the range [0, 7] (below 'rounds'). "
        "Got 8 instead."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        CFLGT(TrainingParams(rounds=8), CFLGTParams(pretrain_rounds=8))


def test_cflgt_s_phases_are_pretrain_cluster_then_train() -> None:
    s = CFLGT(TrainingParams(rounds=5), CFLGTParams(pretrain_rounds=2))
    assert [s.phase(r) for r in range(1, 6)] == ["pretrain", "pretrain", "cluster", "train", "train"]


def test_a_fresh_cflgt_holds_the_empty_state_its_checkpoint_declares() -> None:
    s = CFLGT(TrainingParams(rounds=5), CFLGTParams(pretrain_rounds=2))
    assert s.reference is None and s.trajectories == {} and s.pending == set()
    assert s.exemplars.shape == (0, 0, 2) and s.distance_pids == [] and s.diagnostics == {}
    assert s.distance_matrix is None


def test_cfl_gp_clusters_every_period_below_its_limit_and_names_the_phase_of_a_broadcast_round() -> None:
    s = CFLGP(TrainingParams(rounds=12), CFLGPParams(num_clusters=2, cluster_period=3, cluster_until=10))
    assert [r for r in range(1, 13) if s.is_cluster_round(r)] == [1, 4, 7]
    s.stopped = True
    assert not any(s.is_cluster_round(r) for r in range(1, 13))
    free = CFLGP(TrainingParams(rounds=12), CFLGPParams(num_clusters=2, cluster_period=1))
    assert [r for r in range(1, 13) if free.is_cluster_round(r)] == list(range(1, 13))
    assert free.phase(1) == "train"
    free.broadcasts.append((3, 0))
    assert [free.phase(r) for r in (2, 3, 4)] == ["train", "cluster", "train"]
    assert np.array_equal(np.asarray(free.broadcasts[-1]), [3, 0])


def _fedclust(**params: float) -> FedClust:
    rng = np.random.default_rng(0)
    return _offline(FedClust(TrainingParams(seed=7), FedClustParams(**params)), _layers(rng, range(8)))


def test_a_one_shot_clustering_logs_its_round_strategy_and_sizes_and_the_automatic_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = _fedclust(fedclust_lambda=0.0)
    with caplog.at_level("INFO"):
        s.cluster(1)
    messages = [r.getMessage() for r in caplog.records]
    assert f"round 1: {FedClust.__name__} formed 2 clusters, sizes [4, 4]" in messages
    assert any(
        re.fullmatch(r"automatic cut \(threshold and num-clusters 0\): 2 clusters, silhouette 0\.\d{3}", m)
        for m in messages
    )


def test_fedclust_passes_the_runs_seed_and_sample_above_to_its_step(monkeypatch: pytest.MonkeyPatch) -> None:
    import strategies.fedclust

    calls = []
    found = strategies.fedclust.fedclust_clusters
    monkeypatch.setattr(strategies.fedclust, "fedclust_clusters", lambda *a: calls.append(a) or found(*a))
    s = _offline(
        FedClust(TrainingParams(seed=7), FedClustParams(num_clusters=2, sample_above=5)),
        _layers(np.random.default_rng(0), range(8)),
    )
    s.cluster(1)
    (vectors, cut, sample_above, seed) = calls[0]
    assert (cut, sample_above, seed) == (s.hc_cut, 5, 7) and len(vectors) == 8
    assert adjusted_rand_score(TRUTH, [s.assignment[p] for p in range(8)]) == 1.0


def test_fedclust_reports_and_logs_the_newcomers_accuracy_apart_from_the_residents(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    s = _fedclust(num_clusters=2)
    s.cluster(1)
    assert s.run_details() == {}
    s.newcomers = {9}
    s.last_eval = {1: (0.5, 10), 9: (0.9, 10), 2: (0.7, 10)}
    assert s.run_details() == {"newcomers": 1, "newcomer-accuracy": 0.9, "resident-accuracy": pytest.approx(0.6)}
    s.last_eval = {1: (0.5, 10)}
    assert s.run_details() == {"newcomers": 1, "newcomer-accuracy": None, "resident-accuracy": 0.5}
    s.last_eval = {9: (0.9, 10)}
    assert s.run_details() == {"newcomers": 1, "newcomer-accuracy": 0.9, "resident-accuracy": None}
    s.last_eval = {1: (0.5, 10), 9: (0.9, 10), 2: (0.7, 10)}
    rounds = []
    monkeypatch.setattr(
        OneShotStrategy, "aggregate_evaluate", lambda self, rnd, replies: rounds.append(rnd), raising=False
    )
    with caplog.at_level("INFO"):
        s.aggregate_evaluate(4, [])
    assert rounds == [4]
    assert "round 4: newcomers' accuracy 0.9000 (1 clients), the others' 0.6000" in [
        r.getMessage() for r in caplog.records
    ]


# Two planted groups of trajectories (C = 2 classes): pull 1 everywhere, push 3 on class 0 and 1 on class 1 in
# group 0, the other way round in group 1 (groups apart in their forces and in their shares alike); each point
# moved by 0.001 (AP's choice among identical points is a tie its seed breaks).
PLANTED = {
    p: np.array([[1.0, 3.0 - 2 * TRUTH[p]], [1.0, 1.0 + 2 * TRUTH[p]]])
    + 0.001 * np.random.default_rng(p).random((2, 2))
    for p in range(8)
}


def _cflgt(pids: range, silent: tuple[int, ...] = (), **params: object) -> CFLGT:
    s = CFLGT(TrainingParams(rounds=5, seed=3), CFLGTParams(pretrain_rounds=1, **params))  # type: ignore[arg-type]
    s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, int(TRUTH[p % 8])) for p in pids}
    s.init_clusters(ArrayRecord({"head.bias": Array(np.zeros(2, np.float32))}))
    s._forces = lambda asked, rnd: {p: PLANTED[p % 8] for p in asked if p not in silent}  # type: ignore[method-assign]
    return s


def test_cflgt_clusters_planted_trajectories_and_records_its_diagnostics(caplog: pytest.LogCaptureFixture) -> None:
    s = _cflgt(range(8), damping=0.6)
    with caplog.at_level("INFO"):
        s._cluster(2)
    assert adjusted_rand_score(TRUTH, [s.assignment[p] for p in range(8)]) == 1.0 and len(s.models) == 2
    assert s.distance_pids == list(range(8)) and s.distance_matrix.shape == (8, 8)
    assert s.exemplars.shape == (2, 2, 2) and s.pending == set()
    d = s.diagnostics
    # pull is 1 everywhere (CV 0); push is 1 or 3, eight of each: mean 2, std 1, CV 0.5 (the 0.001 moves aside).
    assert d["cv-pull"] == pytest.approx(0.0, abs=1e-3) and d["cv-push"] == pytest.approx(0.5, abs=1e-3)
    assert 0.0 <= d["hopkins"] <= 1.0 and d["converged"] is True and d["damping"] == 0.6 and d["preference"] < 0
    assert set(s.run_details()) == {
        "ap-" + k for k in ("hopkins", "cv-pull", "cv-push", "preference", "converged", "damping")
    }
    assert any(
        re.fullmatch(
            r"round 2: CFLGT found 2 clusters of sizes \[4, 4\] in 8 trajectories; Hopkins \d\.\d{3}, "
            r"CV of Z1' 0\.000 and Z2' 0\.50\d, AP preference -\d.*",
            r.getMessage(),
        )
        for r in caplog.records
    )


def test_cflgt_s_seed_draws_its_ap_sample() -> None:
    samples = set()
    for seed in (1, 2, 3):
        s = _cflgt(range(8), ap_sample=4)
        s.training = TrainingParams(rounds=5, seed=seed)
        s._cluster(2)
        assert len(s.distance_pids) == 4
        samples.add(tuple(s.distance_pids))
    assert len(samples) > 1
    again = _cflgt(range(8), ap_sample=4)
    again.training = TrainingParams(rounds=5, seed=3)
    again._cluster(2)
    assert again.distance_pids == s.distance_pids


def test_cflgt_passes_its_preference_to_ap() -> None:
    s = _cflgt(range(8), preference=-1000.0)
    s._cluster(2)
    assert len(s.models) == 1 and s.diagnostics["preference"] == -1000.0


def test_flhc_keeps_no_update_after_clustering_and_fedclust_keeps_its_layers() -> None:
    from common.signals.update import ModelUpdate

    rng = np.random.default_rng(0)
    updates = {p: ModelUpdate(np.eye(5)[TRUTH[p]] + rng.normal(scale=0.01, size=5)) for p in range(8)}
    flhc = _offline(FLHC(TrainingParams(seed=7), FLHCParams(num_clusters=2, warmup_rounds=1)), updates)
    flhc.cluster(2)
    assert adjusted_rand_score(TRUTH, [flhc.assignment[p] for p in range(8)]) == 1.0 and flhc.signals == {}
    fedclust = _fedclust(num_clusters=2)
    fedclust.cluster(1)
    assert sorted(fedclust.signals) == list(range(8))


def test_cflgt_puts_clients_without_a_trajectory_in_the_largest_cluster_to_ask_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = _cflgt(range(9), silent=(8,))
    with caplog.at_level("WARNING"):
        s._cluster(2)
    assert s.pending == {8} and s.assignment[8] in (0, 1) and sorted(s.trajectories) == list(range(8))
    assert any(
        r.getMessage().startswith("round 2: no trajectory from clients [8]; they wait in cluster")
        for r in caplog.records
    )
    nobody = _cflgt(range(3), silent=(0, 1, 2))
    with caplog.at_level("WARNING"):
        nobody._cluster(2)
    assert nobody.distance_matrix is None and nobody.diagnostics == {}
    assert "round 2: no client sent a trajectory; one more FedAvg round, then again" in [
        r.getMessage() for r in caplog.records
    ]


def test_cflgt_warns_when_ap_does_not_converge_or_needs_more_damping(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import strategies.cflgt
    from common.clustering.trajectories import APResult, TrajectoryClusters

    def fake(result: APResult) -> object:
        return lambda points, **kw: TrajectoryClusters(result, np.arange(len(points)), np.zeros((len(points),) * 2))

    zeros = np.zeros(8, dtype=np.int64)
    monkeypatch.setattr(strategies.cflgt, "cluster_trajectories", fake(APResult(zeros, zeros[:1], -1.0, False, 0.9)))
    with caplog.at_level("WARNING"):
        _cflgt(range(8))._cluster(2)
    assert "round 2: affinity propagation did not converge up to damping 0.90; one cluster" in [
        r.getMessage() for r in caplog.records
    ]
    monkeypatch.setattr(strategies.cflgt, "cluster_trajectories", fake(APResult(zeros, zeros[:1], -1.0, True, 0.7)))
    caplog.clear()
    with caplog.at_level("WARNING"):
        _cflgt(range(8))._cluster(2)
    assert "round 2: affinity propagation converged only at damping 0.70" in [r.getMessage() for r in caplog.records]
    monkeypatch.setattr(strategies.cflgt, "cluster_trajectories", fake(APResult(zeros, zeros[:1], -1.0, True, 0.5)))
    caplog.clear()
    with caplog.at_level("WARNING"):
        _cflgt(range(8))._cluster(2)
    assert "affinity propagation" not in caplog.text


@pytest.mark.parametrize(("num_train", "vectors", "most"), [((1000, 260), 0, 10), ((40, 30), 0, 1), ((1000,), 3, 3)])
def test_flag_asks_for_at_most_one_percent_of_the_largest_train_split_as_basis_vectors(
    num_train: tuple[int, ...], vectors: int, most: int
) -> None:
    from strategies.flag import FLAG, FLAGParams

    s = FLAG(TrainingParams(), FLAGParams(flag_vectors=vectors))
    s.clients = {p: ClientInfo(p, 1000 + p, n, 5, 0) for p, n in enumerate(num_train)}
    s.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((2, 3), np.float32)), "head.bias": Array(np.zeros(2, np.float32))}
    )
    s.init_clusters(s.initial)
    asked = []
    s.query_signal = lambda *a, **kw: asked.append(kw) or {}  # type: ignore[method-assign]
    s.collect(sorted(s.clients), 1)
    assert asked[0]["max_vectors"] == most


def test_flag_builds_its_sweep_model_for_the_run_s_data_and_refuses_one_that_cannot_take_it() -> None:
    from common.data import DatasetInfo
    from strategies.flag import FLAG, FLAGParams

    info = DatasetInfo("digits", "classification", 10, (64,))
    s = FLAG(TrainingParams(), FLAGParams(flag_sweep_model="linear"))
    s.prepare_sweep(info, 0)
    assert s.sweep_initial is not None and len(s.sweep_initial) > 0
    with pytest.raises(
        ValueError, match=r"^The 'flag-sweep-model' parameter of FLAG must be a model for inputs of shape \(64,\)"
    ):
        FLAG(TrainingParams(), FLAGParams(flag_sweep_model="lenet5")).prepare_sweep(info, 0)


def test_cflgt_s_hopkins_is_seeded_by_the_run_and_undefined_for_one_client() -> None:
    noisy = {p: PLANTED[p] + np.random.default_rng(p).normal(scale=0.3, size=(2, 2)) for p in range(8)}

    def hopkins(seed: int, n: int = 8) -> float:
        s = _cflgt(range(n))
        s._forces = lambda asked, rnd: {p: noisy[p] for p in asked}  # type: ignore[method-assign]
        s.training = TrainingParams(rounds=5, seed=seed)
        s._cluster(2)
        return float(s.diagnostics["hopkins"])

    assert hopkins(3) == hopkins(3) != hopkins(4)
    assert 0.0 <= hopkins(3, n=2) <= 1.0
    one = _cflgt(range(1))
    one._cluster(2)
    assert np.isnan(one.diagnostics["hopkins"]) and one.run_details()["ap-hopkins"] is None


def test_cflgt_asks_for_forces_on_the_reference_model_with_the_head_s_class_count() -> None:
    s = CFLGT(TrainingParams(rounds=5), CFLGTParams(pretrain_rounds=1))
    sentence = f"{CFLGT.__name__}.reference is not initialised yet: the clustering round (before_round) must run first."
    with pytest.raises(RuntimeError, match=f"^{re.escape(sentence)}$"):
        s._forces([0], 2)
    s.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((3, 4), np.float32)), "head.bias": Array(np.zeros(3, np.float32))}
    )
    s.reference = s.initial.copy()
    asked = []
    s.query_signal = lambda *a, **kw: asked.append(kw) or {}  # type: ignore[method-assign]
    assert s._forces([0, 1], 2) == {}
    assert asked[0]["num_classes"] == 3 and asked[0]["models"] == [s.reference]


def test_fedclust_places_no_newcomer_before_its_centroids_exist() -> None:
    sentence = f"{FedClust.__name__}.centroids is not initialised yet: the clustering round (cluster) must run first."
    with pytest.raises(RuntimeError, match=f"^{re.escape(sentence)}$"):
        FedClust(TrainingParams(), FedClustParams()).place([9], 3)


def test_a_fresh_one_shot_strategy_has_clustered_nobody() -> None:
    s = FLHC(TrainingParams(rounds=5), FLHCParams(warmup_rounds=1))
    assert s.distance_matrix is None and s.distance_pids == [] and s.signals == {} and s.clustered is False


def test_flag_collects_bases_then_updates_in_batches_and_drops_a_client_with_another_row_count() -> None:
    from common import keys
    from common.signals.subspaces import ClassSubspaces
    from common.signals.update import ModelUpdate
    from strategies.flag import FLAG, FLAGParams

    s = FLAG(TrainingParams(seed=5), FLAGParams(flag_vectors=2, gradient_epochs=3))
    s.query_batch = 2  # type: ignore[misc]
    s.clients = {p: ClientInfo(p, 1000 + p, 100, 5, 0) for p in range(5)}
    s.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((2, 3), np.float32)), "head.bias": Array(np.zeros(2, np.float32))}
    )
    s.init_clusters(s.initial)
    calls: list[tuple[str, list[int], int, dict[str, object]]] = []

    def basis(rows: int) -> ClassSubspaces:
        return ClassSubspaces(np.array([0]), (np.eye(rows, 1, dtype=np.float32),))

    def query(action: str, pids: list[int], rnd: int, parse: object, **kw: object) -> dict[int, object]:
        calls.append((action, list(pids), rnd, kw))
        if action == keys.SUBSPACES_ACTION:
            assert parse == ClassSubspaces.from_arrays
            return {p: basis(6 if p == 2 else 4) for p in pids}
        assert parse == ModelUpdate.from_arrays
        return {p: ModelUpdate(np.full(8, float(p), np.float32)) for p in pids}

    s.query_signal = query  # type: ignore[method-assign]
    got = s.collect([0, 1, 2, 3, 4], 7)
    assert sorted(got) == [0, 1, 3, 4] and all(got[p][1].delta[0] == p and got[p][0].dim == 4 for p in got)
    (action, pids, rnd, kw), *updates = calls
    assert (action, pids, rnd) == (keys.SUBSPACES_ACTION, [0, 1, 2, 3, 4], 7)
    assert kw["config"] == {keys.SUBSPACE_VECTORS: 2, keys.WITH_COUNTS: True} and kw["with_counts"] is True
    assert kw["num_classes"] == 2 and kw["max_vectors"] == 2 and kw["dim"] is None
    assert [(a, b, r) for a, b, r, _ in updates] == [(keys.UPDATE_ACTION, [0, 1], 7), (keys.UPDATE_ACTION, [3, 4], 7)]
    assert all(
        k["models"] == [s.initial] and k["config"] == {keys.LOCAL_EPOCHS: 3} and k["size"] == 8 for *_, k in updates
    )


def test_fedclust_checks_each_final_layer_reply_against_the_head_s_shape() -> None:
    s = FedClust(TrainingParams(), FedClustParams())
    s.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((2, 3), np.float32)), "head.bias": Array(np.zeros(2, np.float32))}
    )
    asked = []
    s.query_signal = lambda *a, **kw: asked.append(kw) or {}  # type: ignore[method-assign]
    s.collect([0], 1)
    assert (asked[0]["outputs"], asked[0]["features"]) == (2, 3)


def test_pacfl_places_a_newcomer_by_the_configured_angle_skipping_an_empty_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import strategies.pacfl
    from common.signals.subspaces import ClassSubspaces
    from strategies.pacfl import PACFL, PACFLParams

    def basis(axis: int, tilt: float = 0.0) -> ClassSubspaces:
        v = np.eye(4)[axis] + tilt * np.eye(4)[3]
        return ClassSubspaces(np.array([0]), ((v / np.linalg.norm(v))[:, None].astype(np.float32),))

    s = PACFL(TrainingParams(), PACFLParams(pacfl_measure="sum"))
    s.distance_pids = [0, 1, 2, 3]
    s.signals = {0: basis(0), 1: basis(0, 0.1), 2: basis(1), 3: basis(1, 0.1)}
    s.assignment = {0: 0, 1: 0, 2: 1, 3: 1}
    s.models = [ArrayRecord(), ArrayRecord(), ArrayRecord()]  # cluster 2 has no member among the clustered
    rounds, measures = [], []
    s.collect = lambda pids, rnd: rounds.append(rnd) or {9: basis(1, 0.05)}  # type: ignore[method-assign]
    between = strategies.pacfl.client_distances_between
    monkeypatch.setattr(
        strategies.pacfl, "client_distances_between", lambda a, b, m: measures.append(m) or between(a, b, m)
    )
    assert s.place([9], 4) == {9: 1}
    assert rounds == [4] and measures == ["sum"]


def test_a_newcomer_without_a_signal_after_clustering_waits_in_the_largest_cluster() -> None:
    rng = np.random.default_rng(0)
    layers = _layers(rng, [0, 1, 2, 4, 5, 6, 7])  # group 0 has 3 clients, group 1 has 4
    s = _offline(FedClust(TrainingParams(), FedClustParams(num_clusters=2)), layers)
    s.cluster(1)
    largest = s.assignment[4]
    s.clients[9] = ClientInfo(9, 1009, 10, 5, 0)
    s.admit(3, [9])
    assert s.assignment[9] == largest and s.pending == {9}


@pytest.mark.parametrize(
    ("init", "k", "models", "seeded"), [("clients", 3, 1, False), ("clients", 1, 1, True), ("random", 3, 3, True)]
)
def test_fesem_starts_from_one_model_until_clients_seed_it_or_from_k_random_centres(
    init: str, k: int, models: int, seeded: bool
) -> None:
    from strategies.fesem import FeSEM, FeSEMParams

    s = FeSEM(TrainingParams(seed=7), FeSEMParams(init=init, num_clusters=k))
    assert s.training.seed == 7 and s.seeded is False and s._centres is None and s._nearest == {}
    s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, 0) for p in range(6)}
    s.initial = ArrayRecord(
        {"head.weight": Array(np.ones((2, 3), np.float32)), "head.bias": Array(np.zeros(2, np.float32))}
    )
    s.init_clusters(s.initial)
    assert len(s.models) == models and s.seeded is seeded
    if init == "clients":
        assert set(s.assignment.values()) == {0}


def test_sattler_puts_the_members_that_did_not_reply_on_the_larger_half_each_half_from_its_mean():
    from strategies import CFLSattler

    strategy = object.__new__(CFLSattler)
    strategy.models = [ArrayRecord({"w": Array(np.array([1.0, 2.0, 3.0], dtype=np.float32))})]
    strategy.assignment = dict.fromkeys(range(6), 0)
    strategy.splits = []
    means = np.array([[0.5, 0.5, 0.5], [-1.0, 0.0, 1.0]])
    strategy._apply_split(4, 0, [0], [1, 2], list(range(6)), [0, 1, 2], means)
    assert strategy.assignment == {0: 0, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}, "3, 4 and 5 join the larger half"
    np.testing.assert_allclose(strategy.models[0]["w"].numpy(), [1.5, 2.5, 3.5])
    np.testing.assert_allclose(strategy.models[1]["w"].numpy(), [0.0, 2.0, 4.0])
    assert strategy.splits == [{"round": 4, "cluster": 0, "new": 1}]


def test_sattler_records_each_attempts_gamma_max_as_the_papers_sqrt_of_half_one_minus_the_cross_cosine():
    from strategies import CFLSattler
    from strategies.cfl_sattler import SattlerSplit

    strategy = object.__new__(CFLSattler)
    strategy.attempts, strategy._retry = [], {}
    split = SattlerSplit(([0], [1]), [1, 1], cross=-0.5, intra=0.9, kept=True, sums=np.zeros((2, 3)))
    assert strategy._kept(3, 0, split) is True
    assert strategy.attempts[0]["gamma-max"] == pytest.approx(np.sqrt(0.75))  # (1 - (-0.5)) / 2


def test_pacfl_places_a_newcomer_class_by_class_by_default_over_members_in_any_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The newcomer holds classes 0 and 2. Cluster 0's members hold 0 and 1, class 1's basis the newcomer's
    class-2 direction (stacked: the same span, 0 degrees); cluster 1's hold 0 and 2, class 2 at 30 degrees
    (stacked mean 15). Class by class (the default): 60 against 15, so cluster 1; stacked mean: cluster 0.
    The members come in an order other than their ids, three at a time."""
    from common.clustering import subspaces
    from common.signals.subspaces import ClassSubspaces
    from strategies.pacfl import PACFL, PACFLParams

    e = np.eye(4)
    tilted = np.cos(np.radians(30)) * e[2] + np.sin(np.radians(30)) * e[3]

    def signal(classes: tuple[int, ...], *columns: np.ndarray) -> ClassSubspaces:
        return ClassSubspaces(np.array(classes), tuple(c[:, None].astype(np.float32) for c in columns))

    like_a, like_b = signal((0, 1), e[0], e[2]), signal((0, 2), e[0], tilted)
    monkeypatch.setattr(subspaces, "PLACE_CHUNK", 3)
    for measure, want in (("per-class", 1), ("mean", 0)):
        s = PACFL(TrainingParams(), PACFLParams(pacfl_measure=measure))
        s.signals = {0: like_a, 1: like_b, 2: like_a, 3: like_b, 4: like_a}
        s.distance_pids = [2, 3, 0, 4, 1]
        s.assignment = {2: 0, 0: 0, 4: 0, 3: 1, 1: 1}
        s.models = [ArrayRecord(), ArrayRecord(), ArrayRecord()]  # cluster 2 has no member: never chosen
        s.collect = lambda pids, rnd: {9: signal((0, 2), e[0], e[2]), 8: like_a}  # type: ignore[method-assign]
        assert s.place([9, 8], 4) == {8: 0, 9: want}, measure
    assert PACFLParams().pacfl_measure == "per-class"
