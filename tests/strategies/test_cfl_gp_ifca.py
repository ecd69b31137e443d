"""CFL-GP and IFCA on the in-process grid (6 digits clients in 2 true groups)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from sklearn.metrics import adjusted_rand_score

from client.app import app as client_app
from client.signals.profile import gradient_profile
from client.task import task_from_context
from common import keys
from common.clustering import spectral
from common.clustering.compression import block_seed, compressed_size, coordinate_subset
from common.config import TrainingParams
from common.training import evaluate
from server.experiment import Experiment
from server.figures import FIGURES
from strategies import CFLGP, IFCA, state
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

FAST = {"local-epochs": 1, "eval-every": 100}


def _run(name: str, grid_kwargs=None, **overrides):
    rc = small_run_config(strategy=name, **{**FAST, **overrides})
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"], **(grid_kwargs or {}))
    strategy = exp.build_strategy()
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid, rc


def _sent(grid, message_type):
    return [m for m in grid.sent if m.metadata.message_type == message_type]


@pytest.mark.parametrize(
    "key, value",
    [
        ("num-clusters", -1),
        ("max-clusters", 1),
        ("cfl-gp-cluster-period", 0),
        ("cfl-gp-profile-protocol", "sgd"),
        ("cfl-gp-profile-fraction", 0.0),
        ("cfl-gp-compression-ratio", 0.5),
        ("cfl-gp-estimate-after", 0),
        ("cfl-gp-auto-max-clusters", -1),
        ("cfl-gp-auto-max-clusters", 1),
    ],
)
def test_cflgp_rejects_bad_parameters_naming_them(key, value):
    with pytest.raises(ValueError, match=f"'{key}' parameter of CFLGP"):
        CFLGP.from_run_config(TrainingParams(), {key: value})


def test_cflgp_broadcasts_round_robin_to_every_client_and_clusters_by_truth(tmp_path):
    strategy, grid, rc = _run("cfl-gp", rounds=5, **{"num-clusters": 2, "cfl-gp-stable-updates": 0})
    assert strategy.broadcasts == [(1, 0), (3, 1), (5, 0)]
    assert [r.phase for r in strategy.history] == ["cluster", "train"] * 2 + ["cluster"]
    queries = _sent(grid, keys.query_type(keys.PROFILE_ACTION))
    assert len(queries) == 3 * rc["num-clients"]
    assert strategy.history[-1].ari == 1.0
    assert strategy.counts[0].tolist() == [2, 1]
    assert strategy.history[0].bytes_up_signal == rc["num-clients"] * strategy.size * 4
    assert strategy.distance_matrix.shape == (6, 6)
    paths = FIGURES["cfl-gp"](strategy, tmp_path)
    assert [p.name for p in paths] == ["singular-values.png"] and paths[0].stat().st_size > 0


class SpyCFLGP(CFLGP):
    """Records which cluster model each profile query carried (by identity)."""

    def query_signal(self, action, pids, server_round, from_arrays, *, models=(), **kwargs):
        if action == keys.PROFILE_ACTION:
            self.sent_models = [
                *getattr(self, "sent_models", []),
                next(k for k, m in enumerate(self.models) if m is models[0]),
            ]
        return super().query_signal(action, pids, server_round, from_arrays, models=models, **kwargs)


def test_cflgp_sends_the_round_robin_model_itself_with_its_blocks_seed():
    rc = small_run_config(
        strategy="cfl-gp",
        rounds=4,
        **{**FAST, "num-clusters": 3, "cfl-gp-stable-updates": 0, "cfl-gp-cluster-period": 1},
    )
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"])
    strategy = SpyCFLGP(exp.training, exp.strategy_params)
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    assert strategy.sent_models == [0, 1, 2, 0]
    seeds = {
        q.content[keys.CONFIG][keys.SERVER_ROUND]: q.content[keys.CONFIG][keys.PROFILE_SEED]
        for q in _sent(grid, keys.query_type(keys.PROFILE_ACTION))
    }
    assert seeds == {1: block_seed(1, 0), 2: block_seed(1, 1), 3: block_seed(1, 2), 4: block_seed(1, 0)}


def test_cflgp_compression_picks_the_same_coordinates_on_server_and_client():
    rc = small_run_config(strategy="cfl-gp", **{**FAST, "num-clusters": 2, "cfl-gp-compression-ratio": 50.0})
    strategy, grid, _ = _run("cfl-gp", rounds=1, **{"num-clusters": 2, "cfl-gp-compression-ratio": 50.0})
    query = _sent(grid, keys.query_type(keys.PROFILE_ACTION))[0]
    pid = grid.pid_of[query.metadata.dst_node_id]
    dim = sum(a.numpy().size for a in query.content[keys.ARRAYS].values())
    assert strategy.size == compressed_size(dim, 50.0) == query.content[keys.CONFIG][keys.PROFILE_SIZE]
    task = task_from_context(rc, {keys.PARTITION_ID: pid, "num-partitions": rc["num-clients"]})
    full_cfg = ConfigRecord({**dict(query.content[keys.CONFIG]), keys.PROFILE_SIZE: dim})
    full = gradient_profile(task, RecordDict({keys.ARRAYS: query.content[keys.ARRAYS], keys.CONFIG: full_cfg}))
    subset = coordinate_subset(dim, strategy.size, query.content[keys.CONFIG][keys.PROFILE_SEED])
    compressed = gradient_profile(task, query.content)["vector"]
    np.testing.assert_array_equal(compressed, full["vector"][subset])
    assert strategy.history[0].bytes_up_signal == rc["num-clients"] * strategy.size * 4


def test_cflgp_gradient_protocol_and_stable_updates_stop_clustering():
    strategy, _grid, _ = _run(
        "cfl-gp",
        rounds=4,
        **{
            "num-clusters": 2,
            "cfl-gp-cluster-period": 1,
            "cfl-gp-stable-updates": 2,
            "cfl-gp-profile-protocol": "gradient",
        },
    )
    assert strategy.stopped and len(strategy.broadcasts) == 3
    assert strategy.history[-1].ari == 1.0
    assert [r.phase for r in strategy.history] == ["cluster"] * 3 + ["train"]


@pytest.mark.parametrize("projection, dims", [(None, 3), ("largest-gap", 1)])  # None: half the 6 clients
def test_cflgp_estimates_k_when_num_clusters_is_not_given(caplog, tmp_path, projection, dims):
    setting = {"num-clusters": 0, "max-clusters": 4}
    if projection:
        setting["cfl-gp-estimate-projection"] = projection
    with caplog.at_level(logging.INFO):
        strategy, _, _ = _run("cfl-gp", rounds=3, **setting)
    assert strategy.estimate is not None and strategy.k == 2 == len(strategy.models)
    assert (strategy.estimate.gap_dims, strategy.estimate.dims) == (1, dims)
    assert f"silhouettes on {dims} directions" in caplog.text
    # App. G: max-clusters models until the estimate, then K clusters from the centred profile
    assert strategy.history[0].num_clusters == 4 and strategy.history[-1].ari == 1.0
    assert "CFL-GP estimates K = 2" in caplog.text
    assert FIGURES["cfl-gp"](strategy, tmp_path)[0].stat().st_size > 0


def test_cflgp_with_a_profile_fraction_imputes_the_blocks_a_client_has_not_answered(monkeypatch):
    seen = []
    original = spectral.impute_blocks
    monkeypatch.setattr(spectral, "impute_blocks", lambda *a, **k: seen.append((a[1].copy(), k)) or original(*a, **k))
    strategy, grid, _ = _run(
        "cfl-gp",
        rounds=5,
        **{"num-clusters": 2, "cfl-gp-cluster-period": 1, "cfl-gp-stable-updates": 0, "cfl-gp-profile-fraction": 0.5},
    )
    queries = _sent(grid, keys.query_type(keys.PROFILE_ACTION))
    assert len(queries) == 5 * 3
    assert seen and all(np.any(counts == 0) and k["rank"] == 2 for counts, k in seen)
    assert strategy.history[-1].ari == 1.0


def test_ifca_sends_all_models_and_clients_choose_by_train_loss():
    strategy, grid, rc = _run("ifca", rounds=1, fraction=1.0, **{"num-clusters": 3})
    model_bytes = sum(a.numpy().nbytes for a in strategy.models[0].values())
    assert strategy.history[0].bytes_down_model >= 6 * 3 * model_bytes
    for msg in _sent(grid, "train"):
        assert msg.content[keys.CONFIG][keys.NUM_MODELS] == 3
        assert set(msg.content.array_records) == {"arrays-0", "arrays-1", "arrays-2"}
        pid = grid.pid_of[msg.metadata.dst_node_id]
        task = task_from_context(rc, {keys.PARTITION_ID: pid, "num-partitions": rc["num-clients"]})
        losses = [
            evaluate(task.model(msg.content[keys.model_record(k)]), task.data.x_train, task.data.y_train)[0]
            for k in range(3)
        ]
        assert strategy.choices[pid] == int(np.argmin(losses)) == strategy.assignment[pid]


def _bad_choice(value):
    def fault(reply: Message, server_round: int) -> Message:
        if reply.metadata.message_type == "train":
            if value is None:
                del reply.content[keys.METRICS][keys.CLUSTER_ID]
            else:
                reply.content[keys.METRICS][keys.CLUSTER_ID] = value
        return reply

    return fault


@pytest.mark.parametrize(
    "value, message",
    [
        (None, "metric 'cluster-id' is missing"),
        (7, "cluster-id 7 is not a model index in"),
        (0.5, "cluster-id 0.5 is not a model index"),
    ],
)
def test_ifca_rejects_a_missing_or_impossible_choice(value, message, caplog):
    with caplog.at_level(logging.WARNING):
        strategy, _, _ = _run(
            "ifca", rounds=1, fraction=1.0, grid_kwargs={"faults": {0: _bad_choice(value)}}, **{"num-clusters": 2}
        )
    assert f"client 0 reply rejected: {message}" in caplog.text
    assert strategy.history[0].rejected == 1 and 0 not in strategy.choices


def test_ifca_without_num_clusters_keeps_max_clusters_models():
    strategy, _, _ = _run("ifca", rounds=1, **{"num-clusters": 0, "max-clusters": 3})
    assert len(strategy.models) == 3
    assert not np.array_equal(strategy.models[0]["head.weight"].numpy(), strategy.models[1]["head.weight"].numpy())
    assert isinstance(strategy, IFCA)


def test_default_train_path_sends_no_choice():
    _strategy, grid, _ = _run("fedavg", rounds=1)
    replies = grid.send_and_receive(_sent(grid, "train")[:1])
    assert keys.CLUSTER_ID not in replies[0].content[keys.METRICS]
    assert keys.NUM_MODELS not in _sent(grid, "train")[0].content[keys.CONFIG]


def test_automatic_compression_only_above_the_profile_budget():
    from common.clustering import compression

    budget = compression.PROFILE_BUDGET_BYTES
    assert compression.automatic_ratio(100, 8, 159_010) == 1.0  # 0.51 GB: exact profiles
    ratio = compression.automatic_ratio(10_000, 8, 159_010)
    assert ratio == 128.0  # 51 GB at 1x, 0.4 GB at 128x (40 kB a client), 0.8 GB at 64x
    assert 10_000 * 8 * compression.compressed_size(159_010, ratio) * 4 <= budget
    assert 10_000 * 8 * compression.compressed_size(159_010, ratio / 2) * 4 > budget
    assert compression.automatic_ratio(10**9, 8, 10) == 10.0  # never below one coordinate
    assert CFLGP.from_run_config(TrainingParams(), {"cfl-gp-compression-ratio": 0.0}).params.compression_ratio == 0.0
    with pytest.raises(ValueError, match="'cfl-gp-compression-ratio' parameter of CFLGP"):
        CFLGP.from_run_config(TrainingParams(), {"cfl-gp-compression-ratio": -1.0})


def test_cflgp_compresses_automatically_when_the_profile_would_pass_the_budget(monkeypatch, caplog):
    from common.clustering import compression

    rc = small_run_config(strategy="cfl-gp", **{**FAST, "num-clusters": 2})
    monkeypatch.setattr(compression, "PROFILE_BUDGET_BYTES", rc["num-clients"] * 2 * 4 * 1000)
    with caplog.at_level(logging.INFO):
        strategy, grid, _ = _run("cfl-gp", rounds=1, **{"num-clusters": 2})
    query = _sent(grid, keys.query_type(keys.PROFILE_ACTION))[0]
    dim = sum(a.numpy().size for a in query.content[keys.ARRAYS].values())
    assert strategy.ratio == compression.automatic_ratio(rc["num-clients"], 2, dim) > 1
    assert strategy.size == compressed_size(dim, strategy.ratio) == query.content[keys.CONFIG][keys.PROFILE_SIZE]
    assert strategy.size <= 1000 < compressed_size(dim, strategy.ratio / 2)
    assert f"compresses profiles {strategy.ratio:g}x" in caplog.text
    monkeypatch.setattr(compression, "PROFILE_BUDGET_BYTES", 2**40)
    exact, _, _ = _run("cfl-gp", rounds=1, **{"num-clusters": 2})
    assert exact.ratio == 1.0 and exact.size == dim
    # the slimmer profile clusters as the exact one: the same partition, the planted one
    pids = sorted(exact.assignment)
    truth = [exact.true_group(p) for p in pids]
    slim, whole = ([a[p] for p in pids] for a in (strategy.assignment, exact.assignment))
    assert adjusted_rand_score(whole, slim) == adjusted_rand_score(truth, slim) == 1.0
    assert strategy.blocks[0].nbytes * dim == exact.blocks[0].nbytes * strategy.size


def test_cflgp_keeps_its_clients_spectral_features_and_makes_their_distances_when_read():
    strategy, _, rc = _run("cfl-gp", rounds=1, **{"num-clusters": 2})
    n = rc["num-clients"]
    assert strategy.features.shape == (n, 2) and strategy.distance_pids == list(range(n))
    assert not [k for k, v in vars(strategy).items() if isinstance(v, np.ndarray) and v.shape == (n, n)]
    d = strategy.distance_matrix
    i, j = 0, n - 1
    assert d.shape == (n, n) and d[i, j] == pytest.approx(np.linalg.norm(strategy.features[i] - strategy.features[j]))
    assert "features" in state.capture(strategy) and "distance_matrix" not in state.capture(strategy)
