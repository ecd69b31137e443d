"""Tests written against errors injected into the strategies (issue 18): each fails with its error.

``tests/test_mutations.py`` re-injects every one of them and checks that these tests catch it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from client.app import app as client_app
from client.signals.flag import holdout, holdout_split
from client.signals.forces import class_forces, forces
from client.signals.profile import gradient_profile
from client.signals.subspaces import class_bases, subspaces
from client.signals.update import model_update
from client.task import task_from_context, train_local
from common import keys
from common.clustering.compression import block_seed, coordinate_subset
from common.clustering.flag import data_similarity
from common.config import TrainingParams
from common.signals.final_layer import FinalLayer
from common.signals.subspaces import ClassSubspaces
from common.signals.update import ModelUpdate
from common.training import evaluate, train
from server.experiment import Experiment
from strategies import FLAG, PACFL, CFLSattler, FedClust
from strategies.cfl_sattler import CFLSattlerParams
from strategies.fedclust import FedClustParams
from strategies.federation import ClientInfo
from strategies.flag import FLAGParams
from strategies.pacfl import PACFLParams
from strategies.replies import TrainUpdate
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


def _run(**overrides):
    rc = small_run_config(**{"local-epochs": 1, "eval-every": 100, **overrides})
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"])
    strategy = exp.build_strategy()
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid, exp


def _sent(grid, action):
    return [m for m in grid.sent if m.metadata.message_type == keys.query_type(action)]


def _same(a: ArrayRecord, b: ArrayRecord) -> bool:
    return all(np.array_equal(a[n].numpy(), b[n].numpy()) for n in a)


def _task(rc, pid=2):
    return task_from_context(rc, {keys.PARTITION_ID: pid, "num-partitions": rc["num-clients"]})


# ---------------------------------------------------------------- CFLGT
def test_cflgt_forces_and_cluster_models_come_from_the_pretrained_model():
    strategy, grid, exp = _run(strategy="cflgt", **{"cflgt-pretrain-rounds": 1, "rounds": 2})
    initial = exp.initial_model()
    queried = [m.content[keys.ARRAYS] for m in _sent(grid, keys.FORCES_ACTION)]
    assert len(queried) == 6 and not _same(queried[0], initial)  # one FedAvg round moved the model
    assert all(_same(q, strategy.reference) for q in queried)
    trained = [
        m.content[keys.ARRAYS]
        for m in grid.sent
        if m.metadata.message_type == "train" and m.content[keys.CONFIG][keys.SERVER_ROUND] == 2
    ]
    assert trained and all(_same(t, strategy.reference) for t in trained)  # cluster models start there


# ---------------------------------------------------------------- client signals: train split only
def test_forces_bases_and_holdout_accuracy_read_the_train_split():
    rc = small_run_config()
    task = _task(rc)
    initial = Experiment.from_run_config(rc).initial_model()
    x_tr, y_tr, x_te, y_te = task.data.x_train, task.data.y_train, task.data.x_test, task.data.y_test
    cfg = {keys.SERVER_ROUND: 1}
    pull = forces(task, RecordDict({keys.ARRAYS: initial, keys.CONFIG: ConfigRecord(cfg)}))["pull"]
    on_train = class_forces(task.model(initial), x_tr, y_tr, task.info.num_classes)[0]
    on_test = class_forces(task.model(initial), x_te, y_te, task.info.num_classes)[0]
    np.testing.assert_allclose(pull, on_train, rtol=1e-5)
    assert not np.allclose(on_train, on_test, rtol=1e-3)

    reply = ClassSubspaces.from_arrays(
        subspaces(task, RecordDict({keys.CONFIG: ConfigRecord({keys.SUBSPACE_VECTORS: 2, keys.WITH_COUNTS: True})})),
        dim=None,
        num_classes=task.info.num_classes,
        max_vectors=2,
        with_counts=True,
    )
    expected = class_bases(x_tr, y_tr, 2, torch.device("cpu"))
    np.testing.assert_array_equal(reply.counts, expected.counts)
    for got, want in zip(reply.bases, expected.bases, strict=True):
        np.testing.assert_allclose(np.abs(got), np.abs(want), atol=1e-5)
    assert reply.counts.sum() == len(y_tr)
    assert not np.allclose(
        np.abs(expected.bases[0]), np.abs(class_bases(x_te, y_te, 2, torch.device("cpu")).bases[0]), atol=1e-3
    )

    hold = {**task_cfg(rc), keys.HOLDOUT_FRACTION: 0.5, keys.LOCAL_EPOCHS: 0, keys.SERVER_ROUND: 1}
    got = holdout(task, RecordDict({keys.ARRAYS: initial, keys.CONFIG: ConfigRecord(hold)}))
    _, val = holdout_split(len(y_tr), 0.5, task.seed, task.partition_id)
    want = evaluate(task.model(initial), x_tr[val], y_tr[val])[1]
    assert float(got["accuracy"][0]) == pytest.approx(want)
    assert want != pytest.approx(evaluate(task.model(initial), x_te, y_te)[1])


def task_cfg(rc):
    return TrainingParams.from_run_config(rc).local_config()


# ---------------------------------------------------------------- FLAG
def test_flag_update_trains_gradient_epochs_not_local_epochs():
    _, grid, _ = _run(strategy="flag", rounds=1, **{"flag-alpha": 0.5, "flag-gradient-epochs": 3, "local-epochs": 1})
    query = _sent(grid, keys.UPDATE_ACTION)[0]
    assert query.content[keys.CONFIG][keys.LOCAL_EPOCHS] == 3
    rc = small_run_config(**{"local-epochs": 1})
    task = _task(rc, grid.pid_of[query.metadata.dst_node_id])
    delta = model_update(task, query.content)["delta"]
    cfg = dict(query.content[keys.CONFIG])
    model = train_local(task, query.content[keys.ARRAYS], cfg, epochs=3)[0]
    state = model.state_dict()
    three = np.concatenate([(state[n].numpy() - a.numpy()).ravel() for n, a in query.content[keys.ARRAYS].items()])
    np.testing.assert_allclose(delta, three, atol=1e-6)


# ---------------------------------------------------------------- FedClust
def test_fedclust_newcomers_train_the_initial_model():
    s, grid, exp = _run(
        strategy="fedclust", rounds=3, **{"fedclust-lambda": 2.0, "late-clients": 0.34, "late-round": 3}
    )
    queries = _sent(grid, keys.FINAL_LAYER_ACTION)
    late = [m for m in queries if m.content[keys.CONFIG][keys.SERVER_ROUND] == 3]
    assert len(late) == 2
    initial = exp.initial_model()
    assert all(_same(m.content[keys.ARRAYS], initial) for m in queries)
    assert not any(_same(model, initial) for model in s.models)  # two rounds of training moved them
    details = s.run_details()
    late_pids = {grid.pid_of[m.metadata.dst_node_id] for m in late}
    assert s.newcomers == late_pids and details["newcomers"] == 2
    assert details["newcomer-accuracy"] == pytest.approx(np.mean([s.last_eval[p][0] for p in late_pids]))


def _offline(strategy, signals, truth):
    strategy.clients = {p: ClientInfo(p, 1000 + p, 10, 5, int(truth[p])) for p in signals}
    strategy.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((2, 3), np.float32)), "head.bias": Array(np.zeros(2, np.float32))}
    )
    strategy.init_clusters(strategy.initial)
    strategy.collect = lambda pids, rnd: {p: signals[p] for p in pids if p in signals}
    return strategy


def test_fedclust_distance_is_plain_euclidean_and_cuts_by_it():
    # final layers on a line at 0, 1, 3: Euclidean gaps 1 and 2 (squared: 1 and 4)
    vectors = {p: FinalLayer(np.full((2, 3), x), np.zeros(2)) for p, x in enumerate([0.0, 1.0, 3.0])}
    s = _offline(FedClust(TrainingParams(), FedClustParams(fedclust_lambda=3.0, linkage="single")), vectors, [0, 0, 1])
    s.cluster(1)
    step = np.sqrt(6)  # six weights move by 1 per unit
    np.testing.assert_allclose(s.distance_matrix, step * np.array([[0, 1, 3], [1, 0, 2], [3, 2, 0]]))
    # merges at 2.45 and 4.9: a cut at 3 gives {0, 1} | {2} (squared distances 6 and 24 would give three)
    assert [s.assignment[p] for p in range(3)] == [0, 0, 1]


# ---------------------------------------------------------------- PACFL
def _bases(t_deg: float):
    """Client 0 spans e1, e2; client 1 spans e1 and v = cos t e2 + sin t e3 (principal angles 0 and t),
    its basis rotated by 45 degrees inside its span so no column of one is a column of the other."""
    t = np.radians(t_deg)
    e = np.eye(4)
    v = np.cos(t) * e[1] + np.sin(t) * e[2]
    a = e[:, :2]
    b = np.stack([(e[0] + v) / np.sqrt(2), (e[0] - v) / np.sqrt(2)], axis=1)
    return a, b


@pytest.mark.parametrize(
    ("measure", "expected"),
    [("smallest", 0.0), ("sum", 60.0), ("mean", 30.0), ("reference", 45.0), ("per-class", 30.0)],
)
def test_pacfl_measures_differ_on_subspaces_that_are_not_axis_aligned(measure, expected):
    a, b = _bases(60.0)
    signals = {
        0: ClassSubspaces(np.array([0]), (a,)),
        1: ClassSubspaces(np.array([0]), (b,)),
        2: ClassSubspaces(np.array([0]), (a,)),
    }
    s = _offline(PACFL(TrainingParams(), PACFLParams(pacfl_measure=measure, pacfl_vectors=2)), signals, [0, 1, 0])
    s.cluster(1)
    assert s.distance_matrix[0, 1] == pytest.approx(expected, abs=1e-4)
    assert s.distance_matrix[0, 2] == pytest.approx(0.0, abs=1e-4)


# ---------------------------------------------------------------- CFL-GP
def test_cflgp_server_blocks_are_the_clients_compressed_profiles_per_model():
    s, grid, exp = _run(
        strategy="cfl-gp",
        rounds=3,
        **{"num-clusters": 2, "cfl-gp-compression-ratio": 50.0, "cfl-gp-cluster-period": 1, "cfl-gp-stable-updates": 0},
    )
    queries = _sent(grid, keys.PROFILE_ACTION)
    by_round = {}
    for m in queries:
        by_round.setdefault(m.content[keys.CONFIG][keys.SERVER_ROUND], []).append(m)
    seeds = {r: {m.content[keys.CONFIG][keys.PROFILE_SEED] for m in ms} for r, ms in by_round.items()}
    assert seeds == {
        1: {block_seed(exp.training.seed, 0)},
        2: {block_seed(exp.training.seed, 1)},
        3: {block_seed(exp.training.seed, 0)},
    }
    rc = small_run_config(**{"local-epochs": 1})
    for pid in range(6):
        task = _task(rc, pid)
        vectors = {
            r: gradient_profile(task, next(m for m in ms if grid.pid_of[m.metadata.dst_node_id] == pid).content)[
                "vector"
            ]
            for r, ms in by_round.items()
        }
        np.testing.assert_allclose(s.blocks[pid][0], (vectors[1] + vectors[3]) / 2, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(s.blocks[pid][1], vectors[2], rtol=1e-4, atol=1e-6)
        m = by_round[1][0]
        dim = sum(a.numpy().size for a in m.content[keys.ARRAYS].values())
        assert len(coordinate_subset(dim, s.size, block_seed(exp.training.seed, 0))) == s.blocks[pid].shape[1]


# ---------------------------------------------------------------- FedProx
def test_fedprox_step_adds_mu_times_the_distance_to_the_start():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 5)).astype(np.float32), rng.integers(0, 3, 16)
    w0 = [p.detach().clone() for p in model.parameters()]
    mu, lr = 0.7, 0.1
    manual = torch.nn.Linear(5, 3)
    manual.load_state_dict(model.state_dict())
    xs, ys = torch.as_tensor(x), torch.as_tensor(y)
    for _ in range(2):  # two full-batch steps: the second one feels the proximal pull
        loss = torch.nn.functional.cross_entropy(manual(xs), ys)
        grads = torch.autograd.grad(loss, list(manual.parameters()))
        with torch.no_grad():
            for p, g, p0 in zip(manual.parameters(), grads, w0, strict=True):
                p -= lr * (g + mu * (p - p0))
    train(model, x, y, epochs=2, batch_size=16, lr=lr, proximal_mu=mu)
    for got, want in zip(model.parameters(), manual.parameters(), strict=True):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-6)


# ---------------------------------------------------------------- Sattler
def _sattler(updates: np.ndarray):
    s = CFLSattler(TrainingParams(), CFLSattlerParams())
    n, d = updates.shape
    s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, 0) for p in range(n)}
    s.initial = ArrayRecord({"w": Array(np.zeros(d, np.float32))})
    s.init_clusters(s.initial)
    s.query_signal = lambda action, pids, rnd, decode, **kw: {p: ModelUpdate(updates[p]) for p in pids}
    s._try_split(5, 0)
    return s


def test_sattler_keeps_a_split_of_opposed_groups_and_refuses_one_of_unrelated_updates():
    rng = np.random.default_rng(0)
    v = rng.normal(size=50)
    opposed = np.stack(
        [v + 0.1 * rng.normal(size=50) for _ in range(4)] + [-v + 0.1 * rng.normal(size=50) for _ in range(3)]
    ).astype(np.float32)
    s = _sattler(opposed)
    assert len(s.models) == 2 and s.attempts[0]["kept"]
    assert [s.assignment[p] for p in range(7)] == [0, 0, 0, 0, 1, 1, 1]
    np.testing.assert_allclose(s.models[1]["w"].numpy(), opposed[4:].mean(axis=0), rtol=1e-5)
    unrelated = rng.normal(size=(7, 50)).astype(np.float32)  # no group structure: cosines near 0
    s = _sattler(unrelated)
    assert len(s.models) == 1 and not s.attempts[0]["kept"] and set(s.assignment.values()) == {0}


def test_pacfl_reference_signed_is_the_reference_codes_signed_cosine():
    a, b = _bases(60.0)
    signals = {
        0: ClassSubspaces(np.array([0]), (a,)),
        1: ClassSubspaces(np.array([0]), (-b,)),
        2: ClassSubspaces(np.array([0]), (a,)),
    }
    got = {}
    for measure in ("reference", "reference-signed"):
        s = _offline(PACFL(TrainingParams(), PACFLParams(pacfl_measure=measure, pacfl_vectors=2)), signals, [0, 1, 0])
        s.cluster(1)
        got[measure] = s.distance_matrix[0, 1]
    # |cos| ignores the sign of -b: 45 degrees; signed, the largest cosine is e2 . -b2 = cos(60) / sqrt(2)
    assert got["reference"] == pytest.approx(45.0, abs=1e-4)
    assert got["reference-signed"] == pytest.approx(np.degrees(np.arccos(0.5 / np.sqrt(2))), abs=1e-4)


def test_sattler_eps_absolute_compares_the_mean_update_norm_with_eps1():
    rng = np.random.default_rng(1)
    v = rng.normal(size=50)
    updates = np.stack([v + 0.1 * rng.normal(size=50) for _ in range(6)]).astype(np.float32)  # aligned: ratio ~1
    norm = float(np.linalg.norm(updates.mean(axis=0)))
    for absolute, eps1, splits in ((False, 0.5, False), (True, norm * 1.01, True), (True, norm * 0.99, False)):
        s = CFLSattler(TrainingParams(), CFLSattlerParams(eps1=eps1, split_after=0, eps_absolute=absolute))
        s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, 0) for p in range(6)}
        s.initial = ArrayRecord({"w": Array(np.zeros(50, np.float32))})
        s.init_clusters(s.initial)
        updates_of = {p: _train_update(s.initial, updates[p]) for p in range(6)}
        s.after_train(1, updates_of)
        assert (0 in s._candidates) == splits, (absolute, eps1)


def _train_update(sent: ArrayRecord, delta: np.ndarray) -> TrainUpdate:
    w0 = sent["w"].numpy()
    return TrainUpdate({"w": w0 + delta}, 10, 1.0, {"w": w0})


def test_flag_vectors_zero_is_one_percent_of_each_class():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(420, 30)).astype(np.float32)
    y = np.repeat([0, 1, 2], [300, 70, 50])
    got = class_bases(x, y, 0, torch.device("cpu"))
    assert [b.shape[1] for b in got.bases] == [3, 1, 1]
    assert [b.shape[1] for b in class_bases(x, y, 2, torch.device("cpu")).bases] == [2, 2, 2]


def test_flag_uniform_weights_ignores_the_class_counts():
    e = np.eye(6)
    signals = {
        p: (
            ClassSubspaces(
                np.array([0, 1]) if p < 4 else np.array([2, 3]),
                (e[:, [0]], e[:, [1]]) if p < 4 else (e[:, [2]], e[:, [3]]),
                np.array([10 + 20 * p, 30]),
            ),
            ModelUpdate(np.eye(5)[p // 4]),
        )
        for p in range(8)
    }
    matrices = {}
    for uniform in (False, True):
        s = FLAG(TrainingParams(), FLAGParams(alpha=0.5, uniform_weights=uniform))
        s.clients = {p: ClientInfo(p, 1000 + p, 40, 5, p // 4) for p in signals}
        s.initial = ArrayRecord(
            {"head.weight": Array(np.zeros((4, 5), np.float32)), "head.bias": Array(np.zeros(4, np.float32))}
        )
        s.init_clusters(s.initial)
        s.collect = lambda pids, rnd: {p: signals[p] for p in pids}
        s.cluster(1)
        matrices[uniform] = s.data_matrix
        assert [s.assignment[p] for p in range(8)] == [0] * 4 + [1] * 4
    bases = [dict(zip(sig.classes.tolist(), sig.bases, strict=True)) for sig, _ in signals.values()]
    np.testing.assert_allclose(matrices[True], data_similarity(bases, None, 4))
    assert not np.allclose(matrices[True], matrices[False])


def test_flag_uniform_weights_average_the_class_angles_as_eq3_and_eq6_say():
    """Hand-computed V: class 1's subspaces are 60 degrees apart for every pair; client 2 holds 50x
    more of class 1 than the others; client 3 lacks class 1 (Eq. 3: 180 degrees). With counts
    (delta 0.5, Eq. 4-5) an equal-size pair weighs 1 - delta and the most unequal one 1 + delta;
    with uniform weights every class angle counts once: V = (0 + 60) / 2 = 30 for every pair
    holding both classes, (0 + 180) / 2 = 90 against client 3.
    """
    e = np.eye(3)
    c, r = np.cos(np.pi / 3) * e[:, [1]], np.sin(np.pi / 3) * e[:, [2]]
    class1 = [e[:, [1]], c + r, c - r]  # 60 degrees between every two of them
    counts = [np.array([50, 50]), np.array([50, 50]), np.array([50, 2500]), np.array([50])]
    signals = {
        p: (
            ClassSubspaces(
                np.array([0, 1]) if p < 3 else np.array([0]),
                (e[:, [0]], class1[p]) if p < 3 else (e[:, [0]],),
                counts[p],
            ),
            ModelUpdate(np.eye(5)[p]),
        )
        for p in range(4)
    }
    got = {}
    for uniform in (False, True):
        s = FLAG(TrainingParams(), FLAGParams(alpha=0.5, beta=1.0, uniform_weights=uniform))
        s.clients = {p: ClientInfo(p, 1000 + p, 100, 5, p) for p in signals}
        s.initial = ArrayRecord(
            {"head.weight": Array(np.zeros((2, 5), np.float32)), "head.bias": Array(np.zeros(2, np.float32))}
        )
        s.init_clusters(s.initial)
        s.collect = lambda pids, rnd: {p: signals[p] for p in pids}
        s.cluster(1)
        got[uniform] = s.data_matrix
    uniform_v = np.array([[0, 30, 30, 90], [30, 0, 30, 90], [30, 30, 0, 90], [90, 90, 90, 0]])
    np.testing.assert_allclose(got[True], uniform_v, atol=1e-6)
    weighted = got[False]
    np.testing.assert_allclose(weighted[0, 1], 60 * 0.5 / 2, atol=1e-6)  # equal sizes: 1 - delta
    np.testing.assert_allclose(weighted[[0, 1], [2, 2]], 60 * 1.5 / 2, atol=1e-6)  # the largest size ratio: 1 + delta
    np.testing.assert_allclose(weighted[:3, 3], 180 * 1.5 / 2, atol=1e-6)  # a class on one side only


def test_flag_with_uniform_weights_asks_for_no_class_counts():
    strategy, grid, _ = _run(
        strategy="flag", rounds=2, **{"flag-alpha": 0.5, "flag-uniform-weights": True, "flag-gradient-epochs": 1}
    )
    asked = _sent(grid, keys.SUBSPACES_ACTION)
    assert len(asked) == 6 and all(m.content[keys.CONFIG][keys.WITH_COUNTS] is False for m in asked)
    assert strategy.data_matrix is not None and len(strategy.assignment) == 6


def test_flic_graph_sums_each_clients_updates_by_default_and_keeps_the_latest_for_the_paper():
    """Client 0 sends (1, 0) then (0, 1), client 1 (2, 0): summed, 45 degrees apart; the paper's latest, 90."""
    from strategies.flic import FLIC, FLICParams

    assert (FLICParams().graph, FLICParams().min_updates) == ("summed", 5.0)
    for graph, s01 in (("summed", 1.0 + 2**-0.5), ("last", 1.0)):
        s = FLIC(TrainingParams(), FLICParams(graph=graph))
        s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, 0) for p in range(2)}
        sent = ArrayRecord({"w": Array(np.zeros(2, np.float32))})
        s.after_train(1, {0: _train_update(sent, np.array([1.0, 0.0])), 1: _train_update(sent, np.array([2.0, 0.0]))})
        s.after_train(2, {0: _train_update(sent, np.array([0.0, 1.0]))})
        assert s.similarity is not None and s.similarity.summed == (graph == "summed")
        assert s.similarity.matrix([0, 1])[0, 1] == pytest.approx(s01), graph
