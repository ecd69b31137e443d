"""Sattler's CFL strategy step by step, without a grid: written for the mutation run's survivors in
``strategies.cfl_sattler`` (the round's records and candidates, the split's request and settings,
the attempt's record and retry, the halves' clusters and models)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from common import keys
from common.clustering.similarity import CountSketch
from common.config import TrainingParams
from common.signals.update import ModelUpdate
from strategies import cfl_sattler
from strategies.base import ClusteredStrategy
from strategies.cfl_sattler import QUERY_BATCH, SPLIT_SAMPLE, CFLSattler, CFLSattlerParams, SattlerSplit
from strategies.flat import float_size
from strategies.replies import TrainUpdate


def _sattler(clusters: list[int], dim: int = 2, *, rounds: int = 30, seed: int = 3, **params) -> CFLSattler:
    s = CFLSattler(TrainingParams(rounds=rounds, seed=seed), CFLSattlerParams(**params))
    s.clients = dict.fromkeys(range(len(clusters)))
    s.assignment = dict(enumerate(clusters))
    s.models = [ArrayRecord({"w": Array(np.zeros(dim, dtype=np.float32))}) for _ in range(max(clusters) + 1)]
    return s


def _updates(deltas: dict[int, list[float]]) -> dict[int, TrainUpdate]:
    return {
        p: TrainUpdate({"w": np.array(d, dtype=np.float32)}, 1, 0.0, {"w": np.zeros(len(d), dtype=np.float32)})
        for p, d in deltas.items()
    }


def test_sattler_keeps_the_runs_training_params():
    s = CFLSattler(TrainingParams(rounds=7, seed=11))
    assert (s.training.rounds, s.training.seed) == (7, 11)


def test_after_train_records_each_clusters_size_and_norms_and_stores_every_update():
    """Cluster 0 (4 members) sent (3, 4) and (-3, 4): mean (0, 4), RMS 5, max 5, ratio sqrt((2 * 16 - 25) / 1) / 5."""
    s = _sattler([0, 0, 0, 0, 1])
    s.after_train(4, _updates({0: [3, 4], 1: [-3, 4], 4: [0, 2]}))
    common = {"round": 4, "mean-norm": 4.0, "rms-norm": 5.0, "max-norm": 5.0, "ratio": np.sqrt(7) / 5}
    assert s.norms == [
        pytest.approx({**common, "cluster": 0, "size": 4, "sampled": 2}),
        pytest.approx(
            {"round": 4, "cluster": 1, "size": 1, "sampled": 1, "mean-norm": 2.0, "rms-norm": 2.0, "max-norm": 2.0}
            | {"ratio": np.nan},
            nan_ok=True,
        ),
    ]
    assert s.similarity is not None and s.similarity.pids == [0, 1, 4]
    assert s._candidates == set()


def test_after_train_of_a_single_update_stores_and_records_it():
    s = _sattler([0, 0, 0])
    s.after_train(2, _updates({2: [0, 5]}))
    assert s.similarity is not None and s.similarity.pids == [2]
    assert [(r["size"], r["sampled"], r["max-norm"]) for r in s.norms] == [(3, 1, 5.0)]


def test_after_train_sketches_each_update_once_with_the_runs_seed(monkeypatch):
    rows: list[int] = []
    real = CountSketch._row
    monkeypatch.setattr(CountSketch, "_row", lambda self, r, i: rows.append(i) or real(self, r, i))
    s = _sattler([0, 0, 0], dim=10, seed=3, sketch_dim=4)
    x = np.arange(30, dtype=np.float32).reshape(3, 10) - 14
    s.after_train(1, _updates({p: list(x[p]) for p in range(3)}))
    assert s.similarity is not None and s.similarity.sketch == CountSketch(10, 4, 3)
    assert len(rows) == 3
    expected = CountSketch(10, 4, 3).project(x).astype(np.float64)
    unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(s.similarity.matrix(), 1.0 + unit @ unit.T, atol=1e-6)


def test_after_train_marks_a_cluster_by_its_relative_ratio_unless_eps_absolute():
    """(2, 0), (-2, 0), (0, 2): the mean's norm is 2/3 (above eps1 0.5), its unbiased ratio 0 (below it)."""
    deltas = {0: [2, 0], 1: [-2, 0], 2: [0, 2]}
    relative = _sattler([0, 0, 0], split_after=0, eps1=0.5)
    relative.after_train(1, _updates(deltas))
    absolute = _sattler([0, 0, 0], split_after=0, eps1=0.5, eps_absolute=True)
    absolute.after_train(1, _updates(deltas))
    assert (relative._candidates, absolute._candidates) == ({0}, set())


@pytest.mark.parametrize(
    "scale, eps2_relative, eps_absolute, marked",
    [(1.0, 0.3, False, True), (0.25, 0.3, False, False), (0.35, 0.3, False, True), (0.25, 0.0, False, True)]
    + [(0.25, 0.3, True, True)],
)
def test_a_cluster_is_marked_only_while_its_largest_update_exceeds_eps2_relative_of_the_first_rounds_rms(
    scale, eps2_relative, eps_absolute, marked
):
    """Round 1: two clusters, updates of norms 3, 4 and 12 (RMS over all 3 sampled: sqrt(169 / 3) = 7.5).
    Round 2: cluster 0's updates cancel (ratio 0) with largest norm ``scale`` x 8; marked when that exceeds
    eps2-relative x 7.5 (0.3 x 7.5 = 2.25: 8 x 0.25 = 2 is not, 8 x 0.35 = 2.8 is); eps-absolute (the paper's
    criterion) and eps2-relative 0 have no floor."""
    s = _sattler([0, 0, 0, 1], split_after=0, eps1=0.5, eps2_relative=eps2_relative, eps_absolute=eps_absolute)
    assert s.first_rms() is None and s.eps2_floor() == 0.0
    s.after_train(1, _updates({0: [3, 0], 1: [0, 4], 3: [12, 0]}))
    assert s.first_rms() == pytest.approx(np.sqrt(169 / 3))
    s._candidates.clear()
    big = 8 * scale
    s.after_train(2, _updates({0: [big, 0], 1: [-big, 0], 2: [0, 0]}))
    assert s.first_rms() == pytest.approx(np.sqrt(169 / 3))  # the first round's
    assert s._candidates == ({0} if marked else set())


@pytest.mark.parametrize("eps2, marked", [(2.5, False), (1.5, True)])
def test_the_absolute_eps2_still_bounds_the_largest_update_above_the_relative_floor(eps2, marked):
    """First round RMS 5 (eps2-relative 0.3: a floor of 1.5); a cluster whose updates cancel at norm 2 is
    marked under eps2 1.5, not under eps2 2.5: the larger of the two bounds."""
    s = _sattler([0, 0, 0], split_after=0, eps1=0.5, eps2=eps2, eps2_relative=0.3)
    s.after_train(1, _updates({0: [3, 4], 1: [0, 5]}))
    s._candidates.clear()
    s.after_train(2, _updates({0: [2, 0], 1: [-2, 0], 2: [0, 0]}))
    assert s.eps2_floor() == max(eps2, 1.5)
    assert s._candidates == ({0} if marked else set())


def test_the_relative_floor_is_read_from_the_saved_norms_so_a_resumed_run_keeps_it():
    """The first round's RMS comes from ``norms`` (state): a strategy resumed from another's state after
    round 1 marks exactly what the uninterrupted one marks in round 2."""
    first = _updates({0: [3, 0], 1: [0, 4], 3: [12, 0]})
    second = _updates({0: [2, 0], 1: [-2, 0], 2: [0, 0]})
    straight = _sattler([0, 0, 0, 1], split_after=0, eps1=0.5)
    straight.after_train(1, first)
    resumed = _sattler([0, 0, 0, 1], split_after=0, eps1=0.5)
    resumed.norms = [dict(r) for r in straight.norms]
    straight._candidates.clear()
    for s in (straight, resumed):
        s.after_train(2, second)
    assert straight._candidates == resumed._candidates == set()  # 2 < 0.3 x 7.5


@pytest.mark.parametrize("server_round, marked", [(4, False), (5, True)])
def test_after_train_marks_a_cluster_again_from_its_retry_round(server_round, marked):
    s = _sattler([0, 0, 0], split_after=0, eps1=0.5)
    s._retry = {0: 5}
    s.after_train(server_round, _updates({0: [2, 0], 1: [-2, 0], 2: [0, 2]}))
    assert s._candidates == ({0} if marked else set())


def test_ask_queries_the_members_for_their_update_of_the_clusters_model(monkeypatch):
    s = _sattler([0, 0, 0, 0], dim=3)
    model = s.models[0]
    calls = []

    def query_signal(action, pids, server_round, from_arrays, *, models=(), config=None, **expected):
        calls.append((action, list(pids), server_round, from_arrays, list(models), expected))
        return {p: SimpleNamespace(delta=np.full(3, float(p))) for p in (3, 1)}

    monkeypatch.setattr(s, "query_signal", query_signal)
    replied, deltas = s._ask(7, 0, [1, 2, 3])
    assert replied == [1, 3] and [d.tolist() for d in deltas] == [[1.0] * 3, [3.0] * 3]
    assert calls == [(keys.UPDATE_ACTION, [1, 2, 3], 7, ModelUpdate.from_arrays, [model], {"size": float_size(model)})]


def test_try_split_hands_sattler_split_the_runs_settings_and_asks_for_this_round(monkeypatch):
    s = _sattler([0, 1, 0, 0], seed=9, sketch_dim=6, separation="strict", sample_above=7)
    seen: dict = {}
    monkeypatch.setattr(cfl_sattler, "sattler_split", lambda members, ask, **kw: seen.update(kw, m=members, a=ask))
    asked = []
    monkeypatch.setattr(s, "_ask", lambda server_round, k, pids: asked.append((server_round, k, pids)))
    s._try_split(6, 0)
    assert seen.pop("m") == [0, 2, 3]
    seen.pop("a")([2, 3])
    assert asked == [(6, 0, [2, 3])]
    assert seen == {
        "store": s._store,
        "sketch_dim": 6,
        "seed": 9,
        "test": "strict",
        "sample_above": 7,
        "sample_size": SPLIT_SAMPLE,
        "batch": QUERY_BATCH,
        "timer": s.clustering_timer,
    }


def test_try_split_leaves_a_cluster_whole_when_a_kept_split_has_an_empty_half(monkeypatch):
    s = _sattler([0, 0, 0])
    split = SattlerSplit(([0, 1, 2], []), [3, 0], cross=0.0, intra=1.0, kept=True, sums=np.zeros((2, 2)))
    monkeypatch.setattr(cfl_sattler, "sattler_split", lambda members, ask, **kw: split)
    s._try_split(6, 0)
    assert len(s.attempts) == 1 and s.splits == [] and len(s.models) == 1 and set(s.assignment.values()) == {0}


@pytest.mark.parametrize("kept", [True, False])
def test_kept_records_the_attempt_and_waits_five_rounds_only_when_not_kept(kept):
    s = _sattler([0, 0, 0])
    split = SattlerSplit(([0], [1, 2]), [1, 2], cross=-0.5, intra=0.25, kept=kept, sums=np.zeros((2, 2)))
    assert s._kept(6, 0, split) is kept
    assert s.attempts == [
        {
            "round": 6,
            "cluster": 0,
            "sizes": [1, 2],
            "alpha-cross-max": -0.5,
            "alpha-intra-min": 0.25,
            "gamma-max": pytest.approx(np.sqrt(0.75)),
            "kept": kept,
        }
    ]
    assert s._retry == ({} if kept else {0: 11})


@pytest.mark.parametrize(
    "first, second, halves",
    [([0, 1], [2], ([0, 1, 3, 4], [2])), ([0], [1], ([0, 2, 3, 4], [1])), ([0], [1, 2], ([0], [1, 2, 3, 4]))],
)
def test_apply_split_puts_the_silent_members_on_the_larger_half_the_first_on_a_tie(first, second, halves):
    s = _sattler([0, 0, 0, 0, 0])
    s.models = [ArrayRecord({"w": Array(np.array([1.0, 2.0], dtype=np.float32))})]
    means = np.array([[0.5, 0.5], [-1.0, 1.0]])
    s._apply_split(4, 0, list(first), list(second), list(range(5)), first + second, means)
    assert s.assignment == dict.fromkeys(halves[0], 0) | dict.fromkeys(halves[1], 1)
    assert [m["w"].numpy().tolist() for m in s.models] == [[1.5, 2.5], [0.0, 3.0]]
    assert s.splits == [{"round": 4, "cluster": 0, "new": 1}]


@pytest.mark.parametrize("split_after, warns", [(5, True), (4, False)])
def test_init_clusters_warns_when_split_after_leaves_no_round_to_split_in(monkeypatch, caplog, split_after, warns):
    monkeypatch.setattr(ClusteredStrategy, "init_clusters", lambda self, initial: None)
    s = CFLSattler(TrainingParams(rounds=5), CFLSattlerParams(split_after=split_after))
    with caplog.at_level("WARNING"):
        s.init_clusters(None)
    assert any("so no cluster can split" in r.getMessage() for r in caplog.records) is warns


def test_above_sample_above_the_store_keeps_a_seeded_sample_drawn_once_and_never_stale(monkeypatch):
    from common.clustering.sampled import kept_clients

    monkeypatch.setattr(cfl_sattler, "SPLIT_SAMPLE", 4)
    x = np.random.default_rng(1).standard_normal((14, 6))
    sampled = _sattler([0] * 10, dim=6, sample_above=8)
    sampled.after_train(1, _updates({p: list(x[p]) for p in range(10)}))
    kept = kept_clients(range(10), 3, 8, 4)
    assert kept is not None and len(kept) == 4
    assert sampled.similarity is not None and sorted(sampled.similarity.pids) == sorted(kept)
    assert sorted(sampled.distance_pids) == sorted(kept) and np.shape(sampled.distance_matrix) == (4, 4)
    sampled.clients.update(dict.fromkeys(range(10, 14)))  # 4 clients join: the sample stays
    sampled.assignment.update(dict.fromkeys(range(10, 14), 0))
    sampled.after_train(2, _updates({p: list(-x[p]) for p in range(14)}))
    ordered = sorted(kept)
    assert sorted(sampled.similarity.pids) == ordered
    unit = -x[ordered] / np.linalg.norm(x[ordered], axis=1, keepdims=True)  # round 2's updates, none stale
    np.testing.assert_allclose(sampled.similarity.unit_rows(ordered), unit, atol=1e-6)
    whole = _sattler([0] * 10, dim=6, sample_above=10)  # at sample-above: every client's
    whole.after_train(1, _updates({p: list(x[p]) for p in range(10)}))
    assert whole.similarity is not None and whole.similarity.pids == list(range(10))
