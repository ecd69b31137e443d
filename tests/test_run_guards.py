"""Guards around a run: cross-key checks before start, start-up and round timeouts, message
expiry, Ray's pool for slow clients, and resuming (checkpoint errors, assignment history)."""

from __future__ import annotations

import json
import time

import pytest
from flwr.app import Context, Message, RecordDict
from flwr.common.config import parse_config_args

from client.app import app as client_app
from common import keys
from common.modelstore import write_bundle
from server import cli
from server.experiment import Experiment
from server.results import RunRecorder
from strategies import FedAvg
from strategies.state import FORMAT, load_checkpoint
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid

SMALL = ["--dataset", "digits", "--num-clients", "6", "--groups", "2", "--samples-per-label", "20"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--strategy", "cflgt", "--rounds", "5", "--cflgt-pretrain-rounds", "5"],
            "'cflgt-pretrain-rounds' parameter of CFLGT",
        ),
        (
            ["--strategy", "flhc", "--rounds", "5", "--flhc-warmup-rounds", "5"],
            "'flhc-warmup-rounds' parameter of FLHC must be an int in the range [0, 4] ('rounds' is 5). Got 5 instead.",
        ),
        (
            ["--strategy", "flic", "--rounds", "5", "--flic-cluster-round", "6"],
            "'flic-cluster-round' parameter of FLIC must be an int in the range [0, 5]",
        ),
        (
            ["--strategy", "ifca", "--num-clusters", "500"],
            "'num-clusters' parameter of IFCA must be at most the number of clients (6). Got 500 instead.",
        ),
    ],
)
@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_contradicting_keys_stop_before_anything_starts(argv, message, check, capsys, tmp_path):
    code = cli.main(
        [
            "run",
            *SMALL,
            *argv,
            "--flwr-home",
            str(tmp_path),
            "--results-dir",
            str(tmp_path),
            *(["--check"] if check else []),
        ]
    )
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "config.toml").exists()  # no SuperLink was configured


class RecordingGrid(InProcessGrid):
    """Remembers the timeout of each send and the TTL of each message, by message type."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeouts: dict[str, set[float]] = {}

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        for m in messages:
            self.timeouts.setdefault(m.metadata.message_type, set()).update({timeout, m.metadata.ttl})
        return super().send_and_receive(messages, timeout=timeout)


def test_identity_query_has_its_own_timeout_and_messages_expire_with_their_round():
    # a round timeout a loaded box still trains within, and that differs from the identity's
    rc = small_run_config(rounds=1, **{"round-timeout": 45.0, "identity-timeout": 77.0})
    exp = Experiment.from_run_config(rc)
    grid = RecordingGrid(client_app, rc, 6)
    FedAvg(exp.training).start(grid, exp.initial_model(), expected_clients=6)
    assert grid.timeouts[keys.MSG_IDENTITY] - {None} == {77.0}  # pushed and pulled (progress): TTL only
    assert grid.timeouts["train"] == {45.0} and grid.timeouts["evaluate"] == {45.0}


def test_an_expired_instruction_is_refused_without_running():
    from client.faults import ExpiredMessage, skip_expired

    ran = []
    msg = Message(RecordDict(), dst_node_id=5, message_type="train", ttl=0.05)
    context = Context(run_id=1, node_id=5, node_config={}, state=RecordDict(), run_config={})
    assert skip_expired(msg, context, lambda m, c: ran.append(m) or m) is msg and len(ran) == 1
    time.sleep(0.1)
    with pytest.raises(ExpiredMessage, match="train message expired"):
        skip_expired(msg, context, lambda m, c: ran.append(m) or m)
    assert len(ran) == 1


def test_ray_gets_an_actor_per_client_that_may_sleep(monkeypatch, tmp_path):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    config = {"slow-fraction": 0.2, "slow-delay": 60.0, "round-timeout": 45.0}
    # two CPU actors plus 2 sleepers (20% of 10), each holding its actor until its deadline at most
    assert cli.simulation_cpus(config, 10, 1) == 4
    assert cli.simulation_cpus(config, 100, 1) == 2 + 20
    assert cli.simulation_cpus({**config, "slow-fraction": 0.0}, 10, 1) == 0
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert cli.simulation_cpus(config, 10, 1) == 0  # 16 actors already serve 10 clients
    fields = parse_config_args([cli.federation_config(10, 1, 0.0, 8)])
    assert fields["init-args-num-cpus"] == 8 and fields["num-supernodes"] == 10
    assert "init-args-num-cpus" not in parse_config_args([cli.federation_config(10, 1, 0.0)])


def test_a_checkpoint_without_strategy_key_is_a_clear_error(tmp_path):
    path = tmp_path / "checkpoint.npz"
    write_bundle(path, {}, {"format": FORMAT, "round": 3, "state": {"history": []}})
    with pytest.raises(ValueError, match=r"is incomplete: it lacks \['strategy'\]"):
        load_checkpoint(path, "fedavg")


def test_a_resumed_run_keeps_the_assignment_history_from_before(tmp_path):
    def run(rounds, folder, resume=None):
        rc = small_run_config(strategy="ifca", rounds=rounds, **{"num-clusters": 2, "fraction": 1.0})
        exp = Experiment.from_run_config(rc)
        strategy = exp.build_strategy()
        recorder = RunRecorder(folder, rc)
        if resume is not None:
            checkpoint = load_checkpoint(resume, "ifca")
            strategy.resume(checkpoint)
            recorder.replay(checkpoint["state"]["history"])
        strategy.checkpoint_to(tmp_path / "checkpoint.npz", 2)
        strategy.on_round = recorder.on_round
        strategy.start(InProcessGrid(client_app, rc, 6), exp.initial_model(), expected_clients=6)
        recorder.finish(strategy)
        return json.loads((folder / "assignments.json").read_text())["history"]

    straight = run(4, tmp_path / "straight")
    run(2, tmp_path / "first")
    resumed = run(4, tmp_path / "resumed", resume=tmp_path / "checkpoint.npz")
    assert resumed[0]["round"] == 1 and resumed == straight
