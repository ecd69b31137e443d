"""benchmarks.paper_rows: a paper's row reads the run as it ran (its last flags, its final stretch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmarks.records
from common.modelstore import write_bundle
from benchmarks.paper_rows import PAPERS, PaperRow, main, row_figures


def _run(folder: Path, rounds: int, accuracy: dict[int, float], args: list[str], final: float) -> Path:
    folder.mkdir(parents=True)
    lines = [
        {"round": r, "phase": "train", "accuracy": accuracy.get(r), "round-seconds": 2.0, "ari": 1.0, "num-clusters": 5}
        for r in range(1, rounds + 1)
    ]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in lines) + "\n")
    summary = {
        "rounds": rounds,
        "final-accuracy": final,
        "final-evaluations": 3,
        "final-ari": 1.0,
        "final-num-clusters": 5,
        "coverage": {"final-accuracy": "over 100 of 100 clients"},
        "rounds-to-truth": 3,
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "cell.json").write_text(json.dumps({"seconds": 10.0 + 2.0 * rounds, "args": args}))
    return folder


def test_flic_reports_the_round_it_clustered_at_and_the_mean_after_it(tmp_path):
    args = ["--strategy", "flic", "--rounds", "205", "--flic-cluster-round", "200", "--rounds", "10"]
    args += ["--flic-cluster-round", "6"]
    accuracy = {5: 0.5, 6: 0.6, 7: 0.8, 8: 0.9, 9: 0.7, 10: 1.0}
    folder = _run(tmp_path / "cell", 10, accuracy, args, final=0.8)
    figures, command = row_figures(folder, PaperRow("label-swap-5", "flic", "paper", cluster_round=200))
    # the later --flic-cluster-round wins; round 6 itself is before clustering
    assert figures[2].startswith("60.00% at round 6 (FedAvg) -> 85.00% after clustering (mean of rounds 7-10")
    assert figures[1] == "10 of 205, clustered at round 6"
    # 10 s outside the rounds plus 205 rounds of 2 s
    assert figures[5] == "0 min (full run: about 7 min)"
    assert command.startswith("umbel run --strategy flic")


def test_an_interrupted_run_says_so_and_estimates_from_its_clean_rounds_only(tmp_path):
    args = ["--strategy", "fedclust", "--rounds", "200", "--rounds", "20"]
    folder = _run(tmp_path / "cell", 4, {}, args, final=0.0)
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    lines[3].update({"failures": 10, "round-seconds": 0.1})
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in lines) + "\n")
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "interrupted": True, "final-accuracy": None}))
    figures, _ = row_figures(folder, PaperRow("label-skew-20", "fedclust", "paper"))
    assert figures[1] == "4 of 200 (interrupted)" and figures[2] == "not evaluated"
    # the cell's 18 s less its 3 clean rounds of 2 s, plus 200 such rounds
    assert figures[5] == "0 min (full run: about 7 min)"


def test_a_full_run_reports_the_summarys_final_accuracy_not_the_best_round(tmp_path):
    args = ["--strategy", "cfl-gp", "--rounds", "200"]
    folder = _run(tmp_path / "cell", 200, {100: 0.99, 200: 0.7}, args, final=0.75)
    figures, _ = row_figures(folder, PaperRow("rotation-8", "cfl-gp", "paper"))
    assert figures[1] == "200 of 200"
    assert figures[2] == "75.00% (3 rounds, over 100 of 100 clients)"
    assert figures[3] == "1.000, 5 clusters; ARI 1.0 from round 3" and "full run" not in figures[5]


def test_main_writes_one_record_per_paper_and_refuses_a_paper_without_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmarks.records, "RECORDS_DIR", tmp_path / "records")
    runs = tmp_path / "runs"
    _run(runs / "paper-rotation-8-cfl-gp-s0", 200, {200: 0.9}, ["--rounds", "200"], final=0.9)
    assert main(["--paper", "cfl-gp", "--runs", str(runs), "--load", "3-5"]) == 0
    record = json.loads((tmp_path / "records" / "paper-cfl-gp.json").read_text())
    assert record["load"] == "3-5" and record["tables"][0]["rows"][0][0] == "rotation-8"
    assert record["command"] == "umbel run --rounds 200"
    with pytest.raises(FileNotFoundError, match="No cell of paper 'flag'"):
        main(["--paper", "flag", "--runs", str(runs), "--load", "1"])


def test_every_row_names_a_cell_of_the_paper_preset():
    from benchmarks.compare import PAPER

    labels = {s.label for s in PAPER.scenarios}
    for _, rows in PAPERS.values():
        assert all(r.scenario in labels and r.strategy in PAPER.strategies for r in rows)


def _in_progress(folder: Path, rounds: int, accuracy: dict[int, float], args: list[str], saved: int | None) -> Path:
    """A cell as ``compare`` leaves it while running: ``cell.json`` without seconds, no summary."""
    _run(folder, rounds, accuracy, args, final=0.0)
    (folder / "summary.json").unlink()
    (folder / "cell.json").write_text(json.dumps({"args": args, "seconds": None, "resumed-after": []}))
    if saved is not None:
        write_bundle(folder / "checkpoint.npz", {}, {"format": "umbel-state-2", "round": saved})
    return folder


def test_a_running_cell_is_in_progress_with_its_rounds_so_far_and_the_full_runs_estimate(tmp_path):
    args = ["--strategy", "fedclust", "--rounds", "200"]
    folder = _in_progress(tmp_path / "cell", 7, {5: 0.6}, args, saved=6)
    figures, command = row_figures(folder, PaperRow("label-skew-20", "fedclust", "paper"))
    assert figures[1] == "in progress: 7 of 200 rounds (checkpoint after round 6)"
    # the summary of the rounds so far, not a stale one: round 5's evaluation
    assert figures[2].startswith("60.00% (1 rounds")
    # 7 rounds of 2 s so far; 200 of them
    assert figures[5] == "0 min of rounds so far (full run: about 7 min)"
    assert figures[3] == "1.000, 5 clusters; ARI 1.0 from round 1"
    # a long first round (clustering) counts once: 300 s + 199 rounds of 2 s, not 200 x the mean
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    (folder / "metrics.jsonl").write_text(
        "\n".join(json.dumps({**m, "round-seconds": 300.0 if m["round"] == 1 else 2.0}) for m in lines) + "\n"
    )
    assert row_figures(folder, PaperRow("label-skew-20", "fedclust", "paper"))[0][5].endswith(
        "(full run: about 12 min)"
    )
    lines = [{**json.loads(line), "ari": 0.9} for line in (folder / "metrics.jsonl").read_text().splitlines()]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in lines) + "\n")
    assert row_figures(folder, PaperRow("label-skew-20", "fedclust", "paper"))[0][3].endswith("ARI 1.0 not yet")
    assert command == "umbel run --strategy fedclust --rounds 200"
    # an interrupted summary beside a checkpoint is still in progress: the same command continues it
    (folder / "summary.json").write_text(json.dumps({"interrupted": True, "rounds": 7}))
    assert row_figures(folder, PaperRow("label-skew-20", "fedclust", "paper"))[0][1].startswith("in progress: 7 of")
    # without a checkpoint (killed before compare's first one): the interrupted run's summary
    (folder / "checkpoint.npz").unlink()
    (folder / "summary.json").write_text(json.dumps({**_summary(7), "interrupted": True}))
    assert row_figures(folder, PaperRow("label-skew-20", "fedclust", "paper"))[0][1] == "7 of 200 (interrupted)"


def _summary(rounds: int) -> dict[str, object]:
    return {"rounds": rounds, "final-accuracy": None, "final-ari": 1.0, "final-num-clusters": 5}


def test_flic_before_its_clustering_round_reports_its_latest_fedavg_accuracy(tmp_path):
    args = ["--strategy", "flic", "--rounds", "205", "--flic-cluster-round", "200"]
    folder = _in_progress(tmp_path / "cell", 10, {5: 0.5, 10: 0.7}, args, saved=10)
    figures, _ = row_figures(folder, PaperRow("label-swap-5", "flic", "paper", cluster_round=200))
    assert figures[1] == "in progress: 10 of 205 rounds (checkpoint after round 10), clusters at round 200"
    assert figures[2].startswith("70.00% at round 10 (FedAvg;")


def test_the_record_holds_rows_in_progress_and_leaves_out_cells_that_ran_no_round(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmarks.records, "RECORDS_DIR", tmp_path / "records")
    runs = tmp_path / "runs"
    _in_progress(runs / "paper-label-swap-5-flic-s0", 3, {}, ["--rounds", "205"], saved=2)
    (runs / "paper-rotation-4-flic-s0").mkdir()  # started, no round yet
    (runs / "paper-rotation-4-flic-s0" / "cell.json").write_text(json.dumps({"args": [], "seconds": None}))
    assert main(["--paper", "flic", "--runs", str(runs), "--load", "1"]) == 0
    rows = json.loads((tmp_path / "records" / "paper-flic.json").read_text())["tables"][0]["rows"]
    assert [r[0] for r in rows] == ["label-swap-5"] and rows[0][1].startswith("in progress: 3 of 205 rounds")
