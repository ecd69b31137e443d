"""label-groups' ``sample-draw with-replacement``: the scaling stress test's data."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from common.scenarios import SAMPLE_DRAWS, STRESS_TEST, ScenarioConfig, build_partition, client_data
from server.experiment import Experiment
from server.provenance import data_text, describe_data
from tests.helpers import small_run_config


def stress(**kwargs) -> ScenarioConfig:
    base = {"scenario": "label-groups", "dataset": "digits", "sample_draw": STRESS_TEST}
    return ScenarioConfig(**{**base, **kwargs})


def rebuilt(config: ScenarioConfig):
    build_partition.cache_clear()
    return build_partition(config)


def test_it_is_off_by_default_and_the_default_split_is_unchanged():
    assert ScenarioConfig().sample_draw == SAMPLE_DRAWS[0] == "disjoint"
    assert ScenarioConfig.from_run_config({}).sample_draw == "disjoint"
    config = ScenarioConfig(dataset="digits", num_clients=20, groups=3, samples_per_label=5)
    p = rebuilt(config)
    train = np.concatenate([c.train_idx for c in p.clients])
    assert len(np.unique(train)) == len(train), "the default split gave a sample to two clients"
    drawn = rebuilt(ScenarioConfig(**{**config.__dict__, "sample_draw": STRESS_TEST}))
    # the groups are drawn by the same code from the same seed, before any sample
    assert adjusted_rand_score(p.true_groups(), drawn.true_groups()) == 1.0


def test_each_client_draws_its_labels_from_its_groups_own_pool_and_groups_never_share_a_sample():
    p = build_partition(stress(num_clients=60, groups=4, labels_per_group=3, samples_per_label=7, test_fraction=0.3))
    y, y_test = p.dataset.y_train, p.dataset.y_test
    groups = p.true_groups()
    assert p.num_groups == 4 and set(groups.tolist()) == {0, 1, 2, 3}
    label_set: dict[int, frozenset[int]] = {}
    for c in p.clients:
        labels, counts = np.unique(y[c.train_idx], return_counts=True)
        assert label_set.setdefault(c.group, frozenset(labels.tolist())) == frozenset(labels.tolist())
        assert len(labels) == 3 and np.all(counts == 7)
        test_labels, test_counts = np.unique(y_test[c.test_idx], return_counts=True)
        np.testing.assert_array_equal(test_labels, labels)
        assert np.all(test_counts == 2)  # round(0.3 * 7)
    for split in ("train_idx", "test_idx"):
        owner: dict[int, int] = {}
        for c in p.clients:
            for i in getattr(c, split).tolist():
                assert owner.setdefault(i, c.group) == c.group, f"{split} sample {i} is in two groups"


def test_it_draws_with_replacement_beyond_what_a_disjoint_split_allows():
    many = {"num_clients": 600, "groups": 3, "samples_per_label": 20}
    with pytest.raises(ValueError, match=r"The 'samples-per-label' parameter .* asks for more samples than exist"):
        rebuilt(ScenarioConfig(scenario="label-groups", dataset="digits", **many))
    p = rebuilt(stress(**many))
    drawn = sum(len(c.train_idx) for c in p.clients)
    distinct = len(np.unique(np.concatenate([c.train_idx for c in p.clients])))
    assert drawn == 600 * 2 * 20 and distinct < drawn <= 600 * 2 * 20
    assert all(len(c.test_idx) == 2 * 4 for c in p.clients)  # round(0.2 * 20) of each of 2 labels
    data = client_data(p, 599)
    assert data.x_train.shape[0] == 40 and data.group == p.clients[599].group


def test_it_is_deterministic_per_seed():
    config = stress(num_clients=40, groups=3, samples_per_label=6)
    first, again = rebuilt(config), rebuilt(config)
    for a, b in zip(first.clients, again.clients, strict=True):
        np.testing.assert_array_equal(a.train_idx, b.train_idx)
        np.testing.assert_array_equal(a.test_idx, b.test_idx)
    other = rebuilt(stress(num_clients=40, groups=3, samples_per_label=6, seed=1))
    assert any(not np.array_equal(a.train_idx, b.train_idx) for a, b in zip(first.clients, other.clients, strict=True))


def test_it_exists_for_label_groups_only_and_names_a_bad_value():
    with pytest.raises(
        ValueError,
        match=r"^The 'sample-draw' parameter of scenario 'rotation' must be 'disjoint' \('with-replacement' exists "
        r"for scenario 'label-groups' only\)\. Got 'with-replacement' instead\.$",
    ):
        ScenarioConfig(scenario="rotation", dataset="digits", num_clients=8, sample_draw=STRESS_TEST)
    with pytest.raises(ValueError, match=r"The 'sample-draw' parameter .*'with-replacement'.*Got 'bootstrap' instead"):
        ScenarioConfig(dataset="digits", sample_draw="bootstrap")


def test_the_run_says_it_is_a_stress_test_in_its_name_summary_and_titles():
    rc = {**small_run_config(), "scenario": "label-groups", "sample-draw": STRESS_TEST}
    exp = Experiment.from_run_config(rc)
    assert f"-label-groups-{STRESS_TEST}-{rc['dataset']}-" in exp.default_run_name()
    data = describe_data(exp)
    assert "stress test" in data["sample-draw"] and "stress test" in data_text(data)
    plain = Experiment.from_run_config({**rc, "sample-draw": "disjoint"})
    assert STRESS_TEST not in plain.default_run_name() and "sample-draw" not in describe_data(plain)
