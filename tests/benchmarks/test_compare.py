"""benchmarks/compare.py and runs.py: cells, the table, the ratios, the plots (on written run folders)."""

import json

import pytest

from benchmarks import compare, runs


def _write_run(folder, rounds, round_s, eval_every, ari, accuracy, signal_up=0):
    folder.mkdir(parents=True)
    metrics = [
        {
            "round": r,
            "accuracy": accuracy if r % eval_every == 0 or r == rounds else None,
            "ari": ari,
            "round-seconds": 0.1,
        }
        for r in range(1, rounds + 1)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "final-accuracy": accuracy,
                "final-ari": ari,
                "rounds-to-truth": 2 if ari == 1.0 else None,
                "final-num-clusters": 3,
                "num-clients": 10,
                "bytes-up-signal": signal_up,
                "bytes-up-model": 2e6,
                "bytes-down-model": 3e6,
            }
        )
    )
    times = {str(r): round_s for r in range(2, rounds + 1)}
    times["2"] = 50.0  # skipped when skip_first=2, kept with the default skip_first=1
    (folder / "round-times.json").write_text(json.dumps({"round-seconds": times, "final-train-loss": 0.5}))


def test_training_rounds_leave_out_first_evaluated_and_last(tmp_path):
    _write_run(tmp_path / "r", rounds=8, round_s=1.0, eval_every=4, ari=1.0, accuracy=0.9)
    run = runs.read_run(tmp_path / "r")
    # rounds 2..8 timed; 2 is skipped with skip_first=2, 4 evaluated, 8 last
    assert runs.training_round_seconds(run, skip_first=2) == [1.0, 1.0, 1.0, 1.0]
    assert len(runs.training_round_seconds(run)) == 5 and 50.0 in runs.training_round_seconds(run)


def _cells(tmp_path):
    out = []
    for strategy, round_s, ari, acc, signal in (("fedavg", 1.0, 0.0, 0.6, 0), ("flic", 1.5, 1.0, 0.9, 4000)):
        for seed, delta in ((0, 0.0), (1, 0.02)):
            folder = tmp_path / f"{strategy}-{seed}"
            _write_run(folder, 6, round_s, 3, ari, acc + delta, signal)
            run = runs.read_run(folder)
            out.append(
                compare.CellResult(
                    strategy,
                    "rotation-4",
                    seed,
                    run["summary"],
                    run["metrics"],
                    runs.training_round_seconds(run, skip_first=2),
                    30.0,
                )
            )
    return out


def test_summary_rows_average_seeds_and_divide_by_fedavg(tmp_path):
    rows = {r["strategy"]: r for r in compare.summarise(_cells(tmp_path))}
    assert rows["flic"]["round-time-vs-fedavg"] == pytest.approx(1.5)
    assert rows["fedavg"]["round-time-vs-fedavg"] == pytest.approx(1.0)
    assert rows["flic"]["final-accuracy-mean"] == pytest.approx(0.91)
    assert rows["flic"]["final-accuracy-std"] == pytest.approx(0.0141421, rel=1e-4)
    assert rows["flic"]["ari-1.0-round"] == "2/2" and rows["fedavg"]["ari-1.0-round"] == "-/-"
    assert rows["flic"]["signal-bytes-up-per-client"] == pytest.approx(400.0)
    assert rows["flic"]["model-mb"] == pytest.approx(5.0) and rows["flic"]["seeds"] == 2


def test_outputs_are_a_table_a_csv_and_a_plot_per_scenario(tmp_path):
    paths = compare.write_outputs(_cells(tmp_path), compare.QUICK, tmp_path / "out", "python -m benchmarks.compare")
    table = (tmp_path / "out" / "compare.md").read_text()
    assert "#### rotation-4" in table
    flic = next(line for line in table.splitlines() if line.startswith("| flic "))
    assert "91.00 ± 1.41" in flic and "| 1.50 |" in flic
    # FedAvg precedes FLIC: the preset's order
    assert table.index("| fedavg ") < table.index("| flic ")
    csv_lines = (tmp_path / "out" / "compare.csv").read_text().splitlines()
    assert csv_lines[0].split(",") == list(compare.COLUMNS) and len(csv_lines) == 3
    assert (tmp_path / "out" / "rotation-4.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tmp_path / "out" / "rotation-4.png" in paths


def test_quick_preset_covers_the_issue_matrix_and_tells_ifca_its_k():
    quick = compare.QUICK
    assert set(compare.SEED_ALGORITHMS) | {"fedavg", "local", "ifca"} == set(quick.strategies)
    assert [s.label for s in quick.scenarios] == ["label-groups-1", "label-skew-20", "rotation-4", "label-swap-5"]
    rotation = quick.scenarios[2]
    args = quick.args("ifca", rotation, 1)
    assert args[args.index("--max-clusters") + 1] == "4" and args[args.index("--seed") + 1] == "1"
    assert "--max-clusters" not in quick.args("flic", rotation, 0)


def test_unknown_strategy_or_scenario_is_refused_with_the_allowed_ones(capsys):
    with pytest.raises(SystemExit):
        compare.main(["--strategies", "fedavg,nope", "--dry-run"])
    assert "The 'strategies' parameter of compare must be a subset of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--scenarios", "rotation-9", "--dry-run"])
    assert "Got ['rotation-9'] instead" in capsys.readouterr().err


def test_dry_run_prints_one_command_per_cell(capsys):
    assert (
        compare.main(
            [
                "--strategies",
                "fedavg,flic",
                "--scenarios",
                "rotation-4",
                "--seeds",
                "3",
                "--dry-run",
                "--",
                "--rounds",
                "2",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("umbel run --strategy") for line in lines)
    assert lines[1].endswith("--rounds 2") and "--flic-cluster-round" not in lines[1]  # FLIC's automatic round


def test_paper_preset_runs_the_papers_settings_beside_the_modified_defaults(capsys):
    assert (
        compare.main(
            [
                "--preset",
                "paper",
                "--strategies",
                "pacfl,pacfl-reference,cfl-sattler-paper,cflgt",
                "--scenarios",
                "label-groups-1",
                "--seeds",
                "0",
                "--dry-run",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("umbel run --strategy pacfl ") and "--pacfl-measure" not in lines[0]
    assert lines[1].startswith("umbel run --strategy pacfl ")
    assert lines[1].endswith(
        "--pacfl-measure reference-signed --linkage weighted --pacfl-threshold 30 --pacfl-vectors 3"
    )
    assert "--pacfl-threshold" not in lines[0]  # the default: the automatic cut (modified)
    assert "--cfl-sattler-eps-absolute true --cfl-sattler-eps1 0.4 --cfl-sattler-eps2 1.6" in lines[2]
    cflgt = lines[3].split()
    assert _flag(cflgt, "--rounds") == "125"  # 100 rounds after 25 pre-training
    assert cflgt[cflgt.index("--cflgt-pretrain-rounds") + 1] == "25"  # not the automatic quarter of 125


def test_markdown_labels_modified_defaults():
    row = {
        "scenario": "s",
        "final-accuracy-mean": 0.5,
        "final-accuracy-std": None,
        "final-ari": 1.0,
        "ari-1.0-round": "1",
        "final-clusters": "2",
        "signal-bytes-up-per-client": 1.0,
        "model-mb": 1.0,
        "round-time-vs-fedavg": 1.0,
        "wall-seconds": 1.0,
    }
    text = compare.markdown([{**row, "strategy": "pacfl"}, {**row, "strategy": "pacfl-eq3"}], compare.PAPER)
    assert "| pacfl (modified) |" in text and "| pacfl-eq3 |" in text
    assert "(modified) pacfl: principal angles class by class" in text
    # the paper preset runs these with their papers' flags (CFLGT raw forces at the median, CFL-GP told K, ...)
    own = compare.markdown([{**row, "strategy": s} for s in ("cflgt", "cfl-gp", "flic", "flhc", "flag")], compare.PAPER)
    assert "| cflgt |" in own and "| cfl-gp |" in own and "| flic |" in own and "| flhc |" in own
    assert "| flag (modified) |" in own and "(modified) cflgt" not in own and "(modified) flag: elbow" in own
    assert "| cflgt (modified) |" in compare.markdown([{**row, "strategy": "cflgt"}], compare.QUICK)


def test_paper_preset_gives_cflgt_its_own_schedule_only_in_its_own_papers_scenarios():
    by_label = {s.label: s for s in compare.PAPER.scenarios}
    own = compare.PAPER.args("cflgt", by_label["label-groups-3"], 0)
    assert _flag(own, "--rounds") == "125" and "--cflgt-pretrain-rounds" in own
    other = compare.PAPER.args("cflgt", by_label["label-swap-5"], 0)
    assert _flag(other, "--rounds") == "205"  # FLIC's scenario, its rounds
    assert "--cflgt-pretrain-rounds" not in other  # the automatic quarter
    assert "--cflgt-pretrain-rounds" not in compare.PAPER.args("fedavg", by_label["label-groups-1"], 0)


def _flag(args, name):
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == name][-1]


def test_paper_preset_holds_flic_flag_and_cfl_gp_papers_settings():
    by_label = {s.label: s for s in compare.PAPER.scenarios}
    flic = compare.PAPER.args("flic", by_label["label-swap-5"], 0)
    # FLIC Sec. IV: 600 train and 100 test samples a client, E = 5, B = 10, T = 200 then 5 rounds
    assert [_flag(flic, k) for k in ("--samples-per-client", "--local-epochs", "--batch-size")] == ["600", "5", "10"]
    assert round(float(_flag(flic, "--test-fraction")) * 600) == 100
    assert (_flag(flic, "--flic-cluster-round"), _flag(flic, "--rounds"), _flag(flic, "--model")) == (
        "200",
        "205",
        "lenet5",
    )
    # the other papers' scenarios: FLIC clusters by hand 5 rounds before their end, a round their rounds allow
    for scenario in compare.PAPER.scenarios:
        cell = compare.PAPER.args("flic", scenario, 0)
        assert int(_flag(cell, "--flic-cluster-round")) == int(_flag(cell, "--rounds")) - 5, scenario.label
    assert _flag(compare.PAPER.args("flic", by_label["label-groups-1"], 0), "--flic-cluster-round") == "95"
    # CFL-GP App. F.5: C = 32, b = 64, lr 0.1, T = 200, the dense model, told K = 8
    gp = compare.PAPER.args("cfl-gp", by_label["rotation-8"], 0)
    assert [_flag(gp, k) for k in ("--num-clients", "--batch-size", "--lr", "--rounds", "--model")] == [
        "32",
        "64",
        "0.1",
        "200",
        "dnn",
    ]
    assert _flag(gp, "--num-clusters") == "8" and _flag(gp, "--fraction") == "1.0"
    flag = compare.PAPER.args("flag", by_label["label-skew-dirichlet-20"], 0)
    assert _flag(flag, "--flag-vectors") == "0" and _flag(flag, "--flag-sweep-model") == "linear"
    # CFLGT: AP on the forces as sent, at scikit-learn's median (the paper names no preference), in every scenario
    for label in ("label-groups-3", "label-swap-5"):
        cflgt = compare.PAPER.args("cflgt", by_label[label], 0)
        assert (_flag(cflgt, "--cflgt-points"), _flag(cflgt, "--cflgt-preference")) == ("raw", "median"), label
    assert "--cflgt-points" not in compare.QUICK.args("cflgt", compare.QUICK.scenarios[0], 0)
