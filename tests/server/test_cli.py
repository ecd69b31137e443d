"""`umbel run` fails before anything starts on bad input, and maps flags to run-config."""

import subprocess
import sys
import tomllib

import pytest

from strategies import schema
from server import cli
from strategies import REGISTRY
from tests.helpers import SMALL_FEDERATION_ARGS


def _run(argv, capsys):
    code = cli.main(["run", *argv])
    return code, capsys.readouterr()


def test_unknown_strategy_exits_before_training_and_lists_choices(capsys, tmp_path):
    code, out = _run(["--strategy", "nope", "--flwr-home", str(tmp_path)], capsys)
    assert code == 2
    names = ", ".join(repr(n) for n in sorted(REGISTRY))
    assert f"The 'strategy' parameter of the run config must be one of {{{names}}}" in out.err
    assert "Got 'nope' instead" in out.err
    assert not (tmp_path / "config.toml").exists()


def test_eleven_labels_of_ten_exits_before_training(capsys, tmp_path):
    code, out = _run(["--labels-per-group", "11", "--flwr-home", str(tmp_path)], capsys)
    assert code == 2 and "'labels-per-group'" in out.err and "[1, 10]" in out.err and "Got 11" in out.err


def test_check_validates_data_without_running(capsys, tmp_path):
    code, out = _run(
        [
            *SMALL_FEDERATION_ARGS,
            "--results-dir",
            str(tmp_path),
            "--check",
        ],
        capsys,
    )
    assert code == 0 and "6 clients" in out.out
    code, out = _run(["--dataset", "digits", "--samples-per-label", "20", "--check"], capsys)
    assert code == 2 and "'samples-per-label'" in out.err


def test_a_device_this_machine_lacks_fails_before_starting(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    code, out = _run(
        [
            *SMALL_FEDERATION_ARGS,
            "--device",
            "cuda",
            "--check",
        ],
        capsys,
    )
    assert code == 2 and "'device'" in out.err


def test_every_schema_key_is_a_flag_with_its_default(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "prepare", lambda config: seen.update(config) or (_ for _ in ()).throw(ValueError("x")))
    assert cli.main(["run", "--flag-uniform-weights", "--rounds", "7"]) == 2
    assert set(seen) == set(schema.SCHEMA)
    assert seen["flag-uniform-weights"] is True and seen["rounds"] == 7 and seen["lr"] == schema.SCHEMA["lr"].default


def test_a_misspelt_boolean_is_an_error_naming_the_key(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--flag-uniform-weights", "flase"])
    assert exit_.value.code == 2
    assert "The 'flag-uniform-weights' parameter of the run config must be a bool" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--damping", "0.6"], "The 'damping' key was renamed 'cflgt-damping'. Use --cflgt-damping."),
        (["--rounds", "3", "--eps-absolute=true"], "The 'eps-absolute' key was renamed 'cfl-sattler-eps-absolute'."),
        (["--proximal-mu", "0.1"], "The 'proximal-mu' key was renamed 'fedprox-mu'."),
    ],
)
def test_a_former_key_name_fails_naming_its_new_name(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(cli, "prepare", lambda config: pytest.fail("prepare ran"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_former_key_name_in_a_run_config_fails_naming_its_new_name():
    from server.experiment import Experiment

    with pytest.raises(ValueError, match="The 'pretrain-rounds' key was renamed 'cflgt-pretrain-rounds'"):
        Experiment.from_run_config({"strategy": "cflgt", "pretrain-rounds": 3})


def test_help_explains_each_key_in_its_group(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "run-config '" not in out
    assert out.index("data and scenario:") < out.index("training:") < out.index("output:") < out.index("faults:")
    assert out.index("flag:") < out.index("--flag-uniform-weights") < out.index("flic:")
    assert "[read by fedclust, pacfl, flhc, flag]" in out
    assert "--cflgt-damping" in out and "--damping" not in out and "--fedprox-mu" in out


def test_run_config_toml_round_trips():
    config = {"strategy": "fedavg", "lr": 0.001, "num-clients": 6, "angles": "0,90", "data-dir": 'a "b"\\c'}
    assert tomllib.loads(cli.to_toml(config)) == config


def test_flower_config_uses_the_current_form_and_sizes_the_federation(tmp_path):
    from flwr.common.config import parse_config_args
    from flwr.supercore.utils import simulation_config_from_json

    cli.write_flower_config(tmp_path)
    conf = tomllib.loads((tmp_path / "config.toml").read_text())
    assert conf == {"superlink": {"default": "local", "local": {"address": ":local:"}}}
    fields = parse_config_args([cli.federation_config(42, 1, 0.25)])
    sim = simulation_config_from_json({k.replace("-", "_"): v for k, v in fields.items()})
    assert (sim.num_supernodes, sim.client_resources_num_cpus, sim.client_resources_num_gpus) == (42, 1, 0.25)


def test_an_installed_wheel_gets_a_generated_app_with_the_schema_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "PROJECT_ROOT", tmp_path / "site-packages")
    app = cli.flower_app(tmp_path)
    conf = tomllib.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert conf["components"] == {"serverapp": "server.app:app", "clientapp": "client.app:app"}
    assert conf["config"] == schema.defaults()


def test_environment_disables_runtime_installs_and_telemetry(tmp_path):
    env = cli.simulation_env(tmp_path, 12345)
    assert env["FLWR_HOME"] == str(tmp_path) and env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] == "12345"
    assert env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1" and env["FLWR_TELEMETRY_ENABLED"] == "0"


@pytest.mark.parametrize("bad", ["--rounds", "--fraction"])
def test_flag_types_come_from_the_defaults(bad, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", bad, "many"])


def test_min_nodes_above_num_clients_fails_before_starting(capsys, tmp_path):
    code, out = _run([*SMALL_FEDERATION_ARGS, "--min-nodes", "7", "--flwr-home", str(tmp_path), "--check"], capsys)
    assert code == 2 and "The 'min-nodes' parameter" in out.err and "Got 7 instead" in out.err


def test_each_start_of_the_local_superlink_begins_without_a_failed_starts_state(tmp_path, monkeypatch):
    """A slow start leaves a half-written ``local-superlink/state.db``; a SuperLink started on it exits at
    once, so every later run of that name failed. Each start (the first included) begins without it."""
    home = tmp_path / "home"
    state = home / "local-superlink" / "state.db"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"half-written by an earlier run")
    found: list[bool] = []
    fake = _fake_flower([(1, f"{cli.SUPERLINK_SLOW} within 15s.\n")] * 2 + [(0, "run finished\n")], [])

    def start(cmd, **kwargs):
        found.append(state.exists())
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_bytes(b"half-written by this start")
        return fake(cmd, **kwargs)

    monkeypatch.setattr(cli.subprocess, "Popen", start)
    monkeypatch.setattr(cli, "stop_superlinks", lambda home: [])
    assert cli.simulate({"slow-fraction": 0.0}, 4, home, 1, 0.0) == 0
    assert found == [False, False, False]


def _fake_flower(outputs: list[tuple[int, str]], seen: list[list[str]]):
    """A stand-in for ``flwr run``'s process: each start prints the next output and exits with its code."""

    class Proc:
        def __init__(self, cmd, **kwargs):
            seen.append(cmd)
            self.code, text = outputs.pop(0)
            self.stdout = iter(text.splitlines(keepends=True))

        def wait(self, timeout=None):
            return self.code

        def poll(self):
            return self.code

    return Proc


@pytest.mark.parametrize(
    ("outputs", "expected", "starts"),
    [
        ([(1, f"{cli.SUPERLINK_SLOW} within 15s.\n"), (0, "run finished\n")], 0, 2),
        ([(1, f"{cli.SUPERLINK_SLOW} within 15s.\n")] * cli.SUPERLINK_TRIES, 1, cli.SUPERLINK_TRIES),
        ([(1, "Traceback: the ServerApp failed\n"), (0, "never started\n")], 1, 1),
    ],
    ids=["slow-then-up", "slow-every-time", "other-failure"],
)
def test_a_local_superlink_slow_to_start_is_tried_again_and_nothing_else_is(
    outputs, expected, starts, tmp_path, monkeypatch, capsys
):
    seen: list[list[str]] = []
    monkeypatch.setattr(cli.subprocess, "Popen", _fake_flower(list(outputs), seen))
    stopped = []
    monkeypatch.setattr(cli, "stop_superlinks", lambda home: stopped.append(home) or [])
    assert cli.simulate({"slow-fraction": 0.0}, 4, tmp_path / "home", 1, 0.0) == expected
    assert len(seen) == starts and all(cmd == seen[0] for cmd in seen)
    assert len(stopped) == starts + 1  # before the first start and after each
    err = capsys.readouterr().err
    assert err.count("did not start within its fixed time") == (starts - 1)


@pytest.mark.parametrize("argv", [["deploy", "supernode", "--help"], ["models", "--help"], ["assign", "--help"]])
def test_deploy_and_model_commands_start_without_the_strategies(argv):
    """``umbel deploy supernode`` wraps every client machine's SuperNode: torch and scikit-learn (the
    strategies' imports, seconds of CPU) are not loaded to start it; ``umbel run`` loads them."""
    probe = (
        "import sys, runpy; sys.argv = ['umbel', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('server.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'strategies', 'torch', 'sklearn'}), file=sys.stderr)"
    )

    def loaded(args: list[str]) -> str:
        out = subprocess.run(
            [sys.executable, "-c", probe, *args], cwd=cli.PROJECT_ROOT, capture_output=True, text=True, timeout=120
        )
        assert "usage: umbel" in out.stdout, out.stdout + out.stderr
        return out.stderr.strip().splitlines()[-1]

    assert loaded(argv) == "[]"
    assert loaded(["run", "--help"]) == "['sklearn', 'strategies', 'torch']"
