"""CFL-GP's server bookkeeping without Flower: the model count, the compression ratio and its log, who is asked
for a profile, the blocks and counts kept, the seeds and counts handed to the clustering step, and when
re-clustering stops. Profiles are answered by a stub: each client's block is its group's direction.

Written for the mutation run's survivors in strategies/cfl_gp.py (docs/mutation-verdicts/).
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from common.clustering import compression
from common.config import TrainingParams
from common.signals import SignalError
from strategies import cfl_gp
from strategies.cfl_gp import CFLGP, CFLGPParams
from strategies.federation import ClientInfo

DIM = 8


def _direction(pid: int) -> np.ndarray:
    """Group 0 (even clients) along +e0, group 1 (odd clients) along +e1, a little client noise."""
    v = np.random.default_rng(pid).normal(scale=0.01, size=DIM).astype(np.float32)
    v[pid % 2] += 1.0
    return v


def _offline(n: int = 6, seed: int = 1, dim: int = DIM, reply=_direction, **params) -> CFLGP:
    """A CFL-GP over ``n`` clients whose profile queries the stub answers; ``asked`` lists each query's clients."""
    s = CFLGP(TrainingParams(seed=seed), CFLGPParams(**{"max_clusters": 4, **params}))
    s.clients = {p: ClientInfo(p, 1000 + p, 10, 5, p % 2) for p in range(n)}
    s.asked, s.reply = [], reply

    def answer(action, pids, server_round, from_arrays, *, models=(), config=None, **expected):
        s.asked.append(list(pids))
        return {p: from_arrays({"vector": s.reply(p)}, **expected) for p in pids}

    s.query_signal = answer
    s.init_clusters(ArrayRecord({"w": Array(np.zeros(dim, np.float32))}))
    return s


def _rounds(s: CFLGP, rounds: int) -> list[int]:
    """Run ``before_round`` for rounds 1..rounds; ``unchanged`` after each."""
    out = []
    for r in range(1, rounds + 1):
        s.before_round(r)
        out.append(s.unchanged)
    return out


def _rounds_from(s: CFLGP, start: int, stop: int) -> list[int]:
    out = []
    for r in range(start, stop + 1):
        s.before_round(r)
        out.append(s.unchanged)
        assert s.stopped is (r == stop), f"stopped only after the last of the unchanged updates (round {r})"
    return out


def test_a_fresh_cfl_gp_holds_the_empty_state_init_clusters_fills() -> None:
    s = CFLGP(TrainingParams(), CFLGPParams(num_clusters=2))
    assert (s.k, s.ratio, s.size, s.last_block, s.unchanged) == (0, 1.0, 0, -1, 0)
    assert type(s.k) is int and type(s.size) is int and type(s.unchanged) is int and type(s.last_block) is int
    assert s.stopped is False and s.estimate is None and s.features is None and s.distance_pids == []
    assert s.distance_matrix is None


@pytest.mark.parametrize(
    ("num_clusters", "n", "k"),
    [(0, 2, 1), (0, 3, 3), (0, 6, 4), (1, 2, 1), (2, 2, 2), (3, 3, 3), (2, 6, 2)],
)
def test_init_clusters_keeps_num_clusters_models_or_max_clusters_and_one_below_three_clients(
    num_clusters: int, n: int, k: int
) -> None:
    s = _offline(n, num_clusters=num_clusters)
    assert s.k == len(s.models) == k and s.last_block == k - 1
    assert sorted(s.assignment) == list(range(n)) and set(s.assignment.values()) <= set(range(k))


def test_init_clusters_refuses_more_clusters_than_clients_by_name() -> None:
    sentence = "The 'num-clusters' parameter of CFLGP must be at most the 3 clients. Got 4 instead."
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        _offline(3, num_clusters=4)


@pytest.mark.parametrize(
    ("budget", "given", "ratio", "logged"),
    [
        (2**40, 0.0, 1.0, False),
        (6 * 2 * 4 * 4, 0.0, 2.0, True),  # exactly ceil(8 / 2) = 4 coordinates fit
        (6 * 2 * 4 * 2, 0.0, 4.0, True),
        (2**40, 4.0, 4.0, False),
        (6 * 2 * 4 * 2, 2.0, 2.0, False),  # a given ratio is used as given, not logged
    ],
)
def test_the_compression_ratio_is_the_given_one_or_the_automatic_one_which_is_logged_above_one(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    budget: int,
    given: float,
    ratio: float,
    logged: bool,
) -> None:
    monkeypatch.setattr(compression, "PROFILE_BUDGET_BYTES", budget)
    with caplog.at_level(logging.INFO):
        s = _offline(6, num_clusters=2, compression_ratio=given)
    assert s.ratio == ratio and s.size == compression.compressed_size(DIM, ratio)
    assert ("compresses profiles" in caplog.text) is logged


def test_every_client_answers_a_full_profile_round_without_a_draw_from_the_runs_generator() -> None:
    s = _offline(6, num_clusters=2)
    state = s.rng.bit_generator.state
    s.before_round(1)
    assert s.asked == [list(range(6))] and s.rng.bit_generator.state == state


@pytest.mark.parametrize(("fraction", "count"), [(0.5, 3), (0.1, 1), (0.99, 6)])
def test_a_profile_fraction_asks_that_share_of_distinct_clients_each_update(fraction: float, count: int) -> None:
    s = _offline(6, num_clusters=2, profile_fraction=fraction, cluster_period=1, stable_updates=0)
    _rounds(s, 8)
    assert len(s.asked) == 8
    assert all(len(set(pids)) == len(pids) == count and pids == sorted(pids) for pids in s.asked)
    assert len({tuple(p) for p in s.asked}) > 1 or count == 6


def test_the_profile_is_float32_blocks_averaged_per_model_with_int64_answer_counts() -> None:
    s = _offline(6, num_clusters=2, cluster_period=1, stable_updates=0)
    _rounds(s, 5)
    assert s.broadcasts == [(1, 0), (2, 1), (3, 0), (4, 1), (5, 0)]
    for p in range(6):
        assert s.blocks[p].dtype == np.float32 and s.blocks[p].shape == (2, DIM)
        assert s.counts[p].dtype == np.int64 and s.counts[p].tolist() == [3, 2]
        np.testing.assert_allclose(s.blocks[p], [_direction(p), _direction(p)], rtol=1e-6)


def test_the_clustering_step_gets_the_answer_counts_the_run_seed_and_a_seed_per_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = cfl_gp.sampled_cflgp

    def spy(blocks, counts, previous, **kwargs):
        calls.append((counts.copy(), kwargs))
        return real(blocks, counts, previous, **kwargs)

    monkeypatch.setattr(cfl_gp, "sampled_cflgp", spy)
    for _ in range(2):
        _rounds(_offline(6, seed=3, num_clusters=2, cluster_period=1, stable_updates=0, sample_above=5), 2)
    assert [c.tolist() for c, _ in calls] == [[[1, 0]] * 6, [[1, 1]] * 6] * 2
    assert all(k["impute_seed"] == 3 and k["sample_above"] == 5 for _, k in calls)
    seeds = [k["seed"] for _, k in calls]
    assert all(isinstance(x, int) for x in seeds) and seeds[:2] == seeds[2:] and seeds[0] != seeds[1]


def test_the_clusters_follow_the_profiles_and_each_update_records_its_spectrum() -> None:
    s = _offline(2, num_clusters=2, cluster_period=1, stable_updates=0)
    _rounds(s, 2)
    assert s.assignment[0] != s.assignment[1]
    assert [r for r, _ in s.spectra] == [1, 2] and all(v.shape == (2,) for _, v in s.spectra)
    assert s.distance_pids == [0, 1] and s.features.shape == (2, 2)


def test_one_model_never_reclusters() -> None:
    s = _offline(6, num_clusters=1, cluster_period=1, stable_updates=1)
    _rounds(s, 3)
    assert s.spectra == [] and not s.stopped and s.features is None


def test_reclustering_stops_after_stable_updates_unchanged_updates_counted_from_the_last_change() -> None:
    s = _offline(6, num_clusters=2, cluster_period=1, stable_updates=3)
    first = dict(s.assignment)
    assert _rounds(s, 1) == [0] and s.assignment != first, "the first update moves clients off the random split"
    assert _rounds_from(s, 2, 4) == [1, 2, 3] and s.stopped
    assert len(s.broadcasts) == 4


def test_k_is_estimated_after_estimate_after_updates_when_num_clusters_is_zero() -> None:
    s = _offline(6, num_clusters=0, cluster_period=1, stable_updates=0, estimate_after=2)
    _rounds(s, 1)
    assert s.estimate is None and s.k == 4
    s.before_round(2)
    assert s.estimate is not None and s.k == 2 == len(s.models)
    assert {s.assignment[p] for p in range(0, 6, 2)} != {s.assignment[p] for p in range(1, 6, 2)}


def _ten_groups(pid: int) -> np.ndarray:
    """Client ``pid`` in group ``pid % 10``, along its own axis of 16, a little client noise."""
    v = np.random.default_rng(pid).normal(scale=0.01, size=16).astype(np.float32)
    v[pid % 10] += 1.0
    return v


@pytest.mark.parametrize(("given", "found"), [(0, 10), (6, 6)])
def test_the_estimate_scores_k_past_the_models_up_to_half_the_clients_unless_given(given: int, found: int) -> None:
    """10 groups of 3, 4 models before the estimate: half the clients (15) lets k reach 10; a given cap holds."""
    s = _offline(
        30, dim=16, reply=_ten_groups, num_clusters=0, cluster_period=1, stable_updates=0, auto_max_clusters=given
    )
    _rounds(s, 2)
    assert s.estimate is not None and s.k == found == len(s.models)
    assert max(s.estimate.silhouettes) == (given or 15) and s.estimate.dims == (given or 15)
    if found == 10:
        assert len({(s.assignment[p], p % 10) for p in range(30)}) == 10  # each group one cluster


def test_the_estimate_searches_no_more_blocks_than_the_automatic_compressions_budget_holds(monkeypatch) -> None:
    """A budget of 6 blocks of the 30 clients' 16 coordinates: k stops at 6 of the 15 half the clients allow."""
    monkeypatch.setattr(compression, "PROFILE_BUDGET_BYTES", 30 * 16 * 4 * 6)
    s = _offline(30, dim=16, reply=_ten_groups, num_clusters=0, cluster_period=1, stable_updates=0)
    assert s.size == 16
    _rounds(s, 2)
    assert s.k == 6 and max(s.estimate.silhouettes) == 6
    given = _offline(
        30, dim=16, reply=_ten_groups, num_clusters=0, cluster_period=1, stable_updates=0, compression_ratio=1.0
    )
    _rounds(given, 2)
    assert given.k == 10  # a ratio the user gives makes no budget promise


def test_the_estimates_budget_counts_every_client_not_only_those_profiled_so_far(monkeypatch) -> None:
    """Half the 30 clients asked per update, 22 profiled at the estimate: 6 blocks for all 30, not 8 for the 22,
    since every client keeps K blocks once asked (the budget the automatic ratio was chosen for)."""
    monkeypatch.setattr(compression, "PROFILE_BUDGET_BYTES", 30 * 16 * 4 * 6)
    s = _offline(
        30, dim=16, reply=_ten_groups, num_clusters=0, cluster_period=1, stable_updates=0, profile_fraction=0.5
    )
    _rounds(s, 2)
    assert len(s.blocks) < 30 and s.k <= 6 and max(s.estimate.silhouettes) <= 6
    params = CFLGPParams(max_clusters=4)
    assert params.estimate_limit(22, 16, 30) == 6 and params.estimate_limit(22, 16) == 8


def test_cflgp_params_estimate_limit_is_half_the_clients_within_2_and_100_or_the_given_cap() -> None:
    assert [CFLGPParams().estimate_limit(n) for n in (3, 12, 30, 1000)] == [2, 6, 15, 100]
    # the DNN's 159,010 parameters at the automatic ratio for the 8 models: 30 clients keep all, 1,000 get 9,939
    clients = (30, 1000, 10**5)
    sizes = {n: compression.compressed_size(159010, compression.automatic_ratio(n, 8, 159010)) for n in clients}
    assert (sizes[30], sizes[1000]) == (159010, 9939)
    assert [CFLGPParams().estimate_limit(n, sizes[n]) for n in clients] == [15, 13, 8]
    assert CFLGPParams(compression_ratio=16.0).estimate_limit(1000, 9939) == 100
    assert CFLGPParams(max_clusters=3).estimate_limit(30) == 15
    assert CFLGPParams(auto_max_clusters=8).estimate_limit(30) == 8
    with pytest.raises(ValueError, match=r"'cfl-gp-auto-max-clusters' parameter of CFLGP must be 0 .* Got 1 instead"):
        CFLGPParams(auto_max_clusters=1)


def test_a_profile_reply_of_another_length_is_refused_not_broadcast_into_the_block() -> None:
    s = _offline(6, num_clusters=2)
    s.reply = lambda p: np.ones(1 if p == 3 else DIM, np.float32)
    with pytest.raises(SignalError, match="gradient profile"):
        s.before_round(1)
