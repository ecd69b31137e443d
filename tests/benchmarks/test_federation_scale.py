"""benchmarks/federation_scale.py: the figures read back from each run's files."""

import json
from pathlib import Path

import pytest

from benchmarks import federation_scale


def _fake_run(folder: Path, round_seconds: dict[str, float], evaluated: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"final-accuracy": 0.5, "wall-seconds": 60.0}))
    (folder / "resources.json").write_text(
        json.dumps(
            {"peak-rss-mb": 900.0, "cpu-seconds": 30.0, "identity-seconds": 20.0, "state-bytes": {"a": 1000, "b": 3000}}
        )
    )
    (folder / "round-times.json").write_text(json.dumps({"round-seconds": round_seconds}))
    records = [
        {"round": int(r), "ari": 0.9, "num-clusters": 5, "eval-clients": 10 if int(r) == evaluated else None}
        for r in round_seconds
    ]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return folder


def test_training_rounds_leave_out_evaluation_and_clustering_rounds_and_each_kind_of_round_has_its_time(tmp_path):
    folder = _fake_run(tmp_path / "run", {"2": 1.0, "3": 3.0, "4": 50.0, "5": 9.0}, evaluated=4)
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    records[3]["phase"] = "cluster"
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    row = federation_scale.read_outcome(folder)
    assert row["mean-train-round-seconds"] == pytest.approx(2.0)
    assert row["mean-round-seconds"] == pytest.approx(15.75)
    assert row["state-bytes"] == 4000 and row["final-ari"] == 0.9 and row["clusters"] == 5
    assert row["round-seconds-by-kind"] == {"train": "2.0", "train + evaluate": "50.0", "cluster": "9.0"}
    assert "| train 2.0; train + evaluate 50.0; cluster 9.0 |" in federation_scale.markdown({"cflgt": row}, 100)


def test_table_gives_round_time_against_fedavg_and_bytes_per_client(tmp_path):
    fedavg = federation_scale.read_outcome(_fake_run(tmp_path / "a", {"2": 1.0, "3": 1.0}, evaluated=0))
    other = federation_scale.read_outcome(_fake_run(tmp_path / "b", {"2": 1.5, "3": 1.5}, evaluated=0))
    table = federation_scale.markdown({"fedavg": fedavg, "cflgt": other, "flag": {"error": "exit code 1"}}, 100)
    assert "| cflgt | yes | 0.900 | 5 | 900 |" in table and "| 1.50 | 40 |" in table
    assert "| flag | no: exit code 1 |" in table


def test_peak_memory_follows_the_named_runs_process_tree_and_no_other():
    import subprocess
    import sys

    hold = "import time; x = bytearray(60 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(4)"
    mine = subprocess.Popen([sys.executable, "-c", hold, "--run-name", "mine-100", "--x"])
    other = subprocess.Popen([sys.executable, "-c", hold, "--run-name", "mine-1000", "--x"])
    try:
        with federation_scale.PeakMemory("mine-100", interval=0.3) as memory:
            mine.wait(timeout=30)
    finally:
        other.kill()
    summary = memory.summary()
    assert list(summary) == ["other"] and summary["other"]["processes"] == 1
    assert 60 < summary["other"]["peak-rss-mb"] < 200


def test_the_memory_guard_kills_a_run_over_its_limit_and_names_its_largest_process():
    import subprocess
    import sys

    hold = "import time; x = bytearray(80 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(30)"
    run = subprocess.Popen([sys.executable, "-c", hold, "--run-name", "guarded-100", "--x"])
    try:
        with federation_scale.PeakMemory("guarded-100", interval=0.3, max_mb=50) as memory:
            code = run.wait(timeout=20)
    finally:
        run.kill()
    assert code == -9 and memory.stopped_at_mb is not None and memory.stopped_at_mb > 50
    assert memory.stopped_largest[0] == "other" and memory.stopped_largest[1] > 50


def test_kept_rows_of_an_earlier_record_come_first_unless_run_again(tmp_path):
    kept = [["cflgt", "yes", "1.000"] + [""] * 11, ["flic", "no: not run"] + [""] * 12]
    table = federation_scale.markdown({"flic": {"error": "exit code 1"}}, 100, kept)
    lines = table.splitlines()
    assert lines[2].startswith("| cflgt | yes | 1.000 |") and lines[3].startswith("| flic | no: exit code 1 |")
    assert len(lines) == 4


def test_a_variant_run_is_read_from_its_own_folder_and_named_in_its_row_beside_the_default_run(tmp_path, capsys):
    scale = tmp_path / "federation-scale"
    _fake_run(scale / "flag-100-sampled-above-50", {"2": 4.0, "3": 4.0}, evaluated=0)
    _fake_run(scale / "flag-100", {"2": 1.0, "3": 1.0}, evaluated=0)
    argv = ["--clients", "100", "--only", "flag", "--report-only", "--results-dir", str(tmp_path)]
    assert federation_scale.main([*argv, "--variant", "Sampled above 50"]) == 0
    table = (scale / "federation-scale.md").read_text()
    assert "| flag (Sampled above 50) | yes | 0.900 | 5 |" in table and "| 4.00 | 4.00 |" in table
    assert "| flag | yes" not in table
    assert federation_scale.main(argv) == 0
    assert "| flag | yes | 0.900 | 5 |" in (scale / "federation-scale.md").read_text()
    assert federation_scale.variant_folder("") == "" and federation_scale.variant_row("flag", "") == "flag"


def test_each_kind_of_round_is_timed_from_the_metrics_round_1_and_its_server_step_included(tmp_path):
    folder = _fake_run(tmp_path / "run", {"2": 1.0, "3": 5.0}, evaluated=3)
    records = [
        {"round": 1, "phase": "cluster", "round-seconds": 600.0, "clustering-seconds": 15.0},
        {"round": 2, "phase": "train", "round-seconds": 1.2, "clustering-seconds": 0.0},
        {"round": 3, "phase": "train", "round-seconds": 5.2, "clustering-seconds": 0.0},
    ]
    for r in records:
        r.update({"ari": 1.0, "num-clusters": 5, "eval-clients": 10 if r["round"] == 3 else None})
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    row = federation_scale.read_outcome(folder)
    assert row["round-seconds-by-kind"] == {"cluster": "600.0 (step 15.0)", "train": "1.2", "train + evaluate": "5.2"}
    assert row["mean-round-seconds"] == pytest.approx(3.0) and row["mean-train-round-seconds"] == pytest.approx(1.0)


def test_a_run_stopped_before_its_end_is_not_called_not_run(tmp_path):
    _fake_run(tmp_path / "federation-scale" / "fedavg-100", {"2": 1.0}, evaluated=0)
    argv = ["--clients", "100", "--only", "fedavg", "--report-only", "--results-dir", str(tmp_path)]
    federation_scale.main([*argv, "--not-run", "flag=stopped by the memory guard", "--not-run", "fedclust=too slow"])
    table = (tmp_path / "federation-scale" / "federation-scale.md").read_text()
    assert "| flag | no: stopped by the memory guard |" in table and "| fedclust | no: not run: too slow |" in table
    names = [line.split(" | ")[0] for line in table.splitlines()[2:]]
    assert names == ["| fedavg", "| fedclust", "| flag"]  # the order of ALGORITHMS, whatever the order given


def test_a_not_run_row_of_an_unknown_algorithm_is_refused_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit):
        federation_scale.main(["--report-only", "--results-dir", str(tmp_path), "--not-run", "ifca=slow"])
    err = capsys.readouterr().err
    assert "The 'not-run' parameter of federation_scale must name" in err and "Got ['ifca'] instead" in err
