"""Tests for common.scenarios: every scenario's structure, determinism and validation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from common.data import load_dataset, to_float
from common.scenarios import (
    SCENARIOS,
    ClientData,
    Partition,
    ScenarioConfig,
    build_partition,
    client_data,
    rotate_images,
    stratified_test,
)

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def digits(**kwargs) -> ScenarioConfig:
    return ScenarioConfig(dataset="digits", **kwargs)


def check_partition(p: Partition) -> None:
    """Disjoint, in-range, int64 train and test indices; consistent ids."""
    train = np.concatenate([c.train_idx for c in p.clients])
    test = np.concatenate([c.test_idx for c in p.clients])
    assert train.dtype == np.int64 and test.dtype == np.int64
    assert len(np.unique(train)) == len(train), "train indices overlap"
    assert len(np.unique(test)) == len(test), "test indices overlap"
    assert train.min() >= 0 and train.max() < len(p.dataset.y_train)
    assert test.min() >= 0 and test.max() < len(p.dataset.y_test)
    assert [c.partition_id for c in p.clients] == list(range(p.config.num_clients))
    assert all(len(c.train_idx) > 0 and len(c.test_idx) > 0 for c in p.clients)
    groups = p.true_groups()
    assert groups.shape == (p.config.num_clients,) and groups.dtype == np.int64
    if p.num_groups:
        assert groups.min() >= 0 and groups.max() < p.num_groups


def labels_of(p: Partition, i: int, split: str = "train") -> np.ndarray:
    c = p.clients[i]
    if split == "train":
        return p.dataset.y_train[c.train_idx]
    return p.dataset.y_test[c.test_idx]


def rebuild(config: ScenarioConfig) -> Partition:
    build_partition.cache_clear()
    return build_partition(config)


@pytest.mark.parametrize(
    "config",
    [
        digits(scenario="label-groups", num_clients=12, groups=3, samples_per_label=5),
        digits(scenario="label-skew", num_clients=12, label_fraction=0.3),
        digits(scenario="label-skew-dirichlet", num_clients=12, groups=3),
        digits(scenario="dirichlet", num_clients=12, dirichlet_alpha=0.3),
        digits(scenario="rotation", num_clients=8, samples_per_client=40),
        digits(scenario="label-swap", num_clients=10, samples_per_client=40),
        digits(scenario="attack", num_clients=10, samples_per_client=40, attackers=3),
        ScenarioConfig(scenario="linear-regression", dataset="regression", num_clients=9, samples_per_client=30),
    ],
    ids=lambda c: c.scenario,
)
def test_every_scenario_is_disjoint_deterministic_and_model_ready(config):
    p = build_partition(config)
    check_partition(p)
    assert build_partition(config) is p
    same = rebuild(config)
    assert all(
        np.array_equal(a.train_idx, b.train_idx) and np.array_equal(a.test_idx, b.test_idx)
        for a, b in zip(p.clients, same.clients, strict=True)
    )
    np.testing.assert_array_equal(p.true_groups(), same.true_groups())
    np.testing.assert_array_equal(client_data(p, 0).x_train, client_data(same, 0).x_train)
    other = build_partition(ScenarioConfig(**{**config.__dict__, "seed": 1}))
    assert not np.array_equal(p.true_groups(), other.true_groups()) or any(
        not np.array_equal(client_data(p, i).y_train, client_data(other, i).y_train) for i in range(config.num_clients)
    )
    cd = client_data(p, config.num_clients - 1)
    assert isinstance(cd, ClientData)
    split = p.clients[-1]
    shape = p.dataset.info.input_shape
    assert cd.x_train.shape == (len(split.train_idx), *shape) and cd.x_train.dtype == np.float32
    assert cd.x_test.shape == (len(split.test_idx), *shape) and cd.x_test.dtype == np.float32
    assert np.isfinite(cd.x_train).all()
    if p.dataset.info.task == "classification":
        assert cd.y_train.dtype == np.int64 and cd.y_test.dtype == np.int64
        assert cd.y_train.min() >= 0 and cd.y_train.max() < p.dataset.info.num_classes
    else:
        assert cd.y_train.dtype == np.float32
    assert cd.group == split.group and cd.attacker == split.attacker
    with pytest.raises(ValueError, match="'partition-id' parameter"):
        client_data(p, config.num_clients)


def test_scenarios_tuple():
    assert len(SCENARIOS) == 8 and "label-groups" in SCENARIOS


def test_label_groups_structure():
    p = build_partition(
        digits(scenario="label-groups", num_clients=30, groups=4, labels_per_group=3, samples_per_label=4)
    )
    assert p.num_groups == 4
    sets: dict[int, frozenset] = {}
    for i, c in enumerate(p.clients):
        labels, counts = np.unique(labels_of(p, i), return_counts=True)
        assert len(labels) == 3 and np.all(counts == 4)
        assert sets.setdefault(c.group, frozenset(labels.tolist())) == frozenset(labels.tolist())
        test_labels, test_counts = np.unique(labels_of(p, i, "test"), return_counts=True)
        np.testing.assert_array_equal(test_labels, labels)
        assert np.all(test_counts == 1)  # round(0.2 * 4)
    assert len(set(sets.values())) == len(sets)


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist not installed")
def test_label_groups_cflgt_scenario_1_on_fashion_mnist():
    p = build_partition(ScenarioConfig())
    check_partition(p)
    assert all(len(c.train_idx) == 100 and len(c.test_idx) == 20 for c in p.clients)
    assert p.num_groups == 5
    cd = client_data(p, 0)
    assert cd.x_train.shape == (100, 1, 28, 28)
    with pytest.raises(ValueError, match=r"'samples-per-label' .*6000 train samples"):
        build_partition(ScenarioConfig(samples_per_label=1000))


def test_label_skew_follows_niid_bench():
    cfg = digits(scenario="label-skew", num_clients=20, label_fraction=0.3)
    p = build_partition(cfg)
    assert sum(len(c.train_idx) for c in p.clients) == len(p.dataset.y_train)
    sets = [frozenset(np.unique(labels_of(p, i)).tolist()) for i in range(20)]
    assert all(len(s) == 3 and i % 10 in s for i, s in enumerate(sets))
    groups = p.true_groups()
    assert p.num_groups == len(set(sets))
    for i in range(20):
        for j in range(20):
            assert (groups[i] == groups[j]) == (sets[i] == sets[j])
    for label in range(10):
        sizes = [np.sum(labels_of(p, i) == label) for i in range(20) if label in sets[i]]
        assert max(sizes) - min(sizes) <= 1


def test_label_skew_shuffles_each_label_before_splitting_it():
    """NIID-bench shuffles a label's samples before the equal split (flwr-datasets' partitioner does not)."""
    p = build_partition(digits(scenario="label-skew", num_clients=20, label_fraction=0.2))
    y = p.dataset.y_train
    contiguous = 0
    for i, c in enumerate(p.clients):
        label = i % 10
        mine = c.train_idx[y[c.train_idx] == label]
        ranks = np.searchsorted(np.flatnonzero(y == label), mine)
        contiguous += int(ranks.max() - ranks.min() + 1 == len(mine))
    assert contiguous == 0


def test_dirichlet_proportions_follow_alpha():
    """Large alpha: every client near the data set's class mix and the mean size; small alpha: skewed."""
    near = build_partition(digits(scenario="dirichlet", num_clients=5, dirichlet_alpha=1e4))
    y = near.dataset.y_train
    overall = np.bincount(y, minlength=10) / len(y)
    for c in near.clients:
        mix = np.bincount(y[c.train_idx], minlength=10) / len(c.train_idx)
        assert np.abs(mix - overall).max() < 0.03
        assert abs(len(c.train_idx) - len(y) / 5) < 0.05 * len(y) / 5
    skewed = build_partition(digits(scenario="dirichlet", num_clients=5, dirichlet_alpha=0.05))
    shares = [np.bincount(y[c.train_idx], minlength=10).max() / len(c.train_idx) for c in skewed.clients]
    assert np.mean(shares) > 0.4


def test_label_skew_dirichlet_groups_share_label_sets():
    p = build_partition(
        digits(scenario="label-skew-dirichlet", num_clients=12, groups=3, label_fraction=0.2, quantity_alpha=0.5)
    )
    groups = p.true_groups()
    assert np.all(np.bincount(groups) == 4) and p.num_groups == 3
    sets = {}
    for i, g in enumerate(groups):
        held = frozenset(np.unique(labels_of(p, i)).tolist())
        assert len(held) == 2 and sets.setdefault(int(g), held) == held
        assert len(labels_of(p, i)) >= 10
    assert len(set(sets.values())) == 3
    used = set().union(*sets.values())
    assert sum(len(c.train_idx) for c in p.clients) == np.isin(p.dataset.y_train, list(used)).sum()
    sizes = [len(c.train_idx) for c in p.clients]
    assert np.std(sizes) > 0


def test_dirichlet_has_no_groups_and_uses_all_data():
    p = build_partition(digits(scenario="dirichlet", num_clients=15, dirichlet_alpha=0.1))
    assert p.num_groups == 0 and np.all(p.true_groups() == -1)
    assert sum(len(c.train_idx) for c in p.clients) == len(p.dataset.y_train)
    assert min(len(c.train_idx) for c in p.clients) >= 10
    props = np.stack([np.bincount(labels_of(p, i), minlength=10) / len(p.clients[i].train_idx) for i in range(15)])
    assert props.max(axis=1).mean() > 0.3  # skewed, unlike the ~0.1 of IID data


def test_rotation_rotates_by_group_angle():
    p = build_partition(digits(scenario="rotation", num_clients=8, samples_per_client=20))
    assert p.num_groups == 4 and np.all(np.bincount(p.true_groups()) == 2)
    info = p.dataset.info
    for i, c in enumerate(p.clients):
        assert c.rotation == (0.0, 90.0, 180.0, 270.0)[c.group]
        raw = p.dataset.x_train[c.train_idx]
        expected = to_float(info, np.rot90(raw, int(c.rotation // 90), axes=(2, 3)))
        np.testing.assert_array_equal(client_data(p, i).x_train, expected)
        raw_test = p.dataset.x_test[c.test_idx]
        expected_test = to_float(info, np.rot90(raw_test, int(c.rotation // 90), axes=(2, 3)))
        np.testing.assert_array_equal(client_data(p, i).x_test, expected_test)
    assert all(len(c.train_idx) == 20 and len(c.test_idx) == 4 for c in p.clients)


def test_rotation_other_angles():
    p = build_partition(digits(scenario="rotation", num_clients=4, samples_per_client=10, angles="0,15,195"))
    assert p.num_groups == 3
    c = next(c for c in p.clients if c.rotation == 15.0)
    x = client_data(p, c.partition_id).x_train
    raw = p.dataset.x_train[c.train_idx]
    assert x.shape == raw.shape and not np.allclose(x, raw)
    np.testing.assert_allclose(x, rotate_images(raw, 15.0))


def test_rotate_images_exact_quarters_and_uint8():
    x = np.random.default_rng(0).integers(0, 256, (3, 2, 6, 6), dtype=np.uint8)
    np.testing.assert_array_equal(rotate_images(x, 450.0), np.rot90(x, 1, axes=(2, 3)))
    np.testing.assert_array_equal(rotate_images(x, -90.0), np.rot90(x, 3, axes=(2, 3)))
    r = rotate_images(x, 30.0)
    assert r.dtype == np.uint8 and r.shape == x.shape


def test_label_swap_maps_labels():
    p = build_partition(digits(scenario="label-swap", num_clients=10, samples_per_client=30))
    assert p.num_groups == 5 and np.all(np.bincount(p.true_groups()) == 2)
    for i, c in enumerate(p.clients):
        g = c.group
        expected_map = np.arange(10)
        expected_map[[2 * g, 2 * g + 1]] = [2 * g + 1, 2 * g]
        np.testing.assert_array_equal(c.label_map, expected_map)
        cd = client_data(p, i)
        np.testing.assert_array_equal(cd.y_train, expected_map[labels_of(p, i)])
        np.testing.assert_array_equal(cd.y_test, expected_map[labels_of(p, i, "test")])


def test_attack_marks_attackers():
    p = build_partition(digits(scenario="attack", num_clients=20, samples_per_client=30, attackers=7))
    flags = np.array([c.attacker for c in p.clients])
    assert flags.sum() == 7 and p.num_groups == 2
    np.testing.assert_array_equal(p.true_groups(), flags.astype(np.int64))
    assert client_data(p, int(np.flatnonzero(flags)[0])).attacker
    none = build_partition(digits(scenario="attack", num_clients=5, samples_per_client=30))
    assert none.num_groups == 1 and not any(c.attacker for c in none.clients)


def test_linear_regression_follows_cfl_gp():
    cfg = ScenarioConfig(
        scenario="linear-regression", dataset="regression", num_clients=12, samples_per_client=200, regression_phi=30.0
    )
    p = build_partition(cfg)
    assert p.num_groups == 3 and np.all(np.bincount(p.true_groups()) == 4)
    assert p.dataset.x_train.shape == (12 * 200, 1) and p.dataset.y_train.dtype == np.float32
    assert all(len(c.test_idx) == 40 for c in p.clients)
    for g, phi in enumerate(np.deg2rad([-30.0, 0.0, 30.0])):
        idx = np.concatenate([c.train_idx for c in p.clients if c.group == g])
        x, y = p.dataset.x_train[idx, 0], p.dataset.y_train[idx]
        assert x.min() >= 0 and x.max() <= math.cos(phi) + 1e-6
        slope = np.polyfit(x, y, 1)[0]
        assert abs(slope - math.tan(phi)) < 0.15
        assert abs(np.std(y - x * math.tan(phi)) - 0.2) < 0.03


def test_stratified_test_scales_down_when_pool_is_small():
    counts = np.array([[100, 0], [50, 5], [0, 0], [2, 1]])
    y_test = np.array([0] * 10 + [1] * 1)
    rng = np.random.default_rng(0)
    test = stratified_test(counts, y_test, 0.2, rng)
    per_class = np.stack([np.bincount(y_test[t], minlength=2) for t in test])
    assert per_class[:, 0].sum() <= 10 and np.all(per_class[[0, 1, 3], 0] >= 1)
    assert per_class[0, 0] > per_class[1, 0] >= per_class[3, 0]
    assert per_class[:, 1].sum() == 1 and per_class[2].sum() == 0
    flat = np.concatenate(test)
    assert len(np.unique(flat)) == len(flat)


def test_from_run_config_reads_kebab_keys_and_defaults():
    rc = {
        "scenario": "rotation",
        "dataset": "digits",
        "num-clients": 6,
        "angles": "0, 45",
        "samples-per-client": 25,
        "test-fraction": 0.4,
        "rounds": 3,
        "seed": 2,
    }
    cfg = ScenarioConfig.from_run_config(rc)
    assert cfg.angles == (0.0, 45.0) and cfg.num_clients == 6 and cfg.test_fraction == 0.4
    assert cfg.groups == 5 and cfg.labels_per_group == 2 and cfg.seed == 2
    assert ScenarioConfig.from_run_config({}) == ScenarioConfig()
    assert hash(cfg) == hash(ScenarioConfig.from_run_config(rc))


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"scenario": "blobs"}, r"'scenario' parameter .*'label-swap'.*Got 'blobs'"),
        (
            {"labels_per_group": 11},
            r"^The 'labels-per-group' parameter of scenario 'label-groups' must be an int in the "
            r"range \[1, 10\]\. Got 11 instead\.$",
        ),
        ({"num_clients": 0}, r"'num-clients' parameter .* >= 1\. Got 0"),
        ({"test_fraction": 0.0}, r"'test-fraction' parameter .*\(0\.0, 1\.0\]\. Got 0\.0"),
        ({"test_fraction": 1.5}, r"'test-fraction' parameter .*Got 1\.5"),
        ({"label_fraction": 0}, r"'label-fraction' parameter"),
        ({"dirichlet_alpha": 0.0}, r"'dirichlet-alpha' parameter .*> 0\.0"),
        ({"quantity_alpha": -1.0}, r"'quantity-alpha' parameter"),
        ({"attackers": 101}, r"'attackers' parameter .*\[0, 100\]"),
        ({"angles": "north"}, r"'angles' parameter"),
        ({"angles": ()}, r"'angles' parameter"),
        ({"groups": 46, "labels_per_group": 2}, r"'groups' parameter .*\[1, 45\]"),
        ({"scenario": "label-swap", "groups": 6}, r"'groups' parameter of scenario 'label-swap' .*\[1, 5\]\. Got 6"),
        ({"scenario": "linear-regression"}, r"'dataset' parameter .*must be 'regression'"),
        ({"dataset": "regression"}, r"'dataset' parameter .*only in scenario 'linear-regression'"),
        (
            {"scenario": "linear-regression", "dataset": "regression", "regression_phi": 90},
            r"'regression-phi' parameter",
        ),
        ({"scenario": "rotation", "num_clients": 3}, r"'angles' parameter"),
        ({"seed": -1}, r"'seed' parameter"),
        ({"num_clients": 2.5}, r"'num-clients' parameter"),
    ],
)
def test_invalid_config(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ScenarioConfig(**kwargs)


def test_infeasible_builds_name_the_parameter():
    with pytest.raises(ValueError, match=r"'samples-per-label' .*digits has \d+ train samples"):
        build_partition(digits(num_clients=100, samples_per_label=200))
    with pytest.raises(ValueError, match=r"'samples-per-client' .*3000 train samples"):
        build_partition(digits(scenario="attack", num_clients=10, samples_per_client=300))
    with pytest.raises(ValueError, match=r"'num-clients' parameter of scenario 'dirichlet'"):
        build_partition(digits(scenario="dirichlet", num_clients=5000))
    with pytest.raises(ValueError, match=r"'config' parameter"):
        build_partition({"scenario": "rotation"})  # type: ignore[arg-type]


def test_load_dataset_is_shared():
    p = build_partition(digits(scenario="rotation", num_clients=4, samples_per_client=10))
    assert p.dataset is load_dataset("digits", seed=0)
