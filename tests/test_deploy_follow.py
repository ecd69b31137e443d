"""``umbel deploy run`` / ``wait`` exit with the run's outcome (issue 33): 0 only for a run that
finished and trained, 1 with the run's last log lines for one that failed, where ``flwr run
--stream`` returns 0 for both. Here without Flower: parsing Flower's JSON answers and the follow
loop. Against a live SuperLink they run in tests/test_deployment.py's insecure deployment (its
finished run followed with ``wait``, and a run that fails at start-up submitted with ``run``)."""

from __future__ import annotations

import json
import subprocess

import pytest

from server.deploy.follow import follow, outcome, parse_run_id, parse_status


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
