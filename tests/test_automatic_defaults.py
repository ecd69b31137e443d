"""Automatic (0) defaults: the main job's old values at its settings, values that fit on small runs.

``umbel run --rounds 2 --num-clients 10 --dataset digits`` (issue 20's done-means command) must
work on defaults for every strategy, and the README's main job (100 rounds, 100 fashion-mnist
clients) must stay exactly the run it was with the former fixed defaults.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.scenarios import AUTO_SAMPLES_PER_LABEL, ScenarioConfig, build_partition
from strategies.schema import defaults
from server.experiment import Experiment
from strategies import REGISTRY
from strategies.cflgt import CFLGT, CFLGTParams, automatic_pretrain_rounds
from strategies.flhc import FLHC, FLHCParams

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
DONE_MEANS = {"rounds": 2, "num-clients": 10, "dataset": "digits"}


def _strategy(strategy: str, **overrides):
    rc = {**defaults(), "strategy": strategy, **overrides}
    return Experiment.from_run_config(rc).build_strategy()


def test_the_round_defaults_are_automatic():
    assert defaults()["cflgt-pretrain-rounds"] == 0 and defaults()["flhc-warmup-rounds"] == 0
    assert defaults()["samples-per-label"] == 0


def test_the_main_job_round_values():
    assert defaults()["rounds"] == 100
    assert _strategy("cflgt").params.pretrain_rounds == 25  # the paper's, the former default
    assert _strategy("cflgt").clustering_round == 26
    assert _strategy("flhc").params.warmup_rounds == 0  # modified: none (the former automatic 10, then 1)
    assert _strategy("flhc").clustering_round() == 1


@pytest.mark.parametrize("rounds, pretrain", [(1, 0), (2, 1), (3, 1), (4, 1), (8, 2), (20, 5), (30, 7), (125, 31)])
def test_automatic_round_values_leave_rounds_after_them(rounds, pretrain):
    assert automatic_pretrain_rounds(rounds) == pretrain
    assert _strategy("cflgt", rounds=rounds).params.pretrain_rounds == pretrain
    assert _strategy("flhc", rounds=rounds).params.warmup_rounds == 0  # no warm-up, whatever the run's length


def test_explicit_round_values_are_kept_and_still_checked():
    assert _strategy("cflgt", rounds=10, **{"cflgt-pretrain-rounds": 9}).params.pretrain_rounds == 9
    assert _strategy("flhc", rounds=10, **{"flhc-warmup-rounds": 3}).params.warmup_rounds == 3
    with pytest.raises(
        ValueError, match=r"'cflgt-pretrain-rounds' parameter of CFLGT must be an int in the range \[0, 1\]"
    ):
        _strategy("cflgt", rounds=2, **{"cflgt-pretrain-rounds": 25})
    with pytest.raises(
        ValueError, match=r"'flhc-warmup-rounds' parameter of FLHC must be an int in the range \[0, 1\]"
    ):
        _strategy("flhc", rounds=2, **{"flhc-warmup-rounds": 10})


def test_strategies_built_directly_resolve_too():
    from common.config import TrainingParams

    assert CFLGT(TrainingParams(rounds=40), CFLGTParams()).params.pretrain_rounds == 10
    assert FLHC(TrainingParams(rounds=40), FLHCParams()).params.warmup_rounds == 0
    assert FLHC(TrainingParams(rounds=40), FLHCParams()).clustering_round() == 1


@pytest.mark.parametrize("strategy", sorted(REGISTRY))
def test_every_strategy_accepts_the_done_means_settings_on_defaults(strategy):
    exp = Experiment.from_run_config({**defaults(), "strategy": strategy, **DONE_MEANS})
    exp.build_strategy()  # round parameters against rounds, num-clusters against the clients
    partition = exp.partition()
    assert partition is not None and len(partition.clients) == 10


def test_automatic_samples_per_label_fits_a_small_data_set():
    p = build_partition(ScenarioConfig(dataset="digits", num_clients=10))
    y = p.dataset.y_train
    holders = np.zeros(10, dtype=np.int64)
    per_client = set()
    for c in p.clients:
        labels, counts = np.unique(y[c.train_idx], return_counts=True)
        holders[labels] += 1
        per_client.update(counts.tolist())
    assert len(per_client) == 1  # every client takes the same number of each of its labels
    (n,) = per_client
    fits = min(np.sum(y == c) // holders[c] for c in range(10) if holders[c])
    assert 0 < n == min(fits, AUTO_SAMPLES_PER_LABEL) < AUTO_SAMPLES_PER_LABEL
    build_partition(ScenarioConfig(dataset="digits", num_clients=10, samples_per_label=int(n)))  # the most...
    with pytest.raises(ValueError, match=r"'samples-per-label' parameter of scenario 'label-groups' asks for more"):
        build_partition(ScenarioConfig(dataset="digits", num_clients=10, samples_per_label=int(n) + 1))  # ...that fits


def test_automatic_samples_per_label_is_50_where_the_data_allow_it():
    auto = build_partition(ScenarioConfig(dataset="digits", num_clients=4, groups=2, seed=3))
    fixed = build_partition(ScenarioConfig(dataset="digits", num_clients=4, groups=2, seed=3, samples_per_label=50))
    for a, b in zip(auto.clients, fixed.clients, strict=True):
        np.testing.assert_array_equal(a.train_idx, b.train_idx)
        np.testing.assert_array_equal(a.test_idx, b.test_idx)
        assert a.group == b.group
    assert {len(c.train_idx) for c in auto.clients} == {100}


def test_automatic_samples_per_label_names_num_clients_when_nothing_fits():
    with pytest.raises(ValueError, match=r"'num-clients' parameter of scenario 'label-groups' is too large: label"):
        build_partition(ScenarioConfig(dataset="digits", num_clients=400, groups=1))


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist not installed")
def test_the_main_job_keeps_its_partition():
    """The README's defaults (seed 0): the same clients, samples and groups as samples-per-label 50."""
    main = ScenarioConfig.from_run_config(defaults())
    assert main.samples_per_label == 0 and main.dataset == "fashion-mnist" and main.num_clients == 100
    auto, fixed = build_partition(main), build_partition(ScenarioConfig(samples_per_label=50))
    for a, b in zip(auto.clients, fixed.clients, strict=True):
        np.testing.assert_array_equal(a.train_idx, b.train_idx)
        np.testing.assert_array_equal(a.test_idx, b.test_idx)
        assert a.group == b.group
    assert auto.num_groups == 5 and {len(c.train_idx) for c in auto.clients} == {100}
