"""A failed run never looks like a finished one (issue 33): rounds without a usable reply stop
the run whatever the cause, and metrics outside their range are rejected like malformed arrays."""

from __future__ import annotations

import logging
import math
import re

import pytest
from flwr.app import Message, MetricRecord

from client.app import app as umbel_app
from common import keys
from server.experiment import Experiment
from strategies.federation import Exchange
from strategies.outcome import loss_causes, some_ids, stop_reason
from strategies.replies import ReplyFault, decode_evaluate_reply, decode_train_reply, metric_ranges
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

CLIENTS = 6


def _start(grid_kwargs=None, rounds: int = 3, strategy: str = "fedavg", **overrides):
    rc = small_run_config(strategy=strategy, rounds=rounds, fraction=1.0, **overrides)
    exp = Experiment.from_run_config(rc)
    s = exp.build_strategy()
    grid = InProcessGrid(umbel_app, rc, CLIENTS, **(grid_kwargs or {}))
    s.start(grid, exp.initial_model(), expected_clients=CLIENTS)
    return s


# ----------------------------------------------------------------- the stop rule counts every lost round
def test_rounds_in_which_every_client_fails_stop_the_run_naming_the_failures():
    with pytest.raises(RuntimeError, match=r"no train reply was usable in 3 consecutive rounds") as err:
        _start({"failing": range(CLIENTS)}, rounds=5)
    text = str(err.value)
    assert "Stopping after round 3" in text
    assert "6 failed [0, 1, 2, 3, 4] and 1 more" in text
    assert "this client always fails" in text


def test_rounds_in_which_every_reply_times_out_count_too():
    def drop(reply: Message, server_round: int) -> Message | None:  # no train reply ever comes back
        return None if reply.metadata.message_type == "train" else reply

    drop = dict.fromkeys(range(CLIENTS), drop)
    with pytest.raises(RuntimeError, match=r"no train reply was usable in 2 consecutive rounds.*6 timed out"):
        _start({"faults": drop}, rounds=2)


def test_a_short_run_that_never_trains_stops_at_its_last_round():
    with pytest.raises(RuntimeError, match=r"Stopping after round 2: no train reply was usable in 2 consecutive"):
        _start({"failing": range(CLIENTS)}, rounds=2, **{"max-rejected-rounds": 5})


def test_one_usable_reply_breaks_the_streak():
    s = _start({"failing": range(1, CLIENTS)}, rounds=4, **{"max-rejected-rounds": 2})
    assert [r.train_replies for r in s.history] == [1, 1, 1, 1]


def test_the_stop_rule_can_still_be_turned_off():
    s = _start({"failing": range(CLIENTS)}, rounds=2, **{"max-rejected-rounds": 0})
    assert [r.train_replies for r in s.history] == [0, 0]


def test_loss_causes_sort_rejected_failed_and_timed_out():
    ex = Exchange(
        "train",
        failures={
            3: "rejected: metric 'loss' is -1.0",
            1: "no reply within 20 s",
            2: "error code 0: boom",
            0: "error code 3: node unavailable",
        },
    )
    assert loss_causes(ex) == {"rejected": [3], "failed": [0, 2], "timed out": [1]}
    text = stop_reason("train", 4, 1, 3, ex)
    assert "no train reply was usable in round 4 (max-rejected-rounds 3)" in text
    assert "First fault this round: client 3: metric 'loss' is -1.0." in text  # a rejection names the fault
    assert "1 rejected [3], 2 failed [0, 2], 1 timed out [1]" in text


def test_some_ids_shows_a_few_then_a_count():
    assert some_ids([9, 1, 5]) == "[1, 5, 9]"
    assert some_ids(list(range(40, 0, -1)), shown=3) == "[1, 2, 3] and 37 more"


# ----------------------------------------------------------------- metric ranges
def _reply(**metrics) -> Message:
    from flwr.app import RecordDict

    return RecordDict({keys.METRICS: MetricRecord(metrics)})


@pytest.mark.parametrize(
    "accuracy, loss, fault",
    [
        (-1e30, 0.5, "metric 'accuracy' is -1e+30, outside its range [0, 1]"),
        (7.0, 0.5, "metric 'accuracy' is 7.0, outside its range [0, 1]"),
        (1.0000001, 0.5, "metric 'accuracy' is 1.0000001"),
        (0.5, -0.1, "metric 'loss' is -0.1, outside its range [0, inf]"),
        (math.nan, 0.5, "'accuracy'"),
        (0.5, math.inf, "'loss'"),
    ],
)
def test_evaluate_metrics_outside_their_range_are_rejected(accuracy, loss, fault):
    with pytest.raises(ReplyFault, match=re.escape(fault)):
        decode_evaluate_reply(_reply(**{keys.NUM_EXAMPLES: 5, keys.ACCURACY: accuracy, keys.LOSS: loss}), 10)


def test_metric_bounds_are_inclusive_and_regression_scores_may_be_negative():
    ok = _reply(**{keys.NUM_EXAMPLES: 5, keys.ACCURACY: 0.0, keys.LOSS: 0.0})
    assert decode_evaluate_reply(ok, 10) == (0.0, 0.0)
    r2 = _reply(**{keys.NUM_EXAMPLES: 5, keys.ACCURACY: -3.5, keys.LOSS: 2.0})
    with pytest.raises(ReplyFault, match="outside its range"):
        decode_evaluate_reply(r2, 10)
    assert decode_evaluate_reply(r2, 10, metric_ranges("regression")) == (-3.5, 2.0)
    with pytest.raises(ReplyFault, match=r"metric 'accuracy' is 1.5, outside its range \[-inf, 1\]"):
        decode_evaluate_reply(
            _reply(**{keys.NUM_EXAMPLES: 5, keys.ACCURACY: 1.5, keys.LOSS: 2.0}), 10, metric_ranges("regression")
        )


def test_a_negative_train_loss_is_rejected():
    from flwr.app import Array, ArrayRecord, RecordDict
    import numpy as np

    ref = ArrayRecord({"w": Array(np.ones(3, dtype=np.float32))})
    content = RecordDict({keys.ARRAYS: ref, keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: 3, keys.TRAIN_LOSS: -1e30})})
    with pytest.raises(ReplyFault, match=r"metric 'train-loss' is -1e\+30, outside its range \[0, inf\]"):
        decode_train_reply(content, ref, num_train=3)


def _lying_accuracy(value: float):
    def fault(reply: Message, server_round: int) -> Message:
        if not reply.has_error() and reply.metadata.message_type == "evaluate":
            reply.content[keys.METRICS][keys.ACCURACY] = value
        return reply

    return fault


def test_a_client_lying_about_its_accuracy_is_rejected_and_the_mean_stays_honest(caplog):
    honest = _start(rounds=2)
    with caplog.at_level(logging.WARNING):
        lied = _start({"faults": {2: _lying_accuracy(-1e30)}}, rounds=2)
    assert "client 2 reply rejected: metric 'accuracy' is -1e+30, outside its range [0, 1]" in caplog.text
    assert [r.eval_clients for r in lied.history] == [CLIENTS - 1] * 2
    assert 2 not in lied.last_eval
    assert all(0.0 <= r.accuracy <= 1.0 for r in lied.history)
    honest_mean = sum(a for p, (a, _) in honest.last_eval.items() if p != 2) / (CLIENTS - 1)
    assert lied.history[-1].accuracy == pytest.approx(honest_mean)


# ----------------------------------------------------------------- umbel run's exit status
def _results(folder, train_replies, summary_age=0.0):
    import json
    import os
    import time

    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"round": i + 1, "train-replies": n}) for i, n in enumerate(train_replies)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    summary = folder / "summary.json"
    summary.write_text("{}")
    stamp = time.time() - summary_age
    os.utime(summary, (stamp, stamp))
    return time.time() - summary_age / 2 if summary_age else time.time() - 5


def test_run_failure_tells_a_run_that_trained_from_one_that_did_not(tmp_path):
    from server.outcome import run_failure

    started = _results(tmp_path / "good", [0, 3, 0])
    assert run_failure(tmp_path / "good", started) is None
    started = _results(tmp_path / "idle", [0, 0, 0])
    assert "no client trained: none of its 3 rounds had a usable train reply" in run_failure(tmp_path / "idle", started)
    started = _results(tmp_path / "old", [4, 4], summary_age=100.0)  # a re-used run name: a previous run's summary
    assert "wrote no summary.json" in run_failure(tmp_path / "old", started)
    assert "wrote no summary.json" in run_failure(tmp_path / "missing", 0.0)


# ----------------------------------------------------------------- a sleeper holds its worker until its deadline
def _fault_message(ttl: float):
    from flwr.app import ConfigRecord, Context, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1  # as a SuperLink's process has
    msg = Message(
        RecordDict({keys.CONFIG: ConfigRecord({keys.SERVER_ROUND: 2})}), dst_node_id=5, message_type="train", ttl=ttl
    )
    rc = {"fail-fraction": 0.0, "slow-fraction": 0.99, "slow-delay": 60.0, "seed": 0}
    context = Context(run_id=1, node_id=5, node_config={keys.PARTITION_ID: 3}, state=RecordDict(), run_config=rc)
    return msg, context


def test_an_injected_delay_past_the_deadline_gives_up_at_the_deadline():
    import time

    from client.faults import ExpiredMessage, inject_faults

    ran = []
    msg, context = _fault_message(ttl=0.2)
    start = time.monotonic()
    with pytest.raises(ExpiredMessage, match=r"client 3 answers round 2 60 s late, after its deadline"):
        inject_faults(msg, context, lambda m, c: ran.append(m) or m)
    assert time.monotonic() - start < 30  # not the 60 s delay: the worker is free for the next round
    assert ran == []


def test_an_injected_delay_within_the_deadline_still_answers():
    from client.faults import inject_faults

    msg, context = _fault_message(ttl=600.0)
    context.run_config["slow-delay"] = 0.05
    assert inject_faults(msg, context, lambda m, c: m) is msg


# ----------------------------------------------------------------- slow and failing clients cost only themselves
@pytest.mark.slow
def test_healthy_clients_answer_every_round_while_others_sleep_past_the_timeout(tmp_path):
    """``umbel run`` (Ray) of 12 clients: seed 11 puts 2 sleepers and 4 failing clients in round 2 (and
    failing ones in every round); the healthy ones answer every round all the same."""
    import json
    import subprocess
    import sys

    from client.faults import fault_draws
    from server import cli

    clients, slow, fail, seed, eval_every = 12, 0.1, 0.2, 11, 3
    rounds, timeout = 3, 30  # healthy clients answer in seconds; 30 s leaves room on a loaded 2-core box
    run_name = f"slow-{clients}-{tmp_path.name}"
    flags = {
        "strategy": "fedclust",
        "dataset": "digits",
        "num-clients": clients,
        "groups": 2,
        "samples-per-label": 8,
        "seed": seed,
        "rounds": rounds,
        "fraction": 1.0,
        "eval-every": eval_every,
        "local-epochs": 1,
        "fail-fraction": fail,
        "slow-fraction": slow,
        "slow-delay": 3 * timeout,  # as the 60 s against 20 s: a sleeper's messages outlive two rounds
        "round-timeout": timeout,
        "identity-timeout": 300,
        "results-dir": tmp_path / "results",
        "run-name": run_name,
    }
    cmd = [sys.executable, "-m", "server.cli", "run"] + [x for k, v in flags.items() for x in (f"--{k}", str(v))]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    folder = tmp_path / "results" / run_name
    records = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    sleepers, lost = [], []
    for record in records:
        draws = {p: fault_draws(seed, record["round"], p) for p in range(clients)}
        failing = {p for p, (f, _) in draws.items() if f < fail}
        asleep = {p for p, (f, s) in draws.items() if f >= fail and s < slow}
        sleepers.append(len(asleep))
        lost.append(len(failing) + len(asleep))
        said = [line[-200:] for line in out.splitlines() if "failed:" in line or "rejected:" in line]
        # every healthy client answered, in every round: no sleeper or failure held a healthy client up
        assert record["train-replies"] == clients - len(failing) - len(asleep), (record, failing, asleep, said[:30])
        if record["accuracy"] is not None:
            assert record["eval-clients"] == clients - len(failing) - len(asleep), (record, failing, asleep)
    assert sleepers[1] >= 1  # round 2 has sleepers, whose messages would reach into round 3
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["final-ari"] == 1.0
    assert all(n >= k for n, k in zip(summary["lost-replies-per-round"], lost, strict=True)), summary
    assert not (cli.PROJECT_ROOT / ".flwr" / run_name).exists()


# ----------------------------------------------------------------- the smaller items
def test_the_identity_stop_says_how_the_query_went_and_how_long_it_took():
    from flwr.clientapp import ClientApp

    app = ClientApp()  # Flower's quickstart shape: no identity handler, so every node answers with an error
    rc = small_run_config(rounds=1, **{"identity-timeout": 120.0})
    exp = Experiment.from_run_config(rc)
    with pytest.raises(RuntimeError) as err:
        exp.build_strategy().start(InProcessGrid(app, rc, CLIENTS), exp.initial_model(), expected_clients=CLIENTS)
    text = str(err.value)
    assert re.search(
        r"6 nodes asked: 6 failed \[\d+, \d+, \d+, \d+, \d+\] and 1 more after \d+ s \(identity-timeout 120 s\)", text
    ), text
    assert "within" not in text


def test_a_missing_key_file_is_a_usage_error_before_flower_starts(tmp_path, capsys):
    from server import cli

    ca = tmp_path / "ca.crt"
    ca.write_text("not checked before the key")
    code = cli.main(
        [
            "deploy",
            "supernode",
            "--superlink",
            "127.0.0.1:9",
            "--partition-id",
            "0",
            "--num-partitions",
            "2",
            "--root-certificates",
            str(ca),
            "--key",
            str(tmp_path / "supernode-0"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "The 'key' parameter of umbel deploy supernode must be this SuperNode's private key file" in err
    assert f"Got '{tmp_path / 'supernode-0'}', which does not exist, instead." in err
    assert "Traceback" not in err


def test_the_final_log_names_the_clients_the_figures_leave_out():
    from server.outcome import missing_clients

    s = _start({"failing": [2, 4]}, rounds=1)
    assert missing_clients(s, CLIENTS) == "2 not evaluated in the last evaluation [2, 4]"
    assert missing_clients(s, 12) == (
        "6 never took part [6, 7, 8, 9, 10] and 1 more; 2 not evaluated in the last evaluation [2, 4]"
    )
    assert missing_clients(_start(rounds=1), CLIENTS) == ""


# ----------------------------------------------------------------- bad data costs only that client
def _exported(tmp_path, clients: int = 4):
    from common.export import export_partition
    from common.scenarios import ScenarioConfig, build_partition

    rc = small_run_config(**{"num-clients": clients, "samples-per-label": 5})
    config = ScenarioConfig.from_run_config(rc)
    export_partition(build_partition(config, rc["data-dir"]), tmp_path / "fed", "npz")
    return tmp_path / "fed"


def _folder_run(root, **overrides):
    from server.cli import use_data_path

    rc = small_run_config(**{"data-path": str(root), "dataset": "digits", **overrides})
    use_data_path(rc)
    return Experiment.from_run_config(rc)


def test_a_bad_client_folder_leaves_only_that_client_out(tmp_path, caplog):
    import shutil

    root = _exported(tmp_path)
    for f in (root / "partition_2").iterdir():
        f.unlink() if f.is_file() else shutil.rmtree(f)
    (root / "partition_3" / "data.npz").write_bytes(b"not an npz")
    with caplog.at_level(logging.WARNING):
        _folder_run(root).partition()
    assert re.search(r"client 2 is left out: The data of node partition-id=2 at '.*partition_2'", caplog.text)
    assert re.search(r"client 3 is left out: .*partition_3", caplog.text)
    assert "2 of 4 clients have bad data and are left out: [2, 3]" in caplog.text
    assert "client 0 is left out" not in caplog.text and "client 1 is left out" not in caplog.text


def test_too_few_usable_clients_stop_the_run_naming_every_bad_one(tmp_path):
    root = _exported(tmp_path)
    for pid in (0, 1, 3):
        (root / f"partition_{pid}" / "data.npz").write_bytes(b"not an npz")
    exp = _folder_run(root, strategy="ifca", **{"num-clusters": 2})
    with pytest.raises(ValueError, match=r"at least 2 usable client\(s\). Got 1 of 4 instead; 3 have bad data") as err:
        exp.partition()
    assert all(f"client {pid}: " in str(err.value) for pid in (0, 1, 3))
    assert "client 2: " not in str(err.value)


# ----------------------------------------------------------------- a roster binds partitions to node keys
def _keyed_grid(tmp_path, rc, impostor: bool):
    from cryptography.hazmat.primitives import serialization

    from server.deploy import make_keys
    from tests.strategies.test_membership import ChangingGrid

    keys_dir = tmp_path / "keys"
    make_keys(keys_dir, [f"supernode-{i}" for i in range(CLIENTS)] + ["dup"])

    def pem(name: str) -> bytes:  # the form Flower's SuperLink shows a node's key in
        key = serialization.load_ssh_public_key((keys_dir / f"{name}.pub").read_bytes())
        return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    grid = ChangingGrid(umbel_app, rc, CLIENTS, registered=True)
    for node, pid in grid.pid_of.items():
        grid.keys[node] = pem(f"supernode-{pid}")
    if impostor:
        grid._next = 5  # a lower node id than every genuine node: its claim is handled first
        node = grid.add(0, name="dup")
        grid.keys[node] = pem("dup")
    return grid, keys_dir


@pytest.mark.parametrize("with_roster", [True, False], ids=["roster", "no-roster"])
def test_a_registered_impostor_claiming_first_is_refused_by_the_roster(tmp_path, caplog, with_roster):
    from strategies.roster import read_roster, write_roster

    rc = small_run_config(rounds=1, fraction=1.0)
    exp = Experiment.from_run_config(rc)
    s = exp.build_strategy()
    grid, keys_dir = _keyed_grid(tmp_path, rc, impostor=True)
    if with_roster:
        s.membership.roster = read_roster(write_roster(keys_dir))
    with caplog.at_level(logging.WARNING):
        s.start(grid, exp.initial_model(), expected_clients=CLIENTS)
    genuine = grid.node_of[0]
    if with_roster:
        assert s.clients[0].node_id == genuine and sorted(s.clients) == list(range(CLIENTS))
        assert re.search(
            r"Node 5 refused: it claims client 0, but the roster binds client 0 to key SHA256:[0-9a-f]{12}; "
            r"node 5 has SHA256:[0-9a-f]{12}",
            caplog.text,
        )
        assert s.history[-1].train_replies == CLIENTS
    else:  # without a roster the first claim wins, as docs/deployment.md says
        assert s.clients[0].node_id == 5
        assert f"Node {genuine} refused: it claims client 0, but client 0 is held by node 5" in caplog.text


def test_roster_files_are_checked_and_name_the_bad_entry(tmp_path):
    from strategies.roster import read_roster, write_roster

    from server.deploy import make_keys

    make_keys(tmp_path, ["supernode-0", "supernode-1", "dup"])
    roster = read_roster(write_roster(tmp_path))
    assert sorted(roster.keys) == [0, 1]  # "dup" names no partition
    assert roster.refusal(1, 7, (tmp_path / "supernode-1.pub").read_bytes()) is None
    assert "the roster names no key for client 2" in roster.refusal(2, 7, b"")
    bad = tmp_path / "bad.json"
    bad.write_text('{"0": "ssh-rsa nonsense"}')
    with pytest.raises(
        ValueError, match=r"entry '0' of the roster-path file '.*bad.json' must be a public key or a node id"
    ):
        read_roster(bad)
    bad.write_text('{"zero": 5}')
    with pytest.raises(
        ValueError, match=r"partition ids of the roster-path file .* must be ints >= 0. Got 'zero' instead"
    ):
        read_roster(bad)
    by_id = tmp_path / "ids.json"
    by_id.write_text('{"0": 1234}')
    assert read_roster(by_id).refusal(0, 1234, b"") is None
    assert read_roster(by_id).refusal(0, 99, b"") == "the roster binds client 0 to node 1234"
    with pytest.raises(ValueError, match="roster-path"):
        Experiment.from_run_config(small_run_config(**{"roster-path": str(bad)}))
