"""The recorder (``strategies.recorder``): round records, scores and the assignment history, without Flower's run."""

from __future__ import annotations

import pytest
from flwr.app import ArrayRecord, MetricRecord

from common import keys
from strategies import ClusteredStrategy, FedAvg
from strategies.federation import ClientInfo, Exchange, Traffic
from strategies.recorder import RoundStats, assignment_history, record_round, scalar


def test_the_round_record_serialises_to_the_metrics_line_of_before_key_for_key_in_order():
    from strategies.federation import Traffic
    from strategies.record import RoundRecord

    strategy = FedAvg()
    strategy.clients = {}
    strategy.models = [ArrayRecord(), ArrayRecord(), ArrayRecord()]
    strategy.assignment = {0: 0, 1: 0, 2: 2}
    strategy.last_eval = {0: (0.5, 1.0), 2: (0.7, 0.9)}
    strategy.truth = {0: 0, 1: 0, 2: 1}
    s = stats = RoundStats()
    s.train_replies, s.failures, s.rejected, s.capped, s.clustering_seconds = 3, 1, 2, 1, 0.1234567
    s.lost, s.rejoined = [4], [5]
    s.down, s.up = Traffic(model=10, signal=20), Traffic(model=30, signal=40)
    record_round(strategy, 7, MetricRecord({keys.ACCURACY: 0.6, "accuracy-std": 0.1, keys.LOSS: 0.95}), stats)
    line = strategy.history[-1].to_dict()
    assert line.pop("round-seconds") >= 0
    assert list(line.items()) == [
        ("round", 7),
        ("phase", "train"),
        ("accuracy", 0.6),
        ("accuracy-std", 0.1),
        ("loss", 0.95),
        ("ari", 1.0),
        ("ami", 1.0),
        ("num-clusters", 2),
        ("num-clients", 3),
        ("eval-clients", 2),
        ("clients-lost", [4]),
        ("clients-rejoined", [5]),
        ("cluster-sizes", [2, 0, 1]),
        ("train-replies", 3),
        ("failures", 1),
        ("rejected", 2),
        ("capped", 1),
        ("bytes-down-model", 10),
        ("bytes-up-model", 30),
        ("bytes-down-signal", 20),
        ("bytes-up-signal", 40),
        ("clustering-seconds", 0.123457),
    ]
    record = strategy.history[-1]
    assert (
        RoundRecord.from_dict(record.to_dict()) == record
        and record.to_dict()["num-clusters"] == record.num_clusters == 2
    )


def _recording_strategy() -> ClusteredStrategy:
    """Four clients in true groups 0, 0, 1, 1, all in one cluster of two models."""
    strategy = ClusteredStrategy()
    strategy.clients = {p: ClientInfo(p, 100 + p, 10, 2, p // 2) for p in range(4)}
    strategy.set_clusters([ArrayRecord(), ArrayRecord()], dict.fromkeys(range(4), 0))
    return strategy


def test_round_records_rescore_and_log_the_assignment_only_when_it_or_the_truth_changes():
    strategy, stats = _recording_strategy(), RoundStats()
    record_round(strategy, 1, None, stats)
    record_round(strategy, 2, None, stats)
    strategy.set_clusters(strategy.models, {0: 0, 1: 0, 2: 1, 3: 1})
    record_round(strategy, 3, None, stats)
    strategy.truth = {0: 0, 1: 1, 2: 0, 3: 1}  # a truth file: same assignment, other groups
    record_round(strategy, 4, None, stats)
    strategy.set_clusters(strategy.models, {0: 0, 1: 0, 2: 1, 3: 1})  # the same assignment again
    record_round(strategy, 5, None, stats)
    assert [r.ari for r in strategy.history] == pytest.approx([0.0, 0.0, 1.0, -0.5, -0.5])
    assert [c["round"] for c in strategy.assignment_changes] == [1, 3]
    assert strategy.assignment_changes[-1]["assignment"] == {"0": 0, "1": 0, "2": 1, "3": 1}


def test_assignment_history_keeps_only_what_changed_and_rebuilds_every_snapshot():
    strategy, stats = _recording_strategy(), RoundStats()
    record_round(strategy, 1, None, stats)
    for rnd in range(2, 6):
        strategy.set_clusters(strategy.models, {**strategy.assignment, 0: (rnd + 1) % 2})  # one client moves
        record_round(strategy, rnd, None, stats)
    strategy.set_clusters(strategy.models, {p: k for p, k in strategy.assignment.items() if p != 3})  # 3 leaves
    record_round(strategy, 6, None, stats)
    assert [len(diff) for _, diff in strategy._assignment_diffs] == [4, 1, 1, 1, 1, 1]
    history = strategy.assignment_changes
    assert [h["round"] for h in history] == [1, 2, 3, 4, 5, 6]
    assert history[0]["assignment"] == {"0": 0, "1": 0, "2": 0, "3": 0}
    assert history[3]["assignment"] == {"0": 1, "1": 0, "2": 0, "3": 0}
    assert history[5]["assignment"] == {"0": 0, "1": 0, "2": 0}


def test_on_round_sees_each_record_as_it_is_appended():
    strategy, seen = _recording_strategy(), []
    strategy.on_round = lambda s, record: seen.append((record.round, len(s.history)))
    record_round(strategy, 1, None, RoundStats())
    record_round(strategy, 2, None, RoundStats())
    assert seen == [(1, 1), (2, 2)]


def test_stats_add_counts_failures_and_both_directions_of_traffic():
    stats = RoundStats()
    stats.add(Exchange("train", failures={1: "x", 2: "y"}, down=Traffic(model=5, signal=1), up=Traffic(model=7)))
    stats.add(Exchange("evaluate", failures={3: "z"}, down=Traffic(model=2), up=Traffic(signal=3)))
    assert (stats.failures, stats.down, stats.up) == (3, Traffic(model=7, signal=1), Traffic(model=7, signal=3))


def test_assignment_history_of_no_change_is_empty_and_a_left_client_stays_gone():
    assert assignment_history([]) == []
    history = assignment_history([(1, {0: 1, 1: 0}), (4, {0: None}), (6, {0: 0})])
    assert [h["assignment"] for h in history] == [{"0": 1, "1": 0}, {"1": 0}, {"0": 0, "1": 0}]


def test_a_list_metric_is_refused_by_name():
    with pytest.raises(TypeError, match="Metric 'accuracy' is a list"):
        scalar(MetricRecord({keys.ACCURACY: [0.1, 0.2]}), keys.ACCURACY)
