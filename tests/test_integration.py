"""End to end through `umbel run`: flwr run, a local SuperLink, Ray, real messages."""

import json
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from server import cli
from tests.helpers import SMALL_FEDERATION_ARGS

pytestmark = pytest.mark.slow


def _superlinks(home):
    return [
        p
        for p in psutil.process_iter(["cmdline"])
        if any("flower-superlink" in c for c in (p.info["cmdline"] or [])[:2])
        and any(str(home) in c for c in p.info["cmdline"] or [])
    ]


def test_umbel_run_on_digits(tmp_path):
    run_name = f"it-{tmp_path.name}"
    home = cli.PROJECT_ROOT / ".flwr" / run_name
    cmd = [
        sys.executable,
        "-m",
        "server.cli",
        "run",
        "--strategy",
        "fedavg",
        *SMALL_FEDERATION_ARGS,
        "--seed",
        "1",
        "--rounds",
        "3",
        "--fraction",
        "0.5",
        "--eval-every",
        "1",
        "--lr",
        "0.05",
        "--local-epochs",
        "2",
        "--results-dir",
        str(tmp_path / "results"),
        "--run-name",
        run_name,
        "--tensorboard",
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=420)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    folder = tmp_path / "results" / run_name
    assert f"results in {folder}" in out and "6 clients identified" in out
    assert "partitioning digits among 6 clients (label-groups)" in out and "partition checked in" in out
    assert "Since flwr 1.32" not in out and "deprecated" not in out and "Starting logstream" not in out
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3]
    assert lines[-1]["accuracy"] > lines[0]["accuracy"]
    assert all(r["failures"] == 0 and r["train-replies"] == 3 for r in lines)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["final-accuracy"] == lines[-1]["accuracy"] and summary["num-clients"] == 6
    assignments = json.loads((folder / "assignments.json").read_text())
    assert sorted(assignments["true-groups"]) == [str(i) for i in range(6)]
    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("accuracy/mean")] == [
        (r["round"], pytest.approx(r["accuracy"])) for r in lines
    ]
    for png in ("accuracy.png", "clustering.png"):
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _superlinks(home) == [] and not home.exists()


def test_sigterm_stops_the_run_and_its_superlink(tmp_path):
    run_name = f"term-{tmp_path.name}"
    home = cli.PROJECT_ROOT / ".flwr" / run_name
    cmd = [
        sys.executable,
        "-m",
        "server.cli",
        "run",
        "--strategy",
        "fedavg",
        "--dataset",
        "digits",
        "--num-clients",
        "4",
        "--groups",
        "2",
        "--samples-per-label",
        "20",
        "--rounds",
        "500",
        "--fraction",
        "0.5",
        "--results-dir",
        str(tmp_path / "results"),
        "--run-name",
        run_name,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    for line in proc.stdout:  # wait for the first training round
        if "| train " in line or time.monotonic() > deadline:
            break
    assert proc.poll() is None, "the run ended before it was terminated"
    assert _superlinks(home), "no SuperLink was running when the run was terminated"
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, rest[-3000:]
    assert _superlinks(home) == []
    folder = tmp_path / "results" / run_name
    ran = len((folder / "metrics.jsonl").read_text().splitlines())
    assert f"umbel run: interrupted; results of the {ran} rounds that ran in {folder}" in rest, rest[-3000:]
    assert "failed" not in rest and "superlink.log" not in rest
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["rounds"] == ran >= 1 and summary["config"]["rounds"] == 500
    assert (folder / "clustering.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shutil.rmtree(home, ignore_errors=True)  # kept on failure for its log; this one failed on purpose
