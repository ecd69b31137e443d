"""FeSEM on the in-process grid (6 digits clients in 2 true groups) and its parameters."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import Message

from client.app import app as client_app
from common import keys
from common.config import TrainingParams
from server.experiment import Experiment
from strategies import REGISTRY, FeSEM
from strategies.fesem import FeSEMParams
from strategies.flat import flat, from_flat
from strategies.replies import decode_train_reply
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

FAST = {"local-epochs": 2, "eval-every": 100, "fraction": 1.0}


def _run(rounds: int, grid_kwargs=None, **overrides):
    rc = small_run_config(strategy="fesem", rounds=rounds, **{**FAST, **overrides})
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"], **(grid_kwargs or {}))
    strategy = exp.build_strategy()
    assert isinstance(strategy, FeSEM)
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid, rc


def _models(strategy: FeSEM) -> np.ndarray:
    return np.stack([flat({n: a.numpy() for n, a in m.items()}) for m in strategy.models])


@pytest.mark.slow
def test_fesem_finds_the_planted_groups_and_each_centre_is_its_members_mean():
    strategy, _, _ = _run(3, **{"num-clusters": 2, "eval-every": 1})
    assert [r.ari for r in strategy.history] == [1.0, 1.0, 1.0]
    assert len(strategy.models) == 2 and strategy.num_clusters == 2


@pytest.mark.slow
def test_each_reply_joins_the_l2_nearest_centre_not_the_one_it_was_sent():
    """After round 1 (everyone trained the one model, cluster 0) a reply equal to centre j joins j."""
    replies: dict[int, Message] = {}

    def keep(pid):
        def fault(reply: Message, server_round: int) -> Message:
            if reply.metadata.message_type == "train" and reply.has_content():
                replies[pid] = reply
            return reply

        return fault

    strategy, _, _ = _run(1, grid_kwargs={"faults": {p: keep(p) for p in range(6)}}, **{"num-clusters": 2})
    assert strategy.seeded and len(strategy.models) == 2
    content = replies[0].content
    for j in (1, 0):
        content[keys.ARRAYS] = strategy.models[j].copy()
        assert strategy.reply_cluster(2, 0, content, _decoded(strategy, content)) == j
    near_1 = _models(strategy)[1] * 0.9 + _models(strategy)[0] * 0.1
    content[keys.ARRAYS] = from_flat(strategy.models[0], near_1)
    assert strategy.reply_cluster(3, 0, content, _decoded(strategy, content)) == 1


def _decoded(strategy, content):
    return decode_train_reply(content, strategy.models[0], strategy.clients[0].num_train)


def test_from_flat_round_trips_a_model_in_its_dtypes():
    rc = small_run_config(strategy="fesem")
    model = Experiment.from_run_config(rc).initial_model()
    vector = flat({n: a.numpy() for n, a in model.items()})
    back = from_flat(model, vector + 1.0)
    for name, arr in model.items():
        assert back[name].numpy().dtype == arr.numpy().dtype
        if np.issubdtype(arr.numpy().dtype, np.floating):
            assert np.allclose(back[name].numpy(), arr.numpy() + 1.0)
    with pytest.raises(ValueError, match=rf"The 'vector' parameter of from_flat must have {len(vector)} entries\. Got"):
        from_flat(model, vector[:-1])


def _nan_in_round(bad_round: int):
    """A fault: the train reply of ``bad_round`` carries a NaN (the reply checks reject it)."""

    def fault(reply: Message, server_round: int) -> Message:
        if reply.metadata.message_type == "train" and server_round == bad_round:
            from flwr.app import Array

            arrays = reply.content[keys.ARRAYS]
            name = next(iter(arrays))
            bad = arrays[name].numpy().copy()
            bad.flat[0] = np.nan
            arrays[name] = Array(bad)
        return reply

    return fault


def _cluster_steps(grid, server_round: int) -> list:
    """``cluster-steps`` of each train message of ``server_round`` the grid sent (None where absent)."""
    return [
        m.content[keys.CONFIG].get(keys.CLUSTER_STEPS)
        for m in grid.sent
        if m.metadata.message_type == "train" and m.content[keys.CONFIG][keys.SERVER_ROUND] == server_round
    ]


@pytest.mark.slow
def test_a_malformed_reply_is_rejected_for_that_client_only_and_moves_no_centre(caplog):
    with caplog.at_level(logging.WARNING):
        strategy, _, _ = _run(2, grid_kwargs={"faults": {0: _nan_in_round(2)}}, **{"num-clusters": 2})
    assert "client 0 reply rejected" in caplog.text
    assert strategy.history[1].rejected == 1
    assert np.isfinite(_models(strategy)).all()


def test_the_random_init_keeps_k_distinct_seeded_centres():
    rc = small_run_config(strategy="fesem", **{"num-clusters": 0, "max-clusters": 3, "fesem-init": "random"})
    exp = Experiment.from_run_config(rc)
    a, b = exp.build_strategy(), exp.build_strategy()
    for s in (a, b):
        s.clients = dict.fromkeys(range(6))  # type: ignore[misc]
        s.init_clusters(exp.initial_model())
    assert isinstance(a, FeSEM) and len(a.models) == 3 and a.seeded
    assert not np.array_equal(_models(a)[0], _models(a)[1])
    assert np.array_equal(_models(a), _models(b)) and a.assignment == b.assignment


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("num-clusters", -1, r"The 'num-clusters' parameter of FeSEM must be an int >= 0. Got -1 instead"),
        ("max-clusters", 1, r"The 'max-clusters' parameter of FeSEM must be an int >= 2. Got 1 instead"),
        ("fesem-init", "kmeans", r"The 'fesem-init' parameter of FeSEM must be one of \{'clients', 'random'\}"),
        (
            "fesem-auto-metric",
            "cityblock",
            r"The 'fesem-auto-metric' parameter of FeSEM must be one of \{'cosine', 'euclidean'\}.* Got 'cityblock'",
        ),
    ],
)
def test_bad_parameters_are_refused_naming_the_key(key, value, match):
    with pytest.raises(ValueError, match=match):
        REGISTRY["fesem"].from_run_config(TrainingParams(), {key: value})


def test_k_is_num_clusters_or_max_clusters():
    assert FeSEMParams().k == 8 and FeSEMParams(num_clusters=3).k == 3


def test_the_automatic_k_cap_is_half_the_clients_unless_given():
    assert [FeSEMParams().auto_limit(n) for n in (2, 3, 12, 30, 1000)] == [2, 2, 6, 15, 100]
    assert FeSEMParams(auto_max_clusters=8).auto_limit(30) == 8
    assert FeSEMParams(max_clusters=3).auto_limit(30) == 15  # max-clusters (CFL-GP's, IFCA's) no longer caps it
    with pytest.raises(ValueError, match=r"'fesem-auto-max-clusters' parameter of FeSEM must be 0 .* Got 1 instead"):
        FeSEMParams(auto_max_clusters=1)
    with pytest.raises(ValueError, match=r"'fesem-auto-max-clusters' parameter of FeSEM must be an int >= 0. Got -2"):
        REGISTRY["fesem"].from_run_config(TrainingParams(), {"fesem-auto-max-clusters": -2})


def _planted_updates(groups: int, per_group: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Grouped label skew with a quantity shift: updates share a direction (what every client learns) and
    lean their group's way; an update's length is its client's sample count (1x to 6x). Truth, origin, models."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(groups), per_group)
    origin = rng.normal(size=dim)
    size = rng.uniform(1.0, 6.0, size=len(truth))[:, None]
    directions = rng.normal(size=dim) + 0.5 * rng.normal(size=(groups, dim))
    return truth, origin, origin + size * (directions[truth] + 0.1 * rng.normal(size=(len(truth), dim)))


def test_ten_planted_groups_are_all_found_where_the_former_cap_of_8_merged_some():
    from sklearn.metrics import adjusted_rand_score

    from strategies.fesem import automatic_labels

    truth, origin, points = _planted_updates(10, 3, 200, 10)
    new = automatic_labels(points, FeSEMParams().auto_limit(len(points)), 0, origin=origin, metric="cosine")
    old = automatic_labels(points, 8, 0, origin=origin, metric="cosine")
    assert new.max() + 1 == 10 and adjusted_rand_score(truth, new) == 1.0
    assert old.max() + 1 == 8 and adjusted_rand_score(truth, old) < 0.95


@pytest.mark.slow
def test_the_strategy_caps_its_automatic_k_by_its_clients_not_max_clusters(monkeypatch):
    import strategies.fesem as fesem_module

    caps = []
    original = fesem_module.automatic_labels

    def spy(points, max_clusters, *args, **kwargs):
        caps.append((len(points), max_clusters))
        return original(points, max_clusters, *args, **kwargs)

    monkeypatch.setattr(fesem_module, "automatic_labels", spy)
    strategy, _, rc = _run(1, **{"num-clusters": 0, "max-clusters": 2})
    assert caps == [(rc["num-clients"], rc["num-clients"] // 2)] and rc["num-clients"] // 2 != 2
    assert strategy.num_clusters == 2 and strategy.history[0].ari == 1.0


@pytest.mark.parametrize("groups", [2, 5])
def test_automatic_labels_find_planted_blobs_and_a_sample_cut_joins_the_rest_to_the_nearest(groups, monkeypatch):
    from sklearn.metrics import adjusted_rand_score

    import strategies.fesem as fesem_module
    from strategies.fesem import automatic_labels

    rng = np.random.default_rng(groups)
    truth = np.repeat(np.arange(groups), 8)
    points = rng.normal(size=(groups, 50))[truth] * 5.0 + rng.normal(size=(len(truth), 50)) * 0.3
    labels = automatic_labels(points, max_clusters=8, seed=0)
    assert labels.max() + 1 == groups and adjusted_rand_score(truth, labels) == 1.0
    monkeypatch.setattr(fesem_module, "SAMPLE_SIZE", 4 * groups)  # cut a sample; the others join by distance
    cut_sizes = []
    original = fesem_module.auto_cut

    def spy(distances, **kwargs):
        cut_sizes.append(len(distances))
        return original(distances, **kwargs)

    monkeypatch.setattr(fesem_module, "auto_cut", spy)
    sampled = automatic_labels(points, max_clusters=8, seed=0)
    assert cut_sizes == [4 * groups] and adjusted_rand_score(truth, sampled) == 1.0


def test_automatic_labels_keep_one_cluster_on_alike_models_and_say_why(caplog):
    from strategies.fesem import automatic_labels

    with caplog.at_level(logging.INFO):
        labels = automatic_labels(np.ones((6, 10)), max_clusters=8, seed=0)
    assert (labels == 0).all() and "automatic K keeps one cluster: all clients' signals are alike" in caplog.text


@pytest.mark.parametrize("groups", [2, 5])
def test_automatic_k_on_update_directions_finds_groups_whose_update_sizes_follow_sample_counts(groups):
    from sklearn.metrics import adjusted_rand_score

    from strategies.fesem import automatic_labels

    # grouped label skew with a quantity shift: updates share a direction (what every client learns) and
    # lean their group's way; an update's length is its client's sample count (1x to 6x), which
    # Euclidean distances between the trained models follow
    rng = np.random.default_rng(groups)
    truth = np.repeat(np.arange(groups), 8)
    origin = rng.normal(size=200)
    directions = rng.normal(size=200) + 0.5 * rng.normal(size=(groups, 200))
    size = rng.uniform(1.0, 6.0, size=len(truth))[:, None]
    points = origin + size * (directions[truth] + 0.1 * rng.normal(size=(len(truth), 200)))
    cosine = automatic_labels(points, max_clusters=8, seed=0, origin=origin, metric="cosine")
    euclidean = automatic_labels(points, max_clusters=8, seed=0, origin=origin, metric="euclidean")
    assert cosine.max() + 1 == groups and adjusted_rand_score(truth, cosine) == 1.0
    assert adjusted_rand_score(truth, euclidean) < 0.8  # the former rule
    # the updates, not the models: the same models seen from another origin are other directions
    assert adjusted_rand_score(truth, automatic_labels(points, 8, 0, origin=origin + 50.0, metric="cosine")) < 0.8


def test_automatic_k_on_cosines_joins_clients_above_the_sample_by_direction(monkeypatch):
    from sklearn.metrics import adjusted_rand_score

    import strategies.fesem as fesem_module
    from strategies.fesem import automatic_labels

    truth, origin, points = _planted_updates(3, 10, 100, 7)
    monkeypatch.setattr(fesem_module, "SAMPLE_SIZE", 12)
    monkeypatch.setattr(fesem_module, "CHUNK", 7)  # the joining clients are made unit rows a few at a time
    labels = automatic_labels(points, max_clusters=8, seed=0, origin=origin, metric="cosine")
    assert adjusted_rand_score(truth, labels) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize(
    "metric, steps, found", [("cosine", 0, True), ("euclidean", 0, False), ("euclidean", 100, True)]
)
def test_fesem_automatic_k_on_digits_label_skew_with_quantity_shift(metric, steps, found):
    """12 digits clients, grouped label skew (Dirichlet sample counts): seeded by a local epoch (``cluster-steps
    0``, the former seeding) the updates' cosines find the 2 groups after round 1 and the trained models'
    Euclidean distances (the former rule) do not: a larger client trains more steps and moves further. With
    ``cluster-steps`` mini-batches (the default) every client trains equally long and both find them."""
    overrides = {"scenario": "label-skew-dirichlet", "num-clients": 12, "samples-per-label": 0, "seed": 1}
    overrides |= {"num-clusters": 0, "fesem-auto-metric": metric, "local-epochs": 1, "lr": 0.01, "eval-every": 1}
    strategy, _, _ = _run(1, **overrides, **{"cluster-steps": steps})
    ari = strategy.history[0].ari
    assert (len(strategy.models), ari) == (2, 1.0) if found else ari < 0.5


def test_automatic_k_on_cosines_keeps_one_cluster_when_no_client_moved(caplog):
    """lr 0: every update is zero, whose cosine is undefined; one cluster, logged, no crash."""
    from strategies.fesem import automatic_labels

    points = np.tile(np.arange(10.0), (6, 1))
    with caplog.at_level(logging.INFO):
        labels = automatic_labels(points, max_clusters=8, seed=0, origin=np.arange(10.0), metric="cosine")
    assert (labels == 0).all() and "automatic K keeps one cluster: all clients' signals are alike" in caplog.text
    moved = points.copy()
    moved[:3, 0] += 1.0  # three clients moved one way, three did not: two clusters
    two = automatic_labels(moved, max_clusters=8, seed=0, origin=np.arange(10.0), metric="cosine")
    assert two.tolist() == [0, 0, 0, 1, 1, 1]


def test_automatic_labels_above_the_sample_join_each_client_by_its_update_direction(monkeypatch):
    from sklearn.metrics import adjusted_rand_score

    from strategies import fesem

    monkeypatch.setattr(fesem, "SAMPLE_SIZE", 24)
    rng = np.random.default_rng(3)
    truth = rng.permutation(np.arange(90) % 3)
    directions = np.linalg.qr(rng.standard_normal((12, 3)))[0].T
    origin = np.full(12, 10.0)  # far from 0: the clients' models all point the same way, their updates do not
    points = origin + rng.uniform(0.5, 3.0, size=(90, 1)) * directions[truth] + 0.02 * rng.standard_normal((90, 12))
    labels = fesem.automatic_labels(points, 6, seed=1, origin=origin, metric="cosine")
    assert adjusted_rand_score(truth, labels) == 1.0


@pytest.mark.parametrize("init, steps, seeding", [("clients", 100, 100), ("clients", 0, None), ("random", 100, None)])
def test_the_seeding_round_trains_cluster_steps_mini_batches_and_later_rounds_the_epochs(init, steps, seeding):
    """With ``fesem-init clients`` round 1's trained models are the clustering signal: every client
    trains ``cluster-steps`` mini-batches (clients of any size equally long), as FL+HC's signal does;
    ``cluster-steps 0`` is the former seeding (local epochs), and the paper's random init has none."""
    _, grid, _ = _run(2, **{"num-clusters": 2, "fesem-init": init, "cluster-steps": steps})
    by_round = {r: _cluster_steps(grid, r) for r in (1, 2)}
    assert len(by_round[1]) == 6 and set(by_round[1]) == {seeding}
    assert by_round[2] and set(by_round[2]) == {None}


def test_a_seeding_round_without_replies_is_repeated_with_cluster_steps():
    """Every round-1 train reply is malformed (rejected): FeSEM is not seeded, so round 2 asks every
    client again with ``cluster-steps`` and seeds from its replies; round 3 trains the local epochs."""
    faults = dict.fromkeys(range(6), _nan_in_round(1))
    strategy, grid, _ = _run(3, grid_kwargs={"faults": faults}, **{"num-clusters": 2})
    steps = {r: set(_cluster_steps(grid, r)) for r in (1, 2, 3)}
    assert steps == {1: {100}, 2: {100}, 3: {None}}
    assert strategy.history[0].rejected == 6 and strategy.seeded and len(strategy.models) == 2
