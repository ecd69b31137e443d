"""FLIC, FedMedian and Sattler's CFL on the in-process grid (real ClientApp, digits)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score
from flwr.app import Array, ArrayRecord

from client.app import app as client_app
from common.aggregation import coordinate_median
from server.experiment import Experiment
from server.figures import FIGURES
from strategies import FLIC, REGISTRY, CFLSattler, FedMedian
from strategies.cfl_sattler import CFLSattlerParams
from strategies.flic import STABLE_PATIENCE, FLICParams
from strategies.flat import add_flat, float_size
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


def _start(cls, params=None, spy=None, **overrides):
    rc = small_run_config(**overrides)
    exp = Experiment.from_run_config(rc)
    grid = InProcessGrid(client_app, rc, rc["num-clients"])
    strategy = cls(exp.training, params)
    if spy is not None:
        original = strategy.after_train

        def after_train(rnd, updates):
            spy(strategy, rnd, updates)
            original(rnd, updates)

        strategy.after_train = after_train
    strategy.start(grid, exp.initial_model(), expected_clients=rc["num-clients"])
    return strategy, grid


def _sampled(grid, rnd):
    return {
        grid.pid_of[m.metadata.dst_node_id]
        for m in grid.sent
        if m.metadata.message_type == "train" and m.content["config"]["server-round"] == rnd
    }


def test_registry_and_params_validation():
    assert {"flic", "fedmedian", "cfl-sattler"} <= set(REGISTRY)
    with pytest.raises(ValueError, match="'flic-resolution' parameter of FLIC must be a float >= 0.0. Got -1.0"):
        FLICParams(resolution=-1.0)
    with pytest.raises(ValueError, match="'flic-cluster-round' parameter of FLIC"):
        FLICParams(cluster_round=-1)
    with pytest.raises(ValueError, match="'cfl-sattler-eps2' parameter of CFLSattler"):
        CFLSattlerParams(eps2=-1.0)
    with pytest.raises(ValueError, match="'cfl-sattler-eps1' parameter of CFLSattler"):
        CFLSattlerParams(eps1=0.0)
    with pytest.raises(ValueError, match="'cfl-sattler-split-after' parameter of CFLSattler"):
        CFLSattlerParams(split_after=1.5)


def _queried(grid, action):
    return {grid.pid_of[m.metadata.dst_node_id] for m in grid.sent if m.metadata.message_type == f"query.{action}"}


def test_flic_clusters_seen_clients_and_joins_the_unseen_by_their_update():
    strategy, grid = _start(
        FLIC,
        FLICParams(cluster_round=3),
        rounds=6,
        fraction=0.34,
        **{"num-clients": 9, "groups": 3, "samples-per-label": 10},
    )
    seen = _sampled(grid, 1) | _sampled(grid, 2)
    assert strategy.clustered_at == 3 and strategy.resolution > 0
    assert [r.phase for r in strategy.history] == ["fedavg", "fedavg", "cluster", "train", "train", "train"]
    assert sum(strategy.history[2].cluster_sizes) == 9
    assert _queried(grid, "update") == set(range(9)) - seen == set(strategy.joined)
    assert not _queried(grid, "losses")
    assert sorted(strategy.assignment) == list(range(9))
    assert set(strategy.distance_pids) == set(range(9))
    d = strategy.distance_matrix
    assert d.shape == (9, 9) and np.allclose(np.diag(d), 0, atol=1e-5)


class _BatchedFLIC(FLIC):
    join_batch = 3


def test_flic_join_in_batches_places_every_client_as_the_one_query_join_does():
    asked: list[list[int]] = []

    def run(cls):
        original = cls.query_signal

        def spy(self, action, pids, *args, **kwargs):
            if cls is _BatchedFLIC:
                asked.append(list(pids))
            return original(self, action, pids, *args, **kwargs)

        cls.query_signal = spy
        try:
            strategy, grid = _start(
                cls,
                FLICParams(cluster_round=3),
                rounds=3,
                fraction=0.25,
                **{"num-clients": 15, "groups": 3, "samples-per-label": 10},
            )
        finally:
            del cls.query_signal
        return strategy, grid

    whole, _ = run(FLIC)
    batched, grid = run(_BatchedFLIC)
    unseen = sorted(set(range(15)) - set(whole.clustering_similarity[0]))
    assert len(unseen) > 2 * _BatchedFLIC.join_batch
    step = _BatchedFLIC.join_batch
    assert asked == [unseen[i : i + step] for i in range(0, len(unseen), step)]
    assert sorted(_queried(grid, "update")) == unseen == sorted(batched.joined) == sorted(whole.joined)
    assert batched.assignment == whole.assignment and len(set(whole.assignment.values())) > 1
    pids = whole.similarity.pids
    assert batched.similarity.pids == pids
    assert np.allclose(batched.similarity.matrix(pids), whole.similarity.matrix(pids), atol=1e-6)
    # the store was sized once for every newcomer: no doubling to twice the federation
    assert batched.similarity._vectors.shape[0] == len(pids) == 15


def test_flic_late_attackers_join_the_attackers_not_the_loyal_cluster():
    # The attackers' data is clean: by train loss they would join the loyal cluster; by the
    # direction of their update (minus the true one) they join the attackers.
    strategy, grid = _start(
        FLIC,
        FLICParams(cluster_round=3),
        rounds=4,
        fraction=1.0,
        scenario="attack",
        attackers=4,
        **{"num-clients": 8, "samples-per-client": 150, "seed": 2, "late-clients": 0.25, "late-round": 4},
    )
    late = sorted(strategy.joined)
    assert len(late) == 2 and strategy.joined[late[0]] == 4 and late == sorted(_queried(grid, "update"))
    truth = {p: c.true_group for p, c in strategy.clients.items()}
    clusters = {g: {strategy.assignment[p] for p in truth if truth[p] == g} for g in (0, 1)}
    assert len(clusters[0]) == len(clusters[1]) == 1 and clusters[0] != clusters[1]
    attackers = [p for p in late if truth[p] == 1]
    assert attackers
    by_loss = strategy.assign_by_loss(attackers, 5)
    assert {by_loss[p] for p in attackers} == clusters[0] != {strategy.assignment[p] for p in attackers}


def test_flic_similarity_rows_change_only_for_sampled_clients():
    snapshots = {}

    def spy(strategy, rnd, updates):
        if strategy.similarity is not None:
            snapshots[rnd] = (list(strategy.similarity.pids), strategy.similarity.matrix())

    strategy, grid = _start(FLIC, FLICParams(cluster_round=10), spy=spy, rounds=3, fraction=0.5)
    pids, before = snapshots[3]
    after = strategy.similarity.matrix(pids)
    keep = [i for i, p in enumerate(pids) if p not in _sampled(grid, 3)]
    np.testing.assert_allclose(after[np.ix_(keep, keep)], before[np.ix_(keep, keep)])
    assert set(strategy.similarity.pids) == _sampled(grid, 1) | _sampled(grid, 2) | _sampled(grid, 3)


def test_flic_automatic_round_waits_for_a_training_loss_plateau():
    seen = []
    loose, _ = _start(
        FLIC,
        FLICParams(stable_tol=100.0),
        spy=lambda s, rnd, ups: seen.append(ups),
        rounds=16,
        fraction=1.0,
        **{"eval-every": 100},
    )
    # the first round the test can pass is 2 * STABLE_PATIENCE; clustering runs before the next one
    assert loose.clustered_at == 2 * STABLE_PATIENCE + 1 < 16 // 2 + 1
    expected = [
        np.average([u.loss for u in ups.values()], weights=[u.num_examples for u in ups.values()])
        for ups in seen[: 2 * STABLE_PATIENCE]
    ]
    np.testing.assert_allclose(loose.train_loss, expected)
    assert loose.train_loss[0] > loose.train_loss[STABLE_PATIENCE]  # digits at lr 0.05: the loss falls
    details = loose.run_details()
    assert details["clustered-at"] == loose.clustered_at and details["joined-by-upload"] == 0
    strict, _ = _start(FLIC, FLICParams(stable_tol=1e-12), rounds=4, **{"eval-every": 10})
    assert strict.clustered_at == 4 // 2 + 1 and len(strict.train_loss) == 2


def test_flic_automatic_round_also_waits_until_the_clients_have_sent_min_updates_each(caplog):
    """6 clients, 3 a round: 5 updates each on average take 10 rounds, so the plateau (round 6) waits
    until round 11; 8 each would take 16, past the cap rounds // 2 + 1 = 13, which clusters with a warning."""
    waited, _ = _start(FLIC, FLICParams(stable_tol=100.0, min_updates=5.0), rounds=24, **{"eval-every": 100})
    assert waited._stable_since == 2 * STABLE_PATIENCE
    assert waited.clustered_at == 5 * 6 // 3 + 1 == waited.wait_rounds() + 1
    assert waited.mean_updates(waited.clustered_at) == 5.0
    with caplog.at_level("WARNING", logger="flwr"):
        capped, _ = _start(FLIC, FLICParams(stable_tol=100.0, min_updates=8.0), rounds=24, **{"eval-every": 100})
    assert capped.clustered_at == 24 // 2 + 1
    assert any("fewer than flic-min-updates 8" in r.getMessage() for r in caplog.records)


def test_flic_sketch_is_seeded_and_close_to_the_full_similarity():
    full, _ = _start(FLIC, FLICParams(cluster_round=10), rounds=1)
    sketched, _ = _start(FLIC, FLICParams(cluster_round=10, sketch_dim=512), rounds=1)
    again, _ = _start(FLIC, FLICParams(cluster_round=10, sketch_dim=512), rounds=1)
    np.testing.assert_array_equal(sketched.similarity.matrix(), again.similarity.matrix())
    assert np.max(np.abs(sketched.similarity.matrix() - full.similarity.matrix())) < 0.15


def test_fedmedian_model_is_the_coordinate_median_of_the_replies():
    seen = {}
    strategy, _ = _start(FedMedian, spy=lambda s, rnd, ups: seen.update(ups), rounds=1, fraction=1.0)
    expected = coordinate_median([u.arrays for u in seen.values()])
    for name, arr in strategy.models[0].items():
        np.testing.assert_allclose(arr.numpy(), expected[name])
    mean = np.mean([u.arrays[name] for u in seen.values()], axis=0)
    assert not np.allclose(strategy.models[0][name].numpy(), mean)


def test_sattler_splits_on_every_members_update_and_keeps_partition_ids():
    strategy, grid = _start(
        CFLSattler,
        CFLSattlerParams(eps1=1e6, split_after=1),
        rounds=5,
        fraction=0.5,
        **{"num-clients": 8, "samples-per-label": 10},
    )
    first = strategy.attempts[0]
    assert first["round"] == 3 and first["cluster"] == 0 and sum(first["sizes"]) == 8
    asked = [m for m in grid.sent if m.metadata.message_type == "query.update"]
    assert {grid.pid_of[m.metadata.dst_node_id] for m in asked if m.content["config"]["server-round"] == 3} == set(
        range(8)
    )
    kept = [a for a in strategy.attempts if a["kept"]]
    assert kept and all(a["alpha-intra-min"] > a["alpha-cross-max"] for a in kept)
    assert all(
        not a["kept"] and a["alpha-intra-min"] <= a["alpha-cross-max"] for a in strategy.attempts if a not in kept
    )
    assert len(strategy.splits) == len(kept) and len(strategy.models) == 1 + len(kept)
    assert sorted(strategy.assignment) == list(range(8))
    sizes = np.bincount(list(strategy.assignment.values()), minlength=len(strategy.models))
    assert sizes.min() >= 1 and all(r["size"] >= 1 for r in strategy.norms)
    assert [r.phase for r in strategy.history] == ["train"] + ["cluster"] * 4


def test_add_flat_lays_the_update_over_the_floating_arrays_in_record_order():
    record = ArrayRecord(
        {
            "w": Array(np.ones((2, 2), np.float32)),
            "steps": Array(np.array([7], np.int64)),
            "b": Array(np.zeros(3, np.float32)),
        }
    )
    assert float_size(record) == 7
    out = add_flat(record, np.arange(7, dtype=np.float32))
    np.testing.assert_array_equal(out["w"].numpy(), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(out["b"].numpy(), [4, 5, 6])
    np.testing.assert_array_equal(out["steps"].numpy(), [7])
    assert out["w"].numpy().dtype == np.float32
    with pytest.raises(ValueError, match="'delta' parameter of add_flat must have 7 entries"):
        add_flat(record, np.zeros(6))


def test_sattler_does_not_split_when_the_mean_update_is_large():
    strategy, _ = _start(CFLSattler, CFLSattlerParams(eps1=1e-9, eps2=1e-9, split_after=0), rounds=3, fraction=1.0)
    assert strategy.splits == [] == strategy.attempts and len(strategy.models) == 1
    assert [r["round"] for r in strategy.norms] == [1, 2, 3]


def test_figures_are_written(tmp_path):
    flic, _ = _start(FLIC, FLICParams(cluster_round=2), rounds=3)
    cfl, _ = _start(CFLSattler, CFLSattlerParams(eps1=1e6, split_after=1), rounds=3, fraction=1.0)
    paths = FIGURES["flic"](flic, tmp_path) + FIGURES["cfl-sattler"](cfl, tmp_path)
    assert [p.name for p in paths] == ["flic-stability.png", "flic.json", "flic-similarity.npz", "cfl-norms.png"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_a_split_stores_updates_in_chunks_as_in_one_call_and_averages_them_exactly():
    from common.clustering.similarity import UpdateSimilarity
    from strategies.flat import mean_rows

    rng = np.random.default_rng(4)
    first = rng.normal(size=(7, 30)).astype(np.float32)
    fresh = rng.normal(size=(9, 30)).astype(np.float32)
    whole, chunked = UpdateSimilarity(), UpdateSimilarity()
    for s in (whole, chunked):
        s.update([3, 1, 4, 0, 8, 9, 2], first)
    whole.update(list(range(10, 1, -1)), fresh)
    for lo in range(0, 9, 2):
        chunked.update(list(range(10, 1, -1))[lo : lo + 2], fresh[lo : lo + 2])
    assert whole.pids == chunked.pids
    np.testing.assert_allclose(whole.matrix(), chunked.matrix(), atol=1e-6)  # float32 products
    rows = list(fresh)
    np.testing.assert_allclose(mean_rows(rows, chunk=2), fresh.astype(np.float64).mean(axis=0), rtol=1e-12)
    assert mean_rows(rows[:1], chunk=4).tolist() == fresh[0].astype(np.float64).tolist()


def test_flics_true_group_mix_uses_the_truth_file_when_one_is_given(tmp_path):
    import json

    flic, _ = _start(FLIC, FLICParams(cluster_round=2), rounds=3)
    claimed = {p: flic.clients[p].true_group for p in flic.clients}
    FIGURES["flic"](flic, tmp_path)
    mixes = [c["true-groups"] for c in json.loads((tmp_path / "flic.json").read_text())["clusters"]]
    assert sum(sum(m.values()) for m in mixes) == len(claimed)
    assert {int(g) for m in mixes for g in m} == set(claimed.values())
    flic.truth = {p: 100 + p % 2 for p in flic.clients}  # a truth file that differs from the clients' claims
    FIGURES["flic"](flic, tmp_path)
    mixes = [c["true-groups"] for c in json.loads((tmp_path / "flic.json").read_text())["clusters"]]
    assert {int(g) for m in mixes for g in m} == {100, 101}
    assert sum(m.get("100", 0) for m in mixes) == sum(1 for p in flic.clients if p % 2 == 0)


@pytest.mark.slow
def test_sattler_separation_key_decides_whether_a_split_that_leaves_groups_together_is_kept():
    # 12 digits clients in 4 groups: the round-3 bi-partition puts one group (3 clients) against the
    # other three, so the 9-client half holds groups unlike each other: ``nearest`` keeps the split
    # (each member has a same-group partner), ``strict`` does not, ``off`` keeps it whatever the cosines
    runs = {
        sep: _start(
            CFLSattler,
            CFLSattlerParams(eps1=1e6, split_after=1, separation=sep),
            rounds=3,
            fraction=1.0,
            **{"num-clients": 12, "groups": 4, "samples-per-label": 10},
        )[0]
        for sep in ("nearest", "strict", "off")
    }
    tried = {sep: s.attempts for sep, s in runs.items()}
    assert all(len(a) == 1 and a[0]["round"] == 3 and sorted(a[0]["sizes"]) == [3, 9] for a in tried.values())
    # the training before the attempt is the same: one cross-half cosine, two within-half statistics
    assert len({a[0]["alpha-cross-max"] for a in tried.values()}) == 1
    assert tried["strict"][0]["alpha-intra-min"] == tried["off"][0]["alpha-intra-min"]
    assert tried["nearest"][0]["alpha-intra-min"] > tried["nearest"][0]["alpha-cross-max"]
    assert tried["strict"][0]["alpha-intra-min"] <= tried["strict"][0]["alpha-cross-max"]
    assert [tried[sep][0]["kept"] for sep in ("nearest", "strict", "off")] == [True, False, True]
    assert [len(runs[sep].models) for sep in ("nearest", "strict", "off")] == [2, 1, 2]
    assert set(runs["strict"].assignment.values()) == {0} and runs["strict"]._retry == {0: 3 + 5}
    nearest = runs["nearest"]
    pids = sorted(nearest.assignment)
    found = [nearest.assignment[p] for p in pids]
    truth = [nearest.true_group(p) for p in pids]
    # the split is the planted groups with the three-group half merged: one group alone, the rest together
    small = min((0, 1), key=found.count)
    lone = {nearest.true_group(p) for p in pids if nearest.assignment[p] == small}
    assert len(lone) == 1 and adjusted_rand_score(found, [g in lone for g in truth]) == 1.0
    assert runs["off"].assignment == nearest.assignment
