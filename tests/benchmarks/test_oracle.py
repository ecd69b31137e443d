"""benchmarks.oracle: each true group's model is trained on exactly its members' train splits."""

from __future__ import annotations

import json

import numpy as np
import pytest

import benchmarks.records
from benchmarks.oracle import GroupCeiling, group_ceilings, main, mean_over_clients
from common.scenarios import ScenarioConfig, build_partition, client_data

DIGITS = ScenarioConfig(dataset="digits", num_clients=12, groups=2, labels_per_group=2, seed=3)
TRAINING = {"model": "dnn", "epochs": 10, "lr": 0.05, "momentum": 0.9, "batch_size": 16}


@pytest.fixture(scope="module")
def ceilings():
    return group_ceilings(DIGITS, **TRAINING)


def test_each_group_pools_its_own_members_train_splits_and_scores_them_on_their_tests(ceilings):
    partition = build_partition(DIGITS)
    truth = partition.true_groups()
    assert [c.group for c in ceilings] == sorted(set(truth.tolist()))
    for c in ceilings:
        members = [client_data(partition, int(p)) for p in np.flatnonzero(truth == c.group)]
        assert c.clients == len(members) == len(c.client_accuracies)
        assert c.train_samples == sum(len(m.y_train) for m in members)
        assert c.labels == tuple(np.unique(np.concatenate([m.y_train for m in members])).tolist())
    # Two digits apiece: a group's own model is near perfect, the other group's would score 0.
    assert mean_over_clients(ceilings) > 0.9


def test_the_ceiling_is_reproducible_from_the_seed(ceilings):
    again = group_ceilings(DIGITS, **TRAINING)
    for a, b in zip(ceilings, again, strict=True):
        np.testing.assert_array_equal(a.client_accuracies, b.client_accuracies)
        assert a.train_accuracy == b.train_accuracy


def test_a_scenario_without_true_groups_is_refused_by_name():
    config = ScenarioConfig(scenario="dirichlet", dataset="digits", num_clients=6, seed=0)
    with pytest.raises(ValueError, match=r"The 'scenario' parameter of group_ceilings must have true groups"):
        group_ceilings(config, **TRAINING)


def test_main_writes_the_ceiling_and_per_group_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmarks.records, "RECORDS_DIR", tmp_path)
    argv = ["--dataset", "digits", "--num-clients", "12", "--groups", "2", "--seeds", "3", "--epochs", "10"]
    assert main([*argv, "--lr", "0.05", "--batch-size", "16", "--record", "ceiling", "--load", "1.0"]) == 0
    record = json.loads((tmp_path / "ceiling.json").read_text())
    summary, per_group = record["tables"]
    assert summary["rows"][0][0] == 3 and summary["rows"][-1][0] == "mean"
    assert summary["rows"][0][1] == summary["rows"][-1][1] > 0.9
    assert len(per_group["rows"]) == 2 and record["load"] == "1.0"


def test_the_ceiling_is_the_mean_over_clients_not_over_groups():
    big = GroupCeiling(0, (0, 1), 3, 30, 1.0, np.array([1.0, 1.0, 1.0]))
    small = GroupCeiling(1, (2, 3), 1, 10, 1.0, np.array([0.0]))
    assert mean_over_clients([big, small]) == pytest.approx(0.75)  # per group it would be 0.5


def test_main_passes_the_scenario_options_through(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmarks.records, "RECORDS_DIR", tmp_path)
    argv = ["--scenario", "label-swap", "--dataset", "digits", "--num-clients", "12", "--groups", "2"]
    argv += ["--samples-per-client", "40", "--test-fraction", "0.25", "--seeds", "1", "--epochs", "2"]
    assert main([*argv, "--record", "swap", "--load", "1.0"]) == 0
    record = json.loads((tmp_path / "swap.json").read_text())
    per_group = record["tables"][1]
    # 12 clients of 40 train samples each, in two groups: the default 600 would not fit digits
    assert sum(row[4] for row in per_group["rows"]) == 12 * 40
    assert "2 groups, 40 samples a client" in record["tables"][0]["title"]
