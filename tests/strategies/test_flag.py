"""FLAG: proximity and sweep on hand-made signals, the holdout signal, a short digits run."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from sklearn.metrics import adjusted_rand_score

from client.app import app as client_app
from client.signals.flag import holdout_split
from common import keys
from common.config import TrainingParams
from common.signals import SignalError
from common.signals.flag import HoldoutResult
from common.signals.subspaces import ClassSubspaces
from common.signals.update import ModelUpdate
from server.experiment import Experiment
from server.figures.flag import flag_sweep
from strategies import FLAG
from strategies.federation import ClientInfo
from strategies.flag import FLAGParams
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

TRUTH = np.repeat([0, 1], 4)
EYE = np.eye(6)


def _signals(rng, gradient_noise=0.01):
    """Group 0 holds classes 0-1, group 1 classes 2-3 (with unequal counts); updates point apart."""
    out = {}
    for p, g in enumerate(TRUTH):
        classes = np.array([0, 1]) if g == 0 else np.array([2, 3])
        bases = tuple(EYE[:, [c]] for c in classes)
        update = np.eye(5)[g] + rng.normal(scale=gradient_noise, size=5)
        out[p] = (ClassSubspaces(classes, bases, np.array([10 + p, 30])), ModelUpdate(update))
    return out


def _offline(params, signals, truth=TRUTH):
    s = FLAG(TrainingParams(), params)
    s.clients = {p: ClientInfo(p, 1000 + p, 40, 5, int(truth[p])) for p in signals}
    s.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((4, 5), np.float32)), "head.bias": Array(np.zeros(4, np.float32))}
    )
    s.init_clusters(s.initial)
    s.collect = lambda pids, rnd: {p: signals[p] for p in pids if p in signals}
    return s


def test_given_alpha_cuts_the_proximity_and_keeps_v_and_g():
    s = _offline(FLAGParams(alpha=0.5), _signals(np.random.default_rng(0)))
    s.cluster(1)
    assert adjusted_rand_score(TRUTH, [s.assignment[p] for p in range(8)]) == 1.0 and not s.sweep
    # each of the 4 classes is held on one side only: 180 degrees x (1 + delta) = 270 for every class
    assert (
        np.allclose(s.data_matrix[:4, 4:], 270.0)
        and np.all(s.data_matrix[:4, :4] < 90)
        and np.allclose(s.gradient_matrix[:4, 4:], 90.0, atol=2)
    )
    assert s.distance_matrix.shape == (8, 8) and s.distance_pids == list(range(8))
    assert np.allclose(s.distance_matrix[:4, 4:], 1.0, atol=0.02) and s.distance_matrix.max() <= 1.0


def test_beta_selects_data_only_or_gradient_only():
    rng = np.random.default_rng(1)
    signals = _signals(rng, gradient_noise=0.0)
    for p in (0, 1):  # two group-0 clients whose updates look like group 1's
        signals[p] = (signals[p][0], ModelUpdate(np.eye(5)[1] + 0.01 * p))
    data_only = _offline(FLAGParams(alpha=0.5, beta=1.0), signals)
    data_only.cluster(1)
    assert adjusted_rand_score(TRUTH, [data_only.assignment[p] for p in range(8)]) == 1.0
    gradient_only = _offline(FLAGParams(alpha=0.5, beta=0.0), signals)
    gradient_only.cluster(1)
    assert [gradient_only.assignment[p] for p in range(8)] == [0, 0, 1, 1, 0, 0, 0, 0]


def test_sweep_records_every_alpha_and_picks_the_elbow(monkeypatch):
    import common.clustering.hierarchical as hierarchical
    import strategies.flag

    trees = []
    real = hierarchical.linkage_tree
    count = lambda d, linkage: trees.append(d) or real(d, linkage)  # noqa: E731
    for module in (strategies.flag, hierarchical):  # the strategy's own call and any inside a cut
        monkeypatch.setattr(module, "linkage_tree", count)
    s = _offline(FLAGParams(sweep_step=0.25, sweep_clients=6), _signals(np.random.default_rng(2)))
    curve = {1: 0.5, 2: 0.9}
    calls = []

    def validate(rnd, sample, labels):
        calls.append(labels)
        return curve.get(max(labels) + 1, 0.85)

    s.validate = validate
    s.cluster(1)
    assert [r["alpha"] for r in s.sweep] == [1.0, 0.75, 0.5, 0.25]
    assert [r["num-clusters"] for r in s.sweep][:3] == [1, 2, 2] and s.sweep[-1]["num-clusters"] >= 2
    assert len(calls) == len(set(calls))  # each distinct clustering validated once
    assert s.chosen_alpha == 0.75 and s.threshold == 0.75
    assert adjusted_rand_score(TRUTH, [s.assignment[p] for p in range(8)]) == 1.0
    assert len(trees) == 1 and trees[0] is s.distance_matrix  # the sweep's tree is the final cut's


def test_holdout_split_is_disjoint_fixed_and_from_train_only():
    fit, val = holdout_split(50, 0.1, seed=3, partition_id=7)
    assert len(val) == 5 and len(fit) == 45 and not set(fit) & set(val) and set(fit) | set(val) == set(range(50))
    again = holdout_split(50, 0.1, seed=3, partition_id=7)
    assert np.array_equal(val, again[1]) and not np.array_equal(val, holdout_split(50, 0.1, 3, 8)[1])
    assert len(holdout_split(3, 0.1, 0, 0)[1]) == 1
    with pytest.raises(ValueError, match="'holdout-fraction'"):
        holdout_split(10, 1.0, 0, 0)


def test_holdout_result_round_trip_and_rejections():
    r = HoldoutResult(np.arange(3, dtype=np.float32), 0.75, 9)
    back = HoldoutResult.from_arrays(r.to_arrays(), size=3, max_fit=10)
    assert back.accuracy == 0.75 and back.num_fit == 9 and np.array_equal(back.delta, r.delta)
    for arrays, size in [
        ({**r.to_arrays(), "accuracy": np.array([1.5], np.float32)}, 3),
        ({**r.to_arrays(), "num-fit": np.array([11])}, 3),
        (r.to_arrays(), 4),
    ]:
        with pytest.raises(SignalError):
            HoldoutResult.from_arrays(arrays, size=size, max_fit=10)


@pytest.mark.parametrize(
    "field, value, key",
    [
        ("beta", 1.5, "flag-beta"),
        ("beta", -0.1, "flag-beta"),
        ("delta", 2.0, "flag-delta"),
        ("alpha", 1.5, "flag-alpha"),
        ("sweep_step", 0.0, "flag-sweep-step"),
        ("sweep_step", 1.5, "flag-sweep-step"),
        ("sweep_clients", 0, "flag-sweep-clients"),
        ("sweep_rounds", 0, "flag-sweep-rounds"),
        ("gradient_epochs", 0, "flag-gradient-epochs"),
        ("flag_vectors", -1, "flag-vectors"),
        ("uniform_weights", 1, "flag-uniform-weights"),
        ("num_clusters", -1, "num-clusters"),
    ],
)
def test_params_are_validated_with_the_run_config_name(field, value, key):
    with pytest.raises(ValueError, match=f"The '{key}' parameter of FLAG"):
        FLAGParams(**{field: value})


def test_flag_on_digits_sweeps_on_train_data_and_finds_the_groups(tmp_path):
    rc = small_run_config(
        strategy="flag",
        rounds=2,
        **{
            "flag-sweep-step": 0.2,
            "flag-sweep-clients": 4,
            "flag-sweep-rounds": 1,
            "flag-gradient-epochs": 3,
            "local-epochs": 1,
        },
    )
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"])
    s = exp.build_strategy()
    s.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    pids = sorted(s.assignment)
    assert adjusted_rand_score([s.clients[p].true_group for p in pids], [s.assignment[p] for p in pids]) == 1.0
    sent = [m.metadata.message_type for m in grid.sent]
    holdouts = [m for m in grid.sent if m.metadata.message_type == keys.query_type(keys.HOLDOUT_ACTION)]
    assert (
        sent.count(keys.query_type(keys.SUBSPACES_ACTION)) == 6 and sent.count(keys.query_type(keys.UPDATE_ACTION)) == 6
    )
    assert holdouts and {m.content[keys.CONFIG][keys.HOLDOUT_FRACTION] for m in holdouts} == {0.1}
    assert {int(m.metadata.dst_node_id) for m in holdouts} <= {grid.node_of[p] for p in range(6)}
    assert len({grid.pid_of[m.metadata.dst_node_id] for m in holdouts}) == 4
    assert [r["alpha"] for r in s.sweep] == [1.0, 0.8, 0.6, 0.4, 0.2] and s.chosen_alpha in {
        r["alpha"] for r in s.sweep
    }
    assert all(r["accuracy"] is not None and 0 <= r["accuracy"] <= 1 for r in s.sweep)
    paths = flag_sweep(s, tmp_path)
    assert [p.name for p in paths] == ["flag-sweep.png", "flag-sweep.json"] and paths[0].stat().st_size > 0


def test_clustering_drops_the_signals_newcomers_do_not_need():
    s = _offline(FLAGParams(alpha=0.5), _signals(np.random.default_rng(0)))
    s.cluster(1)
    assert s.clustered and s.distance_pids == list(range(8)) and s.signals == {}


def test_sweep_trains_the_named_sweep_model_and_the_run_keeps_its_own():
    rc = small_run_config(
        strategy="flag",
        rounds=2,
        model="dnn",
        **{
            "flag-sweep-model": "linear",
            "flag-sweep-step": 0.5,
            "flag-sweep-clients": 4,
            "flag-sweep-rounds": 1,
            "flag-gradient-epochs": 2,
            "local-epochs": 1,
        },
    )
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"])
    s = exp.build_strategy()
    got: list[HoldoutResult] = []
    query = s.query_signal

    def recorded(action, *args, **kwargs):
        out = query(action, *args, **kwargs)
        got.extend(out.values() if action == keys.HOLDOUT_ACTION else [])
        return out

    s.query_signal = recorded
    s.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    features, classes = 64, 10  # digits: 8x8 flattened, 10 classes
    linear = {"head.weight": (classes, features), "head.bias": (classes,)}
    holdouts = [m for m in grid.sent if m.metadata.message_type == keys.query_type(keys.HOLDOUT_ACTION)]
    assert holdouts and all({n: tuple(a.shape) for n, a in m.content[keys.ARRAYS].items()} == linear for m in holdouts)
    # every sampled client answered, and the trained ones sent an update of the linear model's size
    assert len(got) == len(holdouts) and {len(r.delta) for r in got} == {0, classes * features + classes}
    assert all(r["accuracy"] is not None for r in s.sweep)
    train = [m for m in grid.sent if m.metadata.message_type == "train"]
    assert train and all(m.content[keys.ARRAYS]["head.weight"].shape == (classes, 200) for m in train)


def test_sweep_model_is_validated_before_training():
    with pytest.raises(ValueError, match="The 'flag-sweep-model' parameter of FLAG must be one of"):
        FLAGParams(flag_sweep_model="mlp")
    rc = small_run_config(strategy="flag", **{"flag-sweep-model": "lenet5"})
    with pytest.raises(ValueError, match="The 'flag-sweep-model' parameter of FLAG must be a model for inputs"):
        Experiment.from_run_config(rc).build_strategy()
    s = FLAG(TrainingParams(), FLAGParams(flag_sweep_model="linear"))
    with pytest.raises(RuntimeError, match="prepare_sweep"):
        s.initial = ArrayRecord({"head.weight": Array(np.zeros((4, 5), np.float32))})
        s.validate(1, [0], (0,))


def test_flag_asks_updates_in_batches_and_sketches_them_as_the_whole_set_would_be(monkeypatch):
    from common.clustering import similarity
    from common.clustering.flag import gradient_angles
    from strategies.flat import float_size

    monkeypatch.setattr(similarity, "AUTO_SKETCH_BYTES", 1)
    monkeypatch.setattr(similarity, "AUTO_SKETCH_DIM", 32)
    monkeypatch.setattr(FLAG, "query_batch", 4)
    batches, full, clustered = [], {}, {}
    query, cluster_signals = FLAG.query_signal, FLAG.cluster_signals

    def spy_query(self, action, pids, *args, **kwargs):
        got = query(self, action, pids, *args, **kwargs)
        if action == keys.UPDATE_ACTION:
            batches.append(list(pids))
            full.update({p: u.delta.copy() for p, u in got.items()})
        return got

    def spy_cluster(self, signals):
        clustered["deltas"] = [u.delta for _, u in signals]
        return cluster_signals(self, signals)

    monkeypatch.setattr(FLAG, "query_signal", spy_query)
    monkeypatch.setattr(FLAG, "cluster_signals", spy_cluster)
    rc = small_run_config(strategy="flag", rounds=1, **{"flag-alpha": 0.5, "flag-gradient-epochs": 2})
    exp = Experiment.from_run_config(rc)
    s = exp.build_strategy()
    s.start(InProcessGrid(client_app, rc, rc["num-clients"]), exp.initial_model(), expected_clients=rc["num-clients"])
    assert batches == [[0, 1, 2, 3], [4, 5]]
    assert {len(d) for d in full.values()} == {float_size(exp.initial_model())} != {32}
    assert [len(d) for d in clustered["deltas"]] == [32] * 6  # the stored signal is the sketch
    whole = gradient_angles(similarity.sketch_rows([full[p] for p in range(6)], rc["seed"]))
    np.testing.assert_allclose(s.gradient_matrix, whole, atol=1e-12)


def _many_signals(n: int, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    truth = rng.permutation(np.arange(n) % 2)
    out = {}
    for p, g in enumerate(truth):
        classes = np.array([0, 1]) if g == 0 else np.array([2, 3])
        bases = tuple(np.linalg.qr(EYE[:, [c]] + 0.05 * rng.standard_normal((6, 1)))[0] for c in classes)
        out[p] = (
            ClassSubspaces(classes, bases, np.array([10 + p, 30])),
            ModelUpdate(np.eye(5)[g] + 0.3 * rng.normal(size=5)),
        )
    return truth, out


@pytest.mark.parametrize("sample_above", [0, 39, 40])
def test_sampled_form_sweeps_on_its_sample_and_places_the_rest(monkeypatch, sample_above):
    """Above flag-sample-above: A of a sample (no N x N matrix), the sweep's clients from the sample,
    every other client placed in its own group; at or below it (and with 0): the exact step."""
    import functools

    import common.clustering.flag as flag

    # the strategy's exact-or-sampled branch is flag.flag_proximity, which calls flag_sample
    monkeypatch.setattr(flag, "flag_sample", functools.partial(flag.flag_sample, size=14))
    truth, signals = _many_signals(40, np.random.default_rng(3))
    s = _offline(FLAGParams(sweep_step=0.25, sweep_clients=6, sample_above=sample_above), signals, truth)
    swept = []
    s.validate = lambda rnd, sample, labels: swept.append(sample) or (0.5 if max(labels) == 0 else 0.9)
    s.cluster(1)
    assert adjusted_rand_score(truth, [s.assignment[p] for p in range(40)]) == 1.0
    sampled = sample_above == 39
    assert s.data_matrix.shape == s.gradient_matrix.shape == ((14, 14) if sampled else (40, 40))
    assert (s.distance_matrix is None) == sampled
    if sampled:
        sample = flag.flag_sample(
            *s._signal_arrays([signals[p] for p in range(40)]), 4, beta=0.5, delta=0.5, seed=0
        ).positions
        assert {q for got in swept for q in got} <= set(sample.tolist())
