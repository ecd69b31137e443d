"""benchmarks/sweep.py: the plot and the loop over values (runs stubbed)."""

import json

import matplotlib.pyplot as plt
import pytest

from benchmarks import sweep


def test_sweep_runs_each_value_and_plots(tmp_path, monkeypatch):
    calls = []

    def fake(strategy, key, value, run_name, results_dir, extra):
        calls.append((strategy, key, value, run_name, list(extra)))
        return {
            "value": float(value),
            "run-name": run_name,
            "final-accuracy": 0.5 + float(value) / 10,
            "final-ari": 1.0,
            "num-clusters": 4 - int(float(value)),
            "round-seconds": 1.0,
        }

    monkeypatch.setattr(sweep, "run_one", fake)
    assert (
        sweep.main(
            [
                "--strategy",
                "fedclust",
                "--key",
                "fedclust-lambda",
                "--values",
                "2,1,3",
                "--name",
                "s",
                "--results-dir",
                str(tmp_path),
                "--",
                "--rounds",
                "2",
            ]
        )
        == 0
    )
    assert [c[2] for c in calls] == ["2", "1", "3"] and calls[0][4] == ["--rounds", "2"]
    assert calls[0][3] == "s-2"
    saved = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert [r["value"] for r in saved["runs"]] == [1.0, 2.0, 3.0]
    assert (tmp_path / "s" / "sweep.png").read_bytes().startswith(b"\x89PNG")
    assert plt.get_fignums() == []


def test_sweep_refuses_values_that_are_not_numbers(tmp_path):
    with pytest.raises(SystemExit):
        sweep.main(["--strategy", "fedclust", "--key", "k", "--values", "a,b", "--results-dir", str(tmp_path)])
