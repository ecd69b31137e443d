"""benchmarks/exchange_profile.py: py-spy's samples sorted into kinds of work."""

import pytest

from benchmarks import exchange_profile

KIND = {key: kind for keys, kind in exchange_profile.KINDS for key in keys}
"""A frame's text -> its kind of work."""


def test_shares_take_the_first_kind_on_the_stack_and_leave_out_child_processes(tmp_path):
    sim = 'process 7:"flwr-simulation"'
    lines = [
        f"{sim};Thread.run;server_th_with_start_checks;send;pull_messages;get_message_res 30",
        f"{sim};Thread.run;server_th_with_start_checks;ClusteredStrategy.start 10",
        f"{sim};add_messages_to_queue (flwr/server/superlink/fleet/vce/vce_api.py:177);get_message_ins 20",
        f"{sim};worker (flwr/server/superlink/fleet/vce/vce_api.py:132);_actor_method_call 15",
        f"{sim};_WorkItem.run;install.<locals>.choose (server/raybatch.py:180);call_batch;_actor_method_call 10",
        f"{sim};put_message_into_state;store_message_res 5",
        f"{sim};main;flwr_simulation 10",
        f'{sim};process 9:"ray::ClientAppActor";run;get_message_res 1000',
    ]
    raw = tmp_path / "run.raw"
    raw.write_text("\n".join(lines) + "\n")
    got, total, waited = exchange_profile.shares(raw)
    assert total == 100 and waited == 0.0
    assert got[KIND["get_message_res"]] == pytest.approx(0.30)
    assert got[KIND["server_th_with_start_checks"]] == pytest.approx(0.10)
    assert got[KIND["add_messages_to_queue"]] == pytest.approx(0.20)
    assert got[KIND["fleet/vce/vce_api.py"]] == pytest.approx(0.25), "Flower's engine worker or umbel's batching one"
    assert got[KIND["put_message_into_state"]] == pytest.approx(0.05)
    assert got[exchange_profile.OTHER] == pytest.approx(0.10)


def test_samples_of_a_waiting_thread_are_counted_apart_and_not_as_busy(tmp_path):
    sim = 'process 7:"flwr-simulation"'
    lines = [
        f"{sim};add_messages_to_queue (flwr/server/superlink/fleet/vce/vce_api.py:177);get_message_ins 20",
        f"{sim};add_messages_to_queue (x.py:1);Event.wait (threading.py:629);Condition.wait (threading.py:331) 60",
        f"{sim};worker (vce_api.py:132);Worker.get_objects (ray/_private/worker.py:993) 20",
    ]
    raw = tmp_path / "run.raw"
    raw.write_text("\n".join(lines) + "\n")
    got, total, waited = exchange_profile.shares(raw)
    assert total == 20 and waited == pytest.approx(0.8)
    assert got[KIND["add_messages_to_queue"]] == pytest.approx(1.0)


def test_the_cpu_of_each_phase_is_read_when_its_end_appears_and_taken_apart(tmp_path):
    import json
    import subprocess
    import sys

    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import time; t = time.time()\nwhile time.time() - t < 1.5: pass"])
    log, metrics, out = tmp_path / "r.log", tmp_path / "r" / "metrics.jsonl", tmp_path / "r.cpu.json"
    log.write_text(f"INFO : 10 {exchange_profile.IDENTIFIED} 10 nodes) in 1.0 s\n")
    exchange_profile.phase_cpu(psutil.Process(child.pid), log, metrics, out)
    child.wait()
    got = json.loads(out.read_text())
    assert "round" not in got and 0 <= got["identity"] <= got["last"] and got["last"] > 0
    assert exchange_profile.phases(tmp_path / "r") == (got["identity"], None)
    out.write_text(json.dumps({"identity": 2.0, "round": 5.5, "last": 9.0}))
    assert exchange_profile.phases(tmp_path / "r") == (2.0, 3.5)
    assert exchange_profile.phases(tmp_path / "other") == (None, None)


def test_the_actors_cpu_counts_only_clientapp_actors_and_keeps_those_gone():
    import subprocess
    import sys

    import psutil

    busy = "import time; t = time.time()\nwhile time.time() - t < 1.0: pass"
    actor = subprocess.Popen([sys.executable, "-c", busy, exchange_profile.ACTOR])
    other = subprocess.Popen([sys.executable, "-c", busy, "ray::raylet"])
    seen: dict[int, float] = {}
    me = psutil.Process()
    while actor.poll() is None:
        exchange_profile.actors_cpu(me, seen)
    other.wait()
    assert list(seen) == [actor.pid] and 0 < seen[actor.pid] <= 1.5
    assert exchange_profile.actors_cpu(me, seen) == seen[actor.pid]  # gone, still counted


def test_owners_take_the_innermost_frame_of_umbel_flower_or_ray_and_leave_out_waits_and_children(tmp_path):
    sim = 'process 7:"flwr-simulation"'
    lines = [
        f"{sim};worker (flwr/server/superlink/fleet/vce/vce_api.py:132);_actor_method_call (ray/actor.py:2411) 40",
        f"{sim};worker (flwr/x.py:1);Pickler.dump (ray/cloudpickle/cp.py:1313);ChainMap.get (collections/i.py:1) 10",
        f"{sim};main (server/app.py:43);send (strategies/federation.py:200);push (flwr/a.py:9);uuid4 (uuid.py:723) 20",
        f"{sim};main (server/app.py:43);Outbox.add (strategies/federation.py:150);np.prod (numpy/core.py:1) 20",
        f"{sim};Thread.run (threading.py:982);_bootstrap (<frozen importlib._bootstrap>:1) 10",
        f"{sim};worker (flwr/x.py:1);Worker.get_objects (ray/_private/worker.py:993) 500",
        f'{sim};process 9:"ray::ClientAppActor";run (strategies/federation.py:1) 1000',
    ]
    raw = tmp_path / "run.raw"
    raw.write_text("\n".join(lines) + "\n")
    got = exchange_profile.owner_shares(raw)
    assert got == pytest.approx(
        {"umbel's code": 0.2, "Flower's code": 0.2, "Ray's code": 0.5, exchange_profile.NO_OWNER: 0.1}
    )
    assert exchange_profile.owner("f (flwr_extra/x.py:1)") is None and exchange_profile.owner("x") is None
