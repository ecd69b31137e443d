"""benchmarks.selection: its filters refuse unknown names, and FeSEM's cell measures its default K."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.selection import Cell, main, measure


@pytest.mark.parametrize(
    "flag, value, match",
    [
        ("--scenarios", "rot", r"The '--scenarios' parameter must name scenarios of .* Got \['rot'\] instead"),
        ("--algorithms", "fesm", r"The '--algorithms' parameter must name algorithms of .* Got \['fesm'\] instead"),
    ],
)
def test_unknown_scenarios_or_algorithms_are_refused_naming_the_flag(flag, value, match, capsys):
    with pytest.raises(SystemExit):
        main(["--half", "dev", flag, value, "--dry-run"])
    assert re.search(match, capsys.readouterr().err)


def test_unknown_full_run_strategies_are_refused_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--full-runs", str(tmp_path / "runs"), "--full-strategies", "flic,cfl"])
    err = capsys.readouterr().err
    assert re.search(r"The '--full-strategies' parameter must name strategies of .* Got \['cfl'\] instead", err)
    assert not (tmp_path / "runs").exists()


def test_the_filters_keep_only_the_named_cells(capsys):
    main(["--half", "dev", "--scenarios", "rotation", "--max-clients", "30", "--dry-run"])
    cells = capsys.readouterr().out.split()
    assert cells and all("/rotation/" in c and int(c.split("/N")[1].split("/")[0]) <= 30 for c in cells)


@pytest.mark.slow
def test_fesem_alone_measures_its_automatic_k_on_planted_digits_groups():
    rows = measure(Cell("dev", "digits", "label-groups", 3, 12, 100), ["fesem"])
    assert [r["algorithm"] for r in rows] == ["fesem"]
    assert rows[0]["true-groups"] == 3 and rows[0]["k-found"] == 3 and rows[0]["ari"] == 1.0


def test_a_cut_that_merges_two_groups_is_told_apart_from_a_signal_that_cannot_separate_them():
    import numpy as np

    from benchmarks.selection import _rows, tables

    truth = np.array([0, 0, 1, 1, 2, 2])
    merged, exact = np.array([0, 0, 0, 0, 1, 1]), np.array([2, 2, 0, 0, 1, 1])
    cell = Cell("dev", "digits", "label-groups", 3, 6, 100)
    rows = _rows(cell, truth, {"fedclust": merged, "fesem": exact}, {"fedclust": exact}, 1.0)
    assert rows[0]["k-found"] == 2 and rows[0]["ari"] == 0.444 and rows[0]["ari-at-true-k"] == 1.0
    assert rows[1]["ari"] == 1.0 and rows[1]["ari-at-true-k"] is None
    detail = tables(rows, "dev")[1].rows[0]
    assert "2, 0.444 (true K: 1.000)" in detail and "3, 1.000" in detail


@pytest.mark.slow
def test_fedclust_and_pacfl_cut_their_own_distances_at_the_true_k_on_planted_digits_groups():
    rows = measure(Cell("dev", "digits", "label-groups", 3, 12, 100), ["fedclust", "pacfl"])
    assert [r["algorithm"] for r in rows] == ["fedclust", "pacfl"]
    assert all(r["k-found"] == 3 and r["ari"] == 1.0 and r["ari-at-true-k"] == 1.0 for r in rows)


def test_pacfl_proximity_shows_each_planted_group_closer_to_itself_than_to_the_others(capsys):
    """digits label groups of 3 (dev cell, 12 clients): every within-group mean angle is below every
    between-group one, the true cut is scored, and the automatic cut is the strategy's (3 clusters)."""
    import json

    import numpy as np

    main(["--proximity", "digits/label-groups/G3/N12/s100"])
    got = json.loads(capsys.readouterr().out)
    by_group = np.array(got["mean-angle-by-group"], dtype=float)
    assert by_group.shape == (3, 3) and np.allclose(by_group, by_group.T)
    assert by_group.diagonal().max() < by_group[~np.eye(3, dtype=bool)].min()
    assert got["within"]["max"] < got["between"]["min"] and got["nearest-in-own-group"] == 1.0
    assert sum(g["clients"] for g in got["groups"].values()) == 12
    assert all(len(g["classes"]) == 2 for g in got["groups"].values())  # label groups: 2 labels a group
    assert {c["k"]: c["ari"] for c in got["cuts"]}[3] == 1.0 and got["automatic"] == {"k": 3, "ari": 1.0}
    with pytest.raises(ValueError, match="The '--proximity' parameter must name a cell of the grid"):
        main(["--proximity", "digits/label-groups/G4/N12/s100"])


def test_flic_tables_count_cells_with_and_without_a_one_client_group():
    from benchmarks.selection import flic_tables

    rows = [
        {
            "dataset": "tabular",
            "groups": 3,
            "clients": 10,
            "seed": 1,
            "seen": 8,
            "seen-group-sizes": [1, 2, 5],
            "k a": 2,
            "ari a": 0.5,
            "k b": 3,
            "ari b": 1.0,
        },
        {
            "dataset": "tabular",
            "groups": 3,
            "clients": 10,
            "seed": 2,
            "seen": 9,
            "seen-group-sizes": [2, 3, 4],
            "k a": 3,
            "ari a": 1.0,
            "k b": 4,
            "ari b": 0.9,
        },
    ]
    summary, detail = flic_tables(rows, "dev")
    assert summary.rows == [
        ["a", "yes", 1, 0.5, 0.5, 0],
        ["a", "no", 1, 1.0, 1.0, 1],
        ["b", "yes", 1, 1.0, 1.0, 1],
        ["b", "no", 1, 0.9, 0.9, 0],
    ]
    assert detail.rows[0] == ["tabular", 3, 10, 1, 8, "[1, 2, 5]", 2, 0.5, 3, 1.0]


def _flic_round_row(dataset, seed, aris, rounds):
    from benchmarks.selection import FLIC_MIN_UPDATES

    r = {"dataset": dataset, "groups": 2, "clients": 10, "seed": seed, "plateau": 7, "cap": 51}
    for k, ari, at in zip(FLIC_MIN_UPDATES, aris, rounds, strict=True):
        r |= {f"round {k:g}": at, f"updates {k:g}": (at - 1) * 2 / 10, f"seen {k:g}": 9}
        r |= {f"cos within {k:g}": 0.3, f"cos between {k:g}": -0.2, f"k {k:g}": 2, f"ari {k:g}": ari}
        r |= {f"ari true-k {k:g}": 1.0, f"ari summed {k:g}": 1.0 if seed == 1 else 0.9}
    return r


def test_flic_rounds_tables_summarise_each_min_updates_value_per_data_set():
    from benchmarks.selection import FLIC_MIN_UPDATES, flic_rounds_tables

    row = _flic_round_row
    n = len(FLIC_MIN_UPDATES)
    rows = [
        row("fashion-mnist", 1, [1.0] + [0.5] * (n - 1), [8] * n),
        row("fashion-mnist", 2, [0.0] * n, [10] * n),
        row("tabular", 1, [1.0] * n, [16] * n),
    ]
    summary, detail = flic_rounds_tables(rows, "dev")
    by = {(r[0], r[1]): r[2:] for r in summary.rows}
    # federations, ARI >= 0.95, mean, min, round, updates a client, summed updates' ARI >= 0.95
    assert by["0", "fashion-mnist"] == [2, 1, 0.5, 0.0, 9.0, 1.6, 1]
    assert by[f"{FLIC_MIN_UPDATES[1]:g}", "fashion-mnist"] == [2, 0, 0.25, 0.0, 9.0, 1.6, 1]
    assert by["0", "tabular"] == [1, 1, 1.0, 1.0, 16.0, 3.0, 1]
    assert len(detail.rows) == 3 and detail.rows[0][:6] == ["fashion-mnist", 2, 10, 1, 7, 51]


def test_flic_rounds_measured_rows_go_to_out_and_read_back_with_rows_give_the_same_record(tmp_path, monkeypatch):
    from benchmarks import selection

    n = len(selection.FLIC_MIN_UPDATES)
    measured = [_flic_round_row("tabular", 1, [1.0] * n, [16] * n), _flic_round_row("tabular", 2, [0.0] * n, [9] * n)]
    calls, records = [], []
    monkeypatch.setattr(selection, "flic_rounds", lambda half, seeds, chosen: calls.append((half, seeds)) or measured)
    monkeypatch.setattr(selection, "_record", lambda name, **kw: records.append((name, kw)))
    out = tmp_path / "rows.json"
    assert selection.main(["--flic-rounds", "--half", "dev", "--seeds", "3,4", "--out", str(out), "--record"]) == 0
    assert calls == [("dev", [3, 4])] and json.loads(out.read_text()) == measured
    argv = ["--flic-rounds", "--half", "dev", "--rows", str(out), "--record", "--load", "2", "--measured-by", "x"]
    assert selection.main(argv) == 0
    assert len(calls) == 1 and [r[0] for r in records] == ["selection-flic-rounds-dev"] * 2
    assert records[1][1]["tables"] == records[0][1]["tables"]
    assert (records[1][1]["load"], records[1][1]["command"]) == ("2", "x")


def test_halves_share_no_seed_and_no_group_count():
    """Defaults are chosen on the dev half and reported on the held-out half: the two may share no seed and
    no group count, in the one-shot grid and in the runs that cluster while training alike; and no tabular
    federation repeats a digits one (the same features and model: the same runs)."""
    import benchmarks.selection as selection

    dev, held = selection.HALVES["dev"], selection.HALVES["held-out"]
    assert not set(dev["groups"]) & set(held["groups"]) and not set(dev["seeds"]) & set(held["seeds"])
    assert not set(selection.DURING_SEEDS["dev"]) & set(selection.DURING_SEEDS["held-out"])
    for half in ("dev", "held-out"):
        federations = selection.DURING_FEDERATIONS[half]
        assert {g for _, g, _ in federations} == set(selection.HALVES[half]["groups"]), half
        digits = {(g, n) for d, g, n in federations if d == "digits"}
        assert not digits & {(g, n) for d, g, n in federations if d == "tabular"}, half


def test_during_training_runs_each_strategy_and_setting_and_scores_every_client(monkeypatch):
    """One digits federation of 2 planted groups, CFL-GP at 6 rounds (its K after round 3) with and without
    a setting; the summary counts each setting's runs apart."""
    import benchmarks.selection as selection

    monkeypatch.setitem(selection.DURING_FEDERATIONS, "dev", (("digits", 2, 10),))
    monkeypatch.setitem(selection.DURING_SEEDS, "dev", (3,))
    rows = selection.during_training("dev", ["cfl-gp"], [{"rounds": 6}, {"rounds": 6, "num-clusters": 1}])
    assert [(r["setting"], r["rounds"], r["k-found"], r["ari"]) for r in rows] == [
        ("--rounds 6", 6, 2, 1.0),
        ("--rounds 6 --num-clusters 1", 6, 1, 0.0),
    ]
    summary, detail = selection.during_tables(rows, "dev")
    assert [row[:3] + row[-1:] for row in summary.rows] == [
        ["cfl-gp", "--rounds 6", 1, 1],
        ["cfl-gp", "--rounds 6 --num-clusters 1", 1, 0],
    ]
    assert len(detail.rows) == 2


@pytest.mark.parametrize(
    "text, setting",
    [
        ("defaults", {}),
        ("cfl-sattler-eps2-relative=0,flic-graph=last", {"cfl-sattler-eps2-relative": 0, "flic-graph": "last"}),
    ],
)
def test_a_setting_reads_toml_values_and_keeps_other_text(text, setting):
    import argparse

    from benchmarks.selection import _setting

    assert _setting(text, argparse.ArgumentParser()) == setting


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--during-training", "cfl-gp", "--setting", "rounds"], "must be 'key=value[,key=value]' or 'defaults'"),
        (["--during-training", "cfl-gp", "--setting", "cfl-satler-eps2=0"], "must name run-config keys"),
        (["--setting", "rounds=6"], "needs --during-training"),
    ],
)
def test_a_malformed_setting_is_refused_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert f"The '--setting' parameter {message}" in capsys.readouterr().err
