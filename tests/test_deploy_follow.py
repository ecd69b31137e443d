"""``umbel deploy run`` / ``wait`` exit with the run's outcome (issue 33): 0 only for a run that
finished and trained, 1 with the run's last log lines for one that failed, where ``flwr run
--stream`` returns 0 for both. One insecure SuperLink and 2 SuperNodes on loopback, one short run
(digits, 2 clients, 1 round) and one run that fails at start-up (a missing ``resume-from`` file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from server import deploy
from server.cli import PROJECT_ROOT, free_port, to_toml
from server.deploy.follow import EXIT_COMPLETED, EXIT_FAILED, follow, outcome, parse_run_id, parse_status
from tests.helpers.processes import kill_trees, wait_for_port

NODES = 2


def _umbel(home: Path, *args, log: Path | None = None, wait: bool = True):
    cmd = [sys.executable, "-m", "server.cli", "deploy", *map(str, args)]
    env = deploy.deploy_env(home)
    if wait:
        return subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    with log.open("w") as fh:
        return subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("follow")
    port, control = free_port(), free_port()
    procs = []
    try:
        link = _umbel(
            root / "link-home",
            *("superlink", "--insecure", "--port", port, "--control-port", control, "--database", ":memory:"),
            log=root / "superlink.log",
            wait=False,
        )
        procs.append(link)
        for p in (port, control):
            wait_for_port(p, link, root / "superlink.log")
        home = root / "cli-home"
        made = _umbel(home, "connection", "dep", "--address", f"127.0.0.1:{control}", "--flwr-home", home, "--insecure")
        assert made.returncode == 0, made.stdout + made.stderr
        for pid in range(NODES):
            node = ("supernode", "--superlink", f"127.0.0.1:{port}", "--partition-id", pid)
            procs.append(
                _umbel(
                    root / f"node{pid}-home",
                    *node,
                    *("--num-partitions", NODES, "--port", free_port(), "--insecure"),
                    log=root / f"node{pid}.log",
                    wait=False,
                )
            )
        yield root, home
    finally:
        kill_trees([p.pid for p in procs])


def _config(root: Path, name: str, **overrides) -> Path:
    config = {
        "strategy": "fedavg",
        "dataset": "digits",
        "num-clients": NODES,
        "samples-per-label": 10,
        "seed": 1,
        "rounds": 1,
        "fraction": 1.0,
        "eval-every": 1,
        "local-epochs": 1,
        "node-wait-timeout": 180.0,
        "round-timeout": 300.0,
        "results-dir": str(root / "results"),
        "run-name": name,
        **overrides,
    }
    path = root / f"{name}.toml"
    path.write_text(to_toml(config))
    return path


@pytest.mark.slow
def test_deploy_run_exits_with_the_runs_outcome(federation):
    root, home = federation
    args = ("--app", PROJECT_ROOT, "--flwr-home", home, "--poll", 2, "--timeout", 800)
    failed = _umbel(home, "run", "dep", *args, "--run-config", _config(root, "bad", **{"resume-from": "/nope.pkl"}))
    assert failed.returncode == EXIT_FAILED, failed.stdout + failed.stderr
    assert "ended finished:failed; its last" in failed.stderr
    assert "/nope.pkl" in failed.stderr  # the run's own log says why
    good = _umbel(home, "run", "dep", *args, "--run-config", _config(root, "good"))
    assert good.returncode == EXIT_COMPLETED, good.stdout + good.stderr + (root / "superlink.log").read_text()[-3000:]
    assert "finished and trained" in good.stdout
    run_id = int(good.stdout.split("submitted run ")[1].split()[0])
    again = _umbel(home, "wait", run_id, "dep", "--flwr-home", home)
    assert again.returncode == EXIT_COMPLETED and "finished:completed" in again.stdout
    missing = _umbel(home, "wait", run_id + 12345, "dep", "--flwr-home", home)
    assert missing.returncode == 2 and "error" in missing.stderr


# ----------------------------------------------------------------- parsing Flower's JSON (no Flower needed)
def test_flower_json_answers_are_read_and_refusals_explained():
    assert parse_run_id('{"success": true, "run-id": "7153"}') == 7153
    with pytest.raises(ValueError, match="flwr run did not start a run: no federation"):
        parse_run_id('{"success": false, "error-message": "no federation"}')
    runs = {
        "success": True,
        "runs": [{"run-id": "3", "status": "running"}, {"run-id": "4", "status": "finished:failed"}],
    }
    assert parse_status(json.dumps(runs), 4) == "finished:failed"
    with pytest.raises(ValueError, match="lists no run 5"):
        parse_status(json.dumps(runs), 5)
    with pytest.raises(ValueError, match="did not answer in JSON"):
        parse_status("Traceback ...", 4)
    statuses = ("pending", "running", "finished:completed", "finished:failed", "finished:stopped")
    assert [outcome(s) for s in statuses] == [None, None, 0, 1, 1]


def test_follow_polls_until_the_end_and_prints_the_log_of_a_failed_run(capsys):
    statuses = iter(["starting", "running", "running", "finished:failed"])
    calls = []

    def flwr(args):
        calls.append(args[0])
        if args[0] == "ls":
            out = json.dumps({"success": True, "runs": [{"run-id": "9", "status": next(statuses)}]})
        else:
            out = "\n".join(f"line {i}" for i in range(100)) + "\nRuntimeError: Stopping after round 3"
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")

    assert follow(9, "dep", flwr, poll=0.0, log_lines=3, sleep=lambda s: None) == 1
    err = capsys.readouterr().err
    assert calls == ["ls"] * 4 + ["log"]
    assert "line 98\n  line 99\n  RuntimeError: Stopping after round 3" in err and "line 97" not in err
